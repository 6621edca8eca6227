"""`rvctl compare ... --address ADDR`: the (method, seed) pairs side by side on a Ray cluster.

Each pair is one Ray task holding what its run needs (child_runs.trial_resources: the CPUs of its
trainer processes, a GPU each on GPU machines); its run starts its own engines there (vLLM
sidecars are actors of the same cluster), so pairs share no engine. A new pair trains, a
finished one is kept, a stopped one resumes (child_runs.run_child, as in one process). Each
step's metrics come back through a Ray queue for the live table. A pair that fails does not
stop the others (their runs are worth keeping); the comparison then fails with one line per
failed pair, and `--resume` reruns only what did not finish.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rollverify.config import RunConfig
from rollverify.experiments.child_runs import Child, PairsFailed, run_child, trial_resources
from rollverify.infra.faults import one_line, own_error
from rollverify.infra.nested_dicts import config_fields
from rollverify.training.run_plan import RunSummary


def run_pairs(
    pairs: list[tuple[Child, RunConfig, Path | None]],
    parent_run_id: str,
    address: str,
    on_progress: Callable[[Child, int, dict[str, float]], None],
) -> list[RunSummary]:
    """Run every (child, its config, its folder if started) as a Ray task on `address`;
    their summaries in the order given."""
    import ray
    from ray.util.queue import Empty, Queue

    from rollverify.rollout.engines.ray_runtime import ensure_ray, stop_ray

    ensure_ray(address, field="--address")  # (connected by compare, unless called alone)
    try:
        progress = Queue()
        tasks = {}
        for index, (child, config, folder) in enumerate(pairs):
            resources = trial_resources(config)
            task = ray.remote(_pair).options(
                num_cpus=resources["cpu"], num_gpus=resources["gpu"], max_retries=0
            )
            run_dir = str(folder) if folder is not None else None
            fields = config_fields(config.to_dict())
            tasks[task.remote(fields, run_dir, parent_run_id, progress, index)] = index
            on_progress(child, -1, {})

        def drain() -> None:
            while True:
                try:
                    index, step, metrics = progress.get_nowait()
                except Empty:
                    return
                on_progress(pairs[index][0], step, metrics)

        pending = list(tasks)
        try:
            while pending:
                _, pending = ray.wait(pending, timeout=0.5)
                drain()
        except KeyboardInterrupt:  # each run stops at a safe point, its checkpoint kept
            for ref in tasks:
                ray.cancel(ref)
            raise
        drain()
        summaries, failures = [], []
        for ref, index in tasks.items():
            try:
                summaries.append(RunSummary(**ray.get(ref)))
            except ray.exceptions.RayError as error:  # the run's own error, or a dead worker
                failures.append(f"{pairs[index][0].name}: {one_line(own_error(error))}")
        if failures:
            raise PairsFailed("\n".join(failures))
        return summaries
    finally:
        stop_ray()


def _pair(
    fields: dict[str, Any], run_dir: str | None, parent_run_id: str, progress: Any, index: int
) -> dict[str, Any]:
    """One pair, in a Ray worker: its run, reporting each step to the driver."""
    from rollverify.infra.quiet import quiet_environment

    quiet_environment()  # before TRL and transformers load in this worker
    from rollverify.config import load_config

    config = load_config(overrides=fields)
    summary = run_child(
        config,
        Path(run_dir) if run_dir is not None else None,
        lambda step, metrics: progress.put((index, step, metrics)),
        parent_run_id,
        engine=None,
    )
    return dataclasses.asdict(summary)
