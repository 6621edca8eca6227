"""After every weight sync the engine must score a fixed probe sequence as the trainer does:
otherwise it would sample from a policy other than the one being trained, and every ratio
pi/mu of the next step would be wrong without anything failing."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator

import torch

from rollverify.rollout.engines.protocol import RolloutEngine, SyncCheckError, probe_logprobs_of
from rollverify.rollout.engines.weight_group import spec
from rollverify.training.distributed.sharding import full_tensors, is_sharded, reshard


def check_weight_sync(
    engine: RolloutEngine,
    probe: list[int],
    trainer_logprobs: torch.Tensor,
    tolerance: float,
    step: int,
) -> float:
    """The largest gap between the engine's log-probs of `probe` and the trainer's
    (`trainer_logprobs`: probe_logprobs_of the trainer's model, [T-1]); SyncCheckError if it
    exceeds `tolerance` (vllm.sync_check_tolerance: bf16 engines round)."""
    engine_logprobs = engine.probe_logprobs(probe)  # [replicas, T-1]
    gap = (engine_logprobs - trainer_logprobs[None]).abs().max().item()
    if not gap <= tolerance:
        raise SyncCheckError(
            f"weight sync check failed after step {step}: engine and trainer log-probs of "
            f"the probe differ by {gap:.2e} > vllm.sync_check_tolerance {tolerance:g}; the "
            "engine would sample from a policy other than the one being trained"
        )
    return gap


def sync_engine(
    engine: RolloutEngine,
    model: torch.nn.Module,
    dtype: str,
    probe: list[int],
    tolerance: float,
    step: int,
    load: Callable[[WeightStream, int], None] | None,
) -> tuple[float | None, list]:
    """The model's weights in `dtype` to the engine through `load` (its load_weights, or
    load_weights_in_flight; rank 0's), then the probe check: (gap, the engine's steps of the
    check). The other ranks pass no `load`: they take part in each gather and in the probe's
    forward, and get (None, [])."""
    tensors = WeightStream(model, dtype)
    if load is not None:
        load(tensors, step)
    else:
        for _ in tensors:  # its part of each gather
            pass
    trainer_probe = probe_logprobs_of(model, probe)
    if load is None:
        return None, []
    gap = check_weight_sync(engine, probe, trainer_probe, tolerance, step)
    return gap, engine.take_trace()


def in_dtype(
    named_tensors: Iterable[tuple[str, torch.Tensor]], dtype: str
) -> Iterator[tuple[str, torch.Tensor]]:
    """The trainer's tensors cast, one at a time, to the engines' dtype (model.dtype): float32
    master weights go out as bfloat16 (half the bytes), as the engines serve them."""
    wanted = getattr(torch, dtype)
    for name, tensor in named_tensors:
        yield name, tensor.to(wanted) if tensor.is_floating_point() else tensor


class WeightStream:
    """The trainer's weights on their way to the engines: (name, whole tensor in the engines'
    dtype), gathered one at a time as they are iterated (a collective: every rank iterates).
    `specs` (name, dtype, shape) are known before any tensor is gathered, so an engine's
    workers can receive a broadcast of each in turn (vllm.weight_sync: collective)."""

    def __init__(self, model: torch.nn.Module, dtype: str) -> None:
        # the model weakly: an engine keeps the stream of its last sync for a replacement,
        # which must not keep a finished run's model alive
        self._model, self.dtype = weakref.ref(model), dtype
        wanted = getattr(torch, dtype)
        reshard(model)  # the state dict full_tensors will walk
        self.specs = [
            spec(name, t, wanted if t.is_floating_point() else None)
            for name, t in model.state_dict().items()
        ]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return in_dtype(full_tensors(self._model()), self.dtype)

    @property
    def restartable(self) -> bool:
        """Whether rank 0 alone can give the weights again (a replaced engine between syncs):
        not when they are sharded (asked when needed: a model may be sharded after its first
        sync), as gathering them needs every rank; nor once the model is gone."""
        model = self._model()
        return model is not None and not is_sharded(model)
