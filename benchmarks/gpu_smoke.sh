#!/usr/bin/env bash
# The first run on a GPU (benchmarks/gpu_smoke.py): gpu_check, then rvctl train and resume on
# CUDA with a Qwen3-0.6B-shaped model, grpo and rollverify; JSON in $OUT (or ./gpu_smoke).
# Sized for 8 minutes on one H100/H200. Its image has torch and transformers (Python 3.12) but
# not what rvctl imports besides: carry those as wheels (benchmarks/gpu_smoke_wheels.py downloads
# them here into .whl/), and name their folder in WHEELS: they are installed first, into /tmp/site.
#     [WHEELS=.whl] [OUT=DIR] benchmarks/gpu_smoke.sh [--toy] [gpu_smoke.py's options]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$WHEELS"/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT:-gpu_smoke}"
nvidia-smi -L 2>/dev/null || true
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
exec python3 benchmarks/gpu_smoke.py --out "$out" "$@"
