"""Partial vs synchronous rollout on the long-tail chain task, and our GRPO step vs stock TRL.

    .venv/bin/python benchmarks/rollout_bench.py [--engine hf|vllm] [--steps 8] [--repeats 3]

Part 1 (rollout): the same engine, slots and batch (B groups x G samples per step) run a
continuously fed sequence of steps under both schedules, interleaved run by run; between steps
the engine takes new weights (a version bump, as after an optimizer step). Reported per
schedule: trained samples/s and tokens/s (tokens of the B complete groups), slot utilization
(share of slot-steps that produced a token), and the ratio partial / synchronous.
Part 2 (step time): `rvctl train --method grpo` vs stock TRL GRPOTrainer (its own generation,
use_vllm=False) on the same model, task, batch and threads; mean seconds per optimizer step.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time

import torch

from rollverify.infra.quiet import quiet_environment

quiet_environment()  # before TRL loads

from provenance import provenance  # noqa: E402

from rollverify.config import load_config  # noqa: E402
from rollverify.rollout.engines.protocol import probe_logprobs_of  # noqa: E402
from rollverify.rollout.schedules import RolloutState, collect  # noqa: E402


def rollout_run(engine, model, config, partial: bool, steps: int, seed: int) -> dict:
    """`steps` rollout steps on a started engine; a weight sync (the real path) between steps."""
    from transformers import AutoTokenizer

    from rollverify.training.parts import make_task

    seeded = dataclasses.replace(config, train=dataclasses.replace(config.train, seed=seed))
    task = make_task(seeded, AutoTokenizer.from_pretrained(config.model_path()))
    state = RolloutState()
    rollout = config.rollout
    sync_seconds: list[float] = []
    sync_gaps: list[float] = []
    probe = torch.cat([p.prompt_ids for p in task.eval_problems()[:8]])[:64].tolist()
    trainer_probe = probe_logprobs_of(model, probe)

    def one_step(version: int):
        result = collect(
            engine,
            task,
            state,
            batch_groups=rollout.batch_groups,
            group_size=rollout.group_size,
            partial=partial,
        )
        start = time.perf_counter()
        engine.load_weights(model.state_dict().items(), version=version)
        sync_seconds.append(time.perf_counter() - start)
        # the training loop's check: engine and trainer score the same probe sequence
        sync_gaps.append((engine.probe_logprobs(probe) - trainer_probe).abs().max().item())
        return result

    with engine.seeded(seed):
        one_step(1)  # warm-up: the first step of partial rollout starts from an empty cache
        engine.reset_stats()
        busy_before = _busy_slot_seconds(engine)
        start = time.perf_counter()
        samples = tokens = 0
        for version in range(2, steps + 2):
            result = one_step(version)
            samples += sum(len(g) for g in result.groups)
            tokens += sum(len(t) for t in result.trajectories())
        seconds = time.perf_counter() - start
        busy = _busy_slot_seconds(engine) - busy_before if busy_before is not None else None
        engine.pause()  # drop this run's unfinished requests
        stats = engine.stats
    return {
        "seconds": seconds,
        "samples_per_second": samples / seconds,
        "trained_tokens_per_second": tokens / seconds,
        "generated_tokens_per_second": stats.tokens_generated / seconds,
        # hf: share of slot-steps that produced a token; vllm: share of slot-seconds in which
        # a request was running (the sidecar integrates min(running, slots) over time)
        "slot_utilization": (
            busy / (engine.slots * seconds) if busy is not None else stats.utilization(engine.slots)
        ),
        "sync_seconds_mean": statistics.mean(sync_seconds[1:]),
        "sync_logprob_gap_max": max(sync_gaps),
    }


def _busy_slot_seconds(engine) -> float | None:
    return engine.busy_slot_seconds() if hasattr(engine, "busy_slot_seconds") else None


def step_time_ours(config, steps: int) -> dict:
    """Seconds per step and per generated completion token of `rvctl train --method grpo`."""
    from rollverify.training.run import train

    times: list[float] = []
    tokens: list[float] = []
    batch = config.rollout.batch_groups * config.rollout.group_size

    def record(step: int, metrics: dict) -> None:
        if "train_seconds" in metrics:
            times.append(metrics["rollout_seconds"] + metrics["train_seconds"])
            tokens.append(metrics["response_length_mean"] * batch)

    train(config, on_step=record)
    return _per_step(times, tokens)


def _per_step(times: list[float], tokens: list[float]) -> dict:
    # step 1 pays one-time setup inside TRL; each side samples its own completions, so their
    # lengths differ: compare per generated token too.
    times, tokens = times[1:], tokens[1:]
    return {
        "step_seconds": statistics.mean(times),
        "completion_tokens_per_step": statistics.mean(tokens),
        "seconds_per_completion_token": sum(times) / sum(tokens),
    }


def step_time_stock_trl(config, steps: int) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from rollverify.tasks.chain import ChainTaskConfig, chain_reward, sample_problems

    tokenizer = AutoTokenizer.from_pretrained(config.model_path())
    model = AutoModelForCausalLM.from_pretrained(config.model_path())
    problems = sample_problems(256, seed=config.train.seed, config=ChainTaskConfig())
    dataset = Dataset.from_dict(
        {"prompt": [p.prompt for p in problems], "answer": [p.answer for p in problems]}
    )

    def reward(completions, answer, **_):
        return [chain_reward(c, a) for c, a in zip(completions, answer, strict=True)]

    rollout, train = config.rollout, config.train
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        max_steps=steps,
        report_to="none",
        save_strategy="no",
        per_device_train_batch_size=rollout.batch_groups * rollout.group_size,
        num_generations=rollout.group_size,
        max_completion_length=rollout.max_new_tokens,
        learning_rate=train.learning_rate,
        loss_type=train.loss_type,
        beta=train.beta,
        epsilon=train.epsilon,
        epsilon_high=train.epsilon_high,
        temperature=rollout.temperature,
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        logging_steps=1,
        disable_tqdm=True,
        seed=train.seed,
    )
    times: list[float] = []
    tokens: list[float] = []
    batch = rollout.batch_groups * rollout.group_size

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.start)

        def on_log(self, args, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                tokens.append(logs["completions/mean_length"] * batch)

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[Timer()],
    )
    trainer.remove_callback(PrinterCallback)  # stdout is for our JSON
    trainer.train()
    return _per_step(times, tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    parser.add_argument("--steps", type=int, default=8, help="measured steps per rollout run")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per schedule")
    parser.add_argument("--train-steps", type=int, default=6, help="steps for step-time part")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-step-time", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(overrides={"rollout.engine": args.engine})

    runs: dict[str, list[dict]] = {"synchronous": [], "partial": []}
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollverify.training.parts import engine_running, make_engine

    model = AutoModelForCausalLM.from_pretrained(config.model_path())
    tokenizer = AutoTokenizer.from_pretrained(config.model_path())
    engine = make_engine(config, model, tokenizer)
    started = time.perf_counter()
    with engine_running(engine, config):
        start_seconds = time.perf_counter() - started
        for repeat in range(args.repeats):
            for name, partial in (("synchronous", False), ("partial", True)):
                runs[name].append(rollout_run(engine, model, config, partial, args.steps, repeat))
                print(f"{name} run {repeat}: {runs[name][-1]}", file=sys.stderr)

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    report = {
        "benchmark": "rollout_bench",
        "engine": args.engine,
        "slots": config.rollout.slots,
        "batch_groups": config.rollout.batch_groups,
        "group_size": config.rollout.group_size,
        "steps_per_run": args.steps,
        "repeats": args.repeats,
        "threads": args.threads,
        "engine_start_seconds": start_seconds,
        "runs": runs,
        "median": {name: {key: median(name, key) for key in runs[name][0]} for name in runs},
        "partial_over_synchronous_samples_per_second": median("partial", "samples_per_second")
        / median("synchronous", "samples_per_second"),
        "partial_over_synchronous_trained_tokens_per_second": median(
            "partial", "trained_tokens_per_second"
        )
        / median("synchronous", "trained_tokens_per_second"),
        "goal": {"throughput_ratio": 2.0, "partial_slot_utilization": 0.9},
    }
    if not args.skip_step_time:
        with tempfile.TemporaryDirectory() as output:
            step_config = load_config(
                overrides={
                    "train.method": "grpo",
                    "train.steps": args.train_steps,
                    "train.eval_every": 0,
                    "task.eval_size": 8,
                    "output": output,
                    "train.threads": args.threads,
                    "rollout.engine": args.engine,
                }
            )
            ours = step_time_ours(step_config, args.train_steps)
            stock = step_time_stock_trl(step_config, args.train_steps)
            report["grpo_step"] = {
                "ours": ours,
                "stock_trl": stock,
                "stock_trl_over_ours_per_step": stock["step_seconds"] / ours["step_seconds"],
                "stock_trl_over_ours_per_token": stock["seconds_per_completion_token"]
                / ours["seconds_per_completion_token"],
                "config": step_config.to_dict(),
            }
    report["provenance"] = provenance(config.to_dict())  # at the end: measured_at is when done
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
