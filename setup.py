"""The build mapping of the repository's top-level experiments/ and sweeps/ into the wheel, as
rollverify/assets/experiments and rollverify/assets/sweeps: one copy of each in the repository,
found by an installed package from any folder (rollverify/infra/paths.py). Everything else about
the package is in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

TOP_LEVEL = ("experiments", "sweeps")  # as rollverify/infra/paths.py's TOP_LEVEL


class BuildWithTopLevelAssets(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # a checkout finds them at its top level
            return
        root = Path(__file__).resolve().parent
        for name in TOP_LEVEL:
            target = Path(self.build_lib) / "rollverify" / "assets" / name
            shutil.copytree(root / name, target, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithTopLevelAssets})
