import gc
import json
import sys
from pathlib import Path

import pytest
import torch

from rollverify.infra.quiet import quiet_environment

# Measured here: tiny-model ops with 2 OpenMP threads slow down ~50x when another process is
# busy on the 2 cores (threads spin-wait for each other). One thread keeps tests predictable.
torch.set_num_threads(1)
quiet_environment()  # as the CLI does, before TRL loads

HERE = Path(__file__).parent
DATA = HERE / "data"

# The unit tier (`make test-unit`, `pytest -m unit`): files that train nothing, load no model
# and start no server, the pure rules, configs, checkpoint files and the CLI's parsing, well
# under a minute here. The fast tier is `-m "not slow"`, the full one everything.
UNIT = frozenset(
    {
        "test_checkpoint.py",
        "test_cli.py",
        "test_compare_board.py",
        "test_cli_fuzz.py",
        "test_cli_imports.py",
        "test_config.py",
        "test_config_fuzz.py",
        "test_costmodel.py",
        "test_data_formats.py",
        "test_docs_links.py",
        "test_filters.py",
        "test_kv_cache.py",
        "test_layout.py",
        "test_ledger.py",
        "test_math_task.py",
        "test_metrics_doc.py",
        "test_mutants.py",
        "test_ops.py",
        "test_paper_setting.py",
        "test_sandbox.py",
        "test_spec_copy.py",
        "test_trajectory.py",
        "test_verify.py",
        "test_vllm_compat.py",
    }
)
TRAINER = "trl"  # whatever trains imports it (rollverify/training/trl_adapter.py)
imported_trainer: list[str] = []  # the first unit file whose import brought it in


def unit_tier_only(config) -> bool:
    return config.getoption("markexpr") == "unit"


def pytest_ignore_collect(collection_path: Path, config):
    """`-m unit` alone imports the unit tier's files only: the others import the trainer, Ray
    or vLLM (seconds each) just to be deselected."""
    name = collection_path.name
    other = name.startswith("test_") and name.endswith(".py") and name not in UNIT
    return True if other and unit_tier_only(config) else None  # None: pytest decides


def pytest_collectreport(report):  # after each file's import
    if TRAINER in sys.modules and not imported_trainer and report.nodeid.endswith(".py"):
        imported_trainer.append(report.nodeid)


@pytest.fixture(autouse=True)
def unit_tests_train_nothing(request):
    """A unit test that imports the trainer fails (seen where nothing else imported it first:
    always in `make test-unit`)."""
    checked = request.node.get_closest_marker("unit") and TRAINER not in sys.modules
    yield
    if checked and TRAINER in sys.modules:
        pytest.fail(f"imported {TRAINER}: a unit test trains nothing (UNIT, tests/conftest.py)")


@pytest.fixture(scope="session")
def vectors() -> dict:
    """The spec's test vectors (a copy of ../shared/spec/verify_vectors.json)."""
    return json.loads((DATA / "verify_vectors.json").read_text())


# The longest files first: with `make test`'s two workers taking whole files (--dist
# loadfile), a long file started last would run alone at the end.
def pytest_collection_finish(session):
    # The suite's imports (torch, transformers, TRL, MLflow: millions of objects) live to its
    # end. Frozen, they are out of the full collection accelerate runs as each training ends
    # (measured: 0.5 s of a 2.2 s tiny run, in a process that imported the whole suite).
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session, exitstatus):
    gc.unfreeze()  # (frozen objects are not freed at exit: nanobind then reports leaks)


LONGEST_FIRST = (  # measured (--durations, 2026-12-04): 247, 179, 138, 52, 43, 32, 30, 29 s
    "test_vllm_engine.py",
    "test_orchestration.py",
    "test_vllm_kill.py",  # ~100 s a mode alone (2026-12-05)
    "test_distributed.py",
    "test_chain_tool.py",
    "test_install.py",
    "test_async_training.py",
    "test_compare_resume.py",
    "test_resume.py",
    "test_sweep_stops.py",  # 23-31 s alone (2026-12-05)
)


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order within a file stays
    # A test that starts vLLM or Ray takes minutes here: `-m "not slow"` must leave it out.
    unmarked = [
        item.nodeid
        for item in items
        if any(item.get_closest_marker(m) for m in ("vllm", "ray"))
        and not item.get_closest_marker("slow")
    ]
    if unmarked:
        raise pytest.UsageError(f"vllm and ray tests must also be marked slow: {unmarked}")
    missing = sorted(name for name in UNIT if not (HERE / name).is_file())
    if missing:
        raise pytest.UsageError(f"UNIT in tests/conftest.py names no such file: {missing}")
    for item in items:
        if item.path.name in UNIT:
            item.add_marker(pytest.mark.unit)
    slow = [
        item.nodeid for item in items if item.path.name in UNIT and item.get_closest_marker("slow")
    ]
    if slow:
        raise pytest.UsageError(f"a unit test is not slow (UNIT, tests/conftest.py): {slow}")
    if unit_tier_only(config) and imported_trainer:
        raise pytest.UsageError(
            f"{imported_trainer[0]} imports {TRAINER}: the unit tier trains nothing "
            "(UNIT, tests/conftest.py)"
        )


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> Path:
    """An empty MLflow store that rvctl report's tests copy (tests/report_store.py)."""
    from tests.report_store import make_empty_store

    return make_empty_store(tmp_path_factory)


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_store):
    """A logged compare and sweep (tests/report_store.py's make_store)."""
    from tests.report_store import make_store

    return make_store(tmp_path_factory, empty_store)


@pytest.fixture(scope="module")
def study_store(tmp_path_factory, empty_store):
    """The staleness study in miniature (tests/study_store.py): 37 logged runs."""
    from tests.report_store import Store
    from tests.study_store import make_study_store

    return make_study_store(Store(tmp_path_factory.mktemp("study"), empty_store))


@pytest.fixture
def rvctl(monkeypatch, capsys):
    """`rvctl ARGS` in this process (tests/cli.py), from the checkout's root."""
    from tests.cli import run_rvctl

    def run(*args: str):
        monkeypatch.chdir(HERE.parent)
        return run_rvctl(list(args), monkeypatch, capsys)

    return run
