"""What a training checkpoint holds, and how each part goes back where it came from.

A checkpoint is taken at a step boundary, after the step's metrics are logged:

    tensors  model          the trainer's weights (the engine gets them by weight sync)
             optimizer      AdamW moments, per parameter index (a sharded run: each rank
                            writes its part of these two, sharded.py)
             rng            torch (CPU, CUDA), numpy keys, the engine's sampling state; in a
                            world of processes, every other rank's under rank<r>/
             cache          the partial-rollout cache: token ids, behavior log-probs, versions
    state    config, MLflow run id, optimizer groups, scheduler, python/numpy RNG, task
             (data position), answers of groups in play, acceptance monitor, cost ledger,
             the loop's counters
    documents trainer_state  transformers' TrainerState, read by `Trainer.train(resume_...)`

Everything is safetensors or JSON (files.py writes it atomically). The
transformers Trainer restores the optimizer, scheduler and RNG through three hooks that the
adapter (trl_adapter.py) points at `load_optimizer_and_scheduler` and `restore_rng` here, at
the moments it would restore its own (pickled) files; so a resumed run draws the same random
numbers as one that never stopped.
"""

from __future__ import annotations

import dataclasses
import random
import warnings
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import torch

from rollverify.config import RunConfig
from rollverify.infra.nested_dicts import config_fields
from rollverify.infra.paths import locate
from rollverify.rollout.engines.protocol import RolloutEngine
from rollverify.training.checkpoint.files import Checkpoint, ShardedGroup
from rollverify.training.distributed.sharding import is_sharded, load_optimizer_state

# Fields a resumed run may change: how long, how often, where it runs. Any other change
# (model, task, rollout, verification, optimizer) would make the rest of the run another
# experiment than its first part. (Bit-exact continuation also needs the same threads and
# engine; changing them is allowed, it only gives up exactness.)
RESUMABLE_CHANGES = (
    "train.steps",
    "train.eval_every",
    "train.threads",
    "train.micro_batch_size",  # the same update, summed in other passes
    "train.processes",  # the same update, averaged over another world size
    "train.sharding",  # the same state, held whole or in shards
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.async_checkpoint",  # when the same checkpoints are written
    "train.stop_grace_seconds",  # how a stop goes
    "train.gradient_checkpointing",  # the same gradients, recomputed
    "tracking.plots",
    "rollout.engine",
    "vllm.",
    "output",
)


class CheckpointedLoop(Protocol):
    """What a checkpoint is taken from and put back into (the training loop, loop.py): its
    config, engine and TRL trainer, and the state it owns, under named keys."""

    config: RunConfig
    engine: RolloutEngine
    trainer: Any  # the TRL trainer (trl_adapter.BehaviorRatioGRPOTrainer)

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], step: int) -> None: ...


def capture(
    loop: CheckpointedLoop, run_id: str, tracking_uri: str, whole: WholeState
) -> Checkpoint:
    """Everything needed to continue `loop` and its trainer from the step just finished.
    whole: the model and optimizer state and every rank's RNG (whole_state())."""
    trainer = loop.trainer
    step = trainer.state.global_step
    optimizer_tensors, optimizer_state = _optimizer_parts(whole.optimizer)
    owned = loop.state_dict()
    rollout = owned.pop("rollout")
    rng_tensors, rng_state = _ranks_rng(whole.ranks_rng)
    engine_rng = owned.pop("engine_rng", None)  # (an engine in a thread: read while parked)
    rng_tensors["engine"] = engine_rng if engine_rng is not None else loop.engine.sampling_state()
    trainer.state.stateful_callbacks["TrainerControl"] = trainer.control.state()
    tensors = {"rng": rng_tensors, "cache": rollout["cache"]["tensors"]}
    if whole.weights is not None:  # (else each rank wrote its part: sharded.py)
        tensors |= {"model": whole.weights, "optimizer": optimizer_tensors}
    return Checkpoint(
        step,
        tensors=tensors,
        state={
            "config": loop.config.to_dict(),
            "mlflow": {"run_id": run_id, "tracking_uri": tracking_uri},
            "optimizer": optimizer_state,
            "scheduler": trainer.lr_scheduler.state_dict(),
            "rng": rng_state,
            "cache": rollout["cache"]["records"],
            "answers": rollout["answers"],
            # the step in progress's drops so far (dynamic sampling, the staleness cap)
            "rollout_counts": {k: v for k, v in rollout.items() if k not in ("cache", "answers")},
            **owned,  # task, monitor, ledger, loop: each part's own state_dict()
            "engine": type(loop.engine).__name__,
        },
        documents={"trainer_state": dataclasses.asdict(trainer.state)},
    )


