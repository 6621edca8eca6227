"""The code reward's seconds per problem in two checkouts, side by side: HumanEval's 164
reference solutions through each tree's judge (rollverify/tasks/rewards/unit_tests.py and the
sandbox beside it), the trees in turn for --rounds rounds (A B A B ...), each in a process of
its own with that tree first on its path, so that the machine's drift falls on both alike.

    .venv/bin/python benchmarks/sandbox_paired.py --base 3f90732 --rounds 3 \
        --out benchmarks/results/sandbox_paired_63.json

--base: a revision, checked out with `git archive` into a temporary folder (its package data
included); the other tree is this checkout. Per tree and worker count: each round's seconds per
problem (wall time of the set over 164), their median, and the ratio of this checkout's
median to the base's. Every solution must pass in both: a tree that fails one is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
# Run inside each tree: its judge over the 164, `workers` problems at a time.
PROGRAM = """
import json, statistics, sys, time
from concurrent.futures import ThreadPoolExecutor
from rollverify.tasks.data.code_problems import HUMANEVAL, load_code_set
from rollverify.tasks.rewards import unit_tests
problems = load_code_set(HUMANEVAL, solution_field="canonical_solution").problems
out = {"judge": unit_tests.__file__}
for workers in map(int, sys.argv[1:]):
    def one(problem):
        return unit_tests.run_unit_tests(problem.solution, problem.tests, timeout_s=20).ok
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        passed = sum(pool.map(one, problems))
    wall = time.perf_counter() - started
    out[f"workers_{workers}"] = {"passed": passed, "seconds_per_problem": wall / len(problems)}
print(json.dumps(out))
"""


def archive(revision: str, folder: Path) -> Path:
    """`revision`'s tracked files in `folder`."""
    tar = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=tar.stdout, check=True)
    return folder


def measure(tree: Path, workers: list[int]) -> dict:
    env = os.environ | {"PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, *map(str, workers)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["judge"].startswith(str(tree)), result["judge"]  # that tree's code ran
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision before")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        trees = {"base": archive(args.base, Path(folder)), "this": ROOT}
        rounds: dict[str, list[dict]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                rounds[name].append(measure(tree, args.workers))
    report: dict = {"set": "humaneval", "base": args.base, "rounds": args.rounds, "trees": {}}
    for name, results in rounds.items():
        report["trees"][name] = {
            f"workers_{w}": {
                "passed": [r[f"workers_{w}"]["passed"] for r in results],
                "seconds_per_problem": [
                    round(r[f"workers_{w}"]["seconds_per_problem"], 4) for r in results
                ],
                "median": round(
                    statistics.median(r[f"workers_{w}"]["seconds_per_problem"] for r in results),
                    4,
                ),
            }
            for w in args.workers
        }
    report["this_over_base"] = {
        f"workers_{w}": round(
            report["trees"]["this"][f"workers_{w}"]["median"]
            / report["trees"]["base"][f"workers_{w}"]["median"],
            3,
        )
        for w in args.workers
    }
    report["provenance"] = provenance(vars(args) | {"out": str(args.out)})
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
