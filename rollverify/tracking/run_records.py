"""What a report reads: the training runs of the targets, from the MLflow store.

`load_report` resolves the targets (run ids, or compare/sweep folders holding `parent.json`)
and reads their training runs into `RunRecord`s: one `get_metric_history` call per metric per
run (one query each; fine for tens of runs). rollverify/experiments/report.py turns them
into rows.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollverify.tracking import metric_names as m

PARENT_KINDS = ("compare", "sweep")
# The metrics the tables and plots read (names from docs/metrics.md); others are not fetched.
REPORT_METRICS = (
    m.EVAL_ACCURACY,
    m.COST_DEVICE_DAYS,
    m.MODELED_GPU_DAYS,
    m.OPS_MEAN,
    m.STALENESS_MEAN,
    m.STALENESS_MAX,
    m.MISMATCH_KL,
    m.ACCEPTANCE_RATE,
    m.SWITCHED,
    m.REWARD_MEAN,
    m.ENTROPY_MEAN,
    m.RESPONSE_LENGTH_MEAN,
    m.STALENESS_TOKEN_MEAN,
    m.STALE_TOKEN_SHARE_8,
    m.ACCEPTANCE_WINDOW_MEAN,
    m.TOKENS_CUT_SEQUENCE_STAGE,
    m.TOKENS_CUT_TOKEN_STAGE,
    m.TRAJECTORIES_DROPPED_STALE,  # the composition table: what a staleness cap starves
    m.CORRECTION_TOKEN_SHARE,  # the per-seed rows: how often a peer correction acted
    m.TRL_CLIP_SHARE,  # ... how often the PPO clip cut
    m.TRL_GRAD_NORM,  # ... and its largest gradient norm
    m.DRIFT_OPS,  # ... and the per-version drift
    m.VERIFY_DS,  # ... and the sequence stage's threshold where it is auto
    m.CACHE_TOKENS_VERIFIED,  # the checks' weights (rvctl report --thresholds)
)


@dataclass
class RunRecord:
    """One training run, as the report needs it.

    history: metric name -> {step: value}, NaN dropped. Steps are optimizer steps 1..N;
    `eval_accuracy` also has step 0 (the base model). Cost metrics are cumulative.
    """

    run_id: str
    method: str
    seed: int | None
    status: str  # MLflow: FINISHED, RUNNING, KILLED, FAILED, SCHEDULED
    start_time: int  # ms since the epoch
    params: dict[str, str]  # the flattened resolved config, e.g. "verify.ds": "0.01"
    history: dict[str, dict[int, float]]
    run_dir: str | None = None  # its folder (config.yaml there), as the run tagged it

    @property
    def finished(self) -> bool:
        return self.status == "FINISHED"

    def last(self, metric: str) -> float | None:
        """The value at the largest logged step, or None if never logged."""
        values = self.history.get(metric)
        return values[max(values)] if values else None

    def total(self, metric: str) -> float | None:
        """The metric summed over its finite logged values; None if none (never logged: not 0)."""
        values = self._finite(metric)
        return sum(values) if values else None

    def mean(self, metric: str) -> float | None:
        """The metric's mean over its finite logged values (over steps); None if none."""
        values = self._finite(metric)
        return statistics.fmean(values) if values else None

    def _finite(self, metric: str) -> list[float]:
        return [v for v in self.history.get(metric, {}).values() if math.isfinite(v)]


@dataclass
class Report:
    tracking_uri: str
    kind: str  # "compare" or "sweep" (every target was such a parent), else "runs"
    parent_run_ids: list[str]
    sweep_params: list[str]  # dotted config keys swept, e.g. ["verify.ds", "verify.dt"]
    runs: list[RunRecord]  # oldest first


# ---- reading MLflow ----------------------------------------------------------------------


