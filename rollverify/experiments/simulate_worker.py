"""What `rvctl simulate`'s fork server imports (experiments/workers.py): the simulator, and its
compiled kernel loaded from numba's cache (~0.6 s: numba's own imports), so that each worker,
a fork of the server, starts with it loaded while the command is still starting."""

from rollverify.experiments import simulate  # noqa: F401 (what the workers run)
from rollverify.rollout.engines.simulated_compiled import compile_kernel

compile_kernel()