def restore_loop(loop: CheckpointedLoop, checkpoint: Checkpoint) -> None:
    """Put the loop's own state back (the trainer's comes back through its hooks)."""
    state = checkpoint.state
    rollout = {
        "cache": {"tensors": checkpoint.tensors["cache"], "records": state["cache"]},
        "answers": state["answers"],
        **state.get("rollout_counts", {}),  # (absent in checkpoints from before they were kept)
    }
    owners = ("task", "monitor", "ledger", "loop")
    loop.load_state_dict({"rollout": rollout} | {k: state[k] for k in owners}, checkpoint.step)
    if state["engine"] == type(loop.engine).__name__:
        loop.engine.load_sampling_state(checkpoint.tensors["rng"]["engine"])
    else:  # resumed on another engine: its sampling stream starts from the seed
        warnings.warn(
            f"resumed on {type(loop.engine).__name__}, checkpoint from {state['engine']}: "
            "sampling continues from the seed, not where it was",
            stacklevel=2,
        )


@dataclasses.dataclass
class WholeState:
    """What a checkpoint needs from the trainer beyond what the ranks wrote, on rank 0."""

    weights: dict[str, torch.Tensor] | None  # None: sharded, each rank wrote its part
    optimizer: dict[str, Any]  # as optimizer.state_dict() (sharded: without its tensors)
    ranks_rng: list[tuple]  # rng_parts() of every rank, in rank order


def whole_state(trainer: Any, ranks_rng: list[tuple] | None) -> WholeState | None:
    """The state on rank 0 (ranks_rng given), None on the others. Unsharded, every rank holds
    it all and rank 0 reads its own; sharded, the tensors are in the parts the ranks wrote
    (sharded.py) and only the optimizer's groups and plain values are left."""
    if ranks_rng is None:
        return None
    model = trainer.accelerator.unwrap_model(trainer.model)
    optimizer = trainer.optimizer.state_dict()
    if not is_sharded(model):
        return WholeState(model.state_dict(), optimizer, ranks_rng)
    plain = {
        index: {key: value for key, value in values.items() if not torch.is_tensor(value)}
        for index, values in optimizer["state"].items()
    }
    return WholeState(None, {"state": plain, "param_groups": optimizer["param_groups"]}, ranks_rng)


def load_optimizer_and_scheduler(
    model: torch.nn.Module, optimizer: Any, scheduler: Any, checkpoint: Checkpoint
) -> None:
    """The optimizer's state back (into this rank's shards when sharded: from the parts the
    ranks wrote, each rank reading only its own), and the schedule."""
    saved = checkpoint.state["optimizer"]
    tensors = checkpoint.tensors["optimizer"]
    parts = isinstance(tensors, ShardedGroup) and is_sharded(model)
    if parts:
        tensors = tensors.parts(like=_moment_like(optimizer))
    per_parameter = by_parameter(tensors)
    for index, values in by_parameter(saved["plain"]).items():
        per_parameter.setdefault(index, {}).update(values)
    groups = [
        {k: tuple(v) if k == "betas" else v for k, v in group.items()}
        for group in saved["param_groups"]
    ]
    state = {"state": per_parameter, "param_groups": groups}
    load_optimizer_state(model, optimizer, state, parts=parts)
    scheduler.load_state_dict(checkpoint.state["scheduler"])


