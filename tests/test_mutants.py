"""The named mutants (tests/mutants.py) stay in step with the code: each one's text occurs
exactly once in its file, its mutation compiles, and the tests it names exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.mutants import MUTANTS, ROOT


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_mutant_applies_and_names_existing_tests(mutant):
    source = (ROOT / mutant.path).read_text()
    assert source.count(mutant.original) == 1, f"{mutant.path}: update the mutant's text"
    compile(source.replace(mutant.original, mutant.mutated), mutant.path, "exec")
    for test in mutant.tests:
        path, _, name = test.partition("::")
        assert Path(ROOT / path).is_file(), test
        function = re.sub(r"\[.*\]$", "", name)
        assert not function or f"def {function}(" in (ROOT / path).read_text(), test


def test_mutant_names_are_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
