"""The config's paths (model.path, task.reward, task.train_file, task.eval_file,
task.eval_files) found where rollverify/infra/paths.py looks for them, or reported where found
nowhere (data files: when training starts, run_config.missing_data)."""

from __future__ import annotations

from pathlib import Path

from rollverify.config.reward_spec import resolve_reward
from rollverify.config.run_config import RunConfig
from rollverify.infra.paths import candidates, canonical, locate, searched


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
    # Data files: made absolute where found; a missing one is kept as given and reported
    # when training starts (run_config.missing_data), so that a config whose data is elsewhere still
    # loads for what needs no data (rvctl simulate, report, a look at the config).
    for set_name, given in config.task.eval_files.items():
        config.task.eval_files[set_name] = _found_or_given(given, folder)
    for name in ("train_file", "eval_file"):
        setattr(config.task, name, _found_or_given(getattr(config.task, name), folder))


def _found_or_given(given: str, folder: Path | None) -> str:
    found = locate(given, folder)
    return canonical(given, folder) if found is not None else given


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
