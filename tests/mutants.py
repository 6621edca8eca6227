"""Named mutants: each breaks one mechanism of the paper (or a failure path the docs promise),
and the tests named with it must then fail.

    .venv/bin/python tests/mutants.py                  # every mutant, one after another
    .venv/bin/python tests/mutants.py switch-ignored   # some, by name
    .venv/bin/python tests/mutants.py --list
    .venv/bin/python tests/mutants.py --format json --out benchmarks/results/mutants.json

The mutants themselves are listed in tests/named_mutants.py. A mutant replaces one exact
piece of source text in a copy of the checkout (tracked and untracked files; the checkout
itself is never touched), then runs its tests there, with PYTHONPATH pointing at the copy so
that subprocesses, Ray workers and vLLM's plugin load the mutated code too. "killed": the
tests failed. "survived": they passed, so they do not guard the mechanism. "error": the
mutation no longer applies (its text changed: update the mutant) or the tests did not run;
"timeout": they hung. Exit code 0 only if every mutant was killed.
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

sys.path.insert(0, str(ROOT))  # run as a script: the list of mutants is a module of tests/
from tests.named_mutants import MUTANTS, Mutant  # noqa: E402


@dataclass
class Outcome:
    name: str
    breaks: str
    result: str  # killed | survived | error | timeout
    seconds: float
    detail: str = ""


def copy_checkout(destination: Path) -> None:
    """Tracked and untracked (not ignored) files: what a clean checkout plus your edits hold."""
    destination.mkdir(parents=True, exist_ok=True)
    destination.chmod(0o755)  # readable by the uid tests/test_unprivileged.py drops to
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
    # A checkout of its own, so that what reads the code's commit (runs' provenance tags)
    # finds one there as it does in ours.
    for command in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        [
            "git",
            "-c",
            "user.name=mutants",
            "-c",
            "user.email=mutants@localhost",
            "commit",
            "-qm",
            "the checkout under test",
        ],
    ):
        subprocess.run(command, cwd=destination, capture_output=True, check=True)


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
    # the copy first; paths given before (packages outside the venv) after it
    path = os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH", "")]))
    env = {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}
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
