import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def vectors() -> dict:
    """The spec's test vectors (a copy of ../shared/spec/verify_vectors.json)."""
    return json.loads((DATA / "verify_vectors.json").read_text())
