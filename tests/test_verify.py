"""Two-stage verification: the spec's vectors, a literal reference, properties, errors."""

import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rollverify.core.off_policy_shift import token_ops
from rollverify.core.verify import verify, verify_stages
from tests.reference import reference_kept

INF = float("inf")


def _batch(rows_ops, rows_versions, width=None, pad_ops=0.0, pad_version=0):
    """Right-pad rows into [B, T] tensors; padding holds `pad_ops` / `pad_version`."""
    width = width or max([len(r) for r in rows_ops] + [1])
    ops = torch.full((len(rows_ops), width), pad_ops, dtype=torch.float64)
    versions = torch.full((len(rows_ops), width), pad_version, dtype=torch.long)
    mask = torch.zeros((len(rows_ops), width), dtype=torch.bool)
    for i, (o, v) in enumerate(zip(rows_ops, rows_versions, strict=True)):
        ops[i, : len(o)] = torch.tensor(o, dtype=torch.float64)
        versions[i, : len(v)] = torch.tensor(v, dtype=torch.long)
        mask[i, : len(o)] = True
    return ops, versions, mask


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_kept_lengths_match_every_vector_one_by_one(vectors, dtype):
    for case in vectors["verify"]:
        current = torch.tensor([case["current_logprobs"]], dtype=dtype)
        behavior = torch.tensor([case["behavior_logprobs"]], dtype=dtype)
        ops = token_ops(current, behavior, case["metric"])
        mask = torch.ones_like(ops, dtype=torch.bool)
        kept = verify(ops, torch.tensor([case["versions"]]), mask, case["ds"], case["dt"])
        assert kept.tolist() == [case["kept"]], case


def test_kept_lengths_match_every_vector_in_one_batch(vectors):
    """Batched together (different lengths, so padded), each row keeps what it kept alone."""
    by_setting = {}
    for case in vectors["verify"]:
        by_setting.setdefault((case["ds"], case["dt"]), []).append(case)
    for (ds, dt), cases in by_setting.items():
        rows = [torch.tensor(c["token_ops"], dtype=torch.float64).tolist() for c in cases]
        ops, versions, mask = _batch(rows, [c["versions"] for c in cases], pad_ops=math.nan)
        assert verify(ops, versions, mask, ds, dt).tolist() == [c["kept"] for c in cases]


ops_values = st.one_of(
    st.floats(0, 0.05), st.floats(0, 5), st.sampled_from([0.0, 0.01, 2.0, math.inf])
)


@st.composite
def trajectories(draw, max_len=24):
    length = draw(st.integers(0, max_len))
    ops = draw(st.lists(ops_values, min_size=length, max_size=length))
    # versions: a few segments, sometimes going back to an old version (still a new segment)
    versions = draw(st.lists(st.integers(0, 3), min_size=length, max_size=length))
    versions = sorted(versions) if draw(st.booleans()) else versions
    return ops, versions


thresholds = st.one_of(st.floats(1e-4, 5), st.just(INF))


@settings(max_examples=300, deadline=None)
@given(st.lists(trajectories(), min_size=1, max_size=6), thresholds, thresholds)
def test_vectorized_verify_equals_the_literal_loop(batch, ds, dt):
    ops, versions, mask = _batch([b[0] for b in batch], [b[1] for b in batch])
    expected = [reference_kept(o, v, ds, dt) for o, v in batch]
    assert verify(ops, versions, mask, ds, dt).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(trajectories(), min_size=1, max_size=5), thresholds, thresholds)
