"""The MLflow store may be locked or down: training goes on, metrics wait and arrive later."""

import subprocess
import sys
import textwrap
import time

import pytest
from mlflow.tracking import MlflowClient

from rollverify.tracking.tracker import MLflowTracker

# Writers in subprocesses, a run with system metrics: ~10 s each here.
pytestmark = pytest.mark.slow


def tracker(tmp_path, name="run", spool=True):
    return MLflowTracker(
        f"sqlite:///{tmp_path / 'mlflow.db'}",
        "rollverify",
        run_name=name,
        params={"train": {"steps": 3}},
        tags={"method": "grpo"},
        artifact_root=tmp_path / "artifacts",
        spool=tmp_path / f"{name}-spool.jsonl" if spool else None,
    )


def test_a_store_that_is_down_delays_metrics_and_loses_none(tmp_path):
    """The store goes away (a network folder unmounted; a locked sqlite fails the same way,
    after MLflow's 20 s busy timeout) and comes back: nothing is lost."""
    run = tracker(tmp_path)
    run.log_metrics({"reward_mean": 0.1}, step=1)
    store, aside = tmp_path / "mlflow.db", tmp_path / "aside.db"
    store.rename(aside)
    store.mkdir()  # where the database was, something sqlite cannot write
    with pytest.warns(UserWarning, match="MLflow store unavailable"):
        run.log_metrics({"reward_mean": 0.2}, step=2)
    assert run.pending and (tmp_path / "run-spool.jsonl").exists()
    store.rmdir()
    aside.rename(store)
    run.log_metrics({"reward_mean": 0.3}, step=3)
    run.finish()
    history = MlflowClient(run.client.tracking_uri).get_metric_history(run.run_id, "reward_mean")
    assert {m.step: m.value for m in history} == {1: 0.1, 2: 0.2, 3: 0.3}
    assert not (tmp_path / "run-spool.jsonl").exists()


def test_concurrent_writers_to_one_store_lose_nothing(tmp_path):
    tracker(tmp_path, "init", spool=False).finish()  # the store exists, as in a sweep
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from tests.test_tracking import tracker
        run = tracker(Path({str(tmp_path)!r}), sys.argv[1])
        for step in range(1, 41):
            run.log_metrics({{"reward_mean": step / 100, "ops_mean": step}}, step=step)
        run.finish()
        print(run.run_id)
        """
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", script, f"w{i}"], stdout=subprocess.PIPE, text=True)
        for i in range(3)
    ]
    run_ids = [w.communicate(timeout=300)[0].strip() for w in writers]
    assert all(w.returncode == 0 for w in writers)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for run_id in run_ids:
        for name in ("reward_mean", "ops_mean"):
            assert sorted(m.step for m in client.get_metric_history(run_id, name)) == list(
                range(1, 41)
            )
        assert client.get_run(run_id).info.status == "FINISHED"


def test_runs_opening_a_new_store_at_once_all_start(tmp_path):
    """Three runs create their trackers the same moment on a store that does not exist yet
    (two `rvctl train` started together): each starts, in one experiment. Unserialized,
    MLflow's table migrations collide ("duplicate column name") or the experiment is made
    twice."""
    go = tmp_path / "go"
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from tests.test_tracking import tracker
        while not Path({str(go)!r}).exists():  # everything imported: start together
            time.sleep(0.001)
        run = tracker(Path({str(tmp_path)!r}), sys.argv[1], spool=False)
        run.finish()
        print(run.run_id)
        """
    )
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", script, f"w{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    time.sleep(8)  # the writers' imports
    go.touch()
    outputs = [w.communicate(timeout=300) for w in writers]
    assert [w.returncode for w in writers] == [0, 0, 0], [err[-300:] for _, err in outputs]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "rollverify"]
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_id for r in runs) == sorted(out.strip() for out, _ in outputs)


def test_system_metrics_are_sampled_into_the_run_when_asked(tmp_path):
    """tracking.system_metrics: MLflow's monitor samples CPU and memory into the run while it
    trains (off by default: the other tests' runs hold no system/ metric)."""
    # (imported here: the writers above import this file, and need only MLflow)
    from rollverify.training.run import train
    from tests.runs import history, tiny

    settings = {"tracking.system_metrics": True, "tracking.system_metrics_seconds": 0.2}
    summary = train(tiny(tmp_path, "grpo", **settings, **{"train.steps": 2}))
    metrics = history(summary)
    assert "system/cpu_utilization_percentage" in metrics
    assert "system/system_memory_usage_megabytes" in metrics
    plain = train(tiny(tmp_path / "plain", "grpo", **{"train.steps": 1}))
    assert not [name for name in history(plain) if name.startswith("system/")]
