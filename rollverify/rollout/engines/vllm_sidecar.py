"""The vLLM sidecar: vLLM's AsyncLLM in a Ray actor of its own, driven by its owner only.

The actor holds one AsyncLLM (which runs its EngineCore in a child process, talking over local
IPC sockets: no network port). Requests stream token deltas with their sampled log-probs into
per-request records; the owner collects finished records with `poll`, aborts everything with
`abort_all` (partial tokens and log-probs kept, requests that never started included), and
loads new weights through the worker extension in vllm_plugin.py (memory to memory, no disk):
from Ray's object store, or broadcast by the trainer to the workers (weight_group.py).

For the cost model it traces every engine iteration (rollverify/cost/trace.py) through vLLM's own
stat-logger interface, which reports each iteration's decoding and prefilling requests and the
prompt tokens computed (prefix-cache hits excluded). vLLM does not report context lengths: a
decoding row's context is its prompt plus the tokens it has streamed so far (one iteration
behind the engine), and prefills are matched to requests in the order they were added (vLLM
schedules first come, first served).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

import psutil

if TYPE_CHECKING:  # the vLLM types the code names (benchmarks/vllm_compat.py reads them)
    from vllm.outputs import CompletionOutput, RequestOutput
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.metrics.stats import IterationStats


class SamplingFields(TypedDict, total=False):
    """The sampling fields of vLLM's SamplingParams a request sets
    (rollverify.core.sampling.Sampling.vllm_params, and a tool call's stop tokens)."""

    temperature: float
    top_p: float
    top_k: int
    stop_token_ids: list[int]


class EngineDead(RuntimeError):
    """The sidecar's engine core is gone: the owner replaces the sidecar."""


@dataclass
class RequestRecord:
    """What one request produced so far (token ids and their log-probs, in order)."""

    request_id: str
    prompt_length: int = 0
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None  # "stop", "length"; None while running or when aborted


class VLLMSidecar:
    """Ray actor body (wrapped with ray.remote by vllm_engine.py, so Ray stays optional)."""

    def __init__(self, engine_kwargs: dict[str, Any], env: dict[str, str]) -> None:
        os.environ.update(env)
        self.engine_kwargs = engine_kwargs
        self.llm: AsyncLLM | None = None
        self.records: dict[str, RequestRecord] = {}
        self.tasks: dict[str, asyncio.Task] = {}
        self.finished: list[RequestRecord] = []
        self.changed = asyncio.Event()
        self.error: str | None = None  # the first request failure (e.g. the engine core died)
        self.busy_seconds = 0.0  # integral of min(running, max_num_seqs) dt: slot-seconds used
        self.last_mark = time.perf_counter()
        self.last_iteration: float | None = None  # timestamp of the last iteration, while busy
        self.shared_memory: list[str] = []
        self.iterations: list[
            tuple[int, int, int, int, int, float]
        ] = []  # rollverify.cost.trace.EngineStep
        self.waiting_prompts: deque[int] = deque()  # prompt lengths not prefilled yet, in order

    async def start(self) -> dict[str, Any]:
        import torch
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        started = time.perf_counter()
        kwargs = dict(self.engine_kwargs)
        if not torch.cuda.is_available():
            # vLLM discards the token sampled after a chunked prefill by rewinding the request's
            # seeded generator, which CPU generators cannot do ("CPU Generator does not use
            # offset"): the engine core dies. Resumed trajectories are long prompts, so they
            # would be chunked; on CPU whole prompts are prefilled instead.
            kwargs["enable_chunked_prefill"] = False
            if kwargs.get("tensor_parallel_size", 1) == 1:
                # Run the model in the engine core process rather than in a worker process of
                # its own: one vLLM import less at start. vLLM turns this off on
                # CPU by default for OpenMP core binding, which the sidecar does not use.
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
                kwargs["distributed_executor_backend"] = "uni"
        self.llm = AsyncLLM.from_engine_args(
            AsyncEngineArgs(**kwargs), stat_loggers=[self._iteration_logger]
        )
        from rollverify.rollout.engines.vllm_plugin import on_cpu

        # CPU weight packing is a CPU trap (vllm_plugin.py): each worker's, on a CPU only
        packing = await self.llm.collective_rpc("rollverify_prepacking") if on_cpu() else []
        self.shared_memory = shared_memory_of_children()
        import ray
        import vllm

        return {
            "seconds": time.perf_counter() - started,
            "prepacking": packing,
            "vllm_version": vllm.__version__,
            "host": socket.gethostname(),
            "placement_group": ray.get_runtime_context().get_placement_group_id(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "shared_memory": self.shared_memory,
        }

    # -- requests -----------------------------------------------------------------------------

    async def add(
        self, requests: list[tuple[str, list[int], int, int]], sampling: SamplingFields
    ) -> None:
        """Start (request_id, prompt token ids, max new tokens, sampling seed) requests, with
        `sampling` (temperature, top_p, top_k: rollverify.core.sampling.Sampling.vllm_params;
        stop_token_ids where the engine has them)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        self._mark()
        if not self.tasks:  # waking from idle: the first iteration is timed from this submit
            self.last_iteration = time.time()  # (vLLM stamps iterations with time.time())
        for request_id, prompt_ids, max_tokens, seed in requests:
            params = SamplingParams(
                **sampling,
                max_tokens=max_tokens,
                logprobs=0,
                seed=seed,
                detokenize=False,
                output_kind=RequestOutputKind.DELTA,
            )
            record = RequestRecord(request_id, prompt_length=len(prompt_ids))
            self.waiting_prompts.append(len(prompt_ids))
            self.records[request_id] = record
            stream = self.llm.generate(
                TokensPrompt(prompt_token_ids=prompt_ids), params, request_id
            )
            self.tasks[request_id] = asyncio.create_task(self._consume(record, stream))

    async def _consume(self, record: RequestRecord, stream) -> None:
        output: RequestOutput
        completion: CompletionOutput
        try:
            async for output in stream:
                completion = output.outputs[0]
                record.tokens.extend(completion.token_ids)
                record.logprobs.extend(
                    step[token].logprob
                    for step, token in zip(
                        completion.logprobs or [], completion.token_ids, strict=True
                    )
                )
                if output.finished and completion.finish_reason in ("stop", "length"):
                    record.finish_reason = completion.finish_reason
        except asyncio.CancelledError:
            pass
        except Exception as error:  # the owner must hear of it, or it would wait forever
            self.error = self.error or f"{type(error).__name__}: {error}"
        finally:
            self._mark()
            if record.finish_reason is not None:
                self.finished.append(record)
                del self.records[record.request_id]
            self.tasks.pop(record.request_id, None)
            if not self.tasks:  # idle until the next submit: no iteration spans the gap
                self.last_iteration = None
            self.changed.set()

    async def poll(self, wait_seconds: float) -> dict[str, Any]:
        """Finished records since the last poll; waits up to `wait_seconds` for the first."""
        if not self.finished and self.tasks:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), wait_seconds)
        self._mark()
        if self.error is not None:
            if self.llm is None or self.llm.errored:  # the engine core died: replace us
                raise EngineDead(f"vLLM engine core died: {self.error}")
            raise RuntimeError(f"vLLM request failed: {self.error}")
        finished, self.finished = self.finished, []
        return {
            "finished": [_plain(r) for r in finished],
            "running": len(self.tasks),
            "busy_seconds": self.busy_seconds,
        }

    # -- the trace: one row per engine iteration -----------------------------------------

    def _iteration_logger(self, vllm_config: Any, engine_index: int = 0) -> Any:
        """A vLLM stat logger (StatLoggerFactory) that hands each iteration to `_iterated`."""
        from vllm.v1.metrics.loggers import StatLoggerBase

        sidecar = self

        class IterationTrace(StatLoggerBase):
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                pass

            def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
                if iteration_stats is not None:
                    sidecar._iterated(iteration_stats)

            def log_engine_initialized(self) -> None:
                pass

        return IterationTrace(vllm_config, engine_index)

    def _iterated(self, stats: IterationStats) -> None:
        prefills = len(stats.time_to_first_tokens_iter)  # requests whose prompt ran now
        decodes = len(stats.inter_token_latencies_iter)  # requests that decoded a token
        if not prefills and not decodes:
            return
        prompts = [self.waiting_prompts.popleft() for _ in range(prefills) if self.waiting_prompts]
        total = stats.prompt_token_stats.total or sum(prompts) or 1
        share = stats.prompt_token_stats.computed / total  # the rest came from the prefix cache
        attended = int(sum(n * (n + 1) // 2 for n in prompts) * share)
        running = [r for r in self.records.values() if r.tokens]  # started, not finished
        context = sum(r.prompt_length + len(r.tokens) for r in running)
        # an iteration's time: since the previous one, or since the submit that woke the engine
        now, previous, self.last_iteration = stats.iteration_timestamp, self.last_iteration, None
        seconds = now - previous if previous is not None else 0.0
        if self.tasks:
            self.last_iteration = now
        self.iterations.append(
            (decodes, context, prefills, stats.prompt_token_stats.computed, attended, seconds)
        )

    async def take_trace(self) -> list[tuple[int, int, int, int, int, float]]:
        """The iterations since the last call: (decode rows, their context, prefill rows,
        prefill tokens computed, their context, seconds)."""
        taken, self.iterations = self.iterations, []
        return taken

    async def abort_all(self) -> list[dict[str, Any]]:
        """Abort every request; return all of them, finished or not, with what they produced."""
        running = list(self.tasks)
        if running:
            await self.llm.abort(running)
            await asyncio.wait([self.tasks[r] for r in running if r in self.tasks], timeout=30)
        out = [_plain(r) for r in [*self.finished, *self.records.values()]]
        self.finished, self.records = [], {}
        self.waiting_prompts.clear()  # aborted before their prefill: never prefilled
        return out

    def _mark(self) -> None:
        now = time.perf_counter()
        slots = self.engine_kwargs.get("max_num_seqs", 1)
        self.busy_seconds += min(len(self.tasks), slots) * (now - self.last_mark)
        self.last_mark = now

    # -- weights ------------------------------------------------------------------------------

    async def load_weights(self, named_tensors: list) -> float:
        # vLLM's RPC decodes tensors as views of its message buffers, which its executor then
        # fails to pickle on the way to the worker ("cannot pickle memoryview"): send bytes.
        from rollverify.rollout.engines.vllm_plugin import pack_tensors

        return await self._load("rollverify_load_weights", pack_tensors(named_tensors))

    async def join_weight_group(
        self, host: str, port: int, first_rank: int, world_size: int, kind: str
    ) -> list[int]:
        """Every worker of this engine joins the trainer's weight group (weight_group.py)."""
        return await self.llm.collective_rpc(
            "rollverify_join_weight_group", args=(host, port, first_rank, world_size, kind)
        )

    async def receive_weights(self, specs: list) -> float:
        """Load the tensors of `specs` as the trainer broadcasts them, in that order."""
        return await self._load("rollverify_receive_weights", specs)

    async def _load(self, method: str, weights: list) -> float:
        """New weights into every worker by the extension's `method`: seconds it took."""
        started = time.perf_counter()
        await self.llm.collective_rpc(method, args=(weights,))
        await self.llm.reset_prefix_cache()  # cached KV was computed by the old weights
        return time.perf_counter() - started

    async def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        """log p(token_i | tokens before it) for i >= 1, by one prefill (prompt log-probs)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
        final: RequestOutput | None = None
        async for output in self.llm.generate(
            TokensPrompt(prompt_token_ids=token_ids), params, f"probe-{time.monotonic_ns()}"
        ):
            final = output
        steps = final.prompt_logprobs[1:]
        return [step[token].logprob for step, token in zip(steps, token_ids[1:], strict=True)]

    async def shutdown(self) -> None:
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None
        psutil.wait_procs(engine_processes(), timeout=10)
        unlink_shared_memory(self.shared_memory)


def engine_processes() -> list[psutil.Process]:
    """This process's children but multiprocessing's resource tracker (it lives until we do)."""
    processes = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if not any("resource_tracker" in part for part in child.cmdline()):
                processes.append(child)
    return processes


def shared_memory_of_children() -> list[str]:
    """Shared-memory blocks (/dev/shm) that vLLM's engine processes mapped. vLLM unlinks them
    when its objects are garbage collected, which a killed process never does; the owner
    unlinks what is left (without this, each interrupted run leaked a block)."""
    names: set[str] = set()
    for child in engine_processes():
        with contextlib.suppress(psutil.Error):
            names.update(m.path for m in child.memory_maps() if m.path.startswith("/dev/shm/"))
    return sorted(names)


def unlink_shared_memory(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _plain(record: RequestRecord) -> dict[str, Any]:
    return {
        "request_id": record.request_id,
        "tokens": record.tokens,
        "logprobs": record.logprobs,
        "finish_reason": record.finish_reason,
    }
