#!/bin/bash
# One GPU-machine call's part of the benchmark record (issue 43.6).  The record takes longer than a call's
# 10 minutes, so each call measures a part: every GROUP in its own bench/run.py process (one that dies loses
# no other's figures), merged into $OUT/PART.json, the whole under BUDGET seconds.  Once every part is back:
#   python bench/run.py --join a.json b.json ...      # one record of one machine: doc/bench/results.json
#
#   bash scripts/gpu_record.sh PART GROUP...   # from the checkout's root on the GPU machine (carry .gpu)
#   bash scripts/gpu_record.sh a 1,2,3,3.5,6 4 5 7 8 9 10 11 12 13 14
#   bash scripts/gpu_record.sh b 15 16 17 18 19 26 32
#   bash scripts/gpu_record.sh c 20 22 44
#
# BENCH_ARGS go to every bench/run.py (e.g. --quick).  A GROUP is one --only (a scenario runs with those whose results it reads: 6 with 1 and 3).  One file a part
# comes back: the device tool returns few files, and none with a comma in its name.
PART=${1:?usage: bash scripts/gpu_record.sh PART GROUP...}
shift
OUT=${OUT:-/tmp/gpu_record}
BUDGET=${BUDGET:-540} # seconds for the whole part, the build included: the machine gives a call 600
BEGAN=$SECONDS
mkdir -p "$OUT"
[ -n "$PY" ] || source .gpu/enter.sh
$PY setup.py -q build_ext --inplace >/tmp/gpu_record_build.log 2>&1 || { tail -n 20 /tmp/gpu_record_build.log; exit 1; }
STATUS=0
for group in "$@"; do
  left=$((BUDGET - (SECONDS - BEGAN)))
  if [ $left -lt 20 ]; then
    echo "== not measured, out of time: $group"
    STATUS=1
    continue
  fi
  began=$SECONDS
  timeout --kill-after=10 $left $PY bench/run.py --only "$group" --merge --out "$OUT/$PART.json" --no-report \
    $BENCH_ARGS >/tmp/gpu_record_group.log 2>&1
  rc=$?
  cat /tmp/gpu_record_group.log >>"$OUT/$PART.log" # the whole output of the part, the groups in turn
  grep -E '^\[' /tmp/gpu_record_group.log
  echo "== $group: exit $rc, $((SECONDS - began)) s"
  [ $rc -ne 0 ] && STATUS=$rc
done
exit $STATUS
