"""`rvctl simulate`: the cost of each method on GPUs, at any scale, from the real schedules on a
virtual clock (rollverify/experiments/simulate.py; the cost model: docs/cost-model.md)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rvctl import progress
from rvctl.options import ConfigOption, FormatOption, SetOption
from rvctl.output import Format, print_split, stderr, stdout

HEADERS = {  # the rich table's headers; json/csv/md keep the stable keys
    "context": "ctx",
    "modeled_gpu_days": "GPU-days",
    "modeled_speedup_vs_grpo": "vs grpo",
    "rollout_share": "rollout",
    "slot_utilization": "util",
    "tokens_generated": "tokens",
    "tokens_regenerated": "regen.",
    "switch_step": "switch@",
    "truncated_share": "cut",
    "preemptions": "preempt.",
    "tokens_recomputed": "recomp.",
    "staleness_max": "stale",
    "tool_calls": "calls",
}
# What each displayed column means, under its displayed name (printed for the columns shown)
MEANING = {
    "ctx": "the response budget (max new tokens)",
    "gpu": "the GPU priced",
    "GPU-days": "modeled GPU-days of the whole run, every GPU of the layout counted",
    "vs grpo": "the row's GPU-days over grpo's at the same budget (0.80x: 20% saved)",
    "rollout": "the share of the modeled time spent rolling out",
    "util": "the engines' slot utilization (busy slot-steps over all)",
    "tokens": "tokens generated",
    "regen.": "tokens generated again after verification cut them",
    "switch@": "the step of the switch to on-policy (-: none)",
    "cut": "the share of trained responses the budget cut",
    "preempt.": "rows the KV cache could not hold",
    "recomp.": "tokens those rows prefilled again",
    "stale": "the most versions a trained token lagged (async-eta<N>: at most N)",
    "calls": "tool calls made (--tool-calls)",
}
SHORT = ("method", "context", "modeled_gpu_days", "modeled_speedup_vs_grpo", "rollout_share")
SHORT += ("slot_utilization",)
SHORT += ("tokens_regenerated", "switch_step")  # the rest: --wide, or -f json


def shown(row: dict, wide: bool) -> dict:
    """A row's cells as the rich table shows them: the short columns unless `wide`, counts
    with thousands separators, shares in percent, the cost ratio as a factor."""
    cells = {}
    for key, value in row.items():
        if not (wide or key in SHORT):
            continue
        if value is None or isinstance(value, str):
            cells[key] = value
        elif key == "modeled_speedup_vs_grpo":
            cells[key] = f"{1 / value:.2f}x"
        elif key in ("rollout_share", "slot_utilization", "truncated_share"):
            cells[key] = f"{value:.0%}"
        elif key == "modeled_gpu_days":
            cells[key] = f"{value:,.2f}"
        else:
            cells[key] = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
    return cells


def _numbers(text: str, kind: type, option: str) -> tuple:
    try:
        return tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{option}: {text!r} is not a comma-separated list of numbers") from None


def simulate(
    config: ConfigOption = None,
    methods: Annotated[
        str, typer.Option(help="Comma-separated methods.")
    ] = "grpo,partial,rollverify",
    gpu: Annotated[
        str | None, typer.Option(help="a100, h100, h200, b200 (default: cost.gpu).")
    ] = None,
    context: Annotated[
        str, typer.Option(help="Response budgets (max new tokens), comma-separated.")
    ] = "8192",
    steps: Annotated[
        int | None, typer.Option(help="Training steps (default: train.steps).")
    ] = None,
    seeds: Annotated[int, typer.Option(help="Seeds of the response lengths.")] = 1,
    lengths: Annotated[
        str, typer.Option(help="Response lengths: lognormal:MEDIAN,SIGMA.")
    ] = "lognormal:1500,0.9",
    lengths_from: Annotated[
        Path | None, typer.Option(help="A run folder: sample its trained response lengths.")
    ] = None,
    end_median: Annotated[
        float | None,
        typer.Option(help="The median response length at the last step (default: no growth)."),
    ] = None,
    growth: Annotated[
        str, typer.Option(help="How the median moves to --end-median: linear or log.")
    ] = "linear",
    medians_from: Annotated[
        Path | None, typer.Option(help="A run folder: follow its median response length per step.")
    ] = None,
    acceptance: Annotated[
        float, typer.Option(help="Share of each cached trajectory a verification keeps.")
    ] = 0.95,
    acceptance_from: Annotated[
        Path | None, typer.Option(help="A finished run folder: follow its acceptance per step.")
    ] = None,
    ds: Annotated[
        str | None,
        typer.Option(
            help="With --acceptance-from: follow the acceptance the run's threshold grid logged "
            "for this ds (or auto:C), the curve rvctl plan prices.",
            show_default=False,
        ),
    ] = None,
    prompt_tokens: Annotated[int, typer.Option(help="Tokens per prompt.")] = 256,
    profile: Annotated[
        Path | None,
        typer.Option(help="A profile (rvctl calibrate) to price with (default: cost.profile)."),
    ] = None,
    async_eta: Annotated[
        str,
        typer.Option(
            "--async",
            help="Also price asynchronous training at these staleness bounds eta, comma-"
            "separated (rows async-eta<N>; a disaggregated layout).",
        ),
    ] = "",
    async_verify: Annotated[
        bool,
        typer.Option(
            help="With --async: also rows async-verify-eta<N>, which verify each trajectory "
            "before training it and regenerate what verification cuts."
        ),
    ] = False,
    keep_kv: Annotated[
        bool,
        typer.Option(help="Asynchronous: keep the stale KV cache on a weight update (PipelineRL)."),
    ] = False,
    kv_cache: Annotated[
        bool,
        typer.Option(
            help="Model the engines' KV-cache capacity and preemption (--no-kv-cache: unlimited)."
        ),
    ] = True,
    tool_calls: Annotated[
        str | None,
        typer.Option(
            help="Responses call a tool: PER_1K,MEDIAN_S,SIGMA,OUTPUT_TOKENS (calls per 1,000 "
            "tokens, Poisson; lognormal latency in seconds; tokens each call returns), e.g. "
            "2,1.0,1.0,64. Default: no calls."
        ),
    ] = None,
    reference: Annotated[
        bool,
        typer.Option(
            help="Run the exact model in Python (rollverify/rollout/engines/simulated.py), not "
            "compiled: the same table, ~7x slower; for checking the compiled engine."
        ),
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            help="Simulations run at once, one process each (default: the CPUs this process "
            "may use). Each is deterministic: the table is the same."
        ),
    ] = None,
    settings_: SetOption = None,
    format: FormatOption = Format.table,
    wide: Annotated[
        bool, typer.Option(help="Every column of the table (json/csv/md always carry them).")
    ] = False,
) -> None:
    """Simulate grpo, partial rollout and RollVerify at scale; print modeled GPU-days."""
    from rollverify.config import load_config, parse_settings
    from rollverify.cost.costmodel.profile import Profile
    from rollverify.experiments.simulate_settings import (
        Settings,
        check_fits,
        lengths_of_run,
        medians_of_run,
    )
    from rollverify.experiments.workers import worker_context

    # e.g. the engine / trainer split: --set vllm.engines=6 --set train.processes=2
    run_config = load_config(config, parse_settings(settings_))
    profile_path, option = (
        (profile, "--profile") if profile else (run_config.cost.profile, "cost.profile")
    )
    settings = Settings(
        methods=tuple(m.strip() for m in methods.split(",") if m.strip()),
        contexts=_numbers(context, int, "--context"),
        gpu=gpu or run_config.cost.gpu,
        steps=steps if steps is not None else run_config.train.steps,  # (0 is refused)
        seeds=seeds,
        prompt_tokens=prompt_tokens,
        lengths=replace(
            lengths_of_run(lengths_from) if lengths_from else _length_model(lengths),
            end_median=end_median,
            growth=growth,
            medians=medians_of_run(medians_from) if medians_from else (),
        ),
        acceptance=_acceptance(
            acceptance_from, ds, acceptance, max(1, steps or run_config.train.steps)
        ),
        profile=Profile.load(profile_path, option) if profile_path else None,
        kv_cache=kv_cache,
        asyncs=_numbers(async_eta, int, "--async"),
        keep_kv=keep_kv,
        async_verify=async_verify,
        tool_calls=_tool_call_model(tool_calls) if tool_calls else None,
        compiled=not reference,
    )
    settings.check()
    check_fits(run_config, settings)
    fitted = settings.profile.model if settings.profile else ""
    if fitted and fitted != run_config.model.path:
        stderr.print(
            f"warning: the profile was fitted to {fitted}; it prices {run_config.model.path} "
            "with that model's terms (calibrate a run of this model for its own)"
        )
    if workers is None:
        workers = len(os.sched_getaffinity(0))
    elif workers < 1:
        raise ValueError(f"--workers: must be >= 1, got {workers}")
    if workers > 1:  # the input is good: its server imports the simulator while this process does
        worker_context()
    from rollverify.experiments.simulate import simulate as run
    from rollverify.experiments.simulate_results import rows

    asyncs = len(settings.asyncs) * (2 if settings.async_verify else 1)
    total = (len(settings.methods) + asyncs) * len(settings.contexts) * settings.seeds
    if progress.plain():  # a log: a line per simulation done
        done = [0]

        def say(r) -> None:
            done[0] += 1
            progress.line(
                f"simulate {done[0]}/{total}: {r.method} @ {r.context}: {r.gpu_days:.3g} GPU-days"
            )

        results = run(run_config, settings, on_result=say, workers=workers)
    else:
        with Progress(
            TextColumn("[bold]simulate"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[last]}"),
            TimeElapsedColumn(),
            console=stderr,
        ) as bar:
            task = bar.add_task("simulate", total=total, last="")
            results = run(
                run_config,
                settings,
                on_result=lambda r: bar.update(
                    task, advance=1, last=f"{r.method} @ {r.context}: {r.gpu_days:.3g} GPU-days"
                ),
                workers=workers,
            )
    from rollverify.experiments.simulate_results import setting, verdicts

    table = rows(results)
    if format is not Format.table:
        print_split(table, format, "simulated", HEADERS, 2)
        return
    cells = [shown(row, wide) for row in table]
    print_split(cells, format, f"simulated: {setting(run_config, settings)}", HEADERS, 2)
    for line in verdicts(table):
        stdout.print(line, soft_wrap=True, markup=False, highlight=False)
    columns = [HEADERS.get(key, key) for key in cells[0] if key != "method"]
    meaning = "; ".join(f"{c}: {MEANING[c]}" for c in columns if c in MEANING)
    stderr.print(
        f"{meaning}. Modeled, not measured on a GPU: every constant and what the model leaves "
        "out are in docs/cost-model.md" + ("" if wide else "; every column: --wide"),
        markup=False,
        highlight=False,
    )


def _acceptance(run: Path | None, ds: str | None, fixed: float, steps: int) -> tuple:
    from rollverify.experiments.simulate_settings import acceptance_of_run

    if ds is not None and run is None:
        raise ValueError("--ds: follows a run's threshold grid; add --acceptance-from RUN")
    if ds is not None:
        from rollverify.experiments.plan import acceptance_of_point

        return acceptance_of_point(run, ds, steps)
    return acceptance_of_run(run) if run else (fixed,)


def _length_model(text: str):
    from rollverify.experiments.simulate_settings import LengthModel

    kind, _, numbers = text.partition(":")
    values = _numbers(numbers, float, "--lengths") if kind == "lognormal" else ()
    if kind != "lognormal" or len(values) != 2 or values[0] <= 0 or values[1] < 0:
        raise ValueError(f"--lengths: {text!r}; write lognormal:MEDIAN,SIGMA (e.g. 1500,0.9)")
    return LengthModel(median=values[0], sigma=values[1])


def _tool_call_model(text: str):
    from rollverify.cost.tool_latency import ToolCallModel

    values = _numbers(text, float, "--tool-calls")
    if len(values) != 4 or values[3] != int(values[3]):
        raise ValueError(
            f"--tool-calls: {text!r}; write PER_1K,MEDIAN_S,SIGMA,OUTPUT_TOKENS (e.g. 2,1.0,1.0,64)"
        )
    return ToolCallModel(values[0], values[1], values[2], int(values[3]))
