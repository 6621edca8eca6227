"""The rvctl command line: wires the command modules together and owns the one error path."""

from __future__ import annotations

import os
import sys

import typer

from rvctl.commands import data

app = typer.Typer(
    name="rvctl",
    help="RollVerify: partial rollout for GRPO that verifies stale tokens before training.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(data.app, name="data")

USAGE_ERROR = 2


def main() -> None:
    """Entry point: a bad input prints one line and a hint, exit code 2, no traceback.

    RVCTL_DEBUG=1 shows the traceback instead.
    """
    try:
        app()
    except (ValueError, FileNotFoundError, PermissionError) as error:
        if os.environ.get("RVCTL_DEBUG"):
            raise
        # Plain print: rich would wrap a long path and read [brackets] in it as markup.
        print(f"error: {error}", file=sys.stderr)
        print("hint: RVCTL_DEBUG=1 shows the traceback", file=sys.stderr)
        sys.exit(USAGE_ERROR)


if __name__ == "__main__":
    main()
