"""What the work of a run would cost on GPUs: a roofline per operation, pure functions.

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

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from rollverify.trace import EngineStep, TrainerStep

# -- GPUs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPUProfile:
    """One GPU's peak figures from its spec sheet (dense, not with sparsity)."""

    name: str
    peak_flops: float  # dense BF16 tensor-core FLOP/s
    bandwidth: float  # HBM bytes/s
    memory: float  # HBM bytes
    link: float  # GPU-to-GPU bytes/s, one direction (NVLink)
    source: str


GPUS: dict[str, GPUProfile] = {
    # A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): BF16 312 TFLOPS (624 with
    # sparsity); 80 GB HBM2e at 2,039 GB/s; NVLink 600 GB/s (both directions).
    "a100": GPUProfile(
        "A100-SXM4-80GB",
        312e12,
        2.039e12,
        80e9,
        300e9,
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
        "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
    ),
    # H100 SXM datasheet: BF16 1,979 TFLOPS with sparsity (989 dense); 80 GB HBM3 at 3.35 TB/s;
    # NVLink 900 GB/s (both directions).
    "h100": GPUProfile(
        "H100-SXM5-80GB",
        989e12,
        3.35e12,
        80e9,
        450e9,
        "https://www.nvidia.com/en-us/data-center/h100/",
    ),
    # H200 SXM datasheet: the H100's compute (BF16 1,979 TFLOPS with sparsity); 141 GB HBM3e at
    # 4.8 TB/s; NVLink 900 GB/s.
    "h200": GPUProfile(
        "H200-SXM-141GB",
        989e12,
        4.8e12,
        141e9,
        450e9,
        "https://www.nvidia.com/en-us/data-center/h200/",
    ),
    # DGX B200 datasheet, per GPU (the system's totals / 8): 180 GB HBM3e at 8 TB/s, NVLink 1.8
    # TB/s (both directions); HGX B200: FP16/BF16 4.5 PFLOPS with sparsity (2.25 dense).
    "b200": GPUProfile(
        "B200-SXM-180GB",
        2.25e15,
        8.0e12,
        180e9,
        900e9,
        "https://www.nvidia.com/en-us/data-center/dgx-b200/",
    ),
}


@dataclass(frozen=True)
class Efficiency:
    """The share of peak that real stacks reach, and what a step costs besides its math.

    Named parameters, not truths: each default cites where it comes from, and a user with a GPU
    fits them (docs/cost-model.md)."""

    # Achieved / peak HBM bandwidth in decode. Optimized CUDA serving stacks (vLLM,
    # TensorRT-LLM) are reported in the 60-85% band (Databricks/MosaicML, "LLM Inference
    # Performance Engineering: Best Practices", 2023: model bandwidth utilization); the middle.
    bandwidth: float = 0.7
    # Model FLOP utilization of prefill and forward-only scoring (compute-bound, large token
    # counts). Megatron-LM reaches 52% of peak on A100s for a 175B model (Narayanan et al.,
    # SC 2021); a forward alone does no worse: we take 0.5.
    forward_flops: float = 0.5
    # MFU of training: Llama 3's BF16 pretraining on 16K H100s ran at 38-43% (Llama Team,
    # "The Llama 3 Herd of Models", 2024, Table 4): 0.4.
    train_flops: float = 0.4
    # Achieved / peak NVLink bandwidth for a large transfer (NCCL all-gather / broadcast
    # bus bandwidth is ~75-80% of the link's in nccl-tests on DGX systems): 0.75.
    link: float = 0.75
    # Seconds per engine step besides its math: scheduling, sampling, input preparation,
    # kernel launches. vLLM's profile of Llama 3 8B on one H100 found scheduling alone at 29%
    # of execution time before v0.6 ("vLLM v0.6.0: 2.7x Throughput Improvement", 2024); an
    # absolute figure is not published: 2 ms is our assumption, to be fitted on a GPU.
    step_overhead: float = 2e-3


