"""Calls to a VLLMEngine's sidecars, and a dead one's replacement: a sidecar that dies (its
actor or its engine core) or does not answer in time is buried (its in-flight trajectories
wait, with the tokens they had when submitted) and replaced before its next use by a new actor
with the last synced weights; at most MAX_RESTARTS per engine.

A part of VLLMEngine (vllm_engine.py), apart so that the engine reads on a few screens: its
methods use the engine's sidecars (_actors, _inflight, _load, _new_actor(), _check_started(),
submit()) and keep the replacement's state on it (_dead, _death, _waiting, restarts).
"""

from __future__ import annotations

import contextlib
from typing import Any

from rollverify.infra.faults import describe
from rollverify.rollout.engines.vllm_settings import START_TIMEOUT_S, SidecarFailed
from rollverify.rollout.engines.vllm_sidecar import EngineDead, unlink_shared_memory
from rollverify.rollout.engines.vllm_weight_sync import CollectiveWeightSync

MAX_RESTARTS = 3  # per VLLMEngine, over all its sidecars (then SidecarFailed)


class SidecarReplacement(CollectiveWeightSync):
    """VLLMEngine's calls to its sidecars and their replacement (see the module)."""

    def _call(self, method: str, args: dict[int, tuple], timeout: float) -> dict[int, Any]:
        """Call `method` on the sidecars in `args`; answers by sidecar. One that is dead or hung
        is buried (not restarted here: the caller may be stopping the run) and not in the
        answers; an error in a request of a healthy sidecar stops the run."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        refs = {i: getattr(self._actors[i], method).remote(*a) for i, a in args.items()}
        answers = {}
        for index, ref in refs.items():
            try:
                answers[index] = ray.get(ref, timeout=timeout)
            except (RayActorError, GetTimeoutError) as error:
                self._bury(index, error)
            except RayTaskError as error:
                if not isinstance(error.cause, EngineDead) and not isinstance(error, EngineDead):
                    raise SidecarFailed(f"vLLM sidecar {index}: {error.cause or error}") from None
                self._bury(index, error)
        return answers

    def _bury(self, index: int, error: Exception) -> None:
        """Sidecar `index` is dead: its in-flight trajectories wait for a new one, with the
        tokens they had when submitted (what it generated since is lost)."""
        self._dead.add(index)
        self._death = describe(error)
        lost = [rid for rid, (_, actor) in self._inflight.items() if actor == index]
        self._load[index] = 0
        self._waiting += [self._inflight.pop(rid)[0] for rid in lost]

    def _live(self) -> list[int]:
        return [i for i in range(len(self._actors)) if i not in self._dead]

    def _revive(self, weights_coming: bool = False) -> None:
        """Replace dead sidecars (new actors with the last synced weights, unless a sync is
        `weights_coming` to them) and resubmit the trajectories that were waiting for them."""
        import ray

        for index in sorted(self._dead):
            if self.restarts >= MAX_RESTARTS:
                raise SidecarFailed(
                    f"vLLM sidecar {index} died after {self.restarts} restarts ({self._death}); "
                    "check the engine's log above"
                )
            with contextlib.suppress(Exception):
                ray.kill(self._actors[index])
            unlink_shared_memory(self._leftovers.pop(index, []))  # the dead engine's buffers
            actor = self._new_actor(index)
            try:
                report = ray.get(actor.start.remote(), timeout=START_TIMEOUT_S)
                weights = None if weights_coming else self._restart_weights()
                if weights is not None:
                    ray.get(actor.load_weights.remote(weights), timeout=START_TIMEOUT_S)
            except SidecarFailed:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
                raise
            except Exception as error:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
                raise SidecarFailed(
                    f"vLLM sidecar {index} died ({self._death}) and could not be restarted: "
                    f"{describe(error)}"
                ) from None
            self._actors[index] = actor
            self._check_started(index, report)
            self._dead.discard(index)
            self.restarts += 1
            self.stats.restarts += 1
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            self.submit(waiting)
