"""benchmarks/gpu_check.py: its fit recovers known costs (with and without scipy), and at toy
size on this CPU it writes a profile that rvctl simulate prices with (the GPU run itself needs
a GPU)."""

from __future__ import annotations

import builtins
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rollverify.config import load_config
from rollverify.cost.costmodel.profile import Profile
from rollverify.experiments.simulate import simulate
from rollverify.experiments.simulate_settings import Settings
from tests.cli import run_rvctl

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "gpu_check.py"


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("scipy", [True, False])
def test_the_fit_recovers_a_known_cost_and_keeps_it_non_negative(scipy, monkeypatch):
    module = gpu_check()
    if not scipy:  # a bare CUDA image may have no scipy: the fallback must agree
        real_import = builtins.__import__

        def no_scipy(name, *args, **kwargs):
            if name.startswith("scipy"):
                raise ImportError(name)
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_scipy)
    rng = np.random.default_rng(0)
    rows = rng.integers(1, 64, 40)
    context = rows * rng.integers(100, 8000, 40)
    truth = np.array([3e-3, 2e-5, 4e-9])
    columns = np.column_stack([np.ones(40), rows, context])
    # and a column whose unconstrained fit is negative (the seconds fall a little with it):
    # a cost that falls with more work is not one, so the fit sets it to 0
    useless = rng.integers(0, 100, 40)
    seconds = (columns @ truth - 1e-6 * useless) * (1 + rng.normal(0, 0.01, 40))
    points = [([*c, u], s) for c, u, s in zip(columns.tolist(), useless, seconds, strict=True)]
    values, errors, residual = module.fit(points)
    np.testing.assert_allclose(values[:3], truth, rtol=0.1)
    assert all(v >= 0 for v in values) and values[3] == 0
    assert residual < 0.05
    assert errors[0] is not None and errors[0] < 0.1 * truth[0]


@pytest.mark.slow
def test_at_toy_size_it_writes_a_profile_simulate_prices_with(tmp_path, monkeypatch, capsys):
    out = tmp_path / "gpu_profile.json"
    command = [sys.executable, str(SCRIPT), "--toy", "--device", "cpu", "--repeats", "2"]
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    profile = Profile.load(out)  # the format rvctl calibrate writes
    assert profile.machine.endswith("(gpu_check)") and profile.model == "Qwen/Qwen3-8B-Base"
    assert profile.samples["engine"] == len(summary["points"]["engine"]) == 6 + 5
    terms = {t.name: t.value for t in profile.engine}
    # decode and prefill cost something (on a loaded CPU, which term takes a toy decode's few
    # milliseconds is up to the noise)
    assert terms["overhead"] + terms["per_row"] + terms["per_context"] > 0
    assert terms["prefill_overhead"] + terms["per_prefill_row"] + terms["per_prefill_token"] > 0
    assert {t.name for t in profile.trainer} == {
        "train_overhead",
        "train_per_token",
        "train_per_attended",
        "score_per_token",
        "score_per_attended",
    }
    assert profile.train_seconds(64, 64 * 65 / 2) > 0
    assert summary["achieved"] == profile.achieved  # written, and read back by Profile.load
    # a toy decode on a CPU is nearly all overhead, and its few milliseconds go to the step
    # overhead or the bandwidth as the noise falls (usually no bandwidth is fitted): either.
    # A toy forward+backward is as short: on a CPU shared with other tests its FLOPs term can
    # fit to zero, so one throughput at least (their values: test_the_achieved_figures_*)
    assert {"forward_flops", "train_flops"} & set(profile.achieved)
    assert {"step_overhead", "bandwidth"} & set(profile.achieved)
    assert all(value > 0 for value in profile.achieved.values())
    assert "efficiency" not in json.loads(out.read_text())  # no GPU: no peaks to divide by
    args = ["simulate", "--profile", str(out), "--steps", "2", "--context", "64", "-f", "json"]
    result = run_rvctl(args, monkeypatch, capsys)
    assert result.returncode == 0, result.stderr
    assert {row["gpu"] for row in json.loads(result.stdout)} == {profile.machine}
    # it times no weight sync: simulate prices sync with its roofline, not as free
    settings = Settings(methods=("grpo",), contexts=(64,), steps=2, profile=profile)
    (simulated,) = simulate(load_config(), settings)
    assert simulated.seconds["sync"] > 0


# the device _timings() makes its timings on
BANDWIDTH, STEP_OVERHEAD, FORWARD_FLOPS, TRAIN_FLOPS = 3e11, 2e-3, 2e13, 8e12


def _timings(check, model) -> tuple[list, list]:
    """Engine and train points timed by a device of known figures (the constants above)."""
    config, parameters = model.config, sum(p.numel() for p in model.parameters())
    kv = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 4
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim
    weights = parameters * 4  # fp32 on the CPU

    def flops(tokens, attended):
        return 2 * parameters * tokens + attention * attended

    def decode(rows, context):
        kv_read = rows * (context + 1)
        return [1.0, rows, kv_read, 0, 0, 0, 0, 0], STEP_OVERHEAD + (
            weights + kv_read * kv
        ) / BANDWIDTH

    def prefill(rows, tokens):
        work = flops(rows * tokens, rows * tokens * (tokens + 1) / 2)
        return [0, 0, 0, 0, 1.0, rows, rows * tokens, 0], 1e-3 + work / FORWARD_FLOPS

    engine = [decode(r, c) for r in (1, 8, 32) for c in (128, 1024)]
    engine += [prefill(r, t) for r, t in ((1, 64), (4, 256), (8, 512))]
    train = [
        ([1.0, t, t * (t + 1) / 2], 5e-3 + 3 * flops(t, t * (t + 1) / 2) / TRAIN_FLOPS)
        for t in (64, 256, 1024)
    ]
    return engine, train


