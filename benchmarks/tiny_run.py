"""The tiny run that end-to-end tests and the fault benchmarks start from: the shipped tiny
model on short chains, a few seconds a step on 2 CPU cores (tests/runs.py builds on it)."""

from __future__ import annotations

from pathlib import Path

import yaml

# The tiny run every end-to-end test starts from (each adds what it needs): a few seconds per
# step on 2 CPU cores. Short chains, 2 groups of 2, 8 slots (so partial methods pause), 64 new
# tokens, 3 steps, no evaluation but the base model's, one thread, the in-process hf engine,
# no PNG curves.
TINY: dict[str, object] = {
    "train.steps": 3,
    "train.eval_every": 0,
    "train.threads": 1,
    "task.max_steps": 6,
    "task.eval_size": 8,
    "rollout.batch_groups": 2,
    "rollout.group_size": 2,
    "rollout.slots": 8,
    "rollout.max_new_tokens": 64,
    "rollout.engine": "hf",
    "tracking.plots": False,  # matplotlib: ~1 s a run (tests/test_tracking.py draws them)
}


def tiny_file(path: Path, *, leave_out: tuple[str, ...] = (), **overrides) -> Path:
    """The tiny run as a YAML config file at `path` (for the CLI and `load_config(path)`):
    TINY with overrides (dotted keys), without the keys in leave_out (their defaults apply,
    or the command line's options)."""
    settings = TINY | overrides
    unknown = set(leave_out) - set(settings)
    assert not unknown, f"leave_out names keys that are not set: {sorted(unknown)}"
    nested: dict[str, dict] = {}
    for key, value in settings.items():
        if key not in leave_out:
            section, name = key.split(".")
            nested.setdefault(section, {})[name] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(nested))
    return path
