#!/bin/bash
# The GPU machine's calls (issues 42.6, 43): build, the GPU suite, the bus's floor for copied 256 MiB batches
# (43.3, bench/bus_floor.py), the DMA from each kind of host memory and where a batch's time goes at
# capacities 1 and 3 (staging), the driver lock's cost to a small step by call pattern (43.1, 43.2,
# bench/driver_lock.py), where a small fed step's time goes (profile, bench/step_profile.py), then the real
# paths A/B against the commit before; logs and JSON under $OUT, a summary at the end.  Everything takes
# more than one call's 10 minutes: name the steps each call runs.
#
#   bash scripts/gpu_check.sh OLD [STEP ...]   # from the checkout's root on the GPU machine
#   bash scripts/gpu_check.sh old-tree build gpu-suite lock profile      # e.g. a first call
#   bash scripts/gpu_check.sh old-tree build floor staging ab            # and a second
#
# STEPs: build gpu-suite floor staging lock profile ab (all of them, in this order, when none is named).
# OLD is the checkout before: a folder that travels with the tree (made beforehand, untracked, e.g.
# `mkdir old-tree && git archive <commit> | tar -x -C old-tree`), or a commit where .git came along.  Its
# engine and this tree's are built in place.  A step that fails does not stop the next one; the exit status
# is the first failing step's.  AB_SCENARIOS (e.g. small,lasagne) narrows the A/B to those scenarios.
OLD=${1:?usage: bash scripts/gpu_check.sh OLD_TREE_OR_COMMIT [STEP ...]}
shift
STEPS=" ${*:-build gpu-suite floor staging lock profile ab} "
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
[ -n "$PY" ] || source .gpu/enter.sh
TOTAL=540 # seconds for everything: the machine gives a call 600
BEGAN=$SECONDS
STATUS=0
SUMMARY=()

step() { # step NAME LIMIT_S COMMAND...: runs it under a time limit if named, its output in $OUT/NAME.log
  local name=$1 limit=$2 began=$SECONDS rc
  shift 2
  [[ $STEPS == *" $name "* ]] || return 0
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
step gpu-suite "$(left 150)" $PY -m pytest -m gpu tests/ -q --timeout 120 -p no:cacheprovider -rs
step floor 75 $PY -m bench.bus_floor --mib 256 --threads 8,16 --json "$OUT/floor.json"
# Capacity 1 serialises a slot's write and upload: its upload median is the DMA alone from the queue's staging
# (shared memory: whether the kernel gives it huge pages is shmem_enabled).  --memory sets that DMA beside
# pinned memory's and huge pages'.
step staging 75 bash -c "grep -H . /sys/kernel/mm/transparent_hugepage/{enabled,shmem_enabled};
  $PY -m bench.bus_floor --mib 256 --memory pinned,shared,registered,huge --json '$OUT/memory.json';
  $PY -m bench.bus_floor --mib 256 --threads 16 --capacities 1,3"
# A producer's driver calls beside a small step, by pattern: the floor under 43.1 and 43.2.
step lock 60 $PY -m bench.driver_lock --rounds 5 --json "$OUT/lock.json"
# Issue 43's small steps (256x784 and 500x784, hidden 256): where a fed step's time goes, beside resident.
step profile 150 $PY -m bench.step_profile --shapes 256x784,500x784 --hidden 256 --steps 300 --rounds 3 \
  --switch-intervals "" --json "$OUT/profile.json"
step ab "$(left 10)" $PY bench/ab.py --old "$OLD" --new . --quick --rounds 5 --budget "$(left 40)" \
  ${AB_SCENARIOS:+--scenarios "$AB_SCENARIOS"} --json "$OUT/ab.json"

echo "== summary ($((SECONDS - BEGAN)) s; logs in $OUT)"
printf '%s\n' "${SUMMARY[@]}"
show() { [ -f "$OUT/$1.log" ] && [[ $STEPS == *" $1 "* ]]; }
show floor && grep -A8 '^threads' "$OUT/floor.log"
show staging && grep -E '^ *capacity|transparent_hugepage|^(pinned|shared|registered|huge) ' "$OUT/staging.log"
show lock && grep -A20 '^mode ' "$OUT/lock.log"
show profile && grep -E '^[0-9]+x[0-9]+,|^part|^(resident|given|prefilled|array|held|iterable)' "$OUT/profile.log"
show gpu-suite && echo "gpu suite: $(grep -E ' in [0-9.]+s( \(.*\))?$' "$OUT/gpu-suite.log" | tail -n 1)"
show ab && grep -E '^(worst queue path|fewer|controls|NOISE|slower|faster|budget|stopped|note)' "$OUT/ab.log"
exit $STATUS
