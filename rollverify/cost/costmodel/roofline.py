"""What each operation of a run costs on a GPU: a roofline per operation, pure functions.

Each operation takes the longer of its memory time and its compute time (the roofline: Williams,
Waterman, Patterson, "Roofline", CACM 52(4), 2009), at the efficiency real stacks reach:

    decode step   max((weights + KV read) / achieved bandwidth, FLOPs / achieved FLOP/s)
                  + a fixed per-step overhead (scheduling, sampling, launches)
    prefill       FLOPs / achieved FLOP/s (new prompts and re-prefilled resumed trajectories)
    scoring       forward-only FLOPs (current log-probs, cache verification, reference model)
    training      3 x forward FLOPs (forward + backward) of the trained tokens
    weight sync   bytes / achieved link bandwidth

FLOPs of a forward pass over T tokens, each attending to c_t earlier tokens (Kaplan et al.,
"Scaling Laws for Neural Language Models", 2020, Table 1): 2 x N_active x T for the matrix
products, plus 4 x layers x heads x head_dim x sum(c_t) for attention (QK^T and AV).

Decoding reads every weight once per step whatever the rows (so a step costs about the same
for 8 rows as for 256: stragglers waste the GPU), plus each row's KV cache.
"""

from __future__ import annotations

import math

from rollverify.config.model_shape import ModelShape
from rollverify.cost.costmodel.gpus import Efficiency, GPUProfile
from rollverify.cost.costmodel.layout import Layout
from rollverify.cost.trace import EngineStep


def forward_flops(shape: ModelShape, tokens: float, attended: float) -> float:
    """FLOPs of a forward over `tokens` tokens that attend to `attended` earlier tokens in all
    (the sum over tokens of their context length)."""
    return 2 * shape.active_parameters * tokens + 4 * shape.layers * shape.heads * (
        shape.head_dim * attended
    )


def engine_step_seconds(
    shape: ModelShape,
    gpu: GPUProfile,
    efficiency: Efficiency,
    step: EngineStep,
    tensor_parallel: int = 1,
) -> float:
    """One engine iteration on an engine of `tensor_parallel` GPUs (weights and KV split
    across them): its decode rows and its prefill tokens share one pass over the weights."""
    tokens = step.decode_rows + step.prefill_tokens
    if tokens <= 0:
        return 0.0
    kv = (step.decode_context + step.prefill_tokens) * shape.kv_bytes_per_token  # read, write
    memory = (shape.weight_bytes + kv) / tensor_parallel / (gpu.bandwidth * efficiency.bandwidth)
    attended = step.decode_context + step.prefill_attended
    compute = forward_flops(shape, tokens, attended) / tensor_parallel
    compute /= gpu.peak_flops * efficiency.forward_flops
    overhead = efficiency.step_overhead + _all_reduce(
        shape, gpu, efficiency, tokens, tensor_parallel
    )
    return max(memory, compute) + overhead


def decode_step_seconds(
    shape: ModelShape,
    gpu: GPUProfile,
    efficiency: Efficiency,
    rows: int,
    context: float,
    tensor_parallel: int = 1,
) -> float:
    """One decoding step of `rows` sequences whose contexts sum to `context` tokens."""
    step = EngineStep(rows, int(context), prefill_rows=0, prefill_tokens=0, prefill_attended=0)
    return engine_step_seconds(shape, gpu, efficiency, step, tensor_parallel)


