"""Calls to a VLLMEngine's sidecars, and a dead one's replacement: a sidecar that dies (its
actor or its engine core) or does not answer in time is buried (its in-flight trajectories
wait, with the tokens they had when submitted) and replaced before its next use by a new actor
with the last synced weights; at most MAX_RESTARTS per engine.

A part of VLLMEngine (vllm_engine.py), apart so that the engine reads on a few screens: its
methods use the engine's sidecars (_actors, _inflight, _load, _new_actor(), _check_started(),
submit()) and keep the replacement's state on it (_dead, _death, _waiting, restarts, nodes,
_anywhere). A sidecar whose node is lost is placed again where Ray can (node_loss.py), and
moves back to its own bundle once Ray has placed that again.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any

from rollverify.infra.faults import describe
from rollverify.rollout.engines.node_loss import (
    NodeLost,
    bundle_placed,
    group_anywhere,
    node_alive,
    wait_for_bundle,
)
from rollverify.rollout.engines.vllm_settings import START_TIMEOUT_S, SidecarFailed
from rollverify.rollout.engines.vllm_sidecar import EngineDead, unlink_shared_memory
from rollverify.rollout.engines.vllm_weight_sync import CollectiveWeightSync

MAX_RESTARTS = 3  # per VLLMEngine, over all its sidecars (then SidecarFailed)
PLACEMENTS = 3  # tries to start one replacement: on a node not yet known lost, then again


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
        for index in sorted(self._dead):
            if self.restarts >= MAX_RESTARTS:
                raise SidecarFailed(
                    f"vLLM sidecar {index} died after {self.restarts} restarts ({self._death}); "
                    "check the engine's log above"
                )
            actor, report = self._replacement(index, weights_coming)
            self._actors[index] = actor
            self._check_started(index, report)
            self._dead.discard(index)
            self.restarts += 1
            self.stats.restarts += 1
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            self.submit(waiting)

    def _replacement(self, index: int, weights_coming: bool) -> tuple[Any, dict[str, Any]]:
        """A new sidecar `index`, started, with the last synced weights. Where the dead one's
        node is lost, it waits for Ray to place it again (node_loss.py); a first try may land
        on that node before Ray knows it is lost, and is tried again once Ray does."""
        import ray

        with contextlib.suppress(Exception):
            ray.kill(self._actors[index])
        unlink_shared_memory(self._leftovers.pop(index, []))  # the dead engine's buffers
        lost = self.nodes.get(index)  # the node it ran on, while it may be the lost one
        for _ in range(PLACEMENTS):
            if lost is not None and not node_alive(lost):
                self._place_again(index, lost)
                lost = None  # placed again: a failure now is the new node's
            actor = self._new_actor(index)
            try:
                report = ray.get(actor.start.remote(), timeout=START_TIMEOUT_S)
                weights = None if weights_coming else self._restart_weights()
                if weights is not None:
                    ray.get(actor.load_weights.remote(weights), timeout=START_TIMEOUT_S)
                return actor, report
            except SidecarFailed:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
                raise
            except Exception as error:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
                if lost is None or node_alive(lost):
                    raise SidecarFailed(
                        f"vLLM sidecar {index} died ({self._death}) and could not be "
                        f"restarted: {describe(error)}"
                    ) from None
        raise SidecarFailed(f"vLLM sidecar {index}: not placed again in {PLACEMENTS} tries")

    def _place_again(self, index: int, lost: str) -> None:
        """Sidecar `index`'s node is lost: one line says so; it waits for its bundle to be put
        on another node (with vllm.node_resource), then goes anywhere or stops the run."""
        settings = self.settings
        wait, mark = settings.node_lost_wait_seconds, settings.node_resource or "room"
        after = "then any node with room" if settings.node_lost == "anywhere" else "then stop"
        warnings.warn(
            f"vllm: engine {index}'s node {lost[:12]} was lost ({self._death.split(':')[0]}); "
            f"{len(self._waiting)} unfinished trajectories wait with their "
            f"{sum(len(t) for t in self._waiting)} tokens; placing it again (up to {wait:g} s "
            f"for a node with {mark}, {after})",
            stacklevel=2,
        )
        if wait_for_bundle(self._group, index, time.monotonic() + wait):
            return
        if settings.node_lost == "stop":
            raise NodeLost(
                f"vllm.node_lost: stop: no node with {mark} had room for engine {index} "
                f"within vllm.node_lost_wait_seconds ({wait:g} s) of its node's loss; rvctl "
                "resume continues the run from its last checkpoint once one is back"
            )
        # (a group's reservation takes milliseconds where there is room: waiting longer is for
        # room to come, which is what the wait above was for)
        self._anywhere[index] = group_anywhere(settings, max(wait, 10.0))

    def _move_home(self) -> None:
        """A sidecar placed anywhere after its node's loss (a group of its own) moves back to its
        bundle of the engines' group once Ray has put that on a node again (one with
        vllm.node_resource came back, or had room), and its own group is given back: else the
        run holds both to its end, one of them unused. Called before a weight load, with
        nothing in flight, so no work is lost; the new sidecar takes the weights the load
        brings. Its cost: one sidecar start (vLLM's) in that load. Not a restart."""
        import ray

        for index in [i for i in sorted(self._anywhere) if bundle_placed(self._group, i)]:
            warnings.warn(
                f"vllm: engine {index} moves back to its own bundle, placed again on a node "
                f"with {self.settings.node_resource or 'room'}; the group it ran in since its "
                "node's loss is given back",
                stacklevel=2,
            )
            away = self._anywhere.pop(index)
            actor, report = self._replacement(index, weights_coming=True)
            self._actors[index] = actor
            self._check_started(index, report)
            self._dead.discard(index)  # (one found dead meanwhile: this is its replacement)
            ray.util.remove_placement_group(away)

    def _bundle_of(self, index: int) -> tuple[Any, int]:
        """The placement group and bundle sidecar `index` starts in: its bundle of the engines'
        group, or a group of its own where its node was lost (vllm.node_lost: anywhere)."""
        if index in self._anywhere:
            return self._anywhere[index], 0
        return self._group, index

    def _release_groups(self) -> None:
        """The engines' placement groups given back to the cluster (at shutdown)."""
        import ray

        for group in [self._group, *self._anywhere.values()]:
            if group is not None:
                with contextlib.suppress(Exception):
                    ray.util.remove_placement_group(group)
        self._group, self._anywhere = None, {}
