import json
from pathlib import Path

import pytest
import torch

from rollverify.infra.quiet import quiet_environment

# Measured here: tiny-model ops with 2 OpenMP threads slow down ~50x when another process is
# busy on the 2 cores (threads spin-wait for each other). One thread keeps tests predictable.
torch.set_num_threads(1)
quiet_environment()  # as the CLI does, before TRL loads

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def vectors() -> dict:
    """The spec's test vectors (a copy of ../shared/spec/verify_vectors.json)."""
    return json.loads((DATA / "verify_vectors.json").read_text())


# The longest files first: with `make test`'s two workers taking whole files (--dist
# loadfile), a long file started last would run alone at the end.
LONGEST_FIRST = ("test_vllm_engine.py", "test_orchestration.py", "test_resume.py")


def pytest_collection_modifyitems(items):
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
