"""Token and sequence OPS: the spec's vectors, padding, metrics, argument errors."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rollverify.core.off_policy_shift import OPS_METRICS, sequence_ops, token_ops
from tests.reference import reference_token_ops

# The vectors write OPS with 9 decimals: compare to 1e-6 relative, or to that written precision.
REL, ABS = 1e-6, 1e-9


def _row(values, dtype=torch.float64):
    return torch.tensor([values], dtype=dtype)


def test_token_ops_match_every_vector(vectors):
    for case in vectors["verify"]:
        ops = token_ops(
            _row(case["current_logprobs"]), _row(case["behavior_logprobs"]), case["metric"]
        )
        assert ops[0].tolist() == pytest.approx(case["token_ops"], rel=REL, abs=ABS)


def test_sequence_ops_match_every_vector(vectors):
    for case in vectors["verify"]:
        ops = token_ops(
            _row(case["current_logprobs"]), _row(case["behavior_logprobs"]), case["metric"]
        )
        mask = torch.ones_like(ops, dtype=torch.bool)
        assert sequence_ops(ops, mask).item() == pytest.approx(
            case["sequence_ops"], rel=REL, abs=ABS
        )


def test_default_metric_is_abs_ratio():
    current, behavior = _row([-1.0, -2.0]), _row([-1.5, -1.0])
    assert torch.equal(token_ops(current, behavior), token_ops(current, behavior, "abs_ratio"))
    assert token_ops(current, behavior)[0, 0].item() == pytest.approx(math.exp(0.5) - 1)


@pytest.mark.parametrize("metric", OPS_METRICS)
def test_on_policy_tokens_have_zero_ops(metric):
    logprobs = -torch.rand(3, 7, dtype=torch.float64) * 5
    assert torch.count_nonzero(token_ops(logprobs, logprobs.clone(), metric)) == 0


@given(
    st.lists(st.tuples(st.floats(-20, 0), st.floats(-20, 0)), min_size=1, max_size=30),
    st.sampled_from(OPS_METRICS),
)
def test_token_ops_equal_the_literal_formula(pairs, metric):
    current, behavior = [p[0] for p in pairs], [p[1] for p in pairs]
    ops = token_ops(_row(current), _row(behavior), metric)[0].tolist()
    assert ops == pytest.approx(reference_token_ops(current, behavior, metric), rel=1e-9, abs=1e-12)
    assert min(ops) >= 0  # every metric is a distance (k3 >= 0 since e^x >= 1 + x)


def test_padding_is_ignored_whatever_it_holds():
    current = _row([-1.0, -2.0, -0.5, math.nan, math.inf])
    behavior = _row([-1.1, -2.0, -0.4, 0.0, -math.inf])
    mask = torch.tensor([[True, True, True, False, False]])
    ops = token_ops(current, behavior, mask=mask)
    assert ops[0, 3:].tolist() == [0.0, 0.0]
    expected = token_ops(current[:, :3], behavior[:, :3])
    assert sequence_ops(ops, mask).item() == pytest.approx(expected.mean().item())
    unmasked = token_ops(current, behavior)  # NaN/inf in the pads ...
    assert sequence_ops(unmasked, mask).item() == pytest.approx(expected.mean().item())  # ignored


def test_sequence_ops_of_an_empty_trajectory_is_zero():
    ops = torch.tensor([[math.nan, 1.0], [0.5, 0.25]])
    mask = torch.tensor([[False, False], [True, True]])
    assert sequence_ops(ops, mask).tolist() == [0.0, 0.375]


def test_unknown_metric_is_named():
    with pytest.raises(ValueError, match="metric='kl'.*abs_ratio"):
        token_ops(_row([0.0]), _row([0.0]), "kl")


def test_shape_mismatch_names_both_arguments():
    with pytest.raises(ValueError, match=r"current_logprobs \(1, 2\), behavior_logprobs \(1, 3\)"):
        token_ops(_row([0.0, 0.0]), _row([0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="mask"):
        sequence_ops(_row([0.0, 0.0]), torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        sequence_ops(_row([0.0, 0.0]), torch.ones(1, 2))


def test_sequence_ops_average_each_row_over_its_own_length():
    ops = torch.tensor([[0.25, 0.75, 9.0], [0.5, 9.0, 9.0], [0.1, 0.2, 0.3]])
    mask = torch.tensor([[True, True, False], [True, False, False], [True, True, True]])
    assert sequence_ops(ops, mask).tolist() == pytest.approx([0.5, 0.5, 0.2])


def test_unknown_metric_lists_the_known_ones():
    with pytest.raises(ValueError, match="use one of abs_ratio, abs_log_ratio, k3$"):
        token_ops(_row([0.0]), _row([0.0]), "kl")
