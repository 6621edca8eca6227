"""Sample filters (paper Section 3.3): staleness of a sample and the keep/drop decisions."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rollverify.core.filters import keep_fresh, keep_on_policy, staleness, token_staleness


def test_staleness_is_measured_from_the_oldest_generated_token():
    versions = torch.tensor([[3, 3, 5, 9], [5, 5, 0, 0], [2, 7, 7, 7], [0, 0, 0, 0]])
    mask = torch.tensor(
        [[True, True, True, False], [True, True, False, False], [True] * 4, [False] * 4]
    )
    # padding (9, 0) is never read; an empty sample is not stale
    assert staleness(versions, mask, current_version=6).tolist() == [3, 1, 4, 0]


def test_keep_fresh_keeps_samples_within_the_bound_inclusive():
    versions = torch.tensor([[4, 4], [5, 6], [6, 6]])
    mask = torch.ones_like(versions, dtype=torch.bool)
    assert keep_fresh(versions, mask, 6, bound=1).tolist() == [False, True, True]
    assert keep_fresh(versions, mask, 6, bound=0).tolist() == [False, False, True]
    assert keep_fresh(versions, mask, 6, bound=2).tolist() == [True, True, True]


def test_keep_on_policy_keeps_ops_within_the_bound_and_drops_nan():
    ops = torch.tensor([0.0, 0.05, 0.0500001, float("nan"), float("inf")])
    assert keep_on_policy(ops, 0.05).tolist() == [True, True, False, False, False]


@given(
    st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=6), min_size=1, max_size=6),
    st.integers(0, 5),
)
def test_staleness_equals_the_literal_definition(rows, bound):
    width = max(len(r) for r in rows)
    versions = torch.tensor([r + [99] * (width - len(r)) for r in rows])
    mask = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows])
    current = 25
    expected = [current - min(r) for r in rows]
    assert staleness(versions, mask, current).tolist() == expected
    assert keep_fresh(versions, mask, current, bound).tolist() == [s <= bound for s in expected]


def test_token_staleness_counts_each_trained_token_not_each_sample():
    """Two samples trained at version 10: one of 4 tokens sampled at 10, 9, 2, 2 (two of them
    8 versions old), one of 2 tokens at 10 (padding, at version 0, is never counted)."""
    versions = torch.tensor([[10, 9, 2, 2], [10, 10, 0, 0]])
    mask = torch.tensor([[True, True, True, True], [True, True, False, False]])
    mean, share = token_staleness(versions, mask, current_version=10)
    assert mean == pytest.approx((0 + 1 + 8 + 8 + 0 + 0) / 6)
    assert share == pytest.approx(2 / 6)  # per sample it would be 1 of 2
    assert token_staleness(versions, torch.zeros_like(mask), 10) == (0.0, 0.0)