# -- models ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """What the cost of a transformer depends on, read from its Hugging Face config."""

    parameters: int  # all weights (embeddings included)
    active_parameters: int  # weights one token's forward uses (MoE: the routed experts only)
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    bytes_per_parameter: int = 2  # bf16 weights

    @property
    def weight_bytes(self) -> int:
        return self.parameters * self.bytes_per_parameter

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token in every layer (bf16 KV cache)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    @classmethod
    def from_config(cls, config: dict[str, Any], bytes_per_parameter: int = 2) -> ModelShape:
        """Dense decoders (Llama, Qwen, Mistral) and their MoE variants (num_experts,
        num_experts_per_tok, moe_intermediate_size)."""
        hidden, layers = config["hidden_size"], config["num_hidden_layers"]
        heads = config["num_attention_heads"]
        kv_heads = config.get("num_key_value_heads") or heads
        head_dim = config.get("head_dim") or hidden // heads
        vocab = config["vocab_size"]
        attention = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, o; k, v
        experts = config.get("num_experts") or config.get("n_routed_experts") or 0
        if experts:
            expert = 3 * hidden * config["moe_intermediate_size"]
            routed = config["num_experts_per_tok"]
            shared = 3 * hidden * config.get("shared_expert_intermediate_size", 0)
            mlp_all, mlp_active = experts * expert + shared, routed * expert + shared
        else:
            mlp_all = mlp_active = 3 * hidden * config["intermediate_size"]  # gate, up, down
        embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
        router = hidden * experts  # one score per expert
        norms = 2 * hidden + (2 * head_dim if _has_qk_norm(config) else 0)  # per layer
        fixed = embeddings + hidden  # + the final norm
        return cls(
            parameters=layers * (attention + mlp_all + router + norms) + fixed,
            active_parameters=layers * (attention + mlp_active + router + norms) + fixed,
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            bytes_per_parameter=bytes_per_parameter,
        )

    @classmethod
    def from_folder(cls, folder: str | Path, bytes_per_parameter: int = 2) -> ModelShape:
        config = json.loads((Path(folder) / "config.json").read_text())
        return cls.from_config(config, bytes_per_parameter)

    @classmethod
    def of(cls, model: str, bytes_per_parameter: int = 2) -> ModelShape:
        """The shape of `model.path`: a local folder, a hub id in the local Hugging Face cache,
        or one of the configs shipped in rollverify/model_configs (the paper's models)."""
        if (Path(model) / "config.json").is_file():
            return cls.from_folder(model, bytes_per_parameter)
        shipped = SHIPPED_CONFIGS / f"{model.replace('/', '--')}.json"
        if shipped.is_file():
            return cls.from_config(json.loads(shipped.read_text()), bytes_per_parameter)
        from huggingface_hub import try_to_load_from_cache  # reads the cache, never the network

        cached = try_to_load_from_cache(model, "config.json")
        if isinstance(cached, str):
            return cls.from_config(json.loads(Path(cached).read_text()), bytes_per_parameter)
        raise ValueError(
            f"model.path: no config.json for {model!r} here; download the model, or point "
            "model.path to a folder with its config.json"
        )


SHIPPED_CONFIGS = Path(__file__).parent / "model_configs"


def _has_qk_norm(config: dict[str, Any]) -> bool:
    """Qwen3 normalizes queries and keys per head (one weight of head_dim each)."""
    return str(config.get("model_type", "")).startswith("qwen3")


# -- operations ------------------------------------------------------------------------------


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


# -- a run's layout and the cost of its steps --------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where a run's work runs. colocated: the same GPUs roll out, then train (the paper's
    setup; the in-process engine); disaggregated: the engines hold GPUs of their own, idle
    while the trainer works and the other way round (synchronous RL: no overlap)."""

    kind: Literal["colocated", "disaggregated"]
    trainer_gpus: int
    engines: int = 1
    tensor_parallel: int = 1

    @property
    def gpus(self) -> int:
        engine_gpus = self.engines * self.tensor_parallel
        if self.kind == "colocated":
            return max(self.trainer_gpus, engine_gpus)
        return self.trainer_gpus + engine_gpus


def engines_seconds(
    shape: ModelShape,
    gpu: GPUProfile,
    efficiency: Efficiency,
    steps: Iterable[EngineStep],
    tensor_parallel: int = 1,
) -> float:
    """Wall seconds of the engines' iterations: each engine runs its own in sequence, the
    engines run side by side (the slowest sets the time)."""
    per_engine: dict[int, float] = defaultdict(float)
    for step in steps:
        per_engine[step.engine] += engine_step_seconds(
            shape, gpu, efficiency, step, tensor_parallel
        )
    return max(per_engine.values(), default=0.0)


def step_seconds(
    shape: ModelShape,
    gpu: GPUProfile,
    efficiency: Efficiency,
    layout: Layout,
    rollout: Iterable[EngineStep],
    evaluation: Iterable[EngineStep],
    trainer: TrainerStep,
) -> dict[str, float]:
    """Modeled wall seconds of one training step, by the ledger's phases (rollverify/ledger.py);
    `measure` is scoring for the logs only, kept apart as the ledger keeps it."""
    tp, gpus = layout.tensor_parallel, layout.trainer_gpus
    return {
        "rollout": engines_seconds(shape, gpu, efficiency, rollout, tp),
        "eval": engines_seconds(shape, gpu, efficiency, evaluation, tp),
        "train": train_seconds(
            shape, gpu, efficiency, trainer.tokens_trained, trainer.attended_trained, gpus
        ),
        "verify": prefill_seconds(
            shape, gpu, efficiency, trainer.tokens_scored, trainer.attended_scored, gpus
        ),
        "sync": sync_seconds(trainer.sync_bytes, gpu, efficiency, layout),
        "measure": prefill_seconds(
            shape, gpu, efficiency, trainer.tokens_measured, trainer.attended_measured, gpus
        ),
    }


@dataclass(frozen=True)
class Pricing:
    """A run's model on a GPU in a layout: the prices of its steps."""

    shape: ModelShape
    gpu: GPUProfile
    layout: Layout
    efficiency: Efficiency = Efficiency()

    def engines(self, steps: Iterable[EngineStep]) -> float:
        return engines_seconds(
            self.shape, self.gpu, self.efficiency, steps, self.layout.tensor_parallel
        )

    def step(self, rollout: Iterable[EngineStep], trainer: TrainerStep) -> dict[str, float]:
        return step_seconds(
            self.shape, self.gpu, self.efficiency, self.layout, rollout, [], trainer
        )

    # StepCost, for a simulated engine: the layout's engines decode side by side, each with an
    # even share of the rows.
    reads_padding = False  # paged attention: each row reads its own context

    def decode_run(self, rows: float, context: float, padded: float, steps: int) -> float:
        engines, tp = self.layout.engines, self.layout.tensor_parallel
        return decode_run_seconds(
            self.shape, self.gpu, self.efficiency, rows / engines, context / engines, steps, tp
        )

    def iteration(self, step: EngineStep) -> float:
        engines = self.layout.engines  # (an admission's prefills spread over the engines too)
        share = EngineStep(
            step.decode_rows / engines,
            step.decode_context / engines,
            step.prefill_rows / engines,
            step.prefill_tokens / engines,
            step.prefill_attended / engines,
        )
        return engine_step_seconds(
            self.shape, self.gpu, self.efficiency, share, self.layout.tensor_parallel
        )


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


