"""The config's one error: every problem found in it, one line each, naming the field and the
fix. Every part of the config raises it; so do the parts that check a config's values later
(a custom reward when the task is made, a run's inputs before it starts)."""

from __future__ import annotations


class ConfigError(ValueError):
    """Every problem found in a config, one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))
