"""benchmarks/vllm_compat.py: the vLLM names the code uses are found in the code, and a release
that lacks one (or takes it with another signature) is reported, on a small fake vLLM tree and
a small fake project; the committed check covers every use of today's code, and the releases
it passed are exactly the ones the `gpu` extra and rollverify/infra/vllm_versions.py admit."""

from __future__ import annotations

import json
import re
import textwrap
import tomllib
from pathlib import Path

import pytest

from benchmarks.vllm_compat import INCOMPATIBLE, MISSING, OK, UNCHECKED, main, report
from benchmarks.vllm_uses import used_names
from rollverify.infra.vllm_versions import CHECKED, DEFAULT_BLOCK_SIZE, GPU_STACK

ROOT = Path(__file__).parents[1]
RESULT = ROOT / "benchmarks" / "results" / "vllm_compat.json"

FAKE_VLLM = {
    "vllm/__init__.py": """
        from vllm.sampling_params import SamplingParams
        __version__ = "0.99.0"
    """,
    "vllm/sampling_params.py": """
        import enum

        class RequestOutputKind(enum.Enum):
            CUMULATIVE = 0
            DELTA = 1

        class SamplingParams:
            temperature: float = 1.0
            max_tokens: int | None = 16
            seed: int | None = None
    """,
    "vllm/_cpu_ops.py": """
        _supports_onednn = True
    """,
    "vllm/plugins/__init__.py": """
        DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
    """,
    "vllm/config/cache.py": """
        from typing import ClassVar

        class CacheConfig:
            DEFAULT_BLOCK_SIZE: ClassVar[int] = 32
            block_size: int = 0
    """,
    "vllm/engine/arg_utils.py": """
        from dataclasses import dataclass

        @dataclass
        class EngineArgs:
            model: str = "m"
            seed: int = 0

        @dataclass
        class AsyncEngineArgs(EngineArgs):
            enable_log_requests: bool = False
    """,
    "vllm/v1/engine/async_llm.py": """
        from vllm.engine.arg_utils import AsyncEngineArgs

        class AsyncLLM:
            def __init__(self, vllm_config):
                self.vllm_config = vllm_config

            @classmethod
            def from_engine_args(cls, engine_args: AsyncEngineArgs, stat_loggers=None):
                return cls(None)

            async def generate(self, prompt, sampling_params, request_id, *, priority=0):
                yield None

            async def abort(self, request_id):
                pass
    """,
    "vllm/v1/metrics/loggers.py": """
        from abc import ABC, abstractmethod

        class StatLoggerBase(ABC):
            def __init__(self, vllm_config, engine_index=0):
                pass

            @abstractmethod
            def record(self, scheduler_stats, iteration_stats, engine_idx=0):
                ...

            def log(self):
                pass
    """,
}

FAKE_CODE = {
    "pyproject.toml": """
        [project]
        name = "fake"
        [project.entry-points."vllm.general_plugins"]
        ours = "fake.plugin:hook"
    """,
    "rollverify/config/passthrough.py": """
        VLLM_OWNED = {"model": "model.path", "seed": "train.seed"}
        VLLM_DEFAULTS = set()
    """,
    "rollverify/uses.py": """
        from __future__ import annotations

        from typing import TYPE_CHECKING, TypedDict

        from rollverify.infra.vllm_versions import VLLMAlternatives

        if TYPE_CHECKING:
            from vllm.v1.engine.async_llm import AsyncLLM

        FLAG_HOMES: VLLMAlternatives = (
            "vllm._cpu_ops._supports_onednn",
            "vllm._ops._supports_onednn",
        )


        class Fields(TypedDict, total=False):
            temperature: float


        class Sidecar:
            def __init__(self) -> None:
                self.llm: AsyncLLM | None = None

            async def start(self, kwargs: dict) -> None:
                from vllm.engine.arg_utils import AsyncEngineArgs
                from vllm.v1.engine.async_llm import AsyncLLM

                kwargs["enable_log_requests"] = True
                self.llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=[])

            async def add(self, sampling: Fields) -> None:
                from vllm import SamplingParams
                from vllm.sampling_params import RequestOutputKind

                params = SamplingParams(**sampling, max_tokens=4, seed=1)
                kind = RequestOutputKind.DELTA
                async for out in self.llm.generate("p", params, "r0"):
                    pass
                await self.llm.abort("r0")


        def trace():
            from vllm.v1.metrics.loggers import StatLoggerBase

            class Trace(StatLoggerBase):
                def __init__(self, vllm_config, engine_index=0):
                    pass

                def record(self, scheduler_stats, iteration_stats, engine_idx=0):
                    pass

            return Trace
    """,
}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    for folder in (root / "vllm").rglob("*") if (root / "vllm").is_dir() else []:
        if folder.is_dir() and not (folder / "__init__.py").exists():
            (folder / "__init__.py").write_text("")  # packages, as in a wheel
    return root


