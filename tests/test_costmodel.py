"""The GPU cost model (rollverify/cost/costmodel/): shapes read from configs, roofline costs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import load_file

from rollverify.config import load_config
from rollverify.cost.costmodel import (
    GPUS,
    Efficiency,
    Layout,
    LinearStepCost,
    ModelShape,
    Pricing,
    attended_tokens,
    check_fits,
    decode_run_seconds,
    decode_step_seconds,
    fit_step_cost,
    fit_step_cost_to_totals,
    forward_flops,
    gpu_days,
    prefill_seconds,
    sync_seconds,
    train_seconds,
)
from rollverify.cost.trace import EngineStep

MODEL_DIR = load_config().model_path()  # the shipped tiny Qwen3

# Qwen3-30B-A3B's config.json (huggingface.co/Qwen/Qwen3-30B-A3B): the MoE case; its model card
# gives 30.5B parameters, 3.3B activated.
QWEN3_MOE = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 768,
    "intermediate_size": 6144,
}
H100, EFF = GPUS["h100"], Efficiency()


def test_the_shipped_tiny_model_shape_counts_every_weight():
    shape = ModelShape.from_folder(MODEL_DIR)
    weights = load_file(f"{MODEL_DIR}/model.safetensors")
    assert shape.parameters == sum(t.numel() for t in weights.values())
    assert shape.active_parameters == shape.parameters  # dense
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (3, 2, 32)
    assert shape.kv_bytes_per_token == 2 * 3 * 2 * 32 * 2


def test_qwen3_8b_matches_its_model_card():
    shape = ModelShape.of("Qwen/Qwen3-8B-Base")  # shipped config: no hub needed
    assert shape.parameters == pytest.approx(8.19e9, rel=0.01)  # "8.2B"
    embeddings = 151936 * 4096 * 2
    assert shape.parameters - embeddings == pytest.approx(6.95e9, rel=0.01)  # non-embedding
    assert shape.weight_bytes == 2 * shape.parameters
    assert shape.kv_bytes_per_token == 147_456  # 36 layers x 8 KV heads x 128 x (K, V) x bf16


def test_a_mixture_of_experts_counts_only_routed_experts_as_active():
    shape = ModelShape.from_config(QWEN3_MOE)
    assert shape.parameters == pytest.approx(30.5e9, rel=0.01)
    assert shape.active_parameters == pytest.approx(3.3e9, rel=0.02)


def test_an_unknown_model_is_named_with_the_fix():
    with pytest.raises(ValueError, match=r"model.path: no config.json for 'nobody/none'"):
        ModelShape.of("nobody/none")


def test_a_decode_step_is_far_from_proportional_to_its_rows():
    """Reading the weights dominates decoding at short contexts: 8x the rows for < 1.5x the
    time, so a step of a few stragglers wastes most of the GPU. (At long contexts each row's
    KV read grows, and so does the cost of a row.)"""
    shape = ModelShape.of("Qwen/Qwen3-8B-Base")
    few = decode_step_seconds(shape, H100, EFF, rows=8, context=8 * 512)
    many = decode_step_seconds(shape, H100, EFF, rows=64, context=64 * 512)
    assert many / few < 1.5
    assert many / 64 < few / 8 / 5, "per token, the full batch is >5x cheaper"


def test_decode_cost_grows_with_rows_and_context_and_the_kv_read_is_exact():
    shape = ModelShape.of("Qwen/Qwen3-8B-Base")
    base = decode_step_seconds(shape, H100, EFF, rows=64, context=64 * 2048)
    assert decode_step_seconds(shape, H100, EFF, rows=64, context=64 * 8192) > base
    assert decode_step_seconds(shape, H100, EFF, rows=128, context=64 * 2048) >= base
    # memory-bound here: (weights + KV) / achieved bandwidth + the step overhead
    kv = 64 * 2048 * shape.kv_bytes_per_token
    expected = (shape.weight_bytes + kv) / (H100.bandwidth * EFF.bandwidth) + EFF.step_overhead
    assert base == pytest.approx(expected)
    assert decode_step_seconds(shape, H100, EFF, rows=0, context=0) == 0.0


def test_huge_batches_become_compute_bound():
    shape = ModelShape.of("Qwen/Qwen3-8B-Base")
    rows = 8192
    step = decode_step_seconds(shape, H100, EFF, rows=rows, context=rows * 16)
    compute = forward_flops(shape, rows, rows * 16) / (H100.peak_flops * EFF.forward_flops)
    assert step == pytest.approx(compute + EFF.step_overhead)


def test_tensor_parallel_splits_the_reads_and_pays_all_reduces():
    shape = ModelShape.of("Qwen/Qwen3-8B-Base")
    one = decode_step_seconds(shape, H100, EFF, rows=64, context=64 * 4096)
    two = decode_step_seconds(shape, H100, EFF, rows=64, context=64 * 4096, tensor_parallel=2)
    assert one / 2 < two < one


def test_training_is_three_forwards_at_the_training_mfu():
    shape = ModelShape.of("Qwen/Qwen3-8B-Base")
    tokens, attended = 1e6, attended_tokens(prompt=512, length=1000) * 1000
    flops = 3 * forward_flops(shape, tokens, attended)
    assert train_seconds(shape, H100, EFF, tokens, attended, gpus=4) == pytest.approx(
        flops / (H100.peak_flops * EFF.train_flops * 4)
    )
    assert prefill_seconds(shape, H100, EFF, tokens, attended) == pytest.approx(
        flops / 3 / (H100.peak_flops * EFF.forward_flops)
    )


def test_attention_flops_use_the_sum_of_contexts():
    assert attended_tokens(prompt=10, length=1) == 10
    assert attended_tokens(prompt=10, length=3) == 10 + 11 + 12
    shape = ModelShape.from_folder(MODEL_DIR)
    assert forward_flops(shape, 1, 100) - forward_flops(shape, 1, 0) == 4 * 3 * 4 * 32 * 100


def test_weight_sync_and_gpu_days():
    shape = ModelShape.of("Qwen/Qwen3-8B-Base")
    apart, together = Layout("disaggregated", 4, engines=4), Layout("colocated", 4, engines=4)
    expected = shape.weight_bytes / (450e9 * EFF.link)
    assert sync_seconds(shape.weight_bytes, H100, EFF, apart) == pytest.approx(expected)
    in_memory = shape.weight_bytes / (3.35e12 * EFF.bandwidth) / 4  # each GPU's share
    assert sync_seconds(shape.weight_bytes, H100, EFF, together) == pytest.approx(in_memory)
    assert gpu_days(86_400, gpus=8) == 8.0


def test_every_profile_is_dense_bf16_with_a_source():
    for name, gpu in GPUS.items():
        assert gpu.source.startswith("https://"), name
        assert 1e14 < gpu.peak_flops < 1e16 and 1e12 < gpu.bandwidth < 1e13, name
    assert GPUS["h200"].peak_flops == GPUS["h100"].peak_flops  # same compute, more HBM
    assert GPUS["h200"].bandwidth > GPUS["h100"].bandwidth


def test_a_model_too_big_for_the_gpu_is_named():
    fp32 = ModelShape.from_config(QWEN3_MOE, bytes_per_parameter=4)
    assert check_fits(fp32, H100) == (
        "30.5B parameters need 122 GB per GPU at tensor_parallel_size 1; H100-SXM5-80GB has 80 GB"
    )
    assert check_fits(fp32, H100, tensor_parallel=2) is None
    assert check_fits(ModelShape.of("Qwen/Qwen3-8B-Base"), H100) is None


@given(
    rows=st.sampled_from([1, 3, 8, 64, 500, 4000, 20000]),
    context=st.sampled_from([0, 10, 1000, 10**5, 10**7]),
    steps=st.integers(1, 300),
    tensor_parallel=st.sampled_from([1, 2, 4]),
    gpu=st.sampled_from(sorted(GPUS)),
)
def test_a_run_of_decode_steps_costs_the_sum_of_its_steps(
    rows, context, steps, tensor_parallel, gpu
):
    shape = ModelShape.of("Qwen/Qwen3-8B-Base")
    profile = GPUS[gpu]
    one_by_one = sum(
        decode_step_seconds(shape, profile, EFF, rows, context + rows * i, tensor_parallel)
        for i in range(steps)
    )
    closed = decode_run_seconds(shape, profile, EFF, rows, context, steps, tensor_parallel)
    assert closed == pytest.approx(one_by_one, rel=1e-9)


def test_a_fitted_cpu_profile_recovers_its_coefficients_and_sums_runs_exactly():
    truth = LinearStepCost(2e-3, 4e-5, 0.0, 3e-7, 1.5e-3, 0.0, 9e-5, 2e-7)
    grid = [
        (rows, context, width, admitted, prompt)
        for rows in (1, 8, 64)
        for context in (20, 90)
        for width in (150, 300)
        for admitted, prompt in ((0, 0), (2, 30), (5, 50), (3, 80), (4, 20), (1, 120))
    ]
    steps = [
        EngineStep(r, r * c, a, a * p, 0, decode_padded=r * w, prefill_padded=a * (p + w // 10))
        for r, c, w, a, p in grid
    ]
    fitted = fit_step_cost(steps, [truth.iteration(s) for s in steps])
    fitted_names = ("overhead", "per_row", "per_padded", "prefill_overhead", "per_prefill_token")
    for name in (*fitted_names, "per_prefill_padded"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=1e-6), name
    one_by_one = sum(truth.decode_run(16, 1600 + 16 * i, 3200 + 16 * i, 1) for i in range(37))
    assert truth.decode_run(16, 1600, 3200, 37) == pytest.approx(one_by_one)
    # Only the totals of runs of iterations measured (vLLM): the same coefficients come back.
    runs = [steps[i::7] for i in range(7)] + [steps[i::11] for i in range(11)]
    totals = [sum(truth.iteration(s) for s in run) for run in runs]
    from_totals = fit_step_cost_to_totals(runs, totals)
    for name in (*fitted_names, "per_prefill_padded"):
        assert getattr(from_totals, name) == pytest.approx(getattr(truth, name), rel=1e-6), name


def test_a_simulated_iteration_spreads_its_work_over_the_engines():
    """The simulator's engines share one clock: an iteration's decode rows and its admission's
    prefills split evenly over them, as vLLM's router spreads requests."""
    shape = ModelShape.of("Qwen/Qwen3-8B-Base")
    one, four = (Pricing(shape, H100, Layout("disaggregated", 4, engines=n)) for n in (1, 4))
    admission = EngineStep(0, 0, 1024, 1024 * 3000, 1024 * 3000 * 3001 // 2)
    quarter = EngineStep(0, 0, 256, 256 * 3000, 256 * 3000 * 3001 // 2)
    assert four.iteration(admission) == pytest.approx(one.iteration(quarter))
    assert four.iteration(admission) < one.iteration(admission) / 3.5  # compute-bound prefill
    assert four.decode_run(1024, 1024 * 2000, 0, 10) == pytest.approx(
        one.decode_run(256, 256 * 2000, 0, 10)
    )
