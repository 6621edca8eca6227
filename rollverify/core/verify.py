"""Two-stage verification: how much of each cached trajectory is still on-policy enough to keep.

The rule: docs/rules.md, section 3. A segment is a maximal run of consecutive
generated tokens with one policy version.
  1. Sequence stage (ds): at the first segment whose mean token OPS is >= ds, cut at that
     segment's first token.
  2. Token stage (dt): in what stage 1 kept, cut at the first token whose OPS is >= dt.
The kept prefix keeps its behavior log-probs and versions; the rest is regenerated.

With tool calls a trajectory also holds tokens the policy did not sample (a tool's output,
`policy` False, carrying the version of the call): they are in segments but never judged. A
segment's mean is over its policy tokens (none: it passes), and a cut falls on a policy token,
so the kept prefix ends just before the first rejected policy token and a tool output is kept
exactly when the call before it is (docs/rules.md, section 3).

Both stages are "first index where a condition holds", so one vectorized pass each over [B, T]
does the whole batch: no loop over trajectories or tokens. A NaN OPS on a generated token
fails its check (a token that cannot be scored cannot be trusted); padding is never read.
"""

from __future__ import annotations

import math

import torch

from rollverify.core.argument_checks import check_mask, check_positive_threshold, check_same_shape


def verify(
    ops: torch.Tensor,
    versions: torch.Tensor,
    mask: torch.Tensor,
    ds: float = 0.01,
    dt: float = 2.0,
    policy: torch.Tensor | None = None,
) -> torch.Tensor:
    """Kept length of each trajectory after both stages: long [B].

    ops:      float [B, T] token OPS (rollverify.core.off_policy_shift.token_ops)
    versions: int   [B, T] policy version of each token
    mask:     bool  [B, T] True on generated tokens, right-padded
    ds, dt:   thresholds > 0; float("inf") disables a stage
    policy:   bool  [B, T] True on tokens the policy sampled (None: every generated token)
    """
    return verify_stages(ops, versions, mask, ds, dt, policy)[1]


def verify_stages(
    ops: torch.Tensor,
    versions: torch.Tensor,
    mask: torch.Tensor,
    ds: float = 0.01,
    dt: float = 2.0,
    policy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`verify`'s kept lengths after the sequence stage alone and after both: (long [B],
    long [B]), so that what each stage cut can be counted. Arguments as `verify`'s."""
    ds = check_positive_threshold("ds", ds)
    dt = check_positive_threshold("dt", dt)
    check_same_shape(ops=ops, versions=versions, mask=mask)
    check_mask(mask, ops.shape)
    if versions.dtype.is_floating_point or versions.dtype == torch.bool:
        raise ValueError(f"versions must be an integer tensor, got dtype {versions.dtype}")
    if policy is not None:
        check_mask(policy, ops.shape, "policy")
    if ops.numel() == 0:
        none = torch.zeros(ops.shape[0], dtype=torch.long, device=ops.device)
        return none, none
    lengths = right_padded_lengths(mask)  # [B]

    kept = lengths
    if not math.isinf(ds):
        first_bad = _first_bad_segment_start(ops, versions, mask, lengths, ds, policy)
        kept = torch.minimum(kept, first_bad)
    after_sequence = kept
    if not math.isinf(dt):
        # Tokens past the end of a row may "fail" on padding garbage; the min with kept
        # (<= length) makes them harmless, and saves a pass that would mask them.
        failing = ~(ops < dt)
        kept = torch.minimum(kept, _first_true(failing if policy is None else failing & policy))
    return after_sequence, kept


def right_padded_lengths(mask: torch.Tensor) -> torch.Tensor:
    """Generated length of each row, long [B]; refuses a mask that is not right-padded."""
    if mask.shape[-1] > 1 and torch.gt(mask[:, 1:], mask[:, :-1]).any():
        raise ValueError("mask must be right-padded: True on a prefix of each row, then False")
    return _first_true(~mask)