def test_kept_is_between_zero_and_length(batch, ds, dt):
    ops, versions, mask = _batch([b[0] for b in batch], [b[1] for b in batch])
    kept = verify(ops, versions, mask, ds, dt)
    assert (kept >= 0).all() and (kept <= mask.sum(-1)).all()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(trajectories(), min_size=1, max_size=5),
    st.floats(1e-4, 5),
    st.floats(1e-4, 5),
    st.floats(1, 10),
    st.floats(1, 10),
)
def test_kept_never_decreases_when_thresholds_grow(batch, ds, dt, ds_factor, dt_factor):
    ops, versions, mask = _batch([b[0] for b in batch], [b[1] for b in batch])
    strict = verify(ops, versions, mask, ds, dt)
    for looser in [(ds * ds_factor, dt), (ds, dt * dt_factor), (INF, dt), (ds, INF)]:
        assert (verify(ops, versions, mask, *looser) >= strict).all()


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5), st.integers(1, 30), st.sampled_from(["abs_ratio", "k3"]))
def test_on_policy_input_keeps_everything(batch, width, metric):
    logprobs = -torch.rand(batch, width, dtype=torch.float64) * 10
    lengths = torch.randint(0, width + 1, (batch,))
    mask = torch.arange(width) < lengths[:, None]
    versions = torch.randint(0, 4, (batch, width)).sort(-1).values
    ops = token_ops(logprobs, logprobs.clone(), metric, mask=mask)
    assert torch.equal(verify(ops, versions, mask, ds=1e-9, dt=1e-9), lengths)


@settings(max_examples=100, deadline=None)
@given(st.lists(trajectories(), min_size=1, max_size=5))
def test_infinite_thresholds_keep_everything(batch):
    ops, versions, mask = _batch([b[0] for b in batch], [b[1] for b in batch])
    assert torch.equal(verify(ops, versions, mask, INF, INF), mask.sum(-1))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(trajectories(), min_size=1, max_size=5),
    thresholds,
    thresholds,
    st.integers(0, 9),
    st.sampled_from([0.0, math.nan, math.inf, -1.0, 1e30]),
    st.integers(-5, 5),
)
def test_independent_of_padding_length_and_values(batch, ds, dt, extra, pad_ops, pad_version):
    rows_ops, rows_versions = [b[0] for b in batch], [b[1] for b in batch]
    tight = verify(*_batch(rows_ops, rows_versions), ds, dt)
    width = max([len(r) for r in rows_ops] + [1]) + extra
    padded = verify(*_batch(rows_ops, rows_versions, width, pad_ops, pad_version), ds, dt)
    assert torch.equal(tight, padded)


def test_segments_are_defined_by_version_changes_not_values():
    # versions 1,1,2,1: three segments; the last (version 1 again) is a segment of its own.
    ops, versions, mask = _batch([[0.0, 0.0, 0.0, 0.5]], [[1, 1, 2, 1]])
    assert verify(ops, versions, mask, ds=0.1, dt=INF).tolist() == [3]
    # One segment whose mean is under ds keeps a bad token that stage 2 then catches.
    ops, versions, mask = _batch([[0.0, 0.0, 0.3, 0.0]], [[1, 1, 1, 1]])
    assert verify(ops, versions, mask, ds=0.1, dt=INF).tolist() == [4]
    assert verify(ops, versions, mask, ds=0.1, dt=0.25).tolist() == [2]


def test_a_nan_ops_on_a_generated_token_fails_its_check():
    ops, versions, mask = _batch([[0.0, math.nan, 0.0]], [[1, 1, 2]])
    assert verify(ops, versions, mask, ds=INF, dt=1.0).tolist() == [1]
    assert verify(ops, versions, mask, ds=1.0, dt=INF).tolist() == [0]


def test_empty_batch_and_empty_rows():
    empty = torch.zeros(0, 0)
    assert verify(empty, empty.long(), empty.bool()).tolist() == []
    ops, versions, mask = _batch([[], [0.5]], [[], [1]])
    assert verify(ops, versions, mask, ds=0.1, dt=1.0).tolist() == [0, 0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ds": 0.0}, "ds=0.0 must be > 0"),
        ({"ds": -1}, "ds=-1 must be > 0"),
        ({"dt": math.nan}, "dt=nan must be > 0"),
        ({"dt": "2"}, "dt='2' must be a number"),
    ],
)
def test_bad_thresholds_are_named(kwargs, message):
    ops, versions, mask = _batch([[0.0]], [[1]])
    with pytest.raises(ValueError, match=message):
        verify(ops, versions, mask, **kwargs)


