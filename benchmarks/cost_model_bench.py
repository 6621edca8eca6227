"""Does the simulator predict what the hf engine does on this machine? Fit, then predict.

    .venv/bin/python benchmarks/cost_model_bench.py [--steps 8] [--threads 1]

1. The hf engine runs the embedded default's rollouts (64 slots, B=8, G=8, the chain task):
   synchronous, then partial, `--steps` steps each, with a weight sync between steps. It times
   every engine iteration (poll) beside the iteration's trace row.
2. A `cpu` step-cost profile (costmodel.LinearStepCost) is fitted to those iterations by least
   squares.
3. The simulator (engines/simulated.py) runs the same schedules with that profile and the
   lengths the real rollouts produced. It predicts each schedule's rollout seconds, and so the
   partial / synchronous throughput ratio.
Goal (issue 12): predicted within 10% of measured. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from provenance import provenance

from rollverify.config import load_config
from rollverify.costmodel import fit_step_cost
from rollverify.engines.simulated import SimulatedEngine
from rollverify.rollout import RolloutState, collect


def measured(engine, task_factory, config, partial: bool, steps: int) -> dict:
    """Real rollouts: per-step collect seconds, each poll's (trace row, seconds), lengths."""
    polls: list[tuple] = []
    original = engine.poll

    def timed():
        start = time.perf_counter()
        finished = original()
        polls.append((engine._trace[-1], time.perf_counter() - start))
        return finished

    engine.poll = timed
    source, state = task_factory(), RolloutState()
    rollout, seconds, lengths = config.rollout, [], {}
    try:
        with engine.seeded(config.train.seed):
            for version in range(1, steps + 1):
                start = time.perf_counter()
                result = collect(
                    engine,
                    source,
                    state,
                    batch_groups=rollout.batch_groups,
                    group_size=rollout.group_size,
                    partial=partial,
                )
                seconds.append(time.perf_counter() - start)
                for trajectory in result.trajectories():
                    lengths[trajectory.key] = len(trajectory)
                engine.load_weights(engine.model.state_dict().items(), version=version)
            for trajectory in [*engine.pause(), *state.cache]:
                if trajectory.finished:
                    lengths[trajectory.key] = len(trajectory)
    finally:
        engine.poll = original
        engine.take_trace()
    samples = steps * rollout.batch_groups * rollout.group_size
    return {"seconds": seconds, "polls": polls, "lengths": lengths, "samples": samples}


def simulated(cost, task_factory, config, partial: bool, steps: int, lengths: dict) -> list:
    rollout = config.rollout
    engine = SimulatedEngine(
        cost,
        slots=rollout.slots,
        max_new_tokens=rollout.max_new_tokens,
        lengths=lambda g, i: lengths.get((g, i), rollout.max_new_tokens),
    )
    source, state, seconds = task_factory(), RolloutState(), []
    for version in range(1, steps + 1):
        start = engine.clock
        collect(
            engine,
            source,
            state,
            batch_groups=rollout.batch_groups,
            group_size=rollout.group_size,
            partial=partial,
        )
        seconds.append(engine.clock - start)
        engine.load_weights([], version=version)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per schedule")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollverify.training.run import make_engine, make_task

    config = load_config(overrides={"rollout.engine": "hf"})
    tokenizer = AutoTokenizer.from_pretrained(config.model_path())
    engine = make_engine(
        config, AutoModelForCausalLM.from_pretrained(config.model_path()), tokenizer
    )

    def task_factory():
        return make_task(config, tokenizer)

    # Interleaved repeats: both schedules see the same machine state. Seeded sampling makes the
    # repeats the same rollouts: only their timing differs.
    repeats: dict[str, list[dict]] = {"synchronous": [], "partial": []}
    for _ in range(args.repeats):
        for name, partial in (("synchronous", False), ("partial", True)):
            repeats[name].append(measured(engine, task_factory, config, partial, args.steps))
    runs = {name: results[0] for name, results in repeats.items()}
    polls = [p for results in repeats.values() for run in results for p in run["polls"]]
    cost = fit_step_cost([step for step, _ in polls], [s for _, s in polls])
    errors = [abs(cost.iteration(step) - seconds) for step, seconds in polls]
    predicted = {
        name: simulated(
            cost, task_factory, config, name == "partial", args.steps, runs[name]["lengths"]
        )
        for name in runs
    }

    def ratio(seconds: dict[str, list[float]]) -> float:
        # samples/s partial over synchronous: equal samples, so the inverse ratio of seconds
        return sum(seconds["synchronous"]) / sum(seconds["partial"])

    ratios = [
        ratio({name: repeats[name][i]["seconds"] for name in repeats}) for i in range(args.repeats)
    ]
    measured_ratio = statistics.median(ratios)
    predicted_ratio = ratio(predicted)
    report = {
        "benchmark": "cost_model_bench",
        "profile": {"kind": "cpu (LinearStepCost)", **cost.__dict__},
        "fit": {
            "iterations": len(polls),
            "median_abs_error_seconds": statistics.median(errors),
            "mean_iteration_seconds": statistics.fmean(t for _, t in polls),
            "prefill_iterations": sum(step.prefill_rows > 0 for step, _ in polls),
        },
        "measured_rollout_seconds": {
            name: [sum(run["seconds"]) for run in results] for name, results in repeats.items()
        },
        "measured_ratios_per_repeat": ratios,
        "predicted_rollout_seconds": {k: sum(v) for k, v in predicted.items()},
        "measured_partial_over_synchronous": measured_ratio,
        "predicted_partial_over_synchronous": predicted_ratio,
        "relative_error": abs(predicted_ratio - measured_ratio) / measured_ratio,
        "goal_relative_error": 0.10,
        "steps": args.steps,
        "repeats": args.repeats,
        "provenance": provenance(config.to_dict()),
    }
    report["goal_met"] = report["relative_error"] <= report["goal_relative_error"]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
