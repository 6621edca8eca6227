"""What a code reward costs per problem: the judge (tests outside the sandbox, issue 49) beside
the harness before it (tests inside the program's process, unshare), in one run; prints JSON.

    .venv/bin/python benchmarks/sandbox_bench.py [--before a53ea86] [--workers 1 2] \
        [--out benchmarks/results/sandbox_bench.json]

Both check HumanEval's 164 reference solutions (each must pass: a harness that fails one is
not measured, it is reported). The harness before is the code of revision --before
(rollverify/tools/sandbox.py and rollverify/tasks/rewards/unit_tests.py), loaded from git into
a temporary folder. Seconds per problem: the wall time of the whole set over 164, with
`workers` problems at a time (1: the cost of one; 2: this machine's cores).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from provenance import provenance

from rollverify.tasks.data.code_problems import HUMANEVAL, load_code_set
from rollverify.tasks.rewards import unit_tests as judge_harness

ROOT = Path(__file__).resolve().parents[1]


def harness_before(revision: str, folder: Path):
    """The unit-test harness of `revision` (its sandbox beside it), as a module."""
    for path in ("rollverify/tools/sandbox.py", "rollverify/tasks/rewards/unit_tests.py"):
        source = subprocess.run(
            ["git", "show", f"{revision}:{path}"], cwd=ROOT, capture_output=True, text=True
        ).stdout
        source = source.replace(
            "from rollverify.tools.sandbox import", "from before_sandbox import"
        )
        (folder / f"before_{Path(path).stem}.py").write_text(source)
    sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(
        "before_unit_tests", folder / "before_unit_tests.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["before_unit_tests"] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def measure(run_unit_tests, problems, workers: int) -> dict:
    def one(problem):
        started = time.perf_counter()
        run = run_unit_tests(problem.solution, problem.tests, timeout_s=20)
        return run.ok, time.perf_counter() - started

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(one, problems))
    wall = time.perf_counter() - started
    each = [seconds for _, seconds in results]
    return {
        "passed": sum(ok for ok, _ in results),
        "problems": len(problems),
        "wall_seconds": round(wall, 2),
        "seconds_per_problem": round(wall / len(problems), 4),
        "median_seconds_one_problem": round(statistics.median(each), 4),
        "p90_seconds_one_problem": round(statistics.quantiles(each, n=10)[-1], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="a53ea86")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    problems = load_code_set(HUMANEVAL, solution_field="canonical_solution").problems
    with tempfile.TemporaryDirectory() as folder:
        before = harness_before(args.before, Path(folder))
        results = {}
        for workers in args.workers:
            judged = measure(judge_harness.run_unit_tests, problems, workers)
            in_process = measure(before.run_unit_tests, problems, workers)
            ratio = judged["seconds_per_problem"] / in_process["seconds_per_problem"]
            results[f"workers_{workers}"] = {
                "judge": judged,
                "before": in_process,
                "judge_over_before": round(ratio, 3),
            }
    report = {"set": "humaneval", "before": args.before, "results": results}
    report["provenance"] = provenance(vars(args) | {"out": str(args.out)})
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
