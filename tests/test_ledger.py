"""The cost ledger: phases add up to wall time x devices held; tokens are counted by kind."""

from pathlib import Path

import pytest
import torch

from rollverify.config import load_config
from rollverify.cost.ledger import PHASES, CostLedger, DeviceLayout
from rollverify.cost.overlap import both_busy_seconds, busy_seconds, clipped
from rollverify.rollout.trajectory import Trajectory
from rollverify.training.cost_settings import device_layout


def test_phases_and_idle_add_up_to_wall_time_times_devices_held():
    ledger = CostLedger(DeviceLayout(trainer=4, engines=4))
    for phase, seconds in [("rollout", 10.0), ("train", 5.0), ("sync", 1.0), ("verify", 0.5)]:
        ledger.add_phase(phase, seconds)
    assert ledger.wall_seconds == 16.5
    assert ledger.total_device_seconds == pytest.approx(16.5 * 8)
    assert ledger.device_seconds["rollout"] == 40.0  # the 4 engine GPUs
    assert ledger.device_seconds["sync"] == 8.0  # all 8
    assert ledger.device_seconds["idle"] == pytest.approx(10 * 4 + 5 * 4 + 0.5 * 4)
    metrics = ledger.metrics()
    assert metrics["cost_device_days"] == pytest.approx(16.5 * 8 / 86400)
    assert {f"cost_{p}_device_seconds" for p in (*PHASES, "idle")} <= set(metrics)


def test_in_process_engine_shares_the_trainer_device():
    ledger = CostLedger(DeviceLayout(trainer=1, engines=0))
    ledger.add_phase("rollout", 3.0)
    ledger.add_phase("eval", 1.0)
    assert ledger.device_seconds["idle"] == 0.0 and ledger.total_device_seconds == 4.0
    with pytest.raises(ValueError, match="unknown phase"):
        ledger.add_phase("lunch", 1.0)


def test_round_trips_through_json_dict():
    ledger = CostLedger(DeviceLayout(2, 1))
    ledger.add_phase("train", 2.0)
    ledger.add_tokens(generated=10, kept=7, discarded=3, regenerated=2)
    assert CostLedger.from_dict(ledger.to_dict()) == ledger


def test_layout_comes_from_the_config():
    assert device_layout(load_config(overrides={"rollout.engine": "hf"})) == DeviceLayout(1, 0)
    gpu = load_config(
        overrides={
            "rollout.engine": "vllm",
            "vllm.engines": 4,
            "vllm.tensor_parallel_size": 2,
            "rollout.slots": 64,
            "train.processes": 8,
        }
    )
    assert device_layout(gpu) == DeviceLayout(trainer=8, engines=8)


def test_regenerated_tokens_are_the_ones_below_the_high_water_mark():
    trajectory = Trajectory(prompt_ids=torch.tensor([1]), group_id=0, sample_index=0)
    assert trajectory.extend([5, 6, 7, 8], [0.0] * 4, version=0) == 0
    trajectory.truncate(1)
    assert trajectory.extend([5, 6], [0.0] * 2, version=1) == 2  # positions 1, 2 again
    assert trajectory.extend([7, 8, 9], [0.0] * 3, version=1) == 1  # position 3 again, 4 new
    assert trajectory.high_water == 6


def test_phases_and_tokens_accumulate_over_calls():
    ledger = CostLedger(DeviceLayout(trainer=2, engines=1))
    for _ in range(3):
        ledger.add_phase("train", 1.5)
        ledger.add_phase("checkpoint", 0.5)  # every device waits for the write
        ledger.add_tokens(generated=10, kept=6, discarded=4)
    ledger.add_tokens(regenerated=2)
    assert ledger.device_seconds["train"] == pytest.approx(9.0)
    assert ledger.device_seconds["checkpoint"] == pytest.approx(4.5)
    assert ledger.device_seconds["idle"] == pytest.approx(4.5)  # the engine during training
    assert ledger.wall_seconds == pytest.approx(6.0)
    assert ledger.tokens == {"generated": 30, "kept": 18, "discarded": 12, "regenerated": 2}


