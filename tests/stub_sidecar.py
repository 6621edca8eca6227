"""A small deterministic engine in the VLLMSidecar's place (its actor methods, no model): for
tests of where a VLLMEngine's sidecars run and what happens when their node is lost, in
seconds instead of a vLLM start's minute.

Each request gains RATE tokens a second, token k of a request being (seed + k) % 97 with
log-prob -1.0, until its budget ("length"). It runs in a Ray actor, on whichever node Ray
placed it; `start` says which.
"""

from __future__ import annotations

import socket
import time
from typing import Any

RATE = 20.0  # tokens a second per request


class StubSidecar:
    def __init__(self, engine_kwargs: dict[str, Any], environment: dict[str, str]) -> None:
        self.requests: dict[str, dict[str, Any]] = {}
        # seconds between two tensors of a collective sync (vllm.engine_args: stub_tensor_seconds)
        self.tensor_seconds = float(engine_kwargs.get("stub_tensor_seconds", 0.0))

    def start(self) -> dict[str, Any]:
        import ray

        context = ray.get_runtime_context()
        return {
            "seconds": 0.0,
            "prepacking": [],  # (a CPU vLLM's workers report "off"; the stub packs nothing)
            "vllm_version": "stub",
            "host": socket.gethostname(),
            "placement_group": context.get_placement_group_id(),
            "node_id": context.get_node_id(),
            "shared_memory": [],
        }

    def add(self, requests: list[tuple[str, list[int], int, int]], sampling: dict) -> None:
        for request_id, _prompt, budget, seed in requests:
            self.requests[request_id] = {"seed": seed, "budget": budget, "at": time.monotonic()}

    def _record(self, request_id: str, finished: bool) -> dict[str, Any]:
        request = self.requests.pop(request_id)
        made = int((time.monotonic() - request["at"]) * RATE)
        count = request["budget"] if finished else min(made, request["budget"])
        tokens = [(request["seed"] + k) % 97 for k in range(count)]
        return {
            "request_id": request_id,
            "tokens": tokens,
            "logprobs": [-1.0] * count,
            "finish_reason": "length" if count == request["budget"] else None,
        }

    def poll(self, wait_seconds: float) -> dict[str, Any]:
        time.sleep(wait_seconds)
        now = time.monotonic()
        done = [rid for rid, r in self.requests.items() if (now - r["at"]) * RATE >= r["budget"]]
        return {"busy_seconds": 0.0, "finished": [self._record(rid, True) for rid in done]}

    def abort_all(self) -> list[dict[str, Any]]:
        return [self._record(rid, False) for rid in list(self.requests)]

    def load_weights(self, weights: Any) -> None:
        """Through Ray's object store (vllm.weight_sync: object_store): tensor_seconds a tensor."""
        time.sleep(self.tensor_seconds * len(weights))
        self.received = getattr(self, "received", 0) + len(weights)

    # the collective weight sync (vllm.weight_sync: collective), as a vLLM worker takes part:
    # it joins the trainer's group and receives each tensor of a sync (tensor_seconds apart, so
    # that a test can lose the node while a sync is on its way)

    def join_weight_group(self, host: str, port: int, first_rank: int, world: int, kind: str):
        from rollverify.rollout.engines import weight_group

        self.group = weight_group.join(host, port, first_rank, world, kind)
        return [first_rank]

    def receive_weights(self, specs: list) -> float:
        import torch

        from rollverify.rollout.engines import weight_group

        for _name, dtype, shape in specs:
            weight_group.broadcast(self.group, torch.empty(shape, dtype=getattr(torch, dtype)))
            time.sleep(self.tensor_seconds)
        self.received = getattr(self, "received", 0) + len(specs)
        return 0.0

    def weights_received(self) -> int:
        """Tensors this sidecar received over the collective, all syncs together."""
        return getattr(self, "received", 0)

    def take_trace(self) -> list:
        return []

    def shutdown(self) -> None:
        self.requests.clear()
