"""The GPU check: time a Qwen3-8B-shaped model on this machine and write its cost profile.

    python benchmarks/gpu_check.py [--out gpu_profile.json] [--toy] [--device cuda]

Needs only torch and transformers (a bare CUDA image has both), and no weights: the model is
Qwen3-8B's shape (config.json of Qwen/Qwen3-8B-Base) with random weights, which cost what
trained ones cost. It times
  - decode iterations: `rows` sequences of `context` tokens each, one token each, from a KV
    cache (DynamicCache), over a grid of rows x context;
  - prefill iterations: `rows` prompts of `tokens` tokens, over a grid;
  - a forward and backward at the trainer's micro-batch, and a forward alone (the scoring of
    verification), over a few sequence lengths;
then fits the terms `rvctl calibrate` fits to a run (rollverify/cost/costmodel/profile.py:
the engine's LinearStepCost, the trainer's train_* and score_* terms) by non-negative least
squares, and writes them as a profile (JSON, format 1) naming the machine, with what the
device achieved: decode bandwidth and per-step overhead, FLOP/s of prefill and of training
(`achieved`), and, on a GPU rollverify's cost model knows (its name holds h200, h100, a100 or
b200) and where rollverify imports, those over the GPU's peaks: the roofline's efficiency
factors (`efficiency`; `Profile.efficiency(gpu)` in rollverify gives the same). Both are
printed. `rvctl simulate --profile FILE` prices with it.
Weight sync is not timed here (it depends on the links between trainer and engines, not on
one GPU): the profile leaves `sync_per_byte` out and simulate prices sync with its roofline.

On one H200 the whole check is sized to take a few minutes (the largest decode point holds
32 rows x 8192 tokens of KV, 38.6 GiB in bf16 at 147 KiB a token, beside the 16 GiB of
weights and the prefill's activations). `--toy` runs a
2-layer model at tiny sizes on any device (the test suite runs it on a CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import torch

# Qwen/Qwen3-8B-Base's config.json (rollverify/assets/model_configs holds the same file)
QWEN3_8B = dict(
    vocab_size=151936,
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
)
TOY = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=2048,
)
# (grids: full size, toy size)
DECODE_ROWS = ([1, 8, 24, 32], [1, 4, 8])  # (64 x 8192: 77 GiB of KV, out of memory)
DECODE_CONTEXT = ([1024, 4096, 8192], [32, 128])
# (toy: rows and tokens vary apart, and the largest prefill's FLOPs outweigh the CPU's call
# overhead, so that the fit finds each term on a loaded CPU; 3 points, tokens growing with
# rows, left the fit's terms at 0 in some runs)
PREFILL = (
    [(1, 512), (4, 1024), (8, 2048), (16, 4096)],
    [(1, 16), (4, 16), (1, 128), (4, 128), (8, 512)],
)
TRAIN_TOKENS = ([1024, 2048, 4096, 8192], [16, 64, 256])
TRAIN_TERMS = ("train_overhead", "train_per_token", "train_per_attended")  # (profile.py's)
SCORE_TERMS = ("score_per_token", "score_per_attended")
ENGINE_TERMS = (  # LinearStepCost's fields, in order (rollverify/cost/costmodel/cpu_profile.py)
    "overhead",
    "per_row",
    "per_context",
    "per_padded",
    "prefill_overhead",
    "per_prefill_row",
    "per_prefill_token",
    "per_prefill_padded",
)


def build_model(toy: bool, device: str):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    config = Qwen3Config(**(TOY if toy else QWEN3_8B), torch_dtype=dtype)
    config._attn_implementation = "sdpa"
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(dtype)
    return model.eval()


def timed(device: str, run, repeats: int) -> float:
    """Median seconds of `run()` over `repeats`, after one warm-up call."""
    run()
    samples = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def engine_points(model, toy: bool, device: str, repeats: int) -> list[tuple[list[float], float]]:
    """(the iteration's columns, in ENGINE_TERMS' order; its seconds) for every grid point."""
    from transformers import DynamicCache

    index = 1 if toy else 0
    vocab = model.config.vocab_size
    points = []
    with torch.no_grad():
        for rows in DECODE_ROWS[index]:
            for context in DECODE_CONTEXT[index]:
                prompt = torch.randint(vocab, (rows, context), device=device)
                cache = DynamicCache()
                model(prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
                token = torch.randint(vocab, (rows, 1), device=device)
                position = torch.full((rows, 1), context, device=device)

                def decode(cache=cache, token=token, position=position):
                    model(token, past_key_values=cache, position_ids=position, use_cache=True)
                    cache.crop(-1)  # drop the token: every repeat decodes at the same context

                seconds = timed(device, decode, repeats)
                points.append(([1.0, rows, rows * (context + 1), 0, 0, 0, 0, 0], seconds))
                del cache
        for rows, tokens in PREFILL[index]:
            prompt = torch.randint(vocab, (rows, tokens), device=device)

            def prefill(prompt=prompt):  # the last position's logits, as an engine's prefill
                model(prompt, past_key_values=DynamicCache(), use_cache=True, logits_to_keep=1)

            seconds = timed(device, prefill, repeats)
            points.append(([0, 0, 0, 0, 1.0, rows, rows * tokens, 0], seconds))
    return points


def trainer_points(model, toy: bool, device: str, repeats: int) -> dict[str, list]:
    """Forward+backward (train) and forward-only (score) at one sequence per micro-batch."""
    vocab = model.config.vocab_size
    train, score = [], []
    for tokens in TRAIN_TOKENS[1 if toy else 0]:
        ids = torch.randint(vocab, (1, tokens), device=device)
        attended = tokens * (tokens + 1) / 2  # the sum of the tokens' contexts

        def forward_backward(ids=ids):
            model.zero_grad(set_to_none=True)
            model(ids, labels=ids).loss.backward()

        def forward(ids=ids):
            with torch.no_grad():
                model(ids)

        model.train()
        train.append(([1.0, tokens, attended], timed(device, forward_backward, repeats)))
        model.eval()
        score.append(([tokens, attended], timed(device, forward, repeats)))
    model.zero_grad(set_to_none=True)
    return {"train": train, "score": score}


def fit(points: list[tuple[list[float], float]]) -> tuple[list[float], list, float]:
    """Non-negative least squares (a cost never falls with more work): scipy's NNLS where
    scipy is installed, else least squares refitted without the columns it made negative.
    Returns the coefficients, their standard errors (None: a column set to 0) and the relative
    RMS residual."""
    import numpy as np

    a = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    scale = np.where(np.abs(a).max(axis=0) > 0, np.abs(a).max(axis=0), 1.0)
    scaled = a / scale
    try:
        from scipy.optimize import nnls

        solution, _ = nnls(scaled, y)
    except ImportError:
        kept = np.abs(a).max(axis=0) > 0
        while True:
            solution = np.zeros(a.shape[1])
            solution[kept] = np.linalg.lstsq(scaled[:, kept], y, rcond=None)[0]
            if (solution >= 0).all():
                break
            kept &= solution > 0
    coefficients = solution / scale
    residuals = y - a @ coefficients
    rms = float(np.sqrt(np.mean(residuals**2)) / np.mean(np.abs(y)))
    kept = np.flatnonzero(coefficients > 0)
    errors: list = [None] * a.shape[1]
    dof = len(y) - len(kept)
    if len(kept) and dof > 0:
        columns = scaled[:, kept]
        variance = float(residuals @ residuals) / dof
        covariance = variance * np.linalg.pinv(columns.T @ columns)
        for position, column in enumerate(kept):
            errors[column] = float(np.sqrt(covariance[position, position]) / scale[column])
    return [float(c) for c in coefficients], errors, rms


def achieved(model, engine: list, train: list) -> dict[str, float]:
    """What the device reached, fitted to the timed points (non-negative least squares again):
    decode seconds = step_overhead + bytes read / bandwidth (the weights once, every row's KV);
    prefill seconds = c + forward FLOPs / forward_flops; forward+backward seconds = c + 3 x
    forward FLOPs / train_flops. FLOPs: 2 x parameters x tokens + 4 x layers x heads x head_dim
    x attended positions (docs/cost-model.md, "The formulas").

    Each figure is a fit's slope over every point of its grid, not the largest point's bytes
    (or FLOPs) over its seconds: that ratio would count the step's fixed overhead as time spent
    reading, and understate the bandwidth most where the rows are few. step_overhead is the
    decode fit's per-iteration term (kept even where the fit finds no bandwidth, as on the CPU
    toy run, whose decode steps are all overhead); a figure the fit sets to 0 is left out."""
    config = model.config
    parameters = sum(p.numel() for p in model.parameters())
    width = next(model.parameters()).element_size()
    weight_bytes = parameters * width
    kv_per_token = (
        2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * width
    )
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim

    def flops(tokens: float, attended: float) -> float:
        return 2 * parameters * tokens + attention * attended

    decode = [([1.0, weight_bytes + c[2] * kv_per_token], t) for c, t in engine if c[0]]
    prefill = []
    for columns, seconds in engine:
        if columns[4]:
            rows, tokens = columns[5], columns[6] / columns[5]
            prefill.append(([1.0, flops(rows * tokens, rows * tokens * (tokens + 1) / 2)], seconds))
    backward = [([1.0, 3 * flops(c[1], c[2])], t) for c, t in train]
    figures = {}
    (overhead, per_byte), _, _ = fit(decode)
    if per_byte > 0:
        figures["bandwidth"] = 1 / per_byte
    if overhead > 0:
        figures["step_overhead"] = overhead
    for name, points in (("forward_flops", prefill), ("train_flops", backward)):
        per_flop = fit(points)[0][1]
        if per_flop > 0:
            figures[name] = 1 / per_flop
    return figures


def efficiency(device_name: str, figures: dict[str, float]) -> dict | None:
    """The roofline's efficiency factors (rollverify's `Efficiency` fields) this device
    measured: the figures over the GPU's spec-sheet peaks where rollverify knows the GPU (its
    cost model's table, rollverify/cost/costmodel/gpus.py: "NVIDIA H200" is h200), with the
    step overhead in seconds as it is; None elsewhere. The name decides the peaks: an H100
    PCIe or NVL matches h100's SXM figures, so its factors read low."""
    try:
        from rollverify.cost.costmodel.gpus import GPUS
    except ImportError:  # torch and transformers only: the profile still has the figures
        return None
    name = next((key for key in GPUS if key in device_name.lower()), None)
    if name is None:
        return None
    gpu = GPUS[name]
    shares = {
        "bandwidth": gpu.bandwidth,
        "forward_flops": gpu.peak_flops,
        "train_flops": gpu.peak_flops,
    }
    factors = {k: figures[k] / peak for k, peak in shares.items() if k in figures}
    if "step_overhead" in figures:
        factors["step_overhead"] = figures["step_overhead"]
    return {"gpu": name} | factors