def by_parameter(values: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """A checkpoint's `<index>.<key>` optimizer values as optimizer.state_dict()'s state:
    {parameter index: {key: value}}."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in values.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    return state


def _moment_like(optimizer: Any):
    """Where a sharded checkpoint's `<index>.<key>` tensor is read to: a moment the shape of
    its parameter into a tensor sharded as the parameter is; anything else (AdamW's step)
    whole."""
    parameters = [p for group in optimizer.param_groups for p in group["params"]]

    def like(name: str, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        parameter = parameters[int(name.split(".", 1)[0])]
        if tuple(shape) == tuple(parameter.shape):
            return torch.zeros_like(parameter, dtype=dtype)
        return torch.zeros(shape, dtype=dtype)

    return like


def restore_rng(checkpoint: Checkpoint, rank: int = 0) -> None:
    """This rank's random state as it was (a rank the checkpoint lacks, in a run resumed on
    more processes, takes rank 0's: the run goes on, not exactly as it would have)."""
    tensors, state = checkpoint.tensors["rng"], checkpoint.state["rng"]
    if rank > 0:
        ranks = state.get("ranks", {})
        if str(rank) not in ranks:
            warnings.warn(
                f"the checkpoint has no RNG state of rank {rank} (it was written by "
                f"{len(ranks) + 1} processes): that rank continues from rank 0's",
                stacklevel=2,
            )
        else:
            prefix = f"rank{rank}/"
            mine = [(k, v) for k, v in tensors.items() if k.startswith(prefix)]
            tensors = {k.removeprefix(prefix): v for k, v in mine}
            state = ranks[str(rank)]
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy = state["numpy"]
    keys = tensors["numpy_keys"].numpy().astype(np.uint32)
    np.random.set_state((numpy["kind"], keys, numpy["pos"], numpy["has_gauss"], numpy["gauss"]))
    torch.random.set_rng_state(tensors["torch"])
    cuda = sorted(name for name in tensors if name.startswith("cuda"))
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([tensors[name] for name in cuda])
    elif cuda:
        warnings.warn(
            f"the checkpoint has RNG states of {len(cuda)} GPUs, this process sees "
            f"{torch.cuda.device_count()}: GPU sampling will not repeat exactly",
            stacklevel=2,
        )


def config_changes(saved: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """One line per field whose change would break a resumed run (a mapping field, such as
    task.eval_sets, compared whole)."""
    before, after = config_fields(saved), config_fields(wanted)
    problems = []
    for name in sorted(before.keys() | after.keys()):
        if before.get(name) == after.get(name) or name.startswith(RESUMABLE_CHANGES):
            continue
        if name not in before:  # a field added since the checkpoint was written: its default
            continue
        if name == "model.path" and _one_folder(before[name], after.get(name)):
            continue
        problems.append(
            f"{name}: {before.get(name)!r} in the checkpoint, {after.get(name)!r} now; a resumed "
            "run keeps its model, task, rollout, verification and optimizer settings (put it "
            "back, or start a new run with rvctl train)"
        )
    was, now = _prompt_limit(saved), _prompt_limit(wanted)
    if was != now and "task.max_prompt_tokens" in before:
        problems.append(
            f"vllm.max_model_len: the math prompts kept would change (task.max_prompt_tokens "
            f"null: {was} tokens in the checkpoint, {now} now); set task.max_prompt_tokens: {was}"
        )
    return problems


def _one_folder(saved: Any, wanted: Any) -> bool:
    """A shipped model by this install's absolute path (as sweeps before 2026-12-05 stored
    it) and by its name: one folder here."""
    found = locate(str(saved)) if saved else None
    return found is not None and wanted is not None and found == locate(str(wanted))


def _prompt_limit(config: dict[str, Any]) -> int | None:
    """The math task's prompt limit (task.max_prompt_tokens, or what the engine leaves)."""
    task = config.get("task", {})
    if task.get("name") != "math":
        return None
    if task.get("max_prompt_tokens") is not None:
        return task["max_prompt_tokens"]
    return config["vllm"]["max_model_len"] - config["rollout"]["max_new_tokens"]


def _optimizer_parts(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors, plain = {}, {}
    for index, values in state["state"].items():
        for key, value in values.items():
            if torch.is_tensor(value):
                tensors[f"{index}.{key}"] = value
            else:
                plain[f"{index}.{key}"] = value
    return tensors, {"param_groups": state["param_groups"], "plain": plain}


def _ranks_rng(ranks: list[tuple]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Rank 0's RNG at the top (as one process writes it), every other's under rank<r>/."""
    tensors, state = dict(ranks[0][0]), dict(ranks[0][1])
    if len(ranks) > 1:
        state["ranks"] = {}
        for rank, (rank_tensors, rank_state) in enumerate(ranks[1:], start=1):
            tensors |= {f"rank{rank}/{name}": t for name, t in rank_tensors.items()}
            state["ranks"][str(rank)] = rank_state
    return tensors, state


def rng_parts() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """This process's random state: (tensors, JSON-able state)."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    tensors = {
        "torch": torch.random.get_rng_state(),
        "numpy_keys": torch.from_numpy(keys.astype(np.int64)),
    }
    if torch.cuda.is_available():
        for index, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{index:03d}"] = cuda_state
    state = {
        "python": [version, list(internal), gauss],
        "numpy": {"kind": kind, "pos": int(pos), "has_gauss": int(has_gauss), "gauss": cached},
    }
    return tensors, state
