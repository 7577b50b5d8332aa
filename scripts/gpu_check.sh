#!/bin/bash
# The GPU machine's one call (issues 42.6, 43.6): build, the GPU suite, the bus's floor for copied 256 MiB
# batches (43.3, bench/bus_floor.py: the floor, the DMA from each kind of host memory, then where a batch's
# time goes at capacities 1 and 3), the driver lock's cost to a small step (43.1, 43.2,
# bench/driver_lock.py), then the real paths A/B against the commit before; logs and JSON under $OUT, a
# summary at the end.  About 9 minutes at most.
#
#   bash scripts/gpu_check.sh OLD            # from the checkout's root on the GPU machine
#
# OLD is the checkout before: a folder that travels with the tree (made beforehand, untracked, e.g.
# `mkdir old-tree && git archive <commit> | tar -x -C old-tree`), or a commit where .git came along.  Its
# engine and this tree's are built in place.  A step that fails does not stop the next one; the exit status
# is the first failing step's.
OLD=${1:?usage: bash scripts/gpu_check.sh OLD_TREE_OR_COMMIT}
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
[ -n "$PY" ] || source .gpu/enter.sh
TOTAL=540 # seconds for everything: the machine gives a call 600
BEGAN=$SECONDS
STATUS=0
SUMMARY=()

step() { # step NAME LIMIT_S COMMAND...: runs it under a time limit, its output in $OUT/NAME.log
  local name=$1 limit=$2 began=$SECONDS rc
  shift 2
  echo "== $name (at most ${limit} s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  tail -n 3 "$OUT/$name.log"
  SUMMARY+=("$(printf '%-10s exit %3d  %4d s' "$name" "$rc" $((SECONDS - began)))")
  [ $rc -ne 0 ] && [ $STATUS -eq 0 ] && STATUS=$rc
  return 0
}

left() { # seconds left, keeping $1 for what comes after (30 at least)
  local n=$((TOTAL - (SECONDS - BEGAN) - $1))
  echo $((n < 30 ? 30 : n))
}

if [ ! -d "$OLD" ]; then # a commit: its tree, from this checkout's history
  git archive "$OLD" >/tmp/tq-old.tar && rm -rf /tmp/tq-old && mkdir -p /tmp/tq-old &&
    tar -xf /tmp/tq-old.tar -C /tmp/tq-old && OLD=/tmp/tq-old
fi
step build 150 bash -c "$PY setup.py -q build_ext --inplace && cd '$OLD' && $PY setup.py -q build_ext --inplace"
step gpu-suite "$(left 280)" $PY -m pytest -m gpu tests/ -q --timeout 120 -p no:cacheprovider -rs
step floor 75 $PY -m bench.bus_floor --mib 256 --threads 8,16 --json "$OUT/floor.json"
# Capacity 1 serialises a slot's write and upload: its upload median is the DMA alone from the queue's staging
# (shared memory: whether the kernel gives it huge pages is shmem_enabled).
step staging 75 bash -c "grep -H . /sys/kernel/mm/transparent_hugepage/{enabled,shmem_enabled};
  $PY -m bench.bus_floor --mib 256 --memory pinned,shared,registered,huge --json '$OUT/memory.json';
  $PY -m bench.bus_floor --mib 256 --threads 16 --capacities 1,3"
# A producer's driver calls beside a small step, by pattern (the floor under 43.1 and 43.2).
step lock 60 $PY -m bench.driver_lock --rounds 5 --json "$OUT/lock.json"
step ab "$(left 10)" $PY bench/ab.py --old "$OLD" --new . --quick --rounds 5 --budget "$(left 40)" \
  --json "$OUT/ab.json"

echo "== summary ($((SECONDS - BEGAN)) s; logs in $OUT)"
printf '%s\n' "${SUMMARY[@]}"
grep -A8 '^threads' "$OUT/floor.log"
grep -E '^ *capacity|transparent_hugepage|^(pinned|shared|registered|huge) ' "$OUT/staging.log"
grep -A16 '^mode ' "$OUT/lock.log"
echo "gpu suite: $(grep -E ' in [0-9.]+s( \(.*\))?$' "$OUT/gpu-suite.log" | tail -n 1)"
grep -E '^(worst queue path|fewer|controls|NOISE|slower|faster|budget|stopped|note)' "$OUT/ab.log"
exit $STATUS
