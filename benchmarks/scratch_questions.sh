#!/bin/bash
# Issue 77: the paper's four questions on experiments/scratch.yaml (design v4), stated in
# docs/results.md ("The paper's questions in this setting") before these runs. 5 seeds per point:
# grpo, partial, opsm, rollverify (paper's thresholds), rollverify with auto thresholds,
# rollverify-seq-token; two runs at a time on the hf engine (~10-15 minutes a run on 2 cores).
#     benchmarks/scratch_questions.sh [OUT]        # default OUT: runs/scratch4
# OUT is the preconditions' folder (benchmarks/scratch_preconditions.sh): its grpo and partial
# seeds 0-2 are the first of theirs, in the same store. A run OUT/done.txt lists as finished is
# not run again; one that was stopped is resumed from its last checkpoint (rvctl resume).
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
OUT=${1:-runs/scratch4}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
RV=${RV:-$ROOT/.venv/bin/rvctl}
CONFIG=$ROOT/experiments/scratch.yaml
touch "$OUT/done.txt"

point_args() {  # the point's method and settings
  case $1 in
    rollverify-auto) echo "--method rollverify --set verify.ds=auto --set verify.dt=auto" ;;
    *) echo "--method $1" ;;
  esac
}

run() {  # run POINT SEED: its own folder OUT/q/POINT-sSEED, the study's store
  local name=$1-s$2 folder=$OUT/q/$1-s$2
  grep -q "^$name rc=0" "$OUT/done.txt" && return
  grep -q "^$1 s$2 rc=0" "$OUT/done.txt" && return  # (the preconditions' runs)
  if [ -n "$(ls -d "$folder"/*/ 2>/dev/null)" ]; then
    "$RV" resume "$folder" --engine hf --set train.threads=1 >> "$OUT/$name.log" 2>&1
  else
    mkdir -p "$folder"
    # shellcheck disable=SC2046
    "$RV" train -c "$CONFIG" --engine hf $(point_args "$1") --seed "$2" \
      --set train.threads=1 --output "$folder" --tracking-uri "sqlite:///$OUT/mlflow.db" \
      > "$OUT/$name.log" 2>&1
  fi
  echo "$name rc=$? $(date)" >> "$OUT/done.txt"
}

# the points and seeds: all six on seeds 0-4, or (the point deciding (c), paired) e.g.
#     POINTS="rollverify grpo partial" SEEDS="5 6 7" benchmarks/scratch_questions.sh
POINTS=${POINTS:-rollverify rollverify-auto opsm rollverify-seq-token grpo partial}
jobs=()
for seed in ${SEEDS:-0 1 2 3 4}; do
  for point in $POINTS; do jobs+=("$point $seed"); done
done
for ((i = 0; i < ${#jobs[@]}; i += 2)); do
  run ${jobs[i]} &
  [ $((i + 1)) -lt ${#jobs[@]} ] && run ${jobs[i + 1]} &
  wait
done