def _first_bad_segment_start(
    ops: torch.Tensor,
    versions: torch.Tensor,
    mask: torch.Tensor,
    lengths: torch.Tensor,
    ds: float,
    policy: torch.Tensor | None = None,
) -> torch.Tensor:
    """First policy token of the first segment whose mean OPS (over its policy tokens) fails
    `< ds`, else T: long [B]."""
    return segments(ops, versions, mask, lengths, policy).first_failing(ds)


class Segments:
    """The batch's segments, with what the sequence stage judges of each: its row, the column
    a cut there falls on (its first policy token), its mean OPS over its policy tokens, and
    whether it is judged at all (generated tokens, some sampled by the policy). Independent of
    ds: one pass serves any number of thresholds (threshold_grid.py)."""

    def __init__(self, row, column, mean, judged, batch: int, width: int) -> None:
        self.row, self.column, self.mean, self.judged = row, column, mean, judged
        self.batch, self.width = batch, width

    def first_failing(self, ds: float) -> torch.Tensor:
        """First policy token of each row's first segment whose mean fails `< ds` (NaN fails),
        else T: long [B]."""
        bad = self.judged & ~(self.mean < ds)
        first_bad = torch.full((self.batch,), self.width, dtype=torch.long, device=bad.device)
        return first_bad.scatter_reduce_(0, self.row[bad], self.column[bad], reduce="amin")


def segments(
    ops: torch.Tensor,
    versions: torch.Tensor,
    mask: torch.Tensor,
    lengths: torch.Tensor,
    policy: torch.Tensor | None = None,
) -> Segments:
    """The batch flattened into runs that break at every row start, version change and end of
    the generated tokens; torch.segment_reduce sums each run in order (as a loop would), and
    only the few runs (~segments per row x B) are looked at one by one. Padding forms runs of
    its own that are dropped unread, so NaN or inf in padding cannot leak into a segment."""
    batch, width = ops.shape
    if ops.dtype not in (torch.float32, torch.float64):
        ops = ops.float()  # half precision cannot even count a long segment's length exactly
    boundary = torch.empty(mask.shape, dtype=torch.bool, device=mask.device)  # run starts
    boundary[:, 0] = True
    torch.ne(versions[:, 1:], versions[:, :-1], out=boundary[:, 1:])
    boundary[:, 1:] |= mask[:, 1:] != mask[:, :-1]
    run_start = boundary.view(-1).nonzero().squeeze(1)  # [R] flat indices
    run_length = torch.diff(run_start, append=run_start.new_tensor([batch * width]))
    judged = ops if policy is None else torch.where(policy, ops, torch.zeros((), dtype=ops.dtype))
    run_sum = torch.segment_reduce(judged.reshape(-1), "sum", lengths=run_length)  # [R]
    if policy is None:
        run_count = run_length.to(ops.dtype)
    else:  # a run of tool output alone has no policy token to judge: it passes
        run_count = torch.segment_reduce(
            policy.reshape(-1).to(ops.dtype), "sum", lengths=run_length
        )
    row, column = run_start // width, run_start % width
    is_segment = (column < lengths[row]) & (run_count > 0)  # generated tokens, some judged
    if policy is not None:  # the cut falls on the segment's first policy token
        column = _next_true(policy).view(-1)[run_start]
    mean = run_sum / run_count.clamp(min=1)
    return Segments(row, column, mean, is_segment, batch, width)


def _next_true(condition: torch.Tensor) -> torch.Tensor:
    """For each column, the first column at or after it where `condition` (bool [B, T]) holds,
    T where none does: long [B, T]."""
    width = condition.shape[-1]
    index = torch.arange(width, device=condition.device).expand_as(condition)
    candidates = torch.where(condition, index, width)
    return candidates.flip(-1).cummin(-1).values.flip(-1)


def _first_true(condition: torch.Tensor) -> torch.Tensor:
    """First column where `condition` (bool [B, T]) holds, T where it never does: long [B]."""
    first = condition.view(torch.uint8).argmax(dim=-1)  # argmax returns the first maximum
    holds = condition.gather(1, first[:, None]).squeeze(1)
    return torch.where(holds, first, condition.shape[-1])
