"""The prices of the engine's work: a decode run and a prefill, as cost/costmodel/roofline.py
prices them, evaluated in the same order, so the clock is the reference's to the last bit."""

from __future__ import annotations

import math

from numba import njit

from rollverify.rollout.engines.kernel.arrays import (
    ACTIVE,
    EFF_BANDWIDTH,
    EFF_FLOPS,
    EFF_LINK,
    ENGINES,
    GPU_BANDWIDTH,
    GPU_FLOPS,
    GPU_LINK,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    KV_BYTES,
    LAYERS,
    OVERHEAD,
    TP,
    WEIGHT_BYTES,
)


def price_terms(pricing) -> tuple:
    """A Pricing's terms (`prices`). Integers stay integers: the roofline mixes them."""
    shape, gpu, efficiency, layout = pricing.shape, pricing.gpu, pricing.efficiency, pricing.layout
    return (
        layout.engines, layout.tensor_parallel, shape.weight_bytes, shape.kv_bytes_per_token,
        shape.active_parameters, shape.layers, shape.heads, shape.head_dim, shape.hidden,
        float(gpu.bandwidth), float(gpu.peak_flops), float(gpu.link), float(efficiency.bandwidth),
        float(efficiency.forward_flops), float(efficiency.link), float(efficiency.step_overhead),
    )  # fmt: skip


@njit(cache=True)
def _all_reduce(prices, tokens):
    tp = prices[TP]
    if tp <= 1:
        return 0.0
    data = 2 * prices[LAYERS] * tokens * prices[HIDDEN] * 2
    return data * 2 * (tp - 1) / tp / (prices[GPU_LINK] * prices[EFF_LINK])


@njit(cache=True)
def _line_sum(start, slope, lo, hi):
    if hi <= lo:
        return 0.0
    return (hi - lo) * start + slope * (hi * (hi - 1) - lo * (lo - 1)) / 2


@njit(cache=True)
def decode_run(prices, rows, context, steps):
    """Pricing.decode_run: `steps` decode iterations of `rows` rows, contexts summing to
    `context` at the first (decode_run_seconds on each engine's share)."""
    share, context_share = rows / prices[ENGINES], context / prices[ENGINES]
    if share <= 0 or steps <= 0:
        return 0.0
    tp = prices[TP]
    bandwidth = tp * prices[GPU_BANDWIDTH] * prices[EFF_BANDWIDTH]
    flops = tp * prices[GPU_FLOPS] * prices[EFF_FLOPS]
    attention = 4 * prices[LAYERS] * prices[HEADS] * prices[HEAD_DIM]
    m0 = (prices[WEIGHT_BYTES] + context_share * prices[KV_BYTES]) / bandwidth
    m1 = share * prices[KV_BYTES] / bandwidth
    c0 = (2 * prices[ACTIVE] * share + attention * context_share) / flops
    c1 = attention * share / flops
    fixed = prices[OVERHEAD] + _all_reduce(prices, share)
    if c0 > m0:
        first0, first1, second0, second1 = c0, c1, m0, m1
    else:
        first0, first1, second0, second1 = m0, m1, c0, c1
    cross = steps
    if second1 > first1:
        ceiling = math.ceil((first0 - second0) / (second1 - first1))
        if ceiling < steps:
            cross = int(ceiling)
    return (
        _line_sum(first0, first1, 0, cross) + _line_sum(second0, second1, cross, steps)
        + steps * fixed
    )  # fmt: skip


@njit(cache=True)
def prefill(prices, tokens, attended):
    """Pricing.iteration of an admission: EngineStep(0, 0, rows, tokens, attended) on each
    engine's share (engine_step_seconds)."""
    engines = prices[ENGINES]
    decode_rows, decode_context = 0 / engines, 0 / engines
    new, attending = tokens / engines, attended / engines
    total = decode_rows + new
    if total <= 0:
        return 0.0
    tp = prices[TP]
    kv = (decode_context + new) * prices[KV_BYTES]
    memory = (prices[WEIGHT_BYTES] + kv) / tp / (prices[GPU_BANDWIDTH] * prices[EFF_BANDWIDTH])
    attended_all = decode_context + attending
    flops = 2 * prices[ACTIVE] * total + 4 * prices[LAYERS] * prices[HEADS] * (
        prices[HEAD_DIM] * attended_all
    )
    compute = flops / tp
    compute /= prices[GPU_FLOPS] * prices[EFF_FLOPS]
    overhead = prices[OVERHEAD] + _all_reduce(prices, total)
    return max(memory, compute) + overhead
