"""The training recipe (run.py), the step (loop.py), TRL glue and checkpoints."""

import importlib

# TRL imports vLLM as it loads, for its own vLLM generation, which we do not use: our engines
# run vLLM in sidecar processes. Told that vLLM is absent, TRL does not load it in the trainer
# process: `import rollverify.training.run` takes 17 s instead of 25 s here (measured). This
# runs before any module of this package imports trl.
importlib.import_module("trl.import_utils").is_vllm_available = lambda min_version=None: False
