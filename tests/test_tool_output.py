"""Trajectories with tool output through the verification cycle and the loss's inputs
(docs/rules.md, sections 1 and 3, "Tool output"): OPS, both stages and the acceptance rate count
the policy's tokens only, and TRL's tool mask keeps a tool's output out of the loss."""

from __future__ import annotations

import math

import pytest
import torch

from rollverify.config import VerifyConfig
from rollverify.core.methods import METHODS
from rollverify.core.switching import AcceptanceMonitor
from rollverify.rollout.schedules import RolloutResult
from rollverify.rollout.trajectory import Trajectory
from rollverify.training.cache_check import check_cache
from rollverify.training.trl_adapter import rollout_output


def _trajectory(tokens: list[int], policy: list[bool], versions: list[int]) -> Trajectory:
    t = Trajectory(torch.tensor([1, 2]), 0, len(tokens))
    for token, mine, version in zip(tokens, policy, versions, strict=True):
        if mine:
            t.extend([token], [-1.0], version)
        else:
            t.extend_tool_output([token], version)
    return t


def _cycle(trajectories, current, method="rollverify", ds=0.5, dt=2.0):
    monitor = AcceptanceMonitor(window=1, threshold=0.5)
    check = check_cache(
        trajectories,
        current,
        METHODS[method],
        VerifyConfig(ds=ds, dt=dt),
        monitor,
        step=1,
        version=3,
    )
    return check, monitor


def test_the_cycle_counts_policy_tokens_and_cuts_before_the_first_rejected_one():
    # 3 policy tokens (the call), 2 of tool output, 2 policy tokens; the second of those drifts
    policy = [True, True, True, False, False, True, True]
    t = _trajectory([5, 6, 7, 40, 41, 8, 9], policy, [1, 1, 1, 1, 1, 2, 2])
    # behavior -1 everywhere: current -1 is on-policy; tool positions hold garbage (never read)
    current = torch.tensor([[-1.0, -1.0, -1.0, 30.0, math.nan, -1.0, 2.0]])
    check, monitor = _cycle([t], current, ds=math.inf)
    assert len(t) == 6 and t.policy.tolist() == policy[:6]  # the tool output is kept with its call
    assert (check.tokens_before, check.tokens_kept) == (5, 4)  # policy tokens only
    assert monitor.history == [pytest.approx(4 / 5)]
    assert check.ops_before == pytest.approx((math.exp(3) - 1) / 5)  # mean over policy tokens
    assert check.ops_after == 0.0


def test_the_cycle_counts_what_each_stage_cut_in_policy_tokens():
    """Two segments (versions 1, 2). The second fails the sequence stage (its mean OPS 0.6 >=
    0.5): its 3 policy tokens are the sequence stage's. In the first (mean 0.4 < 0.5) a token
    fails dt = 1 (OPS e^0.7 - 1 ~ 1.01): it and the policy token after it are the token
    stage's; the tool output between them is neither."""
    policy = [True, True, False, True, True, True, True]
    t = _trajectory([5, 6, 40, 7, 8, 9, 10], policy, [1, 1, 1, 1, 2, 2, 2])
    first, second = math.log(1.2), math.log(1.6)  # abs_ratio OPS: 0.2 and 0.6
    current = torch.tensor([[-1 + first, -1 + 0.7, 9.0, -1 + first, *[-1 + second] * 3]])
    check, _ = _cycle([t], current, ds=0.5, dt=1.0)
    assert len(t) == 1 and (check.tokens_before, check.tokens_kept) == (6, 1)
    assert check.tokens_cut_token_stage == 2  # policy tokens 6 and 7; not the tool's 40
    assert check.tokens_cut_sequence_stage == 3
    again = _trajectory([5, 6, 40, 7, 8, 9, 10], policy, [1, 1, 1, 1, 2, 2, 2])
    no_token_stage, _ = _cycle([again], current, method="rollverify-seq", ds=0.5, dt=1.0)
    assert no_token_stage.tokens_cut_token_stage == 0 and no_token_stage.tokens_kept == 3


def test_a_rejected_call_takes_its_tool_output_with_it():
    t = _trajectory([5, 6, 7, 40, 41, 8], [True, True, True, False, False, True], [1] * 6)
    current = torch.tensor([[-1.0, -1.0, 2.0, -1.0, -1.0, -1.0]])  # the call's last token
    check, _ = _cycle([t], current, ds=math.inf)
    assert len(t) == 2 and t.policy.tolist() == [True, True]
    assert (check.tokens_before, check.tokens_kept) == (4, 2)


def test_a_tool_free_cycle_is_todays_cycle():
    t = _trajectory([5, 6, 7, 8], [True] * 4, [1, 1, 2, 2])
    assert t.policy is None
    current = torch.tensor([[-1.0, -1.0, -0.5, -1.0]])
    check, monitor = _cycle([t], current, ds=0.2)
    assert len(t) == 2 and (check.tokens_before, check.tokens_kept) == (4, 2)
    assert monitor.history == [0.5]


def test_tool_output_is_out_of_the_loss_through_trls_tool_mask():
    tool = _trajectory([5, 40, 6], [True, False, True], [0, 0, 0])
    plain = _trajectory([5, 6], [True, True], [0, 0])
    result = RolloutResult([[tool, plain]], ["3"], 0.0, 0, 0, 5, 0)
    output = rollout_output(result, torch.tensor([True, True]), mask_dropped=False)
    assert output["env_mask"] == [[1, 0, 1], [1, 1]]
    dropped = rollout_output(result, torch.tensor([True, False]), mask_dropped=True)
    assert dropped["env_mask"] == [[1, 0, 1], [0, 0]]
