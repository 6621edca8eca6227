"""The package's shape: nothing at the top of rollverify/ but packages (and the assets they
ship), its parts importing downward only, and no import cycle anywhere, counting imports made
inside functions and under TYPE_CHECKING. The parts and their order are import-linter
contracts in pyproject.toml; this file runs them."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

import rollverify

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rollverify"
DATA_FOLDERS = {"assets", "__pycache__"}  # package data, not code
MOST_LINES = 400  # a module longer than this is split along the design (docs/layout.md)
# The parts below training/ (pyproject.toml's layers): each takes its own settings, never the
# whole RunConfig (docs/layout.md, "Settings").
BELOW_TRAINING = ("tasks", "rollout", "cost", "tracking", "core", "infra", "tools")


def test_the_top_of_rollverify_holds_packages_only():
    modules = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert modules == [], f"put {modules} in one of the parts (rollverify/__init__.py lists them)"
    not_packages = sorted(
        p.name
        for p in PACKAGE.iterdir()
        if p.is_dir() and p.name not in DATA_FOLDERS and not (p / "__init__.py").is_file()
    )
    assert not_packages == [], f"folders without __init__.py: {not_packages}"


def test_the_parts_import_downward_only_and_no_module_imports_itself_back():
    """pyproject.toml's contracts: the parts' layers (exhaustive: a new part must be placed),
    rvctl on top, and acyclic siblings at every depth (a cycle between two modules anywhere
    is a cycle between siblings of their closest common package). The broken contracts and
    the imports that break them are printed above the failure."""
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def test_imports_inside_functions_and_under_type_checking_are_in_the_graph():
    """What the contracts see: grimp reads every import statement of a module, not only those
    at its top (these two exist only inside a function, and only for the type checker)."""
    graph = grimp.build_graph("rollverify", cache_dir=None)  # TYPE_CHECKING imports kept
    # check_grid's import of preflight; RunPlan for the type checker
    inside_a_function = ("rollverify.experiments.sweep", "rollverify.training.preflight")
    for_the_type_checker = ("rollverify.training.run_plan", "rollverify.config")  # RunPlan
    for importer, imported in (inside_a_function, for_the_type_checker):
        assert graph.direct_import_exists(importer=importer, imported=imported)


def test_the_paper_rules_are_importable_from_the_package():
    from rollverify import AcceptanceMonitor, sequence_ops, token_ops, verify
    from rollverify.core.off_policy_shift import token_ops as defined

    assert token_ops is defined and callable(sequence_ops) and callable(verify)
    assert AcceptanceMonitor(window=2, threshold=0.5).switched is False
    assert sorted(rollverify.__all__) == sorted(
        ["AcceptanceMonitor", "__version__", "sequence_ops", "token_ops", "verify"]
    )


def run_config_readers(folder: Path) -> list[str]:
    """Where modules under `folder` name RunConfig: an import of it (anywhere, under
    TYPE_CHECKING too) or a use of the name (an annotation, config.RunConfig)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [a.name for a in node.names]
                names += ["RunConfig"] if (node.module or "").endswith("run_config") else []
            elif isinstance(node, ast.Import):
                names = ["RunConfig" for a in node.names if a.name.endswith("run_config")]
            elif isinstance(node, ast.Name | ast.Attribute):
                names = [node.id if isinstance(node, ast.Name) else node.attr]
            if "RunConfig" in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_part_below_training_reads_the_whole_run_config():
    """The whole RunConfig is read in training/ and above; the parts below take what they
    need: their section, or a settings object training/ builds (cost_settings.py, parts.py)."""
    readers = [r for part in BELOW_TRAINING for r in run_config_readers(PACKAGE / part)]
    assert readers == [], f"take the part's own settings instead of RunConfig: {readers}"
    assert run_config_readers(PACKAGE / "training"), "the check finds RunConfig where it is"


def test_no_module_is_over_400_lines():
    """Every module of rollverify/ and rvctl/ reads in a sitting: a longer one is split where
    the design has a seam (the step and the asynchronous schedule, the kernel by what it
    models), not at its 400th line."""
    modules = [*PACKAGE.rglob("*.py"), *(ROOT / "rvctl").rglob("*.py")]
    long = {
        str(p.relative_to(ROOT)): n
        for p in modules
        if (n := len(p.read_text().splitlines())) > MOST_LINES
    }
    assert long == {}, f"split these along the design: {long}"