def test_metrics_and_the_stored_ledger_use_the_documented_names():
    ledger = CostLedger(DeviceLayout(trainer=1, engines=1))
    ledger.add_phase("rollout", 43_200.0)  # half a day on the engine, the trainer idle
    ledger.add_tokens(generated=5)
    metrics = ledger.metrics()
    assert metrics["cost_device_seconds"] == 86_400.0
    assert metrics["cost_device_days"] == 1.0
    assert metrics["cost_wall_seconds"] == 43_200.0
    assert metrics["tokens_generated_total"] == 5.0
    assert ledger.to_dict()["device_days"] == 1.0
    documented = (Path(__file__).parents[1] / "docs" / "metrics.md").read_text()
    assert all(f"`{name}`" in documented for name in metrics), "docs/metrics.md lists them"


def test_a_stored_ledger_without_a_newer_phase_reads_it_as_zero():
    stored = CostLedger(DeviceLayout(1, 0)).to_dict()
    del stored["device_seconds"]["checkpoint"]  # written before that phase existed
    assert CostLedger.from_dict(stored).device_seconds["checkpoint"] == 0.0


def test_measurement_is_kept_apart_from_the_runs_cost():
    ledger = CostLedger(DeviceLayout(trainer=2, engines=1))
    ledger.add_phase("train", 3.0)
    ledger.add_measurement(1.5)  # scoring only to log a metric
    assert ledger.device_seconds["measure"] == 3.0  # the trainer's two devices
    assert ledger.wall_seconds == 3.0 and ledger.total_device_seconds == 9.0  # 3 x 3 held
    metrics = ledger.metrics()
    assert metrics["cost_measure_device_seconds"] == 3.0
    assert metrics["cost_device_days"] == 9.0 / 86_400
    assert CostLedger.from_dict(ledger.to_dict()) == ledger


def test_modeled_gpu_days_are_the_modeled_wall_times_the_layouts_gpus():
    ledger = CostLedger(DeviceLayout(1, 0), modeled_gpus=8)
    ledger.add_modeled({"rollout": 3_600.0, "train": 1_800.0, "measure": 999.0})
    ledger.add_modeled({"rollout": 3_600.0, "sync": 0.0})
    metrics = ledger.metrics()
    assert metrics["modeled_rollout_seconds"] == 7_200.0
    assert metrics["modeled_wall_seconds"] == 9_000.0  # measurement left out
    assert metrics["modeled_gpu_days"] == pytest.approx(9_000.0 * 8 / 86_400)
    assert CostLedger.from_dict(ledger.to_dict()) == ledger
    assert "modeled_gpu_days" not in CostLedger(DeviceLayout(1, 0)).metrics()  # nothing modeled


def test_an_overlapped_step_books_each_sides_busy_seconds_and_the_rest_as_idle():
    """The engine beside the trainer (a thread of its own: one device each): a 10 s step in
    which the engine worked 8 s and the trainer 6 s (train 4, verify 1, sync 1), 5 s of it at
    once."""
    ledger = CostLedger(DeviceLayout(trainer=1, engines=1))
    ledger.add_overlapped_step(10.0, 8.0, 6.0, 5.0, {"train": 4.0, "verify": 1.0, "sync": 1.0})
    assert ledger.wall_seconds == 10.0 and ledger.total_device_seconds == pytest.approx(20.0)
    assert ledger.device_seconds["rollout"] == 8.0 and ledger.device_seconds["idle"] == 6.0
    metrics = ledger.metrics()
    assert metrics["cost_overlap_seconds"] == 5.0
    assert metrics["cost_engine_idle_share"] == pytest.approx(0.2)
    assert metrics["cost_trainer_idle_share"] == pytest.approx(0.4)
    assert CostLedger.from_dict(ledger.to_dict()) == ledger
    assert "cost_overlap_seconds" not in CostLedger(DeviceLayout(1, 0)).metrics()
    threaded = {"rollout.engine": "hf", "rollout.mode": "async", "rollout.lockstep": False}
    assert device_layout(load_config(overrides=threaded)) == DeviceLayout(1, 1)


def test_both_busy_is_the_length_of_the_intervals_intersection():
    engine = [(0.0, 2.0), (3.0, 5.0), (1.0, 2.5)]  # overlapping pieces: 0-2.5, 3-5
    trainer = [(2.0, 4.0), (4.5, 9.0)]
    assert busy_seconds(engine) == 4.5 and busy_seconds(trainer) == 6.5
    assert both_busy_seconds(engine, trainer) == pytest.approx(0.5 + 1.0 + 0.5)
    assert both_busy_seconds(trainer, engine) == both_busy_seconds(engine, trainer)
    assert clipped(engine, 1.0, 4.0) == [(1.0, 2.0), (3.0, 4.0), (1.0, 2.5)]
