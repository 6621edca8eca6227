#!/bin/bash
# Issue 77: the growing-length setting's preconditions (docs/results.md, "The paper's regime"),
# measured with grpo and partial only, seeds 0-2, on experiments/scratch.yaml; two runs at a time
# on the hf engine, one thread each (~11 minutes a run on 2 cores), then `rvctl preconditions`.
#     benchmarks/scratch_preconditions.sh [OUT]       # default OUT: runs/scratch
# Resumes: a run OUT/done.txt lists as finished is not run again.
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
OUT=${1:-runs/scratch}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
RV=${RV:-$ROOT/.venv/bin/rvctl}
CONFIG=$ROOT/experiments/scratch.yaml
touch "$OUT/done.txt"

run() {  # run METHOD SEED
  grep -q "^$1 s$2 rc=0" "$OUT/done.txt" && return
  "$RV" train -c "$CONFIG" --engine hf --method "$1" --seed "$2" --set train.threads=1 \
    --output "$OUT" --tracking-uri "sqlite:///$OUT/mlflow.db" > "$OUT/$1-s$2.log" 2>&1
  echo "$1 s$2 rc=$? $(date)" >> "$OUT/done.txt"
}

for seed in 0 1 2; do
  run grpo "$seed" & run partial "$seed" & wait
done
"$RV" preconditions -c "$CONFIG" --store "$OUT/mlflow.db" -f json > "$OUT/preconditions.json"
"$RV" preconditions -c "$CONFIG" --store "$OUT/mlflow.db"
