"""Reading a config: defaults <- YAML file <- overrides, every problem reported at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rollverify.config.check_links import check_links
from rollverify.config.coercion import build_section
from rollverify.config.resolve_paths import resolve_paths
from rollverify.config.run_config import RunConfig
from rollverify.paths import locate


class ConfigError(ValueError):
    """Every problem found in a config, one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> RunConfig:
    """Defaults <- YAML file <- overrides ({"train.steps": 10}); all problems raised at once."""
    data: dict[str, Any] = {}
    folder = None  # relative paths: from here first
    if path is not None:
        found = locate(path)  # a shipped config by its name, where nothing here has that name
        path = found if found is not None and found.is_file() else Path(path)
        data = _read_yaml(path)
        folder = path.parent
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, key = dotted.rpartition(".")
        target = data.setdefault(section, {}) if section else data
        if not isinstance(target, dict):
            raise ConfigError([f"{section}: must be a mapping to set {dotted}"])
        target[key] = value
    problems: list[str] = []
    config = build_section(RunConfig, data, "", problems)
    if not problems:
        resolve_paths(config, folder, problems)
        check_links(config, problems)
    if problems:
        raise ConfigError(problems)
    return config


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(
            [f"--config {path}: cannot read it ({error.strerror}); check the path"]
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(
            [f"--config {path}: malformed YAML{where}; fix the syntax there"]
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"--config {path}: the top level must be a mapping of sections"])
    return data
