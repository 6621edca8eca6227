"""The simulated engine's exact model of a full KV cache, compiled (numba): the events of
SimulatedEngine.poll (engines/simulated.py), line for line, on arrays.

At the paper's scale partial rollout keeps the engines' KV cache at the brim, and vLLM's
scheduler then preempts a row at almost every engine step and readmits it at the next finish:
millions of events in a run, ~30 us each as Python objects, well under one compiled. The
Python engine stays the reference (it also does tool calls, weights loaded in flight and real
trajectories); tests/test_simulated_compiled.py holds this one to it, table for table.
engines/simulated_compiled.py is the engine interface around it.

Its modules, each what it models:

    arrays.py      the state: numpy arrays, and the names that index them
    prices.py      the price of a decode run and of a prefill (cost/costmodel/roofline.py's)
    kv_blocks.py   the blocks the rows hold, and the prefixes preempted rows left cached
    rows.py        a row's tokens; a trajectory leaving the engine
    decode.py      the rows' finish steps; decoding up to the next event
    admission.py   queued trajectories into free slots, one prefill for all
    preemption.py  the newest rows out when the next step's blocks do not fit
    polls.py       a poll: the next event, decode, preempt or admit; polls until a schedule
                   has something to act on; a pause

numba caches each compiled function apart and checks only its own file; a function compiled
with another file's callee in it would go on running the old callee. So the kernel's cache is
dropped as a whole whenever any of its files changes (infra/numba_cache.py).
"""

from pathlib import Path

from rollverify.infra.numba_cache import forget_if_changed
from rollverify.rollout.engines.kernel import (
    admission,
    arrays,
    decode,
    kv_blocks,
    polls,
    preemption,
    prices,
    rows,
)
from rollverify.rollout.engines.kernel.admission import submit
from rollverify.rollout.engines.kernel.arrays import GROW, empty_state, more_nodes
from rollverify.rollout.engines.kernel.polls import pause, run_polls
from rollverify.rollout.engines.kernel.prices import decode_run, prefill, price_terms

MODULES = (arrays, prices, kv_blocks, rows, decode, admission, preemption, polls)


def compiled_functions() -> list:
    """Every njit function the kernel defines."""
    return [
        value
        for module in MODULES
        for value in vars(module).values()
        if getattr(getattr(value, "py_func", None), "__module__", None) == module.__name__
    ]


forget_if_changed(compiled_functions(), Path(__file__).parent.glob("*.py"))

__all__ = [
    "GROW",
    "arrays",
    "decode_run",
    "empty_state",
    "more_nodes",
    "pause",
    "prefill",
    "price_terms",
    "run_polls",
    "submit",
]
