"""The config's paths (model.path, task.train_file, task.eval_file, task.eval_files) found
where rollverify/paths.py looks for them, or reported where found nowhere."""

from __future__ import annotations

from pathlib import Path

from rollverify.config.run_config import RunConfig
from rollverify.paths import candidates, canonical, locate, searched
from rollverify.tasks.custom_reward import resolve_reward


def resolve_paths(config: RunConfig, folder: Path | None, problems: list[str]) -> None:
    """Relative paths from `folder`, the working directory or the package's data; each made
    absolute where found outside the package, reported where found nowhere."""
    model = config.model.path
    found = locate(model, folder)
    if found is not None and found.is_dir():
        config.model.path = canonical(model, folder)
    elif not _is_hub_id(model, folder):
        problems.append(
            f"model.path: no model folder {searched(model, folder)}; fix the path (the default "
            "is rebuilt by `python -m rollverify.tiny.build --out "
            "rollverify/assets/models/tiny-qwen3-chain`)"
        )
    # task.reward: a module or file of the config's folder or the working directory, by path
    config.task.reward = resolve_reward(config.task.reward, folder, problems)
    for set_name, given in config.task.eval_files.items():
        found = locate(given, folder)
        if found is not None and found.is_file():
            config.task.eval_files[set_name] = canonical(given, folder)
        elif config.task.name == "math":
            problems.append(
                f"task.eval_files.{set_name}: no file {searched(given, folder)}; point it to a "
                "file of problems (see rollverify/assets/data/math/PROVENANCE.md)"
            )
    for name in ("train_file", "eval_file"):
        given = getattr(config.task, name)
        found = locate(given, folder)
        if found is not None and found.is_file():
            setattr(config.task, name, canonical(given, folder))
        elif config.task.name == "math":
            problems.append(
                f"task.{name}: no file {searched(given, folder)}; point it to a JSON list of "
                "problems (see rollverify/assets/data/math/PROVENANCE.md)"
            )


def _is_hub_id(path: str, folder: Path | None = None) -> bool:
    """Qwen/Qwen3-8B-Base: an organisation/name on the model hub, not a local folder (none of
    the places a relative path is looked for has a folder named like its first part)."""
    parts = path.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not any(c.exists() for c in candidates(parts[0], folder))
        and not path.startswith(".")
    )
