"""docs/metrics.md lists exactly the metric names rollverify/tracking/metric_names.py declares."""

from __future__ import annotations

import re
from pathlib import Path

from rollverify.tracking import metric_names as metrics

DOC = Path(__file__).parents[1] / "docs" / "metrics.md"


def documented_names(text: str) -> set[str]:
    """Backticked names in the first column of the tables before the report's columns."""
    logged = text.split("## `rvctl report` columns")[0]
    names = set()
    for line in logged.splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2:
            names |= set(re.findall(r"`([a-z0-9_/<>]+)`", cells[1]))
    return names


def test_the_metrics_doc_lists_exactly_the_declared_names():
    declared = set(metrics.all_names())
    documented = documented_names(DOC.read_text())
    assert not declared - documented, f"declared, not in docs/metrics.md: {declared - documented}"
    assert not documented - declared, f"in docs/metrics.md, not declared: {documented - declared}"


def test_the_doc_check_sees_a_missing_and_an_extra_name():
    text = DOC.read_text().replace("| `reward_mean` |", "| `reward_mean_typo` |")
    assert "reward_mean" not in documented_names(text)
    assert "reward_mean_typo" in documented_names(text)