def test_the_achieved_figures_are_what_made_the_timings():
    """Timings made from a known bandwidth, step overhead and FLOP/s come back as those."""
    check = gpu_check()
    model = check.build_model(toy=True, device="cpu")
    got = check.achieved(model, *_timings(check, model))
    assert got["bandwidth"] == pytest.approx(BANDWIDTH, rel=1e-6)
    assert got["step_overhead"] == pytest.approx(STEP_OVERHEAD, rel=1e-6)
    assert got["forward_flops"] == pytest.approx(FORWARD_FLOPS, rel=1e-6)
    assert got["train_flops"] == pytest.approx(TRAIN_FLOPS, rel=1e-6)


def test_on_a_known_gpu_it_writes_the_efficiency_factors(tmp_path, monkeypatch, capsys):
    """On a device named as rollverify's h200 the profile holds the achieved figures over the
    H200's peaks (hand-computed here), and Profile.efficiency(h200) reads back the same."""
    from rollverify.cost.costmodel.gpus import GPUS

    check = gpu_check()
    model = check.build_model(toy=True, device="cpu")
    engine, train = _timings(check, model)
    score = [([c[1], c[2]], t / 3) for c, t in train]
    monkeypatch.setattr(check, "engine_points", lambda *args: engine)
    monkeypatch.setattr(check, "trainer_points", lambda *args: {"train": train, "score": score})
    monkeypatch.setattr(check, "machine", lambda device: "NVIDIA H200 (gpu_check)")
    out = tmp_path / "h200.json"
    argv = ["gpu_check.py", "--toy", "--device", "cpu", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    check.main()
    printed = json.loads(capsys.readouterr().out)["efficiency"]
    written = json.loads(out.read_text())["efficiency"]
    assert printed == written
    assert written["gpu"] == "h200"
    assert written["bandwidth"] == pytest.approx(3e11 / 4.8e12, rel=1e-6)
    assert written["forward_flops"] == pytest.approx(2e13 / 989e12, rel=1e-6)
    assert written["train_flops"] == pytest.approx(8e12 / 989e12, rel=1e-6)
    assert written["step_overhead"] == pytest.approx(2e-3, rel=1e-6)  # seconds, as measured
    factors = Profile.load(out).efficiency(GPUS["h200"])
    for name in ("bandwidth", "forward_flops", "train_flops", "step_overhead"):
        assert getattr(factors, name) == pytest.approx(written[name], rel=1e-12)


def test_efficiency_needs_a_gpu_rollverify_knows_and_rollverify(monkeypatch):
    check = gpu_check()
    figures = {"bandwidth": 2.4e12, "train_flops": 4e14}
    h100 = check.efficiency("NVIDIA H100 80GB HBM3 (gpu_check)", figures)
    assert h100 == {"gpu": "h100", "bandwidth": 2.4e12 / 3.35e12, "train_flops": 4e14 / 989e12}
    assert check.efficiency("x86_64 CPU, 2 cores (gpu_check)", figures) is None
    real_import = builtins.__import__  # torch and transformers only: no factors, no failure

    def no_rollverify(name, *args, **kwargs):
        if name.startswith("rollverify"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_rollverify)
    assert check.efficiency("NVIDIA H200 (gpu_check)", figures) is None


def test_a_profiles_efficiency_is_what_it_achieved_over_the_gpus_peaks(tmp_path):
    from rollverify.cost.costmodel.gpus import GPUS, Efficiency

    h200 = GPUS["h200"]
    figures = {"bandwidth": 3.6e12, "step_overhead": 4e-3, "train_flops": 3.3e14}
    profile = Profile(
        "H200 (gpu_check)", "test", Profile.from_dict(_minimal()).engine, achieved=figures
    )
    efficiency = profile.efficiency(h200)
    assert efficiency.bandwidth == pytest.approx(3.6e12 / 4.8e12)
    assert efficiency.train_flops == pytest.approx(3.3e14 / 989e12)
    assert efficiency.step_overhead == 4e-3
    assert efficiency.forward_flops == Efficiency().forward_flops  # not measured: the default
    path = tmp_path / "p.json"
    profile.save(path)
    assert Profile.load(path).achieved == figures
    for bad in ({"bandwidth": -1.0}, {"latency": 1.0}, {"train_flops": float("nan")}):
        path.write_text(json.dumps(_minimal() | {"achieved": bad}))
        with pytest.raises(ValueError, match="achieved"):
            Profile.load(path)


def _minimal() -> dict:
    names = ["overhead", "per_row", "per_context", "per_padded", "prefill_overhead",
             "per_prefill_row", "per_prefill_token", "per_prefill_padded"]  # fmt: skip
    return {
        "format": 1,
        "machine": "m",
        "source": "s",
        "engine": [{"name": n, "value": 1e-3, "error": None} for n in names],
    }
