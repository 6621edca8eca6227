"""Broken configs, a few hundred of them: every one is a ConfigError naming a field, never a
traceback, and nothing is written. A handful go through the CLI (exit 2, one line each)."""

import math
import subprocess
import sys

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollverify.config import ConfigError, RunConfig, load_config
from rollverify.infra.nested_dicts import flatten

FIELDS = sorted(flatten(RunConfig().to_dict()))
SECTIONS = sorted({f.split(".")[0] for f in FIELDS if "." in f})

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
keys = st.one_of(
    st.sampled_from(FIELDS),
    st.sampled_from(FIELDS).map(lambda f: f[:-1] + "x"),  # near misses: typos
    st.text(min_size=1, max_size=10).map(lambda t: f"{t}"),
)


def nest(flat: dict) -> dict:
    tree: dict = {}
    for dotted, value in flat.items():
        *path, leaf = dotted.split(".")
        node = tree
        for part in path:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        node[leaf] = value
    return tree


configs = st.one_of(
    st.dictionaries(keys, values, min_size=1, max_size=6).map(nest),
    st.dictionaries(st.sampled_from(SECTIONS), values, min_size=1, max_size=3),
    st.text(max_size=60),  # not even YAML, or YAML of the wrong shape
    st.lists(values, max_size=3),
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(configs)
def test_broken_configs_raise_config_errors_that_name_a_field(tmp_path_factory, config):
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "config.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    try:
        loaded = load_config(path)
    except ConfigError as error:
        assert error.problems and all(p.strip() and "\n" not in p for p in error.problems)
    else:
        assert isinstance(loaded, RunConfig)  # some random configs are valid
        assert not math.isnan(loaded.train.learning_rate)
    assert [p.name for p in folder.iterdir()] == ["config.yaml"], "nothing written"


def test_the_cli_prints_one_line_per_problem_and_writes_nothing(tmp_path):
    cases = [
        "train: {steps: -1, stesp: 2}",
        "rollout: [1, 2]",
        "verify: {ds: nan}",
        "model: {path: /nonexistent}",
        ": : :",
        "output: BLOCKED/runs",  # the output folder cannot be written (a file is in the way)
    ]
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    for i, text in enumerate(cases):
        path = tmp_path / f"bad{i}.yaml"
        path.write_text(text.replace("BLOCKED", str(blocked)))
        output = tmp_path / f"out{i}"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "rvctl.app",
                "train",
                "--config",
                str(path),
            ]
            + (["--output", str(output)] if "output" not in text else []),
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2, (text, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.startswith("error: ")
        assert not output.exists(), f"{text}: output written"
    assert result.stderr.startswith(f"error: output: cannot write runs to {blocked}/runs")
