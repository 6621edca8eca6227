"""rvctl compare's live display: a row per (method, seed) over a bar of the whole comparison."""

from rich.console import Console

from rollverify.experiments.compare import plan
from rvctl.commands.compare import Board


def rendered(board: Board) -> str:
    console = Console(width=100, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(board.view())
    return console.export_text()


def test_the_bar_counts_every_runs_steps_of_the_whole_comparison():
    grpo, partial = plan(["grpo", "partial"], 1, 0)
    board = Board([grpo, partial], steps=10)
    assert "0/20 steps" in rendered(board)
    board.update(grpo, -1, {})  # grpo starts
    board.update(grpo, 10, {"reward_mean": 0.5})
    board.update(partial, -1, {})
    board.update(partial, 3, {"reward_mean": 0.25})
    text = rendered(board)
    assert "13/20 steps" in text and "left" in text
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}
    assert "done" in rows["grpo/s0"] and "10/10" in rows["grpo/s0"]
    assert "running" in rows["partial/s0"] and "3/10" in rows["partial/s0"]
    board.update(partial, 10, {})
    assert "20/20 steps" in rendered(board)
