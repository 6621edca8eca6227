"""RollVerify: verified partial rollout for GRPO (OPS -> two-stage verification -> switching).

The package is its parts, bottom to top; a part imports only parts below it, parts on one
line neither the other (pyproject.toml's import-linter contracts, tests/test_layout.py):

    experiments/ | tiny/   comparisons, sweeps, reports, simulation | the embedded model
    training/              one run: the recipe, the step, TRL glue, checkpoints, processes
    tasks/                 the chain and math tasks, their data and rewards, evaluation
    rollout/               schedules, trajectories and their cache, engines
    cost/                  the trace, the ledger, the GPU cost model, the memory estimate
    tracking/ | config/    metric names, MLflow, runs read back, plots | the typed config
    core/ | infra/ | tools/  the paper's rules, pure functions over tensors | plumbing |
                           the sandbox that runs model-written code

rvctl, the command line, sits on top of them all. The paper's rules are importable from here:

    from rollverify import AcceptanceMonitor, sequence_ops, token_ops, verify
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["AcceptanceMonitor", "__version__", "sequence_ops", "token_ops", "verify"]


def __getattr__(name: str) -> Any:
    # Imported on first use: `import rollverify.config` (every rvctl command) loads no torch.
    if name in ("token_ops", "sequence_ops"):
        from rollverify.core import off_policy_shift as module
    elif name == "verify":
        from rollverify.core import verify as module
    elif name == "AcceptanceMonitor":
        from rollverify.core import switching as module
    else:
        raise AttributeError(f"module 'rollverify' has no attribute {name!r}")
    return getattr(module, name)
