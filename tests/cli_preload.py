"""What the forkserver of tests/cli.py's run_cli imports once, as `python -m rvctl.app` would:
the CLI, then (its environment quieted first, as main() does) the training stack."""

from rollverify.infra.quiet import quiet_environment

quiet_environment()

import rollverify.training.run  # noqa: E402, F401
import rvctl.app  # noqa: E402, F401
