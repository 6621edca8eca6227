"""The format of `task.reward` and where its module is, for the config's loading: the field's
rule (`is_reward_spec`) and the module or file found without importing it (`resolve_reward`,
from config/resolve_paths.py). The function itself is imported and checked when the task is
made (rollverify/tasks/custom_reward.py, whose docstring gives the rules)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from rollverify.infra.paths import locate, roots, searched

FIELD = "task.reward"


def is_reward_spec(value: str | None) -> bool:
    """The field's rule: None, `dotted.module:attr.path` or `path/to/file.py:attr.path`."""
    if value is None:
        return True
    target, colon, attr = value.rpartition(":")
    if not colon or not target or not attr:
        return False
    if not all(part.isidentifier() for part in attr.split(".")):
        return False
    if is_path(target):
        return "\x00" not in target and Path(target).name != ".py"
    return all(part.isidentifier() for part in target.split("."))


def is_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


# -- at config load: where the module is ----------------------------------------------------


def resolve_reward(spec: str | None, folder: Path | None, problems: list[str]) -> str | None:
    """`spec` as a config keeps it (for config/resolve_paths.py): a module or file found in the
    config's `folder` or the working directory becomes the absolute path of its file (so a
    run's config.yaml imports the same file on resume, from any folder); an installed module
    stays as given. Nothing is imported; a module found nowhere is one line in `problems`."""
    if spec is None or not is_reward_spec(spec):
        return spec
    target, _, attr = spec.rpartition(":")
    if is_path(target):
        found = locate(target, folder)
        if found is None or not found.is_file():
            problems.append(f"{FIELD}: no file {searched(target, folder)}; fix the path")
            return spec
        return f"{found.resolve()}:{attr}"
    for root in roots(folder):
        found = _module_file(root, target)
        if found is not None:
            return f"{found}:{attr}"
    top = target.split(".")[0]
    try:
        installed = importlib.util.find_spec(top) is not None  # a top-level name runs nothing
    except (ImportError, ValueError):
        installed = False
    if not installed:
        where = ", ".join(str(root) for root in roots(folder))
        problems.append(
            f"{FIELD}: no module {top!r} for {spec!r} in {where} or the installed packages; "
            "fix the name, or give the file: path/to/file.py:function"
        )
    return spec


def _module_file(root: Path, dotted: str) -> Path | None:
    """The file of module `dotted` under `root` (a.b -> a/b.py or a/b/__init__.py), or None."""
    base = root.joinpath(*dotted.split("."))
    for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.resolve()
    return None