def test_bad_shapes_and_masks_are_named():
    ops, versions, mask = _batch([[0.0, 0.0]], [[1, 1]])
    with pytest.raises(ValueError, match=r"versions \(1, 1\)"):
        verify(ops, versions[:, :1], mask)
    with pytest.raises(ValueError, match="right-padded"):
        verify(ops, versions, torch.tensor([[False, True]]))
    with pytest.raises(ValueError, match="integer"):
        verify(ops, versions.double(), mask)


def test_the_default_thresholds_are_the_spec_defaults():
    # ds = 0.01 and dt = 2.0 (spec): a segment of mean 0.0105 fails, 0.0095 passes; in a
    # segment whose mean passes (~0.0066), a token of 2.0 fails the token stage, 1.99 passes.
    rows = [[0.0095] * 3 + [0.0105] * 2, [0.0] * 250 + [1.99] + [0.0] * 50]
    rows.append([0.0] * 250 + [2.0] + [0.0] * 50)
    ops, versions, mask = _batch(rows, [[1, 1, 1, 2, 2], [3] * 301, [3] * 301])
    assert verify(ops, versions, mask).tolist() == [3, 301, 250]
    assert verify(ops, versions, mask).tolist() == verify(ops, versions, mask, 0.01, 2.0).tolist()


def test_rows_with_no_positions_keep_nothing_and_come_back_as_long():
    ops = torch.zeros(3, 0)
    kept = verify(ops, ops.long(), ops.bool())
    assert kept.tolist() == [0, 0, 0] and kept.dtype == torch.long
    assert verify(torch.zeros(0, 0), torch.zeros(0, 0).long(), torch.zeros(0, 0).bool()).dtype == (
        torch.long
    )


def test_a_mask_with_a_hole_is_not_right_padded():
    ops, versions, _ = _batch([[0.0, 0.0, 0.0]], [[1, 1, 1]])
    for holed in ([True, False, True], [False, False, True]):
        message = "^mask must be right-padded: True on a prefix of each row, then False$"
        with pytest.raises(ValueError, match=message):
            verify(ops, versions, torch.tensor([holed]))


def test_ops_of_another_shape_are_named():
    ops, versions, mask = _batch([[0.0, 0.0]], [[1, 1]])
    with pytest.raises(
        ValueError, match=r"^shapes must agree: ops \(1, 1\), versions \(1, 2\), mask \(1, 2\)$"
    ):
        verify(ops[:, :1], versions, mask)


def test_bfloat16_ops_are_judged_as_in_float32():
    """A 300-token segment of OPS 0.0099 (mean just under ds): summed in bfloat16 its mean
    comes out at 0.0107 (measured), over ds; verify sums it in float32."""
    values = [0.0099] * 300 + [0.5]
    ops, versions, mask = _batch([values], [[1] * 300 + [2]])
    half = ops.to(torch.bfloat16)
    expected = verify(half.float(), versions, mask, ds=0.01, dt=INF)
    assert expected.tolist() == [300]
    assert verify(half, versions, mask, ds=0.01, dt=INF).tolist() == expected.tolist()


# -- tool output in a trajectory (docs/rules.md, section 3, "Tool output") --------------------

TOOL_VECTORS = json.loads((Path(__file__).parent / "data" / "tool_vectors.json").read_text())