def load_report(
    targets: Sequence[str] = (), tracking_uri: str | None = None, prefixes: tuple[str, ...] = ()
) -> Report:
    """Resolve targets and read their training runs.

    A target is a run id (a training run, or a compare/sweep parent: its children) or a folder
    rvctl wrote: a run folder (mlflow.json), a compare/sweep folder (parent.json), or an output
    folder (`train --output`, `compare --output`: the run and compare folders in it; where it
    has none, every training run of its store, mlflow.db). Each folder names its own store;
    targets in several stores are read from each (`tracking_uri` overrides them all).
    No target: the newest parent in the store, else every training run in it. `prefixes`:
    the metrics named so are read too (threshold_grid/: rvctl report --thresholds).
    """
    found = [(t, record) for t in targets if _looks_like_path(t) for record in _records_in(Path(t))]
    # MLflow is slow to import: a bad folder is reported before that.
    from mlflow.tracking import MlflowClient

    from rollverify.tracking.tracker import default_tracking_uri

    by_store: dict[str, list[tuple[str, str | None]]] = {}
    for target, record in found:
        uri = tracking_uri or record["tracking_uri"]
        by_store.setdefault(uri, []).append((target, record["run_id"]))
    ids = [t for t in targets if not _looks_like_path(t)]
    if ids or not by_store:  # run ids: in the store given, the folders' or ./runs'
        uri = tracking_uri or next(iter(by_store), default_tracking_uri("runs"))
        by_store.setdefault(uri, []).extend((t, t) for t in ids)
    parents, runs, kinds = [], {}, set()
    for uri, wanted in by_store.items():
        check_store_exists(uri)
        client = MlflowClient(tracking_uri=uri)
        resolved = _resolved(client, uri, wanted)
        kinds |= {r.data.tags.get("kind") for r in resolved}
        for run in resolved:
            if run.data.tags.get("kind") in PARENT_KINDS:
                parents.append(run)
                runs |= {c.info.run_id: (client, c) for c in _children(client, run)}
            elif _is_training(run):
                runs[run.info.run_id] = (client, run)
    if not runs:
        names = ", ".join(p.info.run_id for p in parents) or ", ".join(targets)
        raise ValueError(f"{names}: no training runs yet (a parent without children?)")
    kind = kinds.pop() if len(kinds) == 1 and parents else "runs"
    sweep_params = [p for r in parents for p in r.data.tags.get("sweep_params", "").split(",") if p]
    records = sorted(
        (_record(c, r, prefixes) for c, r in runs.values()), key=lambda r: r.start_time
    )
    return Report(
        ", ".join(by_store),
        kind,
        [p.info.run_id for p in parents],
        list(dict.fromkeys(sweep_params)),
        records,
    )


def _resolved(client: Any, uri: str, wanted: list[tuple[str, str | None]]) -> list[Any]:
    """The runs one store's targets name: (target, run id) pairs; a run id None stands for
    every training run of the store, and no pair at all for the store's default (_resolve)."""
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    if any(run_id is None for _, run_id in wanted):
        every = client.search_runs(experiment_ids, order_by=["attributes.start_time DESC"])
        return [r for r in every if _is_training(r)]
    return _resolve(client, experiment_ids, [i for _, i in wanted], [t for t, _ in wanted], uri)


def _children(client: Any, parent: Any) -> list[Any]:
    from rollverify.tracking.tracker import child_runs

    return [r for r in child_runs(client, parent.info.run_id) if _is_training(r)]


def _resolve(
    client: Any, experiment_ids: list[str], run_ids: list[str], targets: Sequence[str], uri: str
) -> list[Any]:
    """MLflow runs for the targets; none given: the newest parent, else every training run."""
    from mlflow.exceptions import MlflowException

    if not targets:
        every = client.search_runs(experiment_ids, order_by=["attributes.start_time DESC"])
        parents = [r for r in every if r.data.tags.get("kind") in PARENT_KINDS]
        training = [r for r in every if _is_training(r)]
        if not parents and not training:
            raise ValueError(f"no training runs in {uri}; train or compare first, or pass a run id")
        return parents[:1] or training
    resolved = []
    for target, run_id in zip(targets, run_ids, strict=True):
        try:
            resolved.append(client.get_run(run_id))
        except MlflowException:
            raise ValueError(
                f"{target}: no such run in {uri}; pass a run id from this store "
                "(or --tracking-uri), or a compare/sweep output folder with parent.json"
            ) from None
    return resolved


