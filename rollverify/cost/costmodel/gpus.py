"""The GPUs the cost model prices work on: their spec sheets' peaks, each with its source, and
the share of those peaks that real stacks reach."""

from __future__ import annotations

from dataclasses import dataclass


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
