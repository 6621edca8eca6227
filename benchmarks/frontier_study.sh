#!/bin/bash
# Issue 61's runs on experiments/stale.yaml, each part's question written in docs/results.md
# ("Questions stated before their runs") before it ran; ~2.5-5 minutes a run, two at a time:
#     benchmarks/frontier_study.sh [OUT]          # default OUT: runs/frontier-study
# Parts resume where they stopped (benchmarks/study_sweep.sh). Tables: `rvctl report` on the
# parts' folders (OUT/*.dir) with --frontier (against grpo at the same learning rate:
# --vs grpo --by train.learning_rate).
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
OUT=${1:-runs/frontier-study}; mkdir -p "$OUT"; cd "$OUT"
RV=${RV:-$ROOT/.venv/bin/rvctl}
PY=$ROOT/.venv/bin/python
source "$ROOT/benchmarks/study_sweep.sh"  # sweep()
LR=0.0005  # experiments/stale.yaml's (the embedded default's)
LR4=0.000125 LR16=0.00003125
# 1. the step size: does the switch step move with the per-version drift as drift/ds predicts?
sweep step_size method learning_rate --method grpo,partial,rollverify --learning_rate $LR4,$LR16
# ... and seeds 5-7 where a point is decisive (question 3: within 0.02 AUC of grpo at >= 30% saved)
SEEDS=3 sweep step_size_more method learning_rate --method grpo,rollverify \
  --learning_rate $LR4 --set train.seed=5
# 2. thresholds in drift units (docs/rules.md, section 3): does auto's switch step stay put?
# (one part per learning rate, the shipped one first: where ds 0.01 fails at once; 3 seeds at
# lr/4 and lr/16 for the time one session had: their question is acceptance and the switch)
for part in auto:$LR:5 auto4:$LR4:3 auto16:$LR16:3; do
  IFS=: read -r name rate seeds <<< "$part"
  SEEDS=$seeds sweep $name learning_rate --method rollverify --learning_rate $rate \
    --set verify.ds=auto --set verify.dt=auto
done
# 3. the frontier's points at the shipped step size, and grpo there to pair them with (and
# partial: the drift at the shipped step size; rollverify's switch there is Table 3's)
sweep shipped method --method grpo,partial
# ... or, first, grpo's seeds 0 and 1: if they repeat the staleness study's run to the last digit,
# that study's committed per-seed rows pair with these (benchmarks/frontier_seed_rows.py)
SEEDS=2 sweep grpo_check method --method grpo
sweep ds_loose ds dt --ds 0.02,0.03 --dt 0.2,2
sweep switch_low switch_threshold --switch_threshold 0.3
# (rollverify itself at eta 8, ds 0.01, is the staleness study's: docs/results/stale/)
sweep async8 method eta --method rollverify-seq-token --eta 8 --set rollout.mode=async
sweep async8_auto eta --method rollverify --eta 8 --set rollout.mode=async \
  --set verify.ds=auto --set verify.dt=auto
# 4. the composition: does verification with OPSM's mask in the loss beat both?
sweep composed method --method rollverify-opsm
# 5. issue 77, the decisive point (question stated in the issue and docs/results.md before its
# runs): at lr/4, is RollVerify (paper's thresholds) within 0.01 AUC of grpo (--margin 0.01),
# and above partial, at what modeled saving? 16 seeds a method in one store (seeds 0-7 repeat
# the step_size parts' runs, a check that they pair), opsm on seeds 0-4. ~2 hours two at a time.
SEEDS=16 sweep decisive method learning_rate --method grpo,partial,rollverify \
  --learning_rate $LR4
sweep decisive_opsm method learning_rate --method opsm --learning_rate $LR4
