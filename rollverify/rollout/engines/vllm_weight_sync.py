"""How a VLLMEngine's weights reach its sidecars over the collective (vllm.weight_sync:
collective): rank 0 broadcasts each whole tensor in turn to every engine's workers over a process
group of their own (weight_group.py: NCCL on GPUs, gloo on CPU), formed again when the live
sidecars change; and which weights a replacement sidecar takes (either sync).

A part of VLLMEngine (vllm_engine.py), apart so that the engine reads on a few screens: its
methods use the engine's sidecars (_actors, _births, _live(), settings) and keep the sync's
state on it (_source, _weight_group, _members, _weights, version).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from rollverify.infra.faults import describe, own_error
from rollverify.rollout.engines.protocol import WeightsMixed
from rollverify.rollout.engines.vllm_settings import START_TIMEOUT_S, SidecarFailed

# A failed sync's calls end within this once Ray knows a node is gone (its health checks: 15 s
# by default, docs/clusters.md), with the actor's death; a live worker's ends at once
LOSS_NOTICED_S = 60.0


class CollectiveWeightSync:
    """VLLMEngine's collective weight sync and its restart weights (see the module)."""

    def _broadcast(self, named_tensors: Iterable[tuple[str, torch.Tensor]], tries: int = 3) -> None:
        """Every engine's workers receive each tensor as rank 0 broadcasts it (on rank 0's GPU
        over NCCL: the first sync of a run sends the weights from host memory). An engine lost
        on the way (its node gone) is a node loss: it is placed again and every live engine
        receives the whole sync again, so none keeps half of it; only where the weights cannot
        be sent again (a sharded trainer's stream) do live engines keep mixed weights, and the
        run stops (WeightsMixed: the loop checkpoints first)."""
        from rollverify.rollout.engines import weight_group

        specs = getattr(named_tensors, "specs", None)
        if specs is None:  # plain (name, tensor) pairs, already whole: their specs from them
            named_tensors = list(named_tensors)  # references, no copies
            specs = [weight_group.spec(name, tensor) for name, tensor in named_tensors]
        self._source = named_tensors  # for a replacement before the next sync, if it can
        refs: list = []
        try:
            self._form_group()
            refs = [self._actors[a].receive_weights.remote(specs) for a, _ in self._members]
            self._send(specs, named_tensors, refs)
        except Exception as error:
            members = self._members
            weight_group.abandon(self._weight_group)
            self._weight_group, self._members = None, ()
            lost = self._lost_in_sync(members, refs)
            if not lost or tries <= 1:
                raise SidecarFailed(
                    f"weight sync to the vLLM workers failed ({describe(own_error(error))}); "
                    "the engines' weights are mixed, so the run stops (rvctl resume continues it)"
                ) from None
            for index in lost:
                self._bury(index, error)
            if not getattr(named_tensors, "restartable", True):
                live = [a for a, _ in members if a not in lost]
                raise WeightsMixed(live, lost, self.version + 1) from None
            self._revive(weights_coming=True)  # placed again; it joins the next group
            self._broadcast(named_tensors, tries - 1)  # to every engine, the whole of it

    def _send(self, specs: list, named_tensors: Iterable, refs: list) -> None:
        """Rank 0's side of one sync: each tensor broadcast in turn; a worker whose call ended
        before the last tensor has failed (its error, raised)."""
        import ray

        from rollverify.rollout.engines import weight_group

        kind = weight_group.backend()
        pairs = zip(specs, named_tensors, strict=True)
        for index, ((name, _, _), (sent, tensor)) in enumerate(pairs):
            assert name == sent, f"weight {sent} sent where its spec says {name}"
            weight_group.broadcast(self._weight_group, weight_group.sendable(tensor, kind))
            done, _ = ray.wait(refs, timeout=0)
            if done and index < len(specs) - 1:  # a worker's call ended before the last
                ray.get(done)  # its error
                raise RuntimeError(f"an engine worker stopped receiving after {name}")
        ray.get(refs, timeout=START_TIMEOUT_S)

    def _lost_in_sync(self, members: tuple, refs: list) -> list[int]:
        """The sidecars of a failed sync that are gone (their actor dead, or their node), as
        Ray learns it: their calls end with the actor's death once the node's loss is known;
        a live one's ends with the broadcast's error."""
        import ray
        from ray.exceptions import RayActorError

        from rollverify.rollout.engines.node_loss import node_alive

        lost = []
        for (index, _), ref in zip(members, refs, strict=False):
            try:
                ray.get(ref, timeout=LOSS_NOTICED_S)
            except RayActorError:
                lost.append(index)
            except Exception:
                node = self.nodes.get(index)
                if node is not None and not node_alive(node):
                    lost.append(index)
        return lost

    def _form_group(self) -> None:
        """The weight group over the live sidecars' workers, formed again when they changed."""
        import ray

        from rollverify.rollout.engines import weight_group

        members = tuple((a, self._births[a]) for a in self._live())
        if self._weight_group is not None and self._members == members:
            return
        host = ray.util.get_node_ip_address()  # 127.0.0.1 on rvctl's private Ray
        server = weight_group.listener(host)
        port, kind = server.getsockname()[1], weight_group.backend()
        tp = self.settings.tensor_parallel_size
        world = 1 + len(members) * tp
        joins = [
            self._actors[a].join_weight_group.remote(host, port, 1 + k * tp, world, kind)
            for k, (a, _) in enumerate(members)
        ]
        self._weight_group = weight_group.join(host, port, 0, world, kind, server=server)
        ray.get(joins, timeout=START_TIMEOUT_S)
        self._members = members

    def _restart_weights(self) -> Any:
        """The last synced weights for a replacement sidecar, in Ray's object store."""
        import ray

        if self.settings.weight_sync != "collective":
            return self._weights  # None before the first sync: the base weights are right
        if self.version == 0:
            return None  # the base weights, which a new sidecar loads
        # (asked now: the stream of a run's first sync was of a model sharded since)
        if self._source is not None and getattr(self._source, "restartable", True):
            return ray.put([(n, tensor.detach().cpu()) for n, tensor in self._source])
        raise SidecarFailed(
            f"vLLM sidecar died ({self._death}) and a sharded trainer cannot send its weights "
            "to a replacement alone (vllm.weight_sync: collective); rvctl resume continues "
            "the run from its last checkpoint"
        )
