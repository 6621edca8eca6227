"""CUDA vLLM: the sidecar on a GPU, in bf16 as the real-scale config runs it. Skipped (with the
reason in pytest's summary) where no GPU is present; the config checks run everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rollverify.config import load_config
from rollverify.infra.paths import ASSETS

GPU_CONFIG = Path(__file__).parents[1] / "experiments" / "qwen3-8b-dapo-math.yaml"
MODEL = str(ASSETS / "models" / "tiny-qwen3-chain")

needs_gpu = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU here: the CUDA-vLLM tests need one"
)


def test_gpu_config_gives_each_engine_what_vllm_needs():
    from rollverify.training.parts import vllm_settings

    config = load_config(GPU_CONFIG)
    settings = vllm_settings(config)
    kwargs = settings.engine_kwargs(seed=0)
    assert config.engine() == "vllm" and kwargs["dtype"] == "bfloat16"
    assert kwargs["max_num_seqs"] * config.vllm.engines == config.rollout.slots
    assert kwargs["max_model_len"] >= config.rollout.max_new_tokens + 1024  # prompt + response
    assert kwargs["tensor_parallel_size"] == config.vllm.tensor_parallel_size
    assert kwargs["gpu_memory_utilization"] == config.vllm.gpu_memory_utilization
    assert kwargs["enforce_eager"] is False  # CUDA graphs on GPUs
    assert config.vllm.sync_check_tolerance >= 0.05  # bf16 rounding


@pytest.fixture(scope="module")
def gpu_engine():
    pytest.importorskip("vllm")
    from rollverify.rollout.engines.ray_runtime import ensure_ray, stop_ray
    from rollverify.rollout.engines.vllm_engine import VLLMEngine, VLLMSettings

    ensure_ray()
    settings = VLLMSettings(
        model=MODEL,
        dtype="bfloat16",
        max_model_len=512,
        slots_per_engine=16,
        gpu_memory_utilization=0.3,
        enforce_eager=False,
    )
    engine = VLLMEngine(settings, max_new_tokens=64, temperature=1.0)
    engine.start()
    yield engine
    engine.shutdown()
    stop_ray()


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.ray
@needs_gpu
def test_gpu_engine_samples_log_probs_and_syncs_weights_in_bf16(gpu_engine):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollverify.rollout.engines.protocol import probe_logprobs_of
    from rollverify.rollout.trajectory import Trajectory
    from tests.tiny import teacher_forced_logprobs

    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    prompts = [torch.tensor(tokenizer(f"Q:{i}+3x{i + 4}=")["input_ids"]) for i in range(8)]
    trajectories = [Trajectory(p, i, 0) for i, p in enumerate(prompts)]
    gpu_engine.submit(trajectories)
    while gpu_engine.has_work:
        gpu_engine.poll()
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.bfloat16).eval()
    for trajectory in trajectories:
        assert len(trajectory.behavior_logprobs) == len(trajectory) > 0
        gap = (trajectory.behavior_logprobs - teacher_forced_logprobs(model, trajectory)).abs()
        assert gap.mean() < 0.05

    probe = torch.cat(prompts).tolist()
    moved = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        for parameter in moved.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    gpu_engine.load_weights(moved.state_dict().items(), version=1)
    after = gpu_engine.probe_logprobs(probe)[0]
    assert (after - probe_logprobs_of(moved, probe)).abs().max() < 0.1


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.ray
@needs_gpu
def test_gpu_engine_pause_keeps_partial_tokens_and_resume_continues(gpu_engine):
    from transformers import AutoTokenizer

    from rollverify.rollout.trajectory import Trajectory

    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    prompt = torch.tensor(tokenizer("Q:7+3x30=")["input_ids"])
    trajectories = [Trajectory(prompt, 0, i) for i in range(8)]
    gpu_engine.submit(trajectories)
    gpu_engine.poll(wait_seconds=0.05)
    gpu_engine.pause()
    kept = {t.sample_index: t.token_ids.tolist() for t in trajectories}
    unfinished = [t for t in trajectories if not t.finished]
    gpu_engine.submit(unfinished)
    while gpu_engine.has_work:
        gpu_engine.poll()
    for t in trajectories:
        assert t.token_ids.tolist()[: len(kept[t.sample_index])] == kept[t.sample_index]
        assert len(t.behavior_logprobs) == len(t) == len(t.versions)


def test_the_engines_get_the_configured_weight_sync():
    from rollverify.training.parts import vllm_settings

    config = load_config(GPU_CONFIG)
    assert vllm_settings(config).weight_sync == "collective"  # the default, and the 8B config's
    config.vllm.weight_sync = "object_store"
    assert vllm_settings(config).weight_sync == "object_store"


# NCCL allows one rank per GPU: the trainer's rank 0 and the engine's worker need two.
needs_two_gpus = pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="a collective weight sync over NCCL needs 2 GPUs"
)


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.ray
@needs_two_gpus
def test_collective_weight_sync_over_nccl_makes_the_engine_score_like_the_trainer(gpu_engine):
    import os
    from dataclasses import replace

    import ray
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollverify.rollout.engines.protocol import probe_logprobs_of
    from rollverify.training.weight_sync import WeightStream

    engine_gpus = ray.get(
        gpu_engine._actors[0].__ray_call__.remote(lambda _: os.environ["CUDA_VISIBLE_DEVICES"])
    )
    taken = {int(gpu) for gpu in engine_gpus.split(",")}
    trainer_gpu = min(set(range(torch.cuda.device_count())) - taken)
    torch.cuda.set_device(trainer_gpu)  # rank 0's: another GPU than the engine's
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    probe = tokenizer("Q:7+3x30= 7 10 13 16 19")["input_ids"]
    moved = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.bfloat16).cuda().eval()
    with torch.no_grad():
        for parameter in moved.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    gpu_engine.settings = replace(gpu_engine.settings, weight_sync="collective")
    gpu_engine.load_weights(WeightStream(moved, "bfloat16"), version=1)
    after = gpu_engine.probe_logprobs(probe)[0]
    assert gpu_engine._weights is None  # nothing through the object store
    assert (after - probe_logprobs_of(moved, probe).cpu()).abs().max() < 0.1
