# Shared by the study scripts (stale_study.sh, frontier_study.sh): run from the study's folder
# OUT with ROOT, RV and PY set. `sweep PART ARGS...` runs `rvctl sweep ARGS` on
# experiments/stale.yaml, 5 seeds (SEEDS=8: eight; `SEEDS=3 sweep ...`: one part's), its folder recorded in PART.dir as soon as it exists, so that
# running the script again resumes the part where it stopped (`--sweep-dir`); ONLY="a b" runs
# parts a and b alone. Never pause a sweep's trials (SIGSTOP, e.g. to run the tests): Ray's
# keepalive watchdog fails a stopped actor within minutes (running the script again resumes it).
sweep() {  # part name, sweep arguments...  (ONLY="part1 part2": those parts alone)
  local part=$1; shift
  local COMMON="--config $ROOT/experiments/stale.yaml --seeds ${SEEDS:-5} --engine hf --set train.threads=1 --tracking-uri sqlite:///$PWD/stale.db --output runs"
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $part "* ]]; then return; fi
  echo "$part start $(date)"
  local folder; folder=$(cat $part.dir 2>/dev/null)
  if [ -n "$folder" ] && [ -d "$folder" ]; then
    $RV sweep "$@" $COMMON --sweep-dir "$folder" -f json > $part.json 2> $part.err
  else
    ls -d runs/sweep-* > .before 2>/dev/null
    $RV sweep "$@" $COMMON -f json > $part.json 2> $part.err &
    local pid=$!
    for _ in $(seq 60); do
      sleep 2
      folder=$(comm -13 .before <(ls -d runs/sweep-* 2>/dev/null) | head -1)
      [ -n "$folder" ] && { echo "$folder" > $part.dir; break; }
    done
    wait $pid
  fi
  echo "$part end $(date) rc=$?"
}
