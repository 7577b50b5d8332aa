#!/bin/bash
# The GPU machine's second call: what needs its 16 cores and the PyTorch peer (issues 43.4, 44), in one call of at
# most 10 minutes; JSON and logs under $OUT, a summary at the end.  The first call is scripts/gpu_check.sh.
#
#   bash scripts/gpu_measure.sh            # from the checkout's root on the GPU machine (carry .gpu)
#
# Steps, each under its own time limit (a step that fails does not stop the next):
#   build      the engine in place
#   decode     scenario 44's decode workload: workers="auto" against workers x capacity (bench/auto_bench.py)
#   workers    scenario 11: __getitem__ workers 1-14 against PyTorch's DataLoader (the machine's python3)
#   generator  scenario 44's generator workload
#   arrays     scenario 44's array workload (copy threads x capacity), with what time is left
OUT=${OUT:-/tmp/gpu_measure}
mkdir -p "$OUT"
[ -n "$PY" ] || source .gpu/enter.sh
BEGAN=$SECONDS
STATUS=0

step() { # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2 began=$SECONDS rc
  shift 2
  echo "== $name (at most ${limit} s, at $((SECONDS - BEGAN)) s): $*"
  timeout --kill-after=5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "exit $rc in $((SECONDS - began)) s"
  [ $rc -ne 0 ] && [ $STATUS -eq 0 ] && STATUS=$rc
  return 0
}

step build 90 $PY setup.py -q build_ext --inplace
step decode 215 $PY bench/auto_bench.py --workloads decode --seconds 5 --auto-seconds 12 --rounds 1 \
  --json "$OUT/decode.json"
step workers 150 $PY bench/run.py --only 11 --out "$OUT/workers.json" --no-report
step generator 40 $PY bench/auto_bench.py --workloads generator --seconds 4 --auto-seconds 10 --rounds 1 \
  --json "$OUT/generator.json"
step arrays $((580 - (SECONDS - BEGAN))) $PY bench/auto_bench.py --workloads arrays --seconds 3 \
  --auto-seconds 10 --rounds 1 --json "$OUT/arrays.json"

echo "== summary ($((SECONDS - BEGAN)) s; logs in $OUT)"
grep -h '"headline"' "$OUT"/*.json
exit $STATUS