@pytest.fixture
def fake(tmp_path):
    """(the fake project's root, the fake vLLM tree)."""
    return write_tree(tmp_path / "code", FAKE_CODE), write_tree(tmp_path / "tree", FAKE_VLLM)


def statuses(code: Path, tree: Path) -> dict[tuple[str, str], str]:
    result = report("fake", tree, used_names(code))
    return {(u["kind"], u["name"]): u["status"] for u in result["uses"]}


def test_the_uses_of_the_code_are_found_in_it(fake):
    code, _ = fake
    names = {(u.kind, u.name) for u in used_names(code)}
    assert {
        ("module", "vllm.v1.engine.async_llm"),
        ("name", "vllm.sampling_params.RequestOutputKind"),
        ("attribute", "vllm.sampling_params.RequestOutputKind.DELTA"),
        ("attribute", "vllm.v1.engine.async_llm.AsyncLLM.generate"),  # typed by self.llm: ...
        ("call", "vllm.v1.engine.async_llm.AsyncLLM.abort"),
        ("override", "vllm.v1.metrics.loggers.StatLoggerBase.record"),
        ("abstract", "vllm.v1.metrics.loggers.StatLoggerBase"),
        ("engine argument", "vllm.engine.arg_utils.AsyncEngineArgs.seed"),
        ("entry point", "vllm.general_plugins"),
        ("one of", "vllm._cpu_ops._supports_onednn | vllm._ops._supports_onednn"),
    } <= names
    calls = {u.name: u for u in used_names(code) if u.kind == "call"}
    # a TypedDict's fields are the keywords its ** splat gives; a dict's, the keys stored in it
    assert calls["vllm.SamplingParams"].keywords == ["max_tokens", "seed", "temperature"]
    assert calls["vllm.engine.arg_utils.AsyncEngineArgs"].keywords == ["enable_log_requests"]
    # and in today's code: a parameter annotated with a vLLM type (the sidecar's stat logger)
    real = {(u.kind, u.name) for u in used_names(ROOT)}
    assert ("attribute", "vllm.v1.metrics.stats.IterationStats.iteration_timestamp") in real
    # a use added to the code is found the day it lands
    uses = code / "rollverify" / "uses.py"
    uses.write_text(uses.read_text() + "\nimport vllm.brand_new as brand_new\nbrand_new.thing\n")
    assert ("attribute", "vllm.brand_new.thing") in {(u.kind, u.name) for u in used_names(code)}


def test_a_release_with_every_name_passes(fake):
    result = report("fake", fake[1], used_names(fake[0]))
    assert result["passes"], [u for u in result["uses"] if u["status"] != OK]
    assert result["default_block_size"] == 32