# -- the price of engine iterations, as a simulated engine asks for it -------------------------


class StepCost(Protocol):
    """What a simulated engine needs priced (rollverify/engines/simulated.py)."""

    reads_padding: bool  # whether `padded` changes the price (else it may be passed as context)

    def decode_run(self, rows: float, context: float, padded: float, steps: int) -> float:
        """`steps` decode iterations of `rows` rows whose contexts sum to `context` at the first
        and grow by `rows` per iteration; `padded`: the positions attended at the first,
        padding included (it grows by `rows` too)."""

    def iteration(self, step: EngineStep) -> float:
        """One engine iteration (a prefill)."""


@dataclass(frozen=True)
class LinearStepCost:
    """A machine's engine iterations fitted from its own trace (`fit_step_cost`), for a CPU,
    whose cost is no roofline. A decode pass costs overhead + per_row x rows + per_context x
    their context + per_padded x the positions attended with padding (the in-process engine
    pads each band of rows to its longest); a prefill pass prefill_overhead + per_prefill_row
    x rows + per_prefill_token x tokens + per_prefill_padded x the positions computed with
    padding (the in-process engine left-pads each group of a prefill to its longest). The
    in-process engine runs both in one poll, as two passes."""

    overhead: float
    per_row: float
    per_context: float
    per_padded: float
    prefill_overhead: float
    per_prefill_row: float
    per_prefill_token: float
    per_prefill_padded: float = 0.0

    @property
    def reads_padding(self) -> bool:
        return self.per_padded > 0

    def decode_run(self, rows: float, context: float, padded: float, steps: int) -> float:
        if rows <= 0 or steps <= 0:
            return 0.0
        per_step = self.overhead + self.per_row * rows + self.per_context * context
        per_step += self.per_padded * padded
        growth = (self.per_context + self.per_padded) * rows  # both grow by rows per step
        return steps * per_step + growth * steps * (steps - 1) / 2

    def iteration(self, step: EngineStep) -> float:
        decode = self.decode_run(step.decode_rows, step.decode_context, step.decode_padded, 1)
        if not step.prefill_rows:
            return decode
        prefill = self.prefill_overhead + self.per_prefill_row * step.prefill_rows
        prefill += self.per_prefill_token * step.prefill_tokens
        return decode + prefill + self.per_prefill_padded * step.prefill_padded


def fit_step_cost(steps: list[EngineStep], seconds: list[float]) -> LinearStepCost:
    """Least squares of measured iteration seconds on the trace's columns, no coefficient
    negative (scipy's non-negative least squares: a cost never falls with more work)."""
    return fit_step_cost_to_totals([[step] for step in steps], seconds)


def fit_step_cost_to_totals(runs: list[list[EngineStep]], seconds: list[float]) -> LinearStepCost:
    """The same fit where only the total seconds of each run of iterations were measured (an
    engine that times no iteration, as vLLM behind its RPC): a sum of linear costs is linear
    in the same coefficients."""
    features = [
        lambda s: s.decode_rows > 0,
        lambda s: s.decode_rows,
        lambda s: s.decode_context,
        lambda s: s.decode_padded,
        lambda s: s.prefill_rows > 0,
        lambda s: s.prefill_rows,
        lambda s: s.prefill_tokens,
        lambda s: s.prefill_padded,
    ]
    import numpy as np
    from scipy.optimize import nnls

    matrix = np.array([[sum(f(s) for s in run) for f in features] for run in runs], dtype=float)
    scale = np.where(matrix.max(axis=0) > 0, matrix.max(axis=0), 1.0)  # columns of one size
    solution, _ = nnls(matrix / scale, np.array(seconds, dtype=float))
    return LinearStepCost(*(float(c) for c in solution / scale))
