"""What the work of a run would cost on GPUs (docs/cost-model.md), in the parts a reader looks
for:

    gpus.py         the GPUs' spec sheets (GPUProfile, GPUS) and the share of them real stacks
                    reach (Efficiency), each figure with its source
    ModelShape      a model's shape from its config.json (rollverify/config/model_shape.py: the
                    config reads it too; re-exported here)
    roofline.py     the cost of each operation: decode, prefill, scoring, training, weight sync
    layout.py       where a run's work runs (Layout: colocated or disaggregated)
    pricing.py      the cost of a run's steps on one GPU in one layout (Pricing)
    step_cost.py    what a simulated engine needs priced (StepCost)
    cpu_profile.py  a CPU's engine iterations, fitted from its trace (LinearStepCost)
    profile.py      a machine's engine and trainer terms fitted to a run (rvctl calibrate)
"""

from rollverify.config.model_shape import SHIPPED_CONFIGS, ModelShape
from rollverify.cost.costmodel.cpu_profile import (
    LinearStepCost,
    fit_step_cost,
    fit_step_cost_to_totals,
)
from rollverify.cost.costmodel.gpus import GPUS, Efficiency, GPUProfile
from rollverify.cost.costmodel.layout import Layout
from rollverify.cost.costmodel.pricing import Pricing, engines_seconds, step_seconds
from rollverify.cost.costmodel.roofline import (
    attended_tokens,
    check_fits,
    decode_run_seconds,
    decode_step_seconds,
    engine_step_seconds,
    forward_flops,
    gpu_days,
    prefill_seconds,
    sync_seconds,
    train_seconds,
)
from rollverify.cost.costmodel.step_cost import StepCost

__all__ = [
    "GPUS",
    "SHIPPED_CONFIGS",
    "Efficiency",
    "GPUProfile",
    "Layout",
    "LinearStepCost",
    "ModelShape",
    "Pricing",
    "StepCost",
    "attended_tokens",
    "check_fits",
    "decode_run_seconds",
    "decode_step_seconds",
    "engine_step_seconds",
    "engines_seconds",
    "fit_step_cost",
    "fit_step_cost_to_totals",
    "forward_flops",
    "gpu_days",
    "prefill_seconds",
    "step_seconds",
    "sync_seconds",
    "train_seconds",
]
