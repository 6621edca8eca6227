"""What the engines and the trainer did, step by step: the input of the GPU cost model.

Engine steps, one row per engine iteration:
    step             the training step the work is for (its rollout; 0: evaluations before
                     training); phase "rollout" or "eval"; engine: the sidecar's index
    decode_rows      sequences that decoded a token this iteration
    decode_context   the sum of their context lengths (tokens attended: prompt + generated)
    prefill_rows     sequences prefilled (each samples its first token)
    prefill_tokens   tokens prefilled (new prompts, resumed trajectories re-prefilled), prefix
                     cache hits excluded where the engine reports them
    prefill_attended the sum of those tokens' context lengths
    decode_padded    positions the decode attended in all, padding included: rows x the widest
                     row for an engine that pads rows to one width (the in-process engine);
                     0 where rows attend their own contexts only (vLLM's paged attention)
    prefill_padded   positions the prefill computed, padding included: rows x the longest
                     context for the in-process engine (it left-pads them); 0 for vLLM
    seconds          the iteration's wall time as the engine saw it (in-process: its poll's
                     forward passes; vLLM: since the previous iteration's outputs, while
                     requests ran throughout), 0 where unknown: what a profile is fitted to
Trainer steps, one row per training step: the tokens run forward and backward (with the sum
of their contexts), the tokens scored forward-only that the method pays for (verification,
the OPS filter), those scored only for the logs (kept apart, as the ledger does), and the bytes
of weights synced to the engines.

A run keeps its trace in `RUN/trace/` as Parquet (columnar, compressed: a few KB per step on the
embedded default), one file per checkpoint interval, written with the checkpoint: a run resumed
from a checkpoint traces every step once.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from rollverify.infra.atomic_write import atomic_write_bytes


@dataclass(frozen=True)
class EngineStep:
    decode_rows: int
    decode_context: int
    prefill_rows: int
    prefill_tokens: int
    prefill_attended: int
    engine: int = 0
    decode_padded: int = 0
    seconds: float = 0.0
    prefill_padded: int = 0


@dataclass(frozen=True)
class TrainerStep:
    tokens_trained: int  # prompt + completion tokens through forward and backward
    attended_trained: int
    tokens_scored: int  # forward-only scoring the method acts on
    attended_scored: int
    tokens_measured: int  # forward-only scoring only for the logs
    attended_measured: int
    sync_bytes: int
    completions: tuple[int, ...] = ()  # the trained responses' lengths (rvctl simulate reads)


def scoring_work(prompt_lengths: list[int], completion_lengths: list[int]) -> tuple[int, int]:
    """(tokens, attended) of one forward over prompt + completion rows (causal attention)."""
    tokens = attended = 0
    for prompt, completion in zip(prompt_lengths, completion_lengths, strict=True):
        n = prompt + completion
        tokens += n
        attended += n * (n + 1) // 2
    return tokens, attended


class StepTrace:
    """The rows of the steps since the last checkpoint; `flush` writes them."""

    def __init__(self) -> None:
        self.engine: list[dict] = []
        self.trainer: list[dict] = []

    def add_engine_steps(self, step: int, phase: str, steps: list[EngineStep]) -> None:
        self.engine += [{"step": step, "phase": phase, **asdict(s)} for s in steps]

    def add_trainer_step(self, step: int, record: TrainerStep) -> None:
        self.trainer.append(
            {"step": step, **asdict(record), "completions": list(record.completions)}
        )

    def flush(self, folder: Path, last_step: int) -> None:
        """Write the rows of steps <= last_step to `folder` (one file per kind), atomically."""
        first = min((r["step"] for r in self.engine + self.trainer), default=None)
        if first is None:
            return
        for kind, rows, columns in (
            ("engine", self.engine, ["step", "phase", *(f.name for f in fields(EngineStep))]),
            ("trainer", self.trainer, ["step", *(f.name for f in fields(TrainerStep))]),
        ):
            name = f"{kind}-{first:06d}-{last_step:06d}.parquet"
            atomic_write_bytes(folder / name, _parquet(rows, columns))
        self.engine, self.trainer = [], []


def _parquet(rows: list[dict], columns: list[str]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({c: [r[c] for r in rows] for c in columns}) if rows else _empty(columns)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def _empty(columns: list[str]):
    import pyarrow as pa

    types = {"phase": pa.string(), "completions": pa.list_(pa.int64())}
    return pa.table({c: pa.array([], types.get(c, pa.int64())) for c in columns})


def drop_after(folder: Path, step: int) -> None:
    """Remove trace files of steps past `step` (written by a run killed before its checkpoint
    was complete: the resumed run traces those steps again)."""
    for path in folder.glob("*.parquet"):
        if int(path.stem.rsplit("-", 1)[1]) > step:
            path.unlink()


def read(folder: str | Path, kind: str = "engine"):
    """All rows of one kind ("engine" or "trainer") as a pyarrow table, in step order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = sorted(Path(folder).glob(f"{kind}-*.parquet"))
    if not paths:
        raise ValueError(f"{folder}: no {kind} trace here (a run writes it with checkpoints)")
    return pa.concat_tables([pq.read_table(p) for p in paths]).sort_by("step")
