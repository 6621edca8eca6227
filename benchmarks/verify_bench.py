"""Throughput of token_ops and verify on a large cache-shaped batch; prints JSON.

    .venv/bin/python benchmarks/verify_bench.py [--batch 4096] [--width 4096] [--repeats 7]

The batch looks like a partial-rollout cache: right-padded rows of long-tail lengths, each
row made of 1-5 version segments, current log-probs a small drift away from behavior ones.
Throughput is per generated token (padding excluded: ~2/3 of the [B, T] positions here);
positions/s, padding included, is reported beside it.
Goal: >= 50M generated tokens/s for verify on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from provenance import provenance

from rollverify.core.off_policy_shift import token_ops
from rollverify.core.verify import verify


def make_cache_batch(batch: int, width: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    behavior = -torch.rand(batch, width, generator=generator) * 4
    current = behavior + torch.randn(batch, width, generator=generator) * 0.012
    lengths = (width * torch.rand(batch, generator=generator) ** 2).long().clamp(min=1)
    mask = torch.arange(width) < lengths[:, None]
    segments = torch.randint(1, 6, (batch,), generator=generator)
    cuts = torch.rand(batch, 4, generator=generator).sort(-1).values  # fractions of length
    boundaries = (cuts * lengths[:, None]).long()  # [B, 4]
    boundaries[torch.arange(4) >= (segments - 1)[:, None]] = width  # unused cuts past the end
    positions = torch.arange(width)
    versions = 10 + (positions[None, :, None] >= boundaries[:, None, :]).sum(-1)  # [B, T]
    return current, behavior, versions, mask, segments


def time_call(fn, repeats: int) -> list[float]:
    fn()  # warm-up: first-touch page faults and allocator growth are not throughput
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ds", type=float, default=0.01)
    parser.add_argument("--dt", type=float, default=2.0)
    args = parser.parse_args()

    current, behavior, versions, mask, segments = make_cache_batch(args.batch, args.width)
    ops = token_ops(current, behavior, mask=mask)
    generated = int(mask.sum())
    results = {}
    for name, fn in {
        "token_ops": lambda: token_ops(current, behavior, mask=mask),
        "verify": lambda: verify(ops, versions, mask, args.ds, args.dt),
        "token_ops+verify": lambda: verify(
            token_ops(current, behavior, mask=mask), versions, mask, args.ds, args.dt
        ),
    }.items():
        seconds = time_call(fn, args.repeats)
        results[name] = {
            "seconds_median": statistics.median(seconds),
            "seconds_min": min(seconds),
            "generated_tokens_per_second_median": generated / statistics.median(seconds),
            "positions_per_second_median": mask.numel() / statistics.median(seconds),
        }
    kept = verify(ops, versions, mask, args.ds, args.dt)
    report = {
        "benchmark": "verify_bench",
        "batch": args.batch,
        "width": args.width,
        "dtype": str(ops.dtype),
        "ds": args.ds,
        "dt": args.dt,
        "segments_per_row_mean": segments.float().mean().item(),
        "generated_tokens": generated,
        "padding_share": 1 - generated / mask.numel(),
        "acceptance_rate": kept.sum().item() / generated,
        "results": results,
        "goal_verify_generated_tokens_per_second": 50e6,
        "goal_met": results["verify"]["generated_tokens_per_second_median"] >= 50e6,
        "provenance": provenance(vars(args)),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