def terms(names, coefficients, errors) -> list[dict]:
    return [
        {"name": n, "value": v, "error": e}
        for n, v, e in zip(names, coefficients, errors, strict=True)
    ]


def machine(device: str) -> str:
    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(device)} (gpu_check)"
    return f"{platform.processor() or platform.machine()} CPU, {os.cpu_count()} cores (gpu_check)"


def write_atomically(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as handle:
        handle.write(text)
    os.replace(handle.name, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_profile.json", help="the profile to write")
    parser.add_argument("--toy", action="store_true", help="a 2-layer model at tiny sizes")
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", default=default_device)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--model", default="Qwen/Qwen3-8B-Base", help="the model.path the profile prices"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    started = time.perf_counter()
    model = build_model(args.toy, args.device)
    engine = engine_points(model, args.toy, args.device, args.repeats)
    trainer = trainer_points(model, args.toy, args.device, args.repeats)
    engine_fit = fit(engine)
    train_fit, score_fit = fit(trainer["train"]), fit(trainer["score"])
    profile = {
        "format": 1,
        "machine": machine(args.device),
        "source": "benchmarks/gpu_check.py" + (" --toy" if args.toy else ""),
        "engine": terms(ENGINE_TERMS, *engine_fit[:2]),
        "trainer": terms(
            ("train_overhead", "train_per_token", "train_per_attended"), *train_fit[:2]
        )
        + terms(("score_per_token", "score_per_attended"), *score_fit[:2]),
        "residual": {"engine": engine_fit[2], "train": train_fit[2], "score": score_fit[2]},
        "samples": {"engine": len(engine), "train": len(trainer["train"])},
        "model": args.model,
        "achieved": achieved(model, engine, trainer["train"]),
    }
    factors = efficiency(profile["machine"], profile["achieved"])
    if factors is not None:  # a GPU rollverify knows: Profile.efficiency(gpu) gives the same
        profile["efficiency"] = factors
    write_atomically(args.out, json.dumps(profile, indent=2) + "\n")
    summary = {
        "out": args.out,
        "machine": profile["machine"],
        "seconds": round(time.perf_counter() - started, 1),
        "residual": profile["residual"],
        "achieved": profile["achieved"],
        "efficiency": factors,
        "points": {"engine": [[p[0], p[1]] for p in engine], **trainer},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
