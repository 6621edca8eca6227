"""The README's two commands on a fresh clone, timed: `git clone`, `make setup`, `make demo`,
`make test`, as a new user runs them (issue 64). Prints one JSON object per clone, and with
--out writes them all to a file.

    python3 benchmarks/fresh_check.py                  # one clone of HEAD: setup, demo, test
    python3 benchmarks/fresh_check.py --repeat 5 --out benchmarks/results/fresh_check.json
    python3 benchmarks/fresh_check.py --skip demo      # setup and test only

Run it with the machine to itself: on 2 cores a second heavy job doubles both commands' time.
The goals it measures (docs/testing.md): `make demo` under 600 s after setup, `make test` green.
Standard library only: it runs before any virtual environment exists.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ("setup", "demo", "test")
# pytest's last line: "= 1 failed, 945 passed, 5 skipped in 466.12s (0:07:46) ="
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")


def pytest_counts(output: str) -> dict[str, int]:
    """What pytest's summary line counted, by outcome ({} if it printed none)."""
    lines = [line for line in output.splitlines() if " in " in line and "passed" in line]
    if not lines:
        return {}
    return {outcome.rstrip("s"): int(n) for n, outcome in SUMMARY.findall(lines[-1])}


def failed_tests(output: str) -> list[str]:
    """The node ids pytest's short summary names as FAILED or ERROR."""
    return re.findall(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.MULTILINE)


def run_make(clone: Path, target: str, log: Path) -> dict:
    """One `make TARGET` in the clone: its seconds and exit status; its output to log."""
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(["make", target], cwd=clone, stdout=out, stderr=subprocess.STDOUT)
    figures = {"seconds": round(time.perf_counter() - start, 1), "rc": done.returncode}
    if target == "test":
        text = log.read_text(errors="replace")
        figures |= {"counts": pytest_counts(text), "failed": failed_tests(text)}
    return figures


def fresh_clone(source: Path, commands: list[str], keep: Path | None) -> dict:
    """Clone HEAD of source into a new folder and run the commands there, in order."""
    folder = Path(tempfile.mkdtemp(prefix="fresh-", dir=keep))
    clone = folder / "rollverify"
    subprocess.run(["git", "clone", "-q", str(source), str(clone)], check=True)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True
    ).stdout.strip()
    result: dict = {"commit": head, "clone": str(clone)}
    for target in commands:
        result[target] = run_make(clone, target, folder / f"{target}.log")
        print(f"{target}: {result[target]}", file=sys.stderr, flush=True)
        if target == "setup" and result[target]["rc"] != 0:
            break  # nothing else can run
    result["logs"] = str(folder)
    if keep is None:
        shutil.rmtree(clone, ignore_errors=True)  # the logs stay, beside it
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="fresh clones, one after another")
    parser.add_argument("--skip", action="append", default=[], choices=["demo", "test"])
    parser.add_argument("--out", type=Path, help="write every clone's figures here (JSON)")
    parser.add_argument("--keep", type=Path, help="make the clones under this folder and keep them")
    args = parser.parse_args()
    commands = [c for c in COMMANDS if c not in args.skip]
    results = []
    for _ in range(args.repeat):
        results.append(fresh_clone(REPO, commands, args.keep))
        print(json.dumps(results[-1]), flush=True)
        if args.out is not None:  # after each clone: a long series keeps what it measured
            args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
