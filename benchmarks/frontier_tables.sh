#!/bin/bash
# docs/results.md's frontier tables and figures (issue 61) from benchmarks/frontier_study.sh's
# store and the staleness study's committed per-seed rows:
#     benchmarks/frontier_tables.sh [STUDY]      # default STUDY: runs/frontier-study
# Writes docs/results/frontier/: the step-size table (rvctl report --table step-size), the
# frontier at lr/4 and lr/16 (rvctl report --frontier), the frontier at the shipped learning
# rate (benchmarks/frontier_seed_rows.py: the committed rows' stand-ins beside the stored runs),
# and every part's per-seed rows.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STUDY=$(cd "${1:-runs/frontier-study}" && pwd)
RV=${RV:-$ROOT/.venv/bin/rvctl}
PY=$ROOT/.venv/bin/python
OUT=$ROOT/docs/results/frontier
URI=sqlite:///$STUDY/stale.db
mkdir -p "$OUT"
cd "$STUDY"  # (never a folder holding a `vllm` directory)
folder() { cat "$STUDY/$1.dir" 2>/dev/null | sed "s#^#$STUDY/#"; }
STEP=$(folder step_size) MORE=$(folder step_size_more)
AUTO=$(folder auto) AUTO4=$(folder auto4) AUTO16=$(folder auto16) CHECK=$(folder grpo_check)
COMPOSED=$(folder composed) LOOSE=$(folder ds_loose) LOW=$(folder switch_low)
ASYNC=$(folder async8) ASYNC_AUTO=$(folder async8_auto)  # (empty: not run)
SHIPPED="$AUTO $CHECK $COMPOSED $LOOSE $LOW $ASYNC $ASYNC_AUTO"  # this study's at 5e-4
PARTS="step_size step_size_more auto auto4 auto16 grpo_check composed ds_loose switch_low async8 async8_auto"
for part in $PARTS; do
  dir=$(folder $part)
  [ -n "$dir" ] && $RV report "$dir" --tracking-uri "$URI" --per-seed "$OUT/${part}_seeds.csv" -f json > /dev/null
done
# the step sizes: lr/4 and lr/16 against grpo at each (seeds 5-7 at lr/4 where they ran)
$RV report $STEP $MORE $AUTO4 $AUTO16 --tracking-uri "$URI" --table step-size -f md \
  --out "$OUT/step_size.json" > "$OUT/step_size.md"
$RV report $STEP $MORE $AUTO4 $AUTO16 --tracking-uri "$URI" --frontier -f md \
  --out "$OUT/step_size_frontier.json" --plots "$OUT/step_size" > "$OUT/step_size_frontier.md"
# the shipped learning rate: the staleness study's rows, and auto's runs paired with grpo's
# seeds 0-1 run again (grpo_check: the same figures to the last digit, or this is not valid)
SEEDS=$ROOT/docs/results/stale
PYTHONPATH=$ROOT $PY "$ROOT/benchmarks/frontier_seed_rows.py" \
  $SEEDS/{table3,corrections,dsdt,dt02,composition,dose_opsm,dose_partial_recomputed}_seeds.csv \
  --runs $SHIPPED --tracking-uri "$URI" --vs grpo,rollout.mode=sync \
  --out "$OUT/shipped_frontier.json" --plots "$OUT/shipped" --figure-floor -0.1 \
  > "$OUT/shipped_frontier.md"
PYTHONPATH=$ROOT $PY "$ROOT/benchmarks/frontier_seed_rows.py" \
  $SEEDS/{table3,corrections,dsdt,dt02,composition,dose_opsm,dose_partial_recomputed}_seeds.csv \
  --runs $SHIPPED --tracking-uri "$URI" --vs opsm,rollout.mode=sync \
  --out "$OUT/shipped_vs_opsm.json" > "$OUT/shipped_vs_opsm.md"
echo "wrote $OUT"