def test_tool_vectors_one_by_one_and_by_the_literal_loop():
    for case in TOOL_VECTORS["verify"]:
        ops = torch.tensor([case["token_ops"]], dtype=torch.float64)
        policy = torch.tensor([case["policy"]])
        mask = torch.ones_like(policy)
        versions = torch.tensor([case["versions"]])
        kept = verify(ops, versions, mask, case["ds"], case["dt"], policy=policy)
        assert kept.tolist() == [case["kept"]], case["why"]
        assert reference_kept(*_row(case), case["ds"], case["dt"], case["policy"]) == case["kept"]
        assert sum(case["policy"][: case["kept"]]) == case["kept_policy_tokens"]


def test_tool_vectors_in_one_batch_with_nan_padding():
    cases = [c for c in TOOL_VECTORS["verify"] if (c["ds"], c["dt"]) == (0.5, 2.0)]
    ops, versions, mask = _batch([c["token_ops"] for c in cases], [c["versions"] for c in cases],
                                 pad_ops=math.nan)  # fmt: skip
    policy = mask.clone()
    for i, case in enumerate(cases):
        policy[i, : len(case["policy"])] = torch.tensor(case["policy"])
    kept = verify(ops, versions, mask, 0.5, 2.0, policy=policy)
    assert kept.tolist() == [c["kept"] for c in cases]


def _row(case):
    return [float(o) for o in case["token_ops"]], case["versions"]


@st.composite
def tool_trajectories(draw, max_len=24):
    ops, versions = draw(trajectories(max_len))
    policy = draw(st.lists(st.booleans(), min_size=len(ops), max_size=len(ops)))
    if policy:
        policy[0] = True  # a trajectory opens with the policy's tokens, before any call
    return ops, versions, policy


@settings(max_examples=300, deadline=None)
@given(st.lists(tool_trajectories(), min_size=1, max_size=6), thresholds, thresholds)
def test_verify_with_tool_output_equals_the_literal_loop(batch, ds, dt):
    ops, versions, mask = _batch([b[0] for b in batch], [b[1] for b in batch], pad_ops=math.nan)
    policy = torch.zeros_like(mask)
    for i, (_, _, p) in enumerate(batch):
        policy[i, : len(p)] = torch.tensor(p, dtype=torch.bool)
    expected = [reference_kept(o, v, ds, dt, p) for o, v, p in batch]
    kept = verify(ops, versions, mask, ds, dt, policy=policy)
    assert kept.tolist() == expected
    for k, (_, _, p) in zip(kept.tolist(), batch, strict=True):  # a cut lands on a policy token
        assert k == len(p) or p[k]


@settings(max_examples=200, deadline=None)
@given(st.lists(trajectories(), min_size=1, max_size=6), thresholds, thresholds)
def test_a_tool_free_policy_mask_changes_nothing(batch, ds, dt):
    ops, versions, mask = _batch([b[0] for b in batch], [b[1] for b in batch])
    assert (
        verify(ops, versions, mask, ds, dt, policy=mask).tolist()
        == verify(ops, versions, mask, ds, dt).tolist()
    )


def test_a_bad_policy_mask_is_named_policy():
    ops, versions, mask = _batch([[0.0, 0.0]], [[1, 1]])
    with pytest.raises(ValueError, match="policy must be a bool tensor"):
        verify(ops, versions, mask, policy=mask.int())
    with pytest.raises(ValueError, match=r"shapes must agree: policy \(1, 1\)"):
        verify(ops, versions, mask, policy=mask[:, :1])


@settings(max_examples=200, deadline=None)
@given(st.lists(trajectories(), min_size=1, max_size=6), thresholds, thresholds)
def test_the_stages_kept_lengths_are_the_sequence_stage_alone_then_both(batch, ds, dt):
    """What each stage cut is counted from these: the first is verify with dt off."""
    ops, versions, mask = _batch([b[0] for b in batch], [b[1] for b in batch])
    after_sequence, kept = verify_stages(ops, versions, mask, ds, dt)
    assert after_sequence.tolist() == verify(ops, versions, mask, ds, INF).tolist()
    assert kept.tolist() == verify(ops, versions, mask, ds, dt).tolist()
    assert (kept <= after_sequence).all()
