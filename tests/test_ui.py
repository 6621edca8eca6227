"""`rvctl ui` hands the process to MLflow's UI on 127.0.0.1 only (one worker). What it execs
is checked here; serving it takes MLflow ~15 s to start, too long for this suite."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from rvctl.app import app


class Exec(Exception):
    pass


def test_ui_runs_the_mlflow_ui_on_loopback_over_the_store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).create_experiment("rollverify")
    execs = []

    def execv(path, argv):
        execs.append(argv)
        raise Exec

    monkeypatch.setattr("os.execv", execv)
    result = CliRunner().invoke(app, ["ui", "--tracking-uri", uri, "--port", "5123"])
    assert isinstance(result.exception, Exec), result.output
    (argv,) = execs
    assert argv[1:4] == ["-m", "mlflow", "ui"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "5123"
    assert argv[argv.index("--backend-store-uri") + 1] == uri


def test_ui_of_a_missing_store_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("os.execv", lambda path, argv: pytest.fail(f"started {argv}"))
    result = CliRunner().invoke(app, ["ui", "--tracking-uri", f"sqlite:///{tmp_path}/none.db"])
    assert isinstance(result.exception, ValueError), result.output
    assert not (tmp_path / "none.db").exists()