FOLDER_RECORDS = ("parent.json", "mlflow.json")  # compare/sweep folder; run folder (RUN_DIR)


def _looks_like_path(target: str) -> bool:
    return Path(target).exists() or "/" in target or target.startswith(".")


def _records_in(path: Path) -> list[dict[str, str | None]]:
    """The (run_id, tracking_uri) records a folder target stands for: its own parent.json or
    mlflow.json; else those of the run and compare/sweep folders in it; else, where it holds a
    store (mlflow.db), every training run of it (run_id None)."""
    if not path.exists():
        raise ValueError(
            f"{path}: no such folder; pass a run id, a run folder, a compare/sweep folder or "
            "an output folder"
        )
    if path.is_file():
        return [_read_record(path)] if path.name in FOLDER_RECORDS else []
    if _record_file(path) is not None:
        return [_read_record(_record_file(path))]
    folders = sorted(p for p in path.iterdir() if p.is_dir())
    inside = [_read_record(file) for file in map(_record_file, folders) if file is not None]
    if inside:
        return inside
    store = path / "mlflow.db"
    if store.is_file():
        return [{"run_id": None, "tracking_uri": f"sqlite:///{store.resolve()}"}]
    raise ValueError(
        f"{path}: no runs here (no parent.json, mlflow.json, run folders or mlflow.db); pass "
        "a run folder, a compare/sweep folder or the --output folder of a run"
    )


def _record_file(folder: Path) -> Path | None:
    """The folder's parent.json, else its mlflow.json; None where it has neither."""
    return next((folder / n for n in FOLDER_RECORDS if (folder / n).is_file()), None)


def _read_record(file: Path) -> dict[str, str | None]:
    """A compare/sweep folder's parent.json, or a run folder's mlflow.json (the same keys)."""
    try:
        record = json.loads(file.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{file}: not valid JSON ({error})") from None
    if not isinstance(record, dict) or not {"run_id", "tracking_uri"} <= record.keys():
        raise ValueError(f"{file}: needs keys run_id and tracking_uri")
    return record


def check_store_exists(uri: str) -> None:
    """Reading must not create an empty sqlite store as a side effect."""
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        if not path.is_file():
            raise ValueError(
                f"no MLflow store at {path}; train or compare first, or pass --tracking-uri"
            )


def _is_training(run: Any) -> bool:
    """Training runs carry a `method` tag; parents (a sweep's has one too) carry `kind`."""
    tags = run.data.tags
    return "method" in tags and tags.get("kind") not in PARENT_KINDS


def run_record(tracking_uri: str, run_id: str) -> RunRecord:
    """One training run's record, read from its store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    return _record(client, client.get_run(run_id))


def _record(client: Any, run: Any, prefixes: tuple[str, ...] = ()) -> RunRecord:
    history = {}
    per_set = [name for name in run.data.metrics if m.eval_set_of(name) is not None]
    asked = [name for name in run.data.metrics if prefixes and name.startswith(prefixes)]
    for name in (*REPORT_METRICS, *per_set, *asked):
        stored = name if name in run.data.metrics else m.RENAMED.get(name)  # (older runs)
        if stored not in run.data.metrics:
            continue
        points = sorted(
            client.get_metric_history(run.info.run_id, stored),
            key=lambda m: (m.step, m.timestamp),
        )
        history[name] = {m.step: m.value for m in points if not math.isnan(m.value)}
    seed = run.data.tags.get("seed", "")
    return RunRecord(
        run_id=run.info.run_id,
        method=run.data.tags["method"],
        seed=int(seed) if seed.lstrip("-").isdigit() else None,
        status=run.info.status,
        start_time=run.info.start_time or 0,
        params=dict(run.data.params),
        history=history,
        run_dir=run.data.tags.get("run_dir"),
    )
