"""Values linked to each other, checked together once every field is valid on its own."""

from __future__ import annotations

import os
from pathlib import Path

from rollverify.config.passthrough import check_passthrough
from rollverify.config.run_config import RunConfig
from rollverify.core.methods import METHODS


def check_links(config: RunConfig, problems: list[str]) -> None:
    rollout = config.rollout
    if (
        rollout.max_inflight_groups is not None
        and rollout.max_inflight_groups < rollout.batch_groups
    ):
        problems.append(
            "rollout.max_inflight_groups: must be >= rollout.batch_groups "
            f"({rollout.batch_groups}), got {rollout.max_inflight_groups}; raise it or set null"
        )
    if config.rollout.slots % config.vllm.engines:
        problems.append(
            f"vllm.engines: rollout.slots ({config.rollout.slots}) must split evenly over "
            f"{config.vllm.engines} engines; change either"
        )
    if config.vllm.node_resource is not None and config.vllm.ray_address is None:
        problems.append(
            f"vllm.node_resource: {config.vllm.node_resource!r} marks nodes of a Ray cluster; "
            "give vllm.ray_address (a private local Ray has one node, without it) or set null"
        )
    elif config.vllm.node_resource is not None and config.engine() != "vllm":
        problems.append(
            f"vllm.node_resource: places vLLM engines; the {config.engine()} engine runs in "
            "the trainer's process: set rollout.engine vllm or vllm.node_resource null"
        )
    if config.vllm.max_model_len <= rollout.max_new_tokens:
        problems.append(
            f"vllm.max_model_len: must exceed rollout.max_new_tokens ({rollout.max_new_tokens}) "
            f"by the longest prompt, got {config.vllm.max_model_len}; raise it"
        )
    if rollout.overlong_buffer >= rollout.max_new_tokens:
        problems.append(
            f"rollout.overlong_buffer: must be below rollout.max_new_tokens "
            f"({rollout.max_new_tokens}), got {rollout.overlong_buffer}; lower it (0: off)"
        )
    if config.sampling().truncated and rollout.temperature != 1 and config.engine() == "vllm":
        field = "rollout.top_p" if rollout.top_p < 1 else "rollout.top_k"
        problems.append(
            f"{field}: truncated sampling on the vllm engine needs rollout.temperature 1 (vLLM "
            f"reports no untruncated log-probs at {rollout.temperature}); set temperature 1, "
            "turn truncation off, or use engine hf"
        )
    if config.train.epsilon_high < config.train.epsilon:
        problems.append(
            f"train.epsilon_high: must be >= train.epsilon ({config.train.epsilon}), got "
            f"{config.train.epsilon_high}"
        )
    check_async(config, problems)
    check_passthrough(config, problems)
    check_corrections(config, problems)
    batch = rollout.batch_groups * rollout.group_size
    updates = config.train.updates_per_rollout
    if batch % updates:
        problems.append(
            f"train.updates_per_rollout: must divide the rollout batch, rollout.batch_groups x "
            f"rollout.group_size = {batch}, got {updates}; pick a divisor of {batch}"
        )
    else:
        check_shares(config, problems)
    unwritable = _unwritable(Path(config.output))
    if unwritable:
        problems.append(
            f"output: cannot write runs to {config.output} ({unwritable}); pick a folder you can "
            "write (--output)"
        )


def check_corrections(config: RunConfig, problems: list[str]) -> None:
    """The peers' corrections: the ratio they weight, and the token count of their masks."""
    method = config.train.method
    correction = METHODS[method].correction
    weights = correction is not None and correction != "opsm"  # opsm masks by pi_theta vs mu
    if weights and config.train.ratio_denominator == "behavior":
        # The correction's weight is pi_old/mu: on a ratio pi/mu it would count mu twice.
        problems.append(
            f"train.ratio_denominator: method {method} weights tokens by "
            "pi_old/mu and needs pi_old recomputed, got behavior; set recomputed or null"
        )
    if config.correction.masked_tokens_in_count:
        return
    if correction == "opsm":
        problems.append(
            f"correction.masked_tokens_in_count: method {method} masks in the loss (TRL's "
            "off-policy mask, by pi_theta), after the count is taken; set true"
        )
    if config.train.loss_type == "dr_grpo":
        problems.append(
            "correction.masked_tokens_in_count: train.loss_type dr_grpo divides by a constant "
            "(sequences x rollout.max_new_tokens), not a token count; set true or another "
            "loss_type"
        )


def check_shares(config: RunConfig, problems: list[str]) -> None:
    """Each process trains an equal share of every optimizer step's sequences, in passes of
    train.micro_batch_size."""
    train, rollout = config.train, config.rollout
    step = rollout.batch_groups * rollout.group_size // train.updates_per_rollout
    if step % train.processes:
        problems.append(
            f"train.processes: must divide the step's batch ({step} sequences: "
            "rollout.batch_groups x rollout.group_size / train.updates_per_rollout), got "
            f"{train.processes}; pick a divisor of {step}"
        )
        return
    share, micro = step // train.processes, train.micro_batch_size
    if micro is None or share % micro == 0:
        return
    whose = (
        "the step's batch"
        if train.processes == 1
        else f"each process's share of a step ({step} / train.processes {train.processes})"
    )
    problems.append(
        f"train.micro_batch_size: must divide {whose}: {share} sequences (rollout.batch_groups "
        f"x rollout.group_size / train.updates_per_rollout), got {micro}; pick a divisor of "
        f"{share} or null"
    )


def existing_ancestor(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (where a missing folder would be made)."""
    existing = path.absolute()
    while not existing.exists():
        existing = existing.parent
    return existing


def _unwritable(folder: Path) -> str | None:
    """Why runs could not be written under `folder` (created if missing), or None."""
    existing = existing_ancestor(folder)
    if not existing.is_dir():
        return f"{existing} is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"no write permission on {existing}"
    return None


def check_async(config: RunConfig, problems: list[str]) -> None:
    """What asynchronous training does not combine with yet: each is refused, not ignored."""
    if config.rollout.mode != "async":
        return
    unsupported = [
        (
            "rollout.keep_kv",
            config.rollout.keep_kv and config.engine() == "vllm",
            "false on the vllm engine (it recomputes the KV an update interrupts)",
        ),
        ("train.processes", config.train.processes != 1, "1"),
        ("train.updates_per_rollout", config.train.updates_per_rollout != 1, "1"),
        ("rollout.dynamic_sampling_max_drops", config.rollout.dynamic_sampling_max_drops, "0"),
        ("rollout.max_staleness", config.rollout.max_staleness is not None, "null (eta bounds it)"),
    ]
    for field, refused, fix in unsupported:
        if refused:
            problems.append(f"{field}: rollout.mode async needs {fix}; set it or use mode sync")
