"""Where `rvctl simulate`'s worker processes come from: a fork server that imported the
simulator once, each worker a fork of it. Spawned, each worker imported torch anew (seconds
of a run on two CPUs); forked from the calling process, one whose torch already ran OpenMP can
hang, and a fresh server's has not. This module imports nothing heavy, so the command can start
the server first and let it import while the command itself does."""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver

SIMULATOR = "rollverify.experiments.simulate_worker"


def worker_context() -> multiprocessing.context.BaseContext:
    """The context to start workers in; starts its server (importing SIMULATOR) if need be."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([SIMULATOR])
    multiprocessing.forkserver.ensure_running()
    return context