LOGGERS = "vllm/v1/metrics/loggers.py"
BREAKS = [
    # (file of the fake release, what it had, what it has now, the use now reported, status)
    ("vllm/_cpu_ops.py", "_supports_onednn = True", "supports = True", "one of", MISSING),
    ("vllm/sampling_params.py", "DELTA = 1", "DELTAS = 1", "attribute", MISSING),
    ("vllm/sampling_params.py", "    seed: int | None = None", "", "call", INCOMPATIBLE),
    ("vllm/v1/engine/async_llm.py", "request_id, *,", "*, request_id,", "call", INCOMPATIBLE),
    ("vllm/v1/engine/async_llm.py", "async def abort", "async def cancel", "attribute", MISSING),
    ("vllm/v1/engine/async_llm.py", "stat_loggers=None", "loggers=None", "call", INCOMPATIBLE),
    ("vllm/engine/arg_utils.py", "    seed: int = 0", "", "engine argument", MISSING),
    ("vllm/engine/arg_utils.py", "enable_log_requests", "log_requests", "call", INCOMPATIBLE),
    (LOGGERS, "def record(", "def record_stats(", "override", MISSING),
    (LOGGERS, "engine_idx=0)", "engine_idx=0, mm=None)", "override", INCOMPATIBLE),
    (LOGGERS, "def log(", "@abstractmethod\n    def log(", "abstract", INCOMPATIBLE),
    ("vllm/plugins/__init__.py", "vllm.general_plugins", "vllm.plugins", "entry point", MISSING),
    ("vllm/v1/engine/async_llm.py", "class AsyncLLM", "class AsyncEngine", "name", MISSING),
]  # fmt: skip


@pytest.mark.parametrize("file,had,has,kind,status", BREAKS, ids=[b[2] or b[1] for b in BREAKS])
def test_a_release_that_lacks_a_used_name_is_reported(fake, file, had, has, kind, status):
    code, tree = fake
    path = tree / file
    assert had in path.read_text()
    path.write_text(path.read_text().replace(had, has))
    found = statuses(code, tree)
    broken = {use: s for use, s in found.items() if s in (MISSING, INCOMPATIBLE)}
    assert any(k == kind and s == status for (k, _), s in broken.items()), broken
    assert not report("fake", tree, used_names(code))["passes"]


def test_the_command_line_exits_1_and_writes_what_it_found(fake, tmp_path, capsys):
    code, tree = fake
    (tree / "vllm/_cpu_ops.py").write_text("")
    out = tmp_path / "compat.json"
    assert main(["--tree", str(tree), "--root", str(code), "--out", str(out)]) == 1
    written = json.loads(out.read_text())["releases"][0]
    assert written["counts"][MISSING] == 1 and not written["passes"]
    shown = capsys.readouterr().out
    assert "│ NO " in shown and "│ missing │ one of" in shown


def test_the_committed_check_covers_every_use_of_todays_code():
    """Every vLLM use of the code was checked against every checked release: a new one fails
    this until benchmarks/vllm_compat.py runs again (its command is in the JSON)."""
    document = json.loads(RESULT.read_text())
    wanted = {(u.kind, u.name, tuple(u.keywords), u.positional) for u in used_names(ROOT)}
    for release in document["releases"]:
        checked = {
            (u["kind"], u["name"], tuple(u["keywords"]), u["positional"]) for u in release["uses"]
        }
        assert wanted <= checked, f"{release['release']}: not checked: {sorted(wanted - checked)}"
        assert all(u["status"] in (OK, UNCHECKED) for u in release["uses"]) == release["passes"]


def test_the_releases_admitted_are_those_that_passed():
    document = json.loads(RESULT.read_text())
    passed = {tuple(r["release"].split()) for r in document["releases"] if r["passes"]}
    assert set(CHECKED) == passed
    blocks = {r["release"].split()[1]: r["default_block_size"] for r in document["releases"]}
    assert all(blocks[v] == size for v, size in DEFAULT_BLOCK_SIZE.items())
    gpu = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (requirement,) = gpu["optional-dependencies"]["gpu"]
    low, high = re.fullmatch(r"vllm>=([\d.]+),<=([\d.]+)", requirement).groups()
    cuda = sorted(
        (v for d, v in CHECKED if d == "vllm"), key=lambda v: [int(p) for p in v.split(".")]
    )
    assert (low, high) == (cuda[0], cuda[-1])
    pinned = (ROOT / "constraints-gpu.txt").read_text()
    assert f"\nvllm=={GPU_STACK}\n" in pinned and GPU_STACK in cuda
