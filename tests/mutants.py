"""Named mutants: each breaks one mechanism of the paper (or a failure path the README promises),
and the tests named with it must then fail.

    .venv/bin/python tests/mutants.py                  # every mutant, one after another
    .venv/bin/python tests/mutants.py switch-ignored   # some, by name
    .venv/bin/python tests/mutants.py --list
    .venv/bin/python tests/mutants.py --format json --out benchmarks/results/mutants.json

A mutant replaces one exact piece of source text in a copy of the checkout (tracked and
untracked files; the checkout itself is never touched), then runs its tests there, with
PYTHONPATH pointing at the copy so that subprocesses, Ray workers and vLLM's plugin load the
mutated code too. "killed": the tests failed. "survived": they passed, so they do not guard the
mechanism. "error": the mutation no longer applies (its text changed: update the mutant) or
the tests did not run; "timeout": they hung. Exit code 0 only if every mutant was killed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks' provenance record

from provenance import provenance  # noqa: E402


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str  # the mechanism, in words
    path: str  # file, relative to the repository
    original: str  # exact text, found exactly once
    mutated: str
    tests: tuple[str, ...]  # pytest node ids that must fail


MUTANTS = [
    Mutant(
        "ratio-denominator",
        "the loss's ratio uses the behavior log-probs (pi/mu), not the current ones (ratio 1)",
        "rollverify/training/trl_adapter.py",
        'output["old_per_token_logps"] = output["sampling_per_token_logps"]',
        "pass",
        ("tests/test_loss_inputs.py::test_the_ratio_is_pi_over_the_behavior_policy_of_each_token",),
    ),
    Mutant(
        "switch-ignored",
        "after the switch the run stops pausing (on-policy for good)",
        "rollverify/training/loop.py",
        "return self.method.partial and not self.monitor.switched",
        "return self.method.partial",
        (
            "tests/test_switching.py::"
            "test_a_collapsing_acceptance_rate_switches_the_run_to_on_policy_for_good",
        ),
    ),
    Mutant(
        "switch-not-restored",
        "a resumed run keeps the acceptance monitor and its switch",
        "rollverify/training/loop.py",
        'self.monitor.load_state_dict(state["monitor"])',
        "pass",
        (
            "tests/test_switching.py::"
            "test_a_collapsing_acceptance_rate_switches_the_run_to_on_policy_for_good",
        ),
    ),
    Mutant(
        "trl-overrides-dropped",
        "gspo, sapo and vespo train with their own TRL loss",
        "rollverify/training/trl_adapter.py",
        "settings.update(method.trl_overrides)",
        "pass",
        (
            "tests/test_loss_inputs.py::test_the_loss_level_methods_set_their_trl_loss",
            "tests/test_loss_inputs.py::"
            "test_the_loss_level_methods_train_differently_from_partial_and_each_other",
        ),
    ),
    Mutant(
        "filter-env-mask",
        "a dropped sample's tokens are out of the loss (env_mask)",
        "rollverify/training/trl_adapter.py",
        "    if mask_dropped:",
        "    if False:",
        (
            "tests/test_loss_inputs.py::"
            "test_a_dropped_sample_gets_no_gradient_and_leaves_the_group_baseline",
        ),
    ),
    Mutant(
        "filter-none-rewards",
        "a dropped sample is out of its group's reward baseline (reward None)",
        "rollverify/training/loop.py",
        "return [r if k else None for r, k in zip(rewards, keep, strict=True)]",
        "return rewards",
        (
            "tests/test_loss_inputs.py::"
            "test_a_dropped_sample_gets_no_gradient_and_leaves_the_group_baseline",
        ),
    ),
    Mutant(
        "filter-staleness-inverted",
        "the staleness filter drops the stale samples, not the fresh ones",
        "rollverify/filters.py",
        "return staleness(versions, mask, current_version) <= bound",
        "return staleness(versions, mask, current_version) > bound",
        ("tests/test_train.py::test_filters_drop_stale_and_off_policy_samples",),
    ),
    Mutant(
        "verify-skipped",
        "rollverify truncates the off-policy suffix of the cache",
        "rollverify/training/cache_check.py",
        "            trajectory.truncate(k)",
        "            pass",
        ("tests/test_train.py::test_rollverify_truncates_when_the_policy_moved",),
    ),
    Mutant(
        "sync-check-ignored",
        "a failed weight-sync check stops the run",
        "rollverify/training/weight_sync.py",
        "if not gap <= tolerance:",
        "if False:",
        ("tests/test_train.py::test_a_failed_weight_sync_check_stops_the_run",),
    ),
    Mutant(
        "second-signal-ignored",
        "a second SIGINT/SIGTERM stops at once",
        "rollverify/training/stopping.py",
        "raise KeyboardInterrupt  # asked twice: stop now",
        "return",
        ("tests/test_stopping.py",),
    ),
    Mutant(
        "shared-engine-not-reseeded",
        "compare's runs on a shared engine are the runs `rvctl train` would make",
        "rollverify/training/run.py",
        "with plan.engine.seeded(plan.config.train.seed):  # as if started for this run",
        "if True:",
        (
            "tests/test_orchestration.py::test_compare_runs_every_method_under_one_parent_and_reports_it",
        ),
    ),
    Mutant(
        "math-chat-template-skipped",
        "math prompts go through the model's chat template",
        "rollverify/tasks/math_task.py",
        'if getattr(self.tokenizer, "chat_template", None):',
        "if False:",
        ("tests/test_math_task.py::test_prompts_go_through_the_chat_template",),
    ),
    Mutant(
        "math-order-unseeded",
        "the math task's order depends on the run's seed",
        "rollverify/tasks/math_task.py",
        "random.Random(self.seed * 1_000_003 + epoch).shuffle(order)",
        "random.Random(epoch).shuffle(order)",
        (
            "tests/test_math_task.py::"
            "test_each_epoch_visits_every_problem_once_in_its_own_seeded_order",
        ),
    ),
    Mutant(
        "math-reward-reads-special-tokens",
        "rewards of token ids read the text without special tokens",
        "rollverify/tasks/math_task.py",
        "self.tokenizer.decode(token_ids, skip_special_tokens=True)",
        "self.tokenizer.decode(token_ids)",
        (
            "tests/test_math_task.py::test_rewards_of_token_ids_read_the_text_without_special_tokens",
        ),
    ),
    Mutant(
        "engine-change-refused",
        "a run may resume on another engine",
        "rollverify/training/run_state.py",
        '    "rollout.engine",\n',
        "",
        ("tests/test_vllm_engine.py::test_a_run_resumes_on_another_engine",),
    ),
    Mutant(
        "prepacking-check-ignored",
        "a vLLM sidecar with CPU weight prepacking on refuses to start",
        "rollverify/engines/vllm_engine.py",
        'if not all(report["prepacking_disabled"]) and not torch.cuda.is_available():',
        "if False:",
        ("tests/test_vllm_engine.py::test_a_sidecar_with_weight_prepacking_on_refuses_to_start",),
    ),
    Mutant(
        "hang-not-detected",
        "a sidecar that stops answering is taken for dead",
        "rollverify/engines/vllm_engine.py",
        "except (RayActorError, GetTimeoutError) as error:",
        "except RayActorError as error:",
        (
            "tests/test_vllm_engine.py::"
            "test_a_dead_or_hung_sidecar_is_replaced_and_its_trajectories_finish[frozen]",
        ),
    ),
    Mutant(
        "restart-cap-removed",
        "a sidecar that keeps dying stops the run after MAX_RESTARTS",
        "rollverify/engines/vllm_engine.py",
        "if self.restarts >= MAX_RESTARTS:",
        "if False:",
        ("tests/test_vllm_engine.py::test_the_restart_cap_stops_the_run_with_one_line",),
    ),
    Mutant(
        "weight-sync-plugin-off",
        "vLLM's CPU weight prepacking is turned off, so synced weights take effect (caught "
        "by the engine's refusal to start: the module's engine fixture errors)",
        "rollverify/engines/vllm_plugin.py",
        'if os.environ.get(DISABLE_ENV) == "1":\n        return',
        "return",
        ("tests/test_vllm_engine.py::test_weight_sync_makes_the_engine_score_like_the_trainer",),
    ),
    Mutant(
        "measurement-as-cost",
        "scoring done only for the logs is booked as the method's verification cost",
        "rollverify/training/loop.py",
        "            self.ledger.add_measurement(seconds)",
        '            self.ledger.add_phase("verify", seconds)',
        ("tests/test_train.py::test_every_method_trains_end_to_end[partial]",),
    ),
    Mutant(
        "decode-roofline-summed",
        "a decode step costs the larger of its memory and compute times, not their sum",
        "rollverify/costmodel/roofline.py",
        "    return max(memory, compute) + overhead",
        "    return memory + compute + overhead",
        ("tests/test_costmodel.py",),
    ),
    Mutant(
        "sketch-no-regeneration",
        "the simulator counts tokens generated again after a truncation",
        "rollverify/engines/simulated.py",
        "        start, self.length = self.length, self.length + count\n"
        "        return self._regenerated(start)",
        "        start, self.length = self.length, self.length + count\n        return 0",
        (
            "tests/test_simulate.py::"
            "test_acceptance_one_and_zero_bound_rollverify_between_partial_and_grpo",
        ),
    ),
    Mutant(
        "simulate-acceptance-constant",
        "rvctl simulate follows an acceptance curve step by step (--acceptance-from)",
        "rollverify/simulate.py",
        "acceptance = settings.acceptance[min(step, len(settings.acceptance)) - 1]",
        "acceptance = settings.acceptance[-1]",
        (
            "tests/test_simulate.py::"
            "test_acceptance_can_follow_a_runs_curve_and_switches_where_the_run_did",
        ),
    ),
]


@dataclass
class Outcome:
    name: str
    breaks: str
    result: str  # killed | survived | error | timeout
    seconds: float
    detail: str = ""


def copy_checkout(destination: Path) -> None:
    """Tracked and untracked (not ignored) files: what a clean checkout plus your edits hold."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def apply(mutant: Mutant, tree: Path) -> str | None:
    """Mutate the copy; None, or why the mutant does not apply."""
    path = tree / mutant.path
    text = path.read_text()
    count = text.count(mutant.original)
    if count != 1:
        return f"{mutant.path}: the original text occurs {count} times (expected once)"
    mutated = text.replace(mutant.original, mutant.mutated)
    try:
        compile(mutated, str(path), "exec")
    except SyntaxError as error:
        return f"{mutant.path}: the mutation does not compile ({error})"
    path.write_text(mutated)
    return None


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, str]:
    """Run pytest on `tests` in `tree` with the tree first on the path; (verdict, detail)
    with verdict passed | failed | error | timeout."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(
            command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:  # a hang is no verdict: the tests must fail
        return "timeout", f"after {timeout:.0f} s"
    lines = done.stdout.strip().splitlines()
    failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    why = next((line[1:].strip() for line in lines if line.startswith("E ")), "")
    detail = "; ".join(failures + ([why] if why else [])) or (lines or [""])[-1]
    verdict = {0: "passed", 1: "failed"}.get(done.returncode, "error")  # 1: tests ran, failed
    return verdict, detail if verdict != "error" else f"pytest exit {done.returncode}: {detail}"


def run(mutant: Mutant, timeout: float) -> Outcome:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as folder:
        tree = Path(folder)
        copy_checkout(tree)
        problem = apply(mutant, tree)
        if problem:
            return Outcome(mutant.name, mutant.breaks, "error", 0.0, problem)
        verdict, detail = run_tests(tree, mutant.tests, timeout)
    result = {"passed": "survived", "failed": "killed"}.get(verdict, verdict)
    return Outcome(mutant.name, mutant.breaks, result, time.perf_counter() - started, detail)


def baseline(mutants: list[Mutant], timeout: float) -> str | None:
    """The tests of `mutants` must pass on the unmutated copy, or a failure proves nothing;
    None if they do, else what failed."""
    tests = tuple(dict.fromkeys(test for m in mutants for test in m.tests))
    with tempfile.TemporaryDirectory(prefix="mutant-baseline-") as folder:
        copy_checkout(Path(folder))
        verdict, detail = run_tests(Path(folder), tests, timeout * 2)
    return None if verdict == "passed" else f"{verdict}: {detail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per mutant")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip running the tests unmutated first"
    )
    parser.add_argument(
        "--mutmut-stats", type=Path, help="record a mutmut run's stats (make mutation) and exit"
    )
    args = parser.parse_args()
    if args.mutmut_stats:
        return record_mutmut(args.mutmut_stats, args.out)
    known = {m.name: m for m in MUTANTS}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"error: unknown mutant {', '.join(unknown)}; --list shows them", file=sys.stderr)
        return 2
    chosen = [known[n] for n in args.names] or MUTANTS
    if args.list:
        for mutant in chosen:
            print(f"{mutant.name:34} {mutant.path:40} {mutant.breaks}")
        return 0

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    outcomes = []
    with Progress(console=Console(stderr=True)) as progress:
        if not args.no_baseline:
            progress.add_task("the tests, unmutated", total=None)
            failed = baseline(chosen, args.timeout)
            if failed:
                print(f"error: the tests fail without a mutation ({failed})", file=sys.stderr)
                return 2
        task = progress.add_task("mutants", total=len(chosen))
        for mutant in chosen:
            progress.update(task, description=mutant.name)
            outcomes.append(run(mutant, args.timeout))
            progress.advance(task)
    killed = sum(o.result == "killed" for o in outcomes)
    report = {
        "mutants": len(outcomes),
        "killed": killed,
        "score": killed / len(outcomes),
        "baseline_passed": not args.no_baseline,
        "outcomes": [asdict(o) for o in outcomes],
        "provenance": provenance(),
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    if args.format == "json":
        print(json.dumps(report, indent=2))
    else:
        table = Table(title=f"mutants: {killed} of {len(outcomes)} killed")
        for column in ("mutant", "breaks", "result", "seconds"):
            table.add_column(column)
        for outcome in outcomes:
            style = {"killed": "green", "survived": "red"}.get(outcome.result, "yellow")
            table.add_row(
                outcome.name, outcome.breaks, f"[{style}]{outcome.result}", f"{outcome.seconds:.0f}"
            )
        Console().print(table)
        for outcome in outcomes:
            if outcome.result != "killed":
                print(f"{outcome.name}: {outcome.result}: {outcome.detail}", file=sys.stderr)
    return 0 if killed == len(outcomes) else 1


def record_mutmut(stats_file: Path, out: Path | None) -> int:
    """mutmut's counts with the score, the revision and the surviving mutants' names."""
    stats = json.loads(stats_file.read_text())
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "mutmut"), "results"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    report = {
        "score": stats["killed"] / stats["total"],
        **stats,
        "survivors": [line.split(":")[0].strip() for line in listed if "survived" in line],
        "provenance": provenance({"tool.mutmut": "pyproject.toml"}) | {"command": "make mutation"},
    }
    text = json.dumps(report, indent=2) + "\n"
    if out:
        out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
