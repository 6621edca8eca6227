#!/bin/bash
# The staleness study of docs/results.md on experiments/stale.yaml, every part in order (~200
# runs of ~2.5-5 minutes each, two at a time on 2 cores: ~13 hours):
#     benchmarks/stale_study.sh [OUT]          # default OUT: runs/stale-study
# Each part is a sweep whose folder is recorded in OUT/PART.dir as soon as it exists, so running
# the script again resumes every part where it stopped (`--sweep-dir`): finished trials are
# kept, unfinished ones resume from their checkpoints. Tables: `rvctl report` on the parts'
# folders (OUT/*.dir): as it is (against grpo), `--table dose-response`, `--table composition`
# and, against another baseline (partial, the same method at dt 2), `--vs KEY=VALUE`.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-runs/stale-study}; mkdir -p "$OUT"; cd "$OUT"
RV=${RV:-$ROOT/.venv/bin/rvctl}  # (RV: another rvctl, e.g. to try the script)
PY=$ROOT/.venv/bin/python
source "$ROOT/benchmarks/study_sweep.sh"  # sweep()
sweep grpo_partial method --method grpo,partial
sweep table3 method --method partial-recomputed,rollverify-seq,rollverify-seq-token,rollverify
# the composition control (which groups train first, apart from how stale their tokens are),
# with eta 8 of the dose-response: its finish-order twin
sweep cap0 method max_staleness --method partial --max_staleness 0
sweep start_order method batch_order --method grpo,partial-recomputed --batch_order start --set rollout.mode=async --set rollout.eta=8
sweep dose8 method eta --method grpo,partial-recomputed,rollverify --eta 8 --set rollout.mode=async
# the dose-response of staleness alone (async grpo), then rollverify's ends, then whether the
# token stage acts at dt 0.2 (at the default ds; the verifying methods with and without
# switching), then the rest of the dose-response and the peers' corrections
sweep doseG method eta --method grpo --eta 0,16,2,4 --set rollout.mode=async
sweep doseR method eta --method rollverify --eta 0,16 --set rollout.mode=async
sweep dt02 method dt --method rollverify-seq-token,rollverify --dt 0.2
sweep doseR2 method eta --method rollverify --eta 2,4 --set rollout.mode=async
sweep corrections method --method tis,mis,icepop,opsm,decoupled,m2po
# the peer correction with the highest AUC difference to grpo in the method table
$RV report $(cat corrections.dir) $(cat grpo_partial.dir) --tracking-uri sqlite:///$PWD/stale.db -f json > method_table.json 2> method_table.err
BEST=$($PY -c "
import json
rows = json.load(open('method_table.json'))
peers = [r for r in rows if r['method'] in ('tis', 'mis', 'icepop', 'opsm', 'decoupled', 'm2po') and r.get('auc_diff_vs_grpo') is not None]
print(max(peers, key=lambda r: r['auc_diff_vs_grpo'])['method'] if peers else '')
")
echo "best correction: $BEST"
[ -n "$BEST" ] && sweep doseB method eta --method $BEST --eta 0,2,4,8,16 --set rollout.mode=async
# ds x dt (dt 0.2 at ds 0.01 is dt02's rollverify; dt 2 at ds 0.01 is table3's)
sweep dsdt ds dt --ds 0.005,0.05 --dt 0.2,2
# the peers' naive across the doses (its runs take 15-25 min each as it collapses)
sweep doseP method eta --method partial-recomputed --eta 0,2,4,16 --set rollout.mode=async
