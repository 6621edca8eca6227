"""Where metrics go: a small Tracker interface, and MLflow behind it.

Each call to MLflow's sqlite store is a transaction, so a step's metrics go in one `log_batch`.
Metric names are stable (docs/metrics.md lists them): dashboards depend on them.
"""

from __future__ import annotations

import fcntl
import json
import math
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from rollverify.infra.atomic_write import atomic_write_text
from rollverify.infra.faults import describe
from rollverify.infra.nested_dicts import (
    flatten,  # re-exported: `from rollverify.tracking.tracker import flatten`
)
from rollverify.tracking.provenance import source_tags

MAX_PARAM_LENGTH = 6000  # MLflow 3 limit on a param value


class Tracker(Protocol):
    run_id: str
    uri: str

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def finish(self, status: str = "FINISHED") -> None: ...


def default_tracking_uri(output: str | Path) -> str:
    """A sqlite store inside the output folder, so a run's metrics live beside its files."""
    return f"sqlite:///{(Path(output).resolve() / 'mlflow.db')}"


@contextmanager
def store_opened_alone(uri: str) -> Iterator[None]:
    """One process at a time opens a sqlite store and finds or creates the experiment in it.
    Processes that open a new store side by side each run MLflow's table migrations on it,
    which are not safe together (measured: two `rvctl train` started at once on a new store,
    one failed with sqlite's "duplicate column name: step"), and each would create the
    experiment. Other stores (a server) serialize this themselves."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    path = Path(uri.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class MLflowTracker:
    """One MLflow run: params = the resolved config, tags = method/seed/engine."""

    def __init__(
        self,
        uri: str,
        experiment: str,
        run_name: str,
        params: dict[str, Any],
        tags: dict[str, str],
        artifact_root: Path,
        parent_run_id: str | None = None,
        spool: Path | None = None,
    ) -> None:
        self.uri = uri
        self.spool = spool  # metrics the store refused, one JSON batch per line, until delivered
        self.pending: list[list[Metric]] = []
        self.logged_through: dict[str, int] = {}  # a resumed run's metrics: their newest step
        with store_opened_alone(uri):
            self.client = MlflowClient(tracking_uri=uri)
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = (
                found.experiment_id
                if found is not None
                else self.client.create_experiment(
                    experiment, artifact_location=artifact_root.as_uri()
                )
            )
        if parent_run_id is not None:
            tags = {**tags, "mlflow.parentRunId": parent_run_id}
        tags = {**source_tags(), **tags}  # (what mlflow.start_run would add, and more)
        run = self.client.create_run(experiment_id, run_name=run_name, tags=tags)
        self.run_id = run.info.run_id
        self.client.log_batch(
            self.run_id,
            params=[Param(k, str(v)[:MAX_PARAM_LENGTH]) for k, v in flatten(params).items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
        )

    @classmethod
    def attach(
        cls, uri: str, run_id: str, spool: Path | None = None, log_once: bool = False
    ) -> MLflowTracker:
        """Continue an existing run (a resumed run, a resumed sweep's parent): RUNNING again.
        Metrics a killed process left in its spool file go out first. With `log_once` (a
        resumed training run), a metric is not logged again at a step its history has: the
        resumed run trains again the steps after its checkpoint, and the killed process may
        have logged some of them already."""
        tracker = cls.__new__(cls)
        tracker.client, tracker.uri, tracker.run_id = MlflowClient(tracking_uri=uri), uri, run_id
        tracker.spool, tracker.pending = spool, _read_spool(spool)
        tracker.client.update_run(run_id, status="RUNNING")
        tracker.deliver()
        tracker.logged_through = tracker._newest_steps() if log_once else {}
        return tracker

    def _newest_steps(self) -> dict[str, int]:
        """Each metric's newest step, logged or still spooled (within one process a metric's
        steps only grow)."""
        newest = {
            name: max(point.step for point in self.client.get_metric_history(self.run_id, name))
            for name in self.client.get_run(self.run_id).data.metrics
        }
        for metric in (metric for batch in self.pending for metric in batch):
            newest[metric.key] = max(newest.get(metric.key, -1), metric.step)
        return newest

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """One batch per step. If the store is down or locked, training goes on: the batch
        waits (in memory, and in the spool file) and goes out with the next one that can."""
        timestamp = int(time.time() * 1000)
        batch = [
            Metric(name, float(value), timestamp, step)
            for name, value in metrics.items()
            if value is not None
            and not (isinstance(value, float) and math.isnan(value))
            and step > self.logged_through.get(name, -1)
        ]
        if batch:
            self.pending.append(batch)
            self.deliver()

    def deliver(self) -> bool:
        """Send what is pending; True when nothing is left."""
        try:
            while self.pending:
                self.client.log_batch(self.run_id, metrics=self.pending[0])
                self.pending.pop(0)
        except Exception as error:  # sqlite busy, server down, ...: keep it, say so once
            if not getattr(self, "warned", False):
                self.warned = True
                warnings.warn(
                    f"MLflow store unavailable ({type(error).__name__}); metrics are kept "
                    f"{'in ' + str(self.spool) if self.spool else 'in memory'} and sent later",
                    stacklevel=2,
                )
        self._write_spool()
        return not self.pending

    def _write_spool(self) -> None:
        if self.spool is None:
            return
        if not self.pending:
            self.spool.unlink(missing_ok=True)
            return
        lines = [
            json.dumps([[m.key, m.value, m.timestamp, m.step] for m in batch])
            for batch in self.pending
        ]
        atomic_write_text(self.spool, "\n".join(lines) + "\n")

    def log_artifacts(self, files: list[Path], folder: str | None = None) -> None:
        """Copy files into the run's artifacts (under `folder`); a store that cannot take
        them is warned about, training's results are kept in the run folder anyway."""
        try:
            for file in files:
                self.client.log_artifact(self.run_id, str(file), artifact_path=folder)
        except Exception as error:
            warnings.warn(f"MLflow artifacts not stored: {describe(error)}", stacklevel=2)

    def watch_system(self, resumed: bool, interval_s: float = 10.0) -> None:
        """MLflow's system metrics (system/cpu_utilization_percentage, memory, disk, network,
        and GPUs where pynvml sees them) every `interval_s`, until `finish`."""
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        self.monitor = SystemMetricsMonitor(
            self.run_id,
            sampling_interval=interval_s,
            resume_logging=resumed,
            tracking_uri=self.uri,
        )
        self.monitor.start()

    def finish(self, status: str = "FINISHED", retry_seconds: float = 30.0) -> None:
        """Deliver what is pending (retrying a while), then close the run."""
        if getattr(self, "monitor", None) is not None:
            self.monitor.finish()
            self.monitor = None
        deadline = time.monotonic() + retry_seconds
        while not self.deliver() and time.monotonic() < deadline:
            time.sleep(1.0)
        try:
            self.client.set_terminated(self.run_id, status=status)
        except Exception as error:
            warnings.warn(f"MLflow run {self.run_id} not closed: {error}", stacklevel=2)


def child_runs(client: MlflowClient, parent_run_id: str, finished_only: bool = False) -> list:
    """The runs of a compare or a sweep: children of its MLflow parent run."""
    experiment = client.get_run(parent_run_id).info.experiment_id
    query = f"tags.mlflow.parentRunId = '{parent_run_id}'"
    if finished_only:
        query += " and status = 'FINISHED'"
    return client.search_runs([experiment], filter_string=query)


def _read_spool(spool: Path | None) -> list[list[Metric]]:
    if spool is None or not spool.exists():
        return []
    return [
        [Metric(key, value, timestamp, step) for key, value, timestamp, step in json.loads(line)]
        for line in spool.read_text().splitlines()
        if line.strip()
    ]
