"""SimulatedEngine's model, compiled: what `rvctl simulate` runs when nothing needs the Python
engine's other parts (tool calls, weights loaded in flight, a fitted CPU profile's prices).
Same events, same table: engines/kernel/ does the work on arrays; this class is
the engine interface around it, and moves each Sketch's counts in (submit) and out (finish,
pause)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from rollverify.config.model_shape import ModelShape
from rollverify.cost.costmodel import GPUS, Layout, Pricing
from rollverify.rollout.engines import kernel
from rollverify.rollout.engines.kernel import arrays
from rollverify.rollout.engines.protocol import EngineStats
from rollverify.rollout.engines.simulated_base import SimulatedBase
from rollverify.rollout.engines.sketch import Sketch
from rollverify.rollout.trajectory import Trajectory

_STATS = {  # EngineStats field: its counter in the kernel's integers
    "decode_steps": arrays.DECODE_STEPS,
    "slot_steps_busy": arrays.SLOT_STEPS_BUSY,
    "tokens_generated": arrays.GENERATED,
    "tokens_regenerated": arrays.REGENERATED,
    "tokens_prefilled": arrays.PREFILLED,
    "aborted": arrays.ABORTED,
    "preemptions": arrays.PREEMPTIONS,
    "tokens_recomputed": arrays.RECOMPUTED,
}
_REASONS = {arrays.STOP: "stop", arrays.LENGTH_CUT: "length"}
_DRAWN = arrays.IN.index(arrays.DRAWN)  # its column in what enters


class CompiledSimulatedEngine(SimulatedBase):
    """SimulatedEngine (exact, no tool calls, weights loaded between steps) for Sketches, priced
    by a GPU's Pricing. `lengths` may have `peek(group_id, sample_index)`, a draw that fixes
    nothing (LengthSampler: a moving median is fixed at a group's first admission, as the
    reference asks `lengths` then); it is then called for real as each trajectory leaves."""

    cost: Pricing

    def _start(self, version: int) -> None:
        # (weights load between steps, never waited for; no tool calls: idle_seconds,
        # calls_made and tool_wait_seconds stay 0)
        if self.tool_calls is not None:
            raise TypeError("the compiled simulated engine takes no tool calls")
        slots, max_new_tokens, block_size = self.slots, self.max_new_tokens, self.block_size
        self._peek_draws = getattr(self.lengths, "peek", None)
        self._keep_draws = getattr(self.lengths, "keep", None)
        self._prices = kernel.price_terms(self.cost)
        self._arrays = kernel.empty_state(slots, block_size, max_new_tokens)
        ints = self._arrays["ints"]
        ints[arrays.SLOTS], ints[arrays.MAX_NEW], ints[arrays.BLOCK] = (
            slots,
            max_new_tokens,
            block_size,
        )
        ints[arrays.KV_BLOCKS] = arrays.NO_LIMIT if self.kv_blocks is None else self.kv_blocks
        ints[arrays.CACHE_BLOCKS] = ints[arrays.FREED] = self.kv_blocks or 0
        ints[arrays.ADMIT_BATCH] = self.admit_batch
        ints[arrays.FINISHES_PER_POLL] = self.finishes_per_poll
        ints[arrays.VERSION] = version
        ints[arrays.Q_HEAD] = ints[arrays.Q_TAIL] = 2 * slots  # room to put rows before it
        self._inside: list[Sketch] = []  # by slot: the trajectories in the engine this step
        self._running = self._waiting = 0
        self._submitted: list[Sketch] = []  # since the last poll (`_enter`)
        self._groups: dict[int, int] = {}  # group id: its index in the kernel's `members`
        self._grow(slots=0, waiting=0, out=0, groups=0)  # (run_polls's arguments)

    # -- state the schedules read ---------------------------------------------------------------

    @property
    def _ints(self) -> np.ndarray:
        return self._arrays["ints"]

    @property
    def version(self) -> int:
        return int(self._ints[arrays.VERSION])

    @property
    def step(self) -> int:
        return int(self._ints[arrays.STEP])

    @property
    def clock(self) -> float:
        return float(self._arrays["floats"][arrays.CLOCK])

    @property
    def prefill_seconds(self) -> float:
        return float(self._arrays["floats"][arrays.PREFILL_SECONDS])

    @property
    def stats(self) -> EngineStats:
        return EngineStats(**{name: int(self._ints[i]) for name, i in _STATS.items()})

    def reset_stats(self) -> None:
        self._ints[list(_STATS.values())] = 0

    @property
    def has_work(self) -> bool:
        return bool(self._running or self._waiting)

    def idle_slots(self) -> int:
        return max(0, self.slots - self._running - self._waiting)

    def _counted(self) -> None:
        """The rows running and waiting, as Python ints (asked after every poll), from the
        kernel's."""
        ints = self._ints
        self._running = ints.item(arrays.ROWS)
        self._waiting = ints.item(arrays.Q_TAIL) - ints.item(arrays.Q_HEAD)

    # -- the engine interface -----------------------------------------------------------------

    def submit(self, trajectories: list[Trajectory]) -> None:
        for t in trajectories:
            if type(t) is not Sketch or t.tool_outputs:
                raise TypeError("the compiled simulated engine takes Sketches without tool calls")
            if t.finish_reason is not None:
                raise ValueError(f"trajectory {t.key} is finished; submit unfinished ones")
        self._submitted += trajectories  # into the kernel at the next poll, in one go (grpo
        self._waiting += len(trajectories)  # submits its 128 groups one by one)

    def _enter(self) -> None:
        """What was submitted since the last poll, to the queue's end."""
        trajectories, self._submitted = self._submitted, []
        if not trajectories:
            return
        count, groups, flat = len(trajectories), self._groups, []
        for t in trajectories:  # arrays.IN's columns (DRAWN to come), group id, sample index
            oldest = t.oldest_version
            flat += (
                t.length,
                t.high_water,
                t.prompt_tokens,
                -1 if oldest is None else oldest,  # (the kernel's: no tokens yet)
                0,
                groups.setdefault(t.group_id, len(groups)),
                t.group_id,
                t.sample_index,
            )
        entering = np.array(flat, dtype=np.int64).reshape(count, len(arrays.IN) + 2)
        entering[:, _DRAWN] = self._draws(entering[:, -2], entering[:, -1])
        self._room(len(self._inside) + count, self._waiting, groups=len(groups))
        a = self._arrays
        kernel.submit(a["ints"], a["trajs"], a["queue"], a["members"], len(self._inside), entering)
        self._inside += trajectories

    def _draws(self, groups: np.ndarray, samples: np.ndarray) -> np.ndarray | list[int]:
        """Each one's length as `lengths` draws it (the reference asks at every admission: the
        same answer, but a moving median is fixed then; `_out` fixes it)."""
        if self._peek_draws is not None:
            return self._peek_draws(groups, samples)
        return [self.lengths(g, i) for g, i in zip(groups.tolist(), samples.tolist(), strict=True)]

    def poll(self) -> list[Trajectory]:
        self._enter()
        while True:
            count = kernel.run_polls(*self._args)
            if count != kernel.GROW:
                break
            self._room(slots=len(self._inside), waiting=self._waiting)
        self._counted()
        return self._out(self._arrays["out"][:count])

    def pause(self) -> list[Trajectory]:
        self._enter()
        arrays = self._arrays
        self._room(slots=len(self._inside), waiting=self._waiting, out=len(self._inside))
        count = kernel.pause(
            arrays["ints"], arrays["trajs"], arrays["queue"], arrays["run"], arrays["ends"],
            arrays["spans"], arrays["nodes"], arrays["padding"], arrays["out"],
        )  # fmt: skip
        paused = self._out(arrays["out"][:count])
        self._counted()
        self._emptied()
        return paused

    def load_weights(self, named_tensors: Iterable, version: int) -> None:
        if self.has_work:
            raise RuntimeError("pause the engine before loading weights: in-flight KV is stale")
        self._emptied()
        self._ints[arrays.VERSION] = version

    # -- in and out of the arrays ---------------------------------------------------------------

    def _out(self, rows: np.ndarray) -> list[Sketch]:
        """Trajectories leaving the engine get their counts back (rows: arrays.OUT's)."""
        inside, leaving, admitted = self._inside, [], []
        for slot, length, high_water, oldest, reason, final in rows.tolist():
            sketch = inside[slot]
            sketch.length, sketch.high_water = length, high_water
            sketch.oldest_version = None if oldest == -1 else oldest
            if reason:
                sketch.finish_reason = _REASONS[reason]
            if final:
                admitted.append(sketch.group_id)
            leaving.append(sketch)
        if admitted and self._keep_draws is not None:  # their draws are fixed now, as there
            self._keep_draws(admitted)
        return leaving

    def _emptied(self) -> None:
        """Every trajectory is out: the slots start again, with no claims on the prefix cache
        (PrefixCache.reset: the weights change next, and what it holds is stale)."""
        self._arrays["trajs"][: len(self._inside), arrays.CLAIMED] = 0
        self._inside = []
        self._arrays["members"][: len(self._groups)] = 0
        self._groups = {}
        self._ints[arrays.Q_HEAD] = self._ints[arrays.Q_TAIL] = 2 * self.slots

    def _room(self, slots: int, waiting: int, out: int = 0, groups: int = 0) -> None:
        """Arrays large enough for `slots` trajectories, `waiting` queued with a poll's
        preemptions before them, the heap's next poll, `out` leaving at once and `groups`."""
        a, ints, head = self._arrays, self._ints, self._ints.item(arrays.Q_HEAD)
        if (  # (asked before every poll: something grows once in thousands)
            a["trajs"].shape[0] >= slots
            and a["out"].shape[0] >= out
            and a["members"].shape[0] >= groups
            and a["heap"].shape[0] > ints.item(arrays.H_SIZE) + self.slots
            and a["nodes"].shape[0] - ints.item(arrays.ENTRIES) > self.slots
            and head >= self.slots
            and a["queue"].shape[0] > head + waiting
        ):
            return
        self._grow(slots, waiting, out, groups)

    def _grow(self, slots: int, waiting: int, out: int, groups: int) -> None:
        """`_room`'s arrays, those short of it replaced by longer copies, and run_polls's
        arguments anew."""
        a, ints = self._arrays, self._ints
        a["trajs"] = _at_least(a["trajs"], slots)
        a["out"] = _at_least(a["out"], out)
        a["members"] = _at_least(a["members"], groups)
        a["heap"] = _at_least(a["heap"], ints.item(arrays.H_SIZE) + self.slots + 1)
        if a["nodes"].shape[0] - ints.item(arrays.ENTRIES) <= self.slots:
            a["nodes"] = kernel.more_nodes(ints, a["nodes"], a["nodes"].shape[0])
        head, tail = ints.item(arrays.Q_HEAD), ints.item(arrays.Q_TAIL)
        if head < self.slots or a["queue"].shape[0] < head + waiting + 1:
            queue = np.zeros(2 * (2 * self.slots + waiting) + 64, dtype=np.int64)
            queue[2 * self.slots : 2 * self.slots + tail - head] = a["queue"][head:tail]
            a["queue"] = queue
            ints[arrays.Q_HEAD], ints[arrays.Q_TAIL] = 2 * self.slots, 2 * self.slots + tail - head
        names = ("ints", "floats", "trajs", "queue", "run", "ends", "spans", "nodes", "padding")
        self._args = (  # run_polls's
            *(a[name] for name in names), a["pads"], a["heap"], self._prices, a["members"],
            a["out"], a["admitted"],
        )  # fmt: skip


def _at_least(array: np.ndarray, rows: int) -> np.ndarray:
    """`array`, or a copy twice as long as asked, its rows first, if it has fewer than `rows`."""
    if array.shape[0] >= rows:
        return array
    grown = np.zeros((2 * rows + 64, *array.shape[1:]), dtype=array.dtype)
    grown[: array.shape[0]] = array
    return grown


def compile_kernel() -> None:
    """Run the kernel once on a tiny engine: numba compiles it and caches it (make setup, so
    that no run or test pays the ~10 s)."""
    shape = ModelShape(1000, 1000, layers=2, hidden=16, heads=2, kv_heads=1, head_dim=8)
    tiny = Pricing(shape, GPUS["h100"], Layout("disaggregated", 1))  # the same types as any
    engine = CompiledSimulatedEngine(tiny, 2, 8, lambda group, index: 4, kv_tokens=64)
    engine.submit([Sketch(torch.zeros(3, dtype=torch.long), 0, i) for i in range(3)])
    while engine.has_work:
        engine.poll()
    engine.submit([Sketch(torch.zeros(3, dtype=torch.long), 1, 0)])
    engine.pause()


if __name__ == "__main__":
    compile_kernel()
