"""The rvctl command line: wires the command modules together and owns the one error path."""

from __future__ import annotations

import os
import signal
import sys
import warnings

import typer
from typer._click import exceptions as usage  # typer 0.29 ships its own click

from rollverify.infra.quiet import quiet_environment
from rvctl.commands import (
    calibrate,
    compare,
    config,
    data,
    export,
    methods,
    plan,
    preconditions,
    report,
    simulate,
    sweep,
    train,
    ui,
)

app = typer.Typer(
    name="rvctl",
    help="RollVerify: partial rollout for GRPO that verifies stale tokens before training.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion for bash, zsh, fish, PowerShell
    rich_markup_mode=None,  # click's plain help: wrapped whole at any width, never cut
)


def _version(shown: bool) -> None:
    if shown:
        from rvctl.version import lines

        print("\n".join(lines()))
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="rollverify's version and commit, and torch's, TRL's, vLLM's; then exit.",
    ),
) -> None:
    """RollVerify: partial rollout for GRPO that verifies stale tokens before training."""


app.command("train", short_help="Train one run (any method); log it to MLflow.")(train.train)
app.command("resume", short_help="Continue a stopped or killed run from a checkpoint.")(
    train.resume
)
app.command("methods")(methods.methods)
app.command("compare", short_help="Train every method for every seed; the cost table.")(
    compare.compare
)
app.command(
    "sweep",
    short_help="Run a grid of trainings on Ray Tune; its table.",
    context_settings=sweep.CONTEXT,
)(sweep.sweep)
app.command("report", short_help="Accuracy, GPU-days and speedup per method or point.")(
    report.report
)
app.command("preconditions", short_help="Does a setting meet the staleness study's preconditions?")(
    preconditions.preconditions
)
app.command("plan", short_help="Which ds, and the long run's cost, from short pilot runs.")(
    plan.plan
)
app.command("simulate", short_help="Modeled GPU cost of the methods at scale.")(simulate.simulate)
app.command("calibrate", short_help="Fit the cost model's terms to a run's trace.")(
    calibrate.calibrate
)
app.command("export", short_help="Write a checkpoint's weights as a model folder.")(export.export)
app.command("ui", short_help="The MLflow UI on 127.0.0.1 over the runs' store.")(ui.ui)
app.add_typer(data.app, name="data")
app.add_typer(config.app, name="config")

USAGE_ERROR = 2


def main() -> None:
    """Entry point: a bad input prints one line, exit code 2, no traceback. A run failure
    that explains itself prints its line and a hint: RVCTL_DEBUG=1 shows the traceback."""
    quiet_environment()
    warnings.formatwarning = _one_line  # "warning: <what>", not the source line that warned
    # SIGTERM (kill, a scheduler's preemption) unwinds like Ctrl-C: the engine sidecars, Ray
    # and the MLflow run are closed by the context managers on the way out.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        # Not standalone: click's usage errors come here, to be told in one line like ours.
        code = app(standalone_mode=False)  # typer turns KeyboardInterrupt into 130
    except usage.NoArgsIsHelpError as error:
        error.show()  # `rvctl` or `rvctl data` alone: the help
        sys.exit(USAGE_ERROR)
    except usage.UsageError as error:  # an unknown option, a value of the wrong type
        message = " ".join(error.format_message().split()).rstrip(".")
        where = f"; see {error.ctx.command_path if error.ctx else 'rvctl'} --help"
        _fail(ValueError(message + where), USAGE_ERROR)
    except typer.Abort:  # end of input at a prompt
        sys.exit(1)
    except (ValueError, FileNotFoundError, PermissionError) as error:
        _fail(error, USAGE_ERROR)
    except Exception as error:
        # Run failures that explain themselves (e.g. the weight-sync check) carry exit_code.
        code = getattr(error, "exit_code", None)
        if not isinstance(code, int):
            raise
        _fail(error, code)
    if isinstance(code, int) and code:  # typer.Exit(code), Ctrl-C's 130
        sys.exit(code)


def _fail(error: Exception, code: int) -> None:
    if os.environ.get("RVCTL_DEBUG"):
        raise error
    # Plain print: rich would wrap a long path and read [brackets] in it as markup.
    for line in str(error).splitlines() or [type(error).__name__]:
        print(f"error: {line}", file=sys.stderr)
    hint = getattr(error, "hint", "RVCTL_DEBUG=1 shows the traceback")
    if code != USAGE_ERROR:  # the user's input is fine: the traceback may help
        print(f"hint: {hint}", file=sys.stderr)
    sys.exit(code)


def _one_line(message, category, filename, lineno, line=None) -> str:
    return f"warning: {message}\n"


def _raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
