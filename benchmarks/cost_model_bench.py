"""Does the simulator predict what a real engine does on this machine? Fit, then predict.

    .venv/bin/python benchmarks/cost_model_bench.py --engine hf|vllm [--steps 8] [--repeats 5]

1. The engine runs the embedded default's rollouts (64 slots, B=8, G=8, the chain task):
   after one warm-up step, synchronous, then partial, `--steps` steps each, with a weight sync
   between steps, repeated and interleaved. Each step's seconds are measured beside its trace
   (engine iterations).
2. A `cpu` step-cost profile (costmodel.LinearStepCost) is fitted by least squares:
   - `iterations`: every iteration of both schedules that the engine timed in its own trace
     (trace.EngineStep.seconds: the hf engine times its polls; vLLM's stat logger gives each
     iteration's time since the previous one while requests run);
   - `synchronous steps`: the total seconds of each synchronous step on the sums of its
     iterations' columns (no iteration timing needed). Partial rollout is then out of sample.
3. The simulator (rollout/engines/simulated.py) runs both schedules with each profile and the
   lengths the real rollouts produced, admitting as the engine does (hf: in batches of slots /
   8; vLLM: into every free slot). It predicts each schedule's rollout seconds, and so the partial /
   synchronous throughput ratio.
Goal: predicted within 10% of measured. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from provenance import provenance

from rollverify.config import load_config
from rollverify.cost.costmodel import fit_step_cost, fit_step_cost_to_totals
from rollverify.rollout.engines.simulated import SimulatedEngine
from rollverify.rollout.schedules import RolloutState, collect

GOAL = 0.10


def measured(engine, weights, task_factory, config, partial: bool, steps: int) -> dict:
    """Real rollouts: per-step seconds and trace (timed iterations included), lengths."""
    source, state = task_factory(), RolloutState()
    rollout, seconds, traces, lengths = config.rollout, [], [], {}
    engine.take_trace()
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
            traces.append(engine.take_trace())
            for trajectory in result.trajectories():
                lengths[trajectory.key] = len(trajectory)
            engine.load_weights(weights(), version=version)
        for trajectory in [*engine.pause(), *state.cache]:
            if trajectory.finished:
                lengths[trajectory.key] = len(trajectory)
    engine.take_trace()
    return {"seconds": seconds, "traces": traces, "lengths": lengths}


def simulated(cost, task_factory, config, partial: bool, steps: int, lengths: dict, admit) -> list:
    rollout = config.rollout
    engine = SimulatedEngine(
        cost,
        slots=rollout.slots,
        max_new_tokens=rollout.max_new_tokens,
        lengths=lambda g, i: lengths.get((g, i), rollout.max_new_tokens),
        admit_batch=admit,
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


def ratio(seconds: dict[str, list[float]]) -> float:
    """Samples/s partial over synchronous: equal samples, so the inverse ratio of seconds."""
    return sum(seconds["synchronous"]) / sum(seconds["partial"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved runs per schedule")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollverify.training.parts import engine_running, make_engine, make_task

    config = load_config(overrides={"rollout.engine": args.engine})
    tokenizer = AutoTokenizer.from_pretrained(config.model_path())
    model = AutoModelForCausalLM.from_pretrained(config.model_path())
    engine = make_engine(config, model, tokenizer)

    def task_factory():
        return make_task(config, tokenizer)

    # Interleaved repeats: both schedules see the same machine state. Seeded sampling makes the
    # repeats the same rollouts: only their timing differs.
    repeats: dict[str, list[dict]] = {"synchronous": [], "partial": []}
    with engine_running(engine, config):
        # warm-up, not measured: an engine's first iterations compile and allocate (vLLM's
        # first step took 2.5 s more than its iterations' times, once)
        measured(engine, model.state_dict().items, task_factory, config, False, 1)
        for _ in range(args.repeats):
            for name, partial in (("synchronous", False), ("partial", True)):
                run = measured(
                    engine, model.state_dict().items, task_factory, config, partial, args.steps
                )
                repeats[name].append(run)
    runs = {name: results[0] for name, results in repeats.items()}
    ratios = [
        ratio({name: repeats[name][i]["seconds"] for name in repeats}) for i in range(args.repeats)
    ]
    measured_ratio = statistics.median(ratios)

    iterations = [step for r in repeats.values() for run in r for t in run["traces"] for step in t]
    timed = [step for step in iterations if step.seconds > 0]
    fits = {"iterations": fit_step_cost(timed, [step.seconds for step in timed])}
    synchronous = [
        (trace, seconds)
        for run in repeats["synchronous"]
        for trace, seconds in zip(run["traces"], run["seconds"], strict=True)
    ]
    fits["synchronous steps"] = fit_step_cost_to_totals(
        [trace for trace, _ in synchronous], [seconds for _, seconds in synchronous]
    )
    admit = None if args.engine == "hf" else 1  # the engines' admission (None: slots / 8)
    predictions = {}
    for fit, cost in fits.items():
        predicted = {
            name: simulated(
                cost,
                task_factory,
                config,
                name == "partial",
                args.steps,
                runs[name]["lengths"],
                admit,
            )
            for name in runs
        }
        error = abs(ratio(predicted) - measured_ratio) / measured_ratio
        predictions[fit] = {
            "profile": cost.__dict__,
            "predicted_rollout_seconds": {k: sum(v) for k, v in predicted.items()},
            "predicted_step_seconds": predicted,
            "predicted_partial_over_synchronous": ratio(predicted),
            "relative_error": error,
            "goal_met": error <= GOAL,
        }
    cost = fits["iterations"]
    predictions["iterations"] |= {
        "iterations": len(iterations),
        "timed": len(timed),
        "timed_seconds_over_rollout_seconds": sum(s.seconds for s in timed)
        / sum(sum(run["seconds"]) for r in repeats.values() for run in r),
        "mean_iteration_seconds": statistics.fmean(s.seconds for s in timed),
        "median_abs_iteration_error_seconds": statistics.median(
            abs(cost.iteration(s) - s.seconds) for s in timed
        ),
    }
    report = {
        "benchmark": "cost_model_bench",
        "engine": args.engine,
        "measured_rollout_seconds": {
            name: [sum(run["seconds"]) for run in results] for name, results in repeats.items()
        },
        "measured_step_seconds": {name: run["seconds"] for name, run in runs.items()},
        "timed_step_seconds": {
            name: [sum(step.seconds for step in trace) for trace in run["traces"]]
            for name, run in runs.items()
        },
        "measured_ratios_per_repeat": ratios,
        "measured_partial_over_synchronous": measured_ratio,
        "fits": predictions,
        "goal_relative_error": GOAL,
        "steps": args.steps,
        "repeats": args.repeats,
        "threads": args.threads,
        "provenance": provenance(config.to_dict()),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
