"""Where a path in a config points, so that an installed package works from any folder.

The package ships its assets in rollverify/assets/: the embedded model (models/), the math data
(data/math/) and the paper's models' configs (model_configs/). The training recipes
(experiments/) and sweep grids (sweeps/) live at the repository's top level, where a researcher
looks for them; a wheel carries them in rollverify/assets/ too (setup.py maps them there at
build time), and a checkout finds them at its top level. A relative path resolves against the
config file's folder, then the working directory, then those shipped folders; so
`models/tiny-qwen3-chain` or `--config experiments/default.yaml` mean the shipped ones wherever
nothing of that name is at hand.
"""

from __future__ import annotations

import os
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "assets"  # rollverify/assets
TOP_LEVEL = ("experiments", "sweeps")  # at the repository's top level; in ASSETS in a wheel


def _checkout() -> Path | None:
    """The repository's top level when the package runs from a checkout (an editable
    install): where experiments/ and sweeps/ are; None in an installed wheel."""
    top = ASSETS.parents[1]
    if (top / "pyproject.toml").is_file() and all((top / n).is_dir() for n in TOP_LEVEL):
        return top
    return None


CHECKOUT = _checkout()


def shipped_roots(name: str | Path) -> list[Path]:
    """Where a shipped `name` may be: the package's assets, and for the recipes and grids
    (experiments/..., sweeps/...) the checkout's top level too. Nothing else is looked for in
    the checkout: a file of the user's there is found (and kept) as any other of theirs."""
    top_level = CHECKOUT is not None and Path(name).parts[:1] in [(n,) for n in TOP_LEVEL]
    return [ASSETS, CHECKOUT] if top_level else [ASSETS]


def shipped(name: str | Path) -> Path:
    """A shipped file or folder by its name (`experiments/default.yaml`, `models/...`),
    wherever this install keeps it."""
    found = next((root / name for root in shipped_roots(name) if (root / name).exists()), None)
    return found if found is not None else ASSETS / name


HUB_DATA = "hf:"  # a data file that is a hub dataset: hf:OWNER/NAME[:CONFIG][@SPLIT]


def is_hub_data(path: str | Path) -> bool:
    """A data file given as a hub dataset (rollverify/tasks/data/hub_data.py reads it)."""
    return str(path).startswith(HUB_DATA)


def candidates(path: str | Path, folder: Path | None = None) -> list[Path]:
    """Where `path` is looked for, in order (an absolute path: only itself)."""
    path = Path(path)
    if path.is_absolute():
        return [path]
    return [Path(os.path.normpath(root / path)) for root in [*roots(folder), *shipped_roots(path)]]


def locate(path: str | Path, folder: Path | None = None) -> Path | None:
    """The first of `candidates` that exists, or None."""
    return next((c for c in candidates(path, folder) if c.exists()), None)


def canonical(path: str, folder: Path | None = None) -> str:
    """How a config keeps `path`: absolute where it was found in the config's folder or the
    working directory; a shipped asset by its name (the same on every install, so a run's
    config.yaml compares equal on resume); as given where nothing has it."""
    found = locate(path, folder)
    if found is None or Path(path).is_absolute() or found == shipped(path):
        return path
    return str(found)


def searched(path: str | Path, folder: Path | None = None) -> str:
    """Where `path` was looked for, for an error message."""
    if Path(path).is_absolute():
        return str(path)
    places = ", ".join(str(root) for root in roots(folder))
    shipped_places = ", ".join(map(str, shipped_roots(path)))
    return f"{path} in {places} or the package's data ({shipped_places})"


def roots(folder: Path | None) -> list[Path]:
    """The config's folder (if any), then the working directory; once each."""
    roots = [Path(os.path.abspath(folder))] if folder is not None else []
    return list(dict.fromkeys([*roots, Path.cwd()]))
