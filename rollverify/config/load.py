"""Reading a config: defaults <- YAML file <- overrides, every problem reported at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rollverify.config.check_links import check_links
from rollverify.config.coercion import build_section
from rollverify.config.errors import ConfigError
from rollverify.config.resolve_paths import resolve_paths
from rollverify.config.run_config import RunConfig
from rollverify.config.tiny_defaults import warn_tiny_defaults
from rollverify.infra.nested_dicts import config_fields
from rollverify.infra.paths import locate

# An override that sets a field to null (`--set train.micro_batch_size=null`); a plain None in
# the overrides means "not given: keep the config's value".
NULL = type("Null", (), {"__repr__": lambda self: "NULL"})()


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
        if value is not None:
            _put(data, dotted, None if value is NULL else value)
    problems: list[str] = []
    config = build_section(RunConfig, data, "", problems)
    if not problems:
        resolve_paths(config, folder, problems)
        check_links(config, problems)
    if problems:
        raise ConfigError(problems)
    warn_tiny_defaults(config, set(config_fields(data)))
    return config


def with_overrides(config: RunConfig, overrides: dict[str, Any]) -> RunConfig:
    """A checked copy of `config` with dotted fields replaced ({"train.seed": 1}; None: keep)."""
    wanted = {k: v for k, v in overrides.items() if v is not None}
    return load_config(overrides=config_fields(config.to_dict()) | wanted)


def _put(data: dict[str, Any], dotted: str, value: Any) -> None:
    """data["train"]["steps"] = value for "train.steps"; deeper names reach into a mapping
    field ("task.eval_sets.short")."""
    *path, key = dotted.split(".")
    target = data
    for depth, name in enumerate(path):
        target = target.setdefault(name, {})
        if not isinstance(target, dict):
            where = ".".join(path[: depth + 1])
            raise ConfigError([f"{where}: must be a mapping to set {dotted}"])
    target[key] = value


def parse_settings(texts: list[str] | None) -> dict[str, Any]:
    """`--set key=value` items as overrides: the value is read as YAML (1e-6, true, null,
    [1, 2], {short: 8}), the key is checked with the rest of the config."""
    settings: dict[str, Any] = {}
    for text in texts or []:
        key, equals, raw = text.partition("=")
        key = key.strip()
        if not equals or not key or any(not part for part in key.split(".")):
            raise ConfigError(
                [f"--set {text}: expected key=value, e.g. --set train.learning_rate=1e-6"]
            )
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            raise ConfigError(
                [f"--set {text}: the value is not valid YAML; quote it or fix the brackets"]
            ) from None
        settings[key] = NULL if value is None else value
    return settings


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