def decode_run_seconds(
    shape: ModelShape,
    gpu: GPUProfile,
    efficiency: Efficiency,
    rows: float,
    context: float,
    steps: int,
    tensor_parallel: int = 1,
) -> float:
    """`steps` decoding iterations of the same `rows` rows, their contexts summing to `context`
    at the first and growing by `rows` each iteration: the sum of `decode_step_seconds` over
    them, in closed form (a simulator jumps from event to event, not token by token)."""
    if rows <= 0 or steps <= 0:
        return 0.0
    bandwidth = tensor_parallel * gpu.bandwidth * efficiency.bandwidth
    flops = tensor_parallel * gpu.peak_flops * efficiency.forward_flops
    attention = 4 * shape.layers * shape.heads * shape.head_dim
    # memory(i) = m0 + m1 i and compute(i) = c0 + c1 i at iteration i (context + rows i)
    m0 = (shape.weight_bytes + context * shape.kv_bytes_per_token) / bandwidth
    m1 = rows * shape.kv_bytes_per_token / bandwidth
    c0 = (2 * shape.active_parameters * rows + attention * context) / flops
    c1 = attention * rows / flops
    fixed = efficiency.step_overhead + _all_reduce(shape, gpu, efficiency, rows, tensor_parallel)
    # The larger of two lines: the one above at i = 0 until the other overtakes it (if it does:
    # only a steeper line can), at the first integer past their crossing.
    first, second = ((c0, c1), (m0, m1)) if c0 > m0 else ((m0, m1), (c0, c1))
    cross = steps
    if second[1] > first[1]:
        cross = min(steps, math.ceil((first[0] - second[0]) / (second[1] - first[1])))
    return _line_sum(*first, 0, cross) + _line_sum(*second, cross, steps) + steps * fixed


def _line_sum(start: float, slope: float, lo: int, hi: int) -> float:
    """The sum of start + slope x i over the integers i in [lo, hi)."""
    if hi <= lo:
        return 0.0
    return (hi - lo) * start + slope * (hi * (hi - 1) - lo * (lo - 1)) / 2


def _all_reduce(
    shape: ModelShape, gpu: GPUProfile, efficiency: Efficiency, tokens: float, tp: int
) -> float:
    """Tensor parallelism's two all-reduces per layer of the activations (ring: 2 (tp-1)/tp
    of the data crosses each link)."""
    if tp <= 1:
        return 0.0
    data = 2 * shape.layers * tokens * shape.hidden * 2  # bf16 activations
    return data * 2 * (tp - 1) / tp / (gpu.link * efficiency.link)


def prefill_seconds(
    shape: ModelShape,
    gpu: GPUProfile,
    efficiency: Efficiency,
    tokens: float,
    attended: float,
    gpus: int = 1,
) -> float:
    """Prefilling (or scoring forward-only) `tokens` tokens attending to `attended` tokens."""
    if tokens <= 0:
        return 0.0
    compute = forward_flops(shape, tokens, attended) / (gpu.peak_flops * efficiency.forward_flops)
    memory = shape.weight_bytes / (gpu.bandwidth * efficiency.bandwidth)  # read once at least
    return max(compute / gpus, memory / gpus)


def train_seconds(
    shape: ModelShape,
    gpu: GPUProfile,
    efficiency: Efficiency,
    tokens: float,
    attended: float,
    gpus: int = 1,
) -> float:
    """Forward and backward (3 x the forward's FLOPs) of `tokens` trained tokens, on `gpus`
    GPUs training data-parallel (or sharded) at the training MFU."""
    flops = 3 * forward_flops(shape, tokens, attended)
    return flops / (gpu.peak_flops * efficiency.train_flops * gpus)


def sync_seconds(
    weight_bytes: float, gpu: GPUProfile, efficiency: Efficiency, layout: Layout
) -> float:
    """The trainer's weights to the engines. Colocated: a copy within each GPU's memory (its
    share of the weights); disaggregated: over the GPU links (a broadcast: each link carries
    the bytes once)."""
    if layout.kind == "colocated":
        return weight_bytes / (gpu.bandwidth * efficiency.bandwidth) / layout.trainer_gpus
    return weight_bytes / (gpu.link * efficiency.link)


def attended_tokens(prompt: float, length: float) -> float:
    """Sum of context lengths over the `length` tokens after a `prompt`: each token attends to
    the prompt and the tokens before it."""
    return length * prompt + length * (length - 1) / 2


def gpu_days(seconds: float, gpus: int) -> float:
    return seconds * gpus / 86_400.0


def check_fits(shape: ModelShape, gpu: GPUProfile, tensor_parallel: int = 1) -> str | None:
    """Why the weights cannot fit one engine's GPUs (None if they do): a user asking for an
    8B model on one 16 GB card should hear it, not get a cost."""
    weights = shape.weight_bytes / tensor_parallel
    if weights > gpu.memory:
        return (
            f"{shape.parameters / 1e9:.1f}B parameters need {weights / 1e9:.0f} GB per GPU at "
            f"tensor_parallel_size {tensor_parallel}; {gpu.name} has {gpu.memory / 1e9:.0f} GB"
        )
    return None
