"""Our copy of the spec's vectors must be the binding one, where the shared spec is present."""

from pathlib import Path

import pytest

from tests.conftest import DATA

SHARED = Path(__file__).resolve().parents[2] / "shared" / "spec" / "verify_vectors.json"


@pytest.mark.skipif(not SHARED.exists(), reason=f"{SHARED} is not on this machine")
def test_vectors_copy_is_identical_to_the_shared_spec():
    assert (DATA / "verify_vectors.json").read_bytes() == SHARED.read_bytes()
