#!/usr/bin/env bash
# KernelBench solve at upstream sizes on one GPU, in ONE device call under a hard wall limit:
# compose every task of levels 1 and 2, judge the non-convolution ones (a task whose
# composition leaves a convolution to torch is skipped) with eager and torch.compile baselines
# timed in the same run, several tasks at once (argus/bench/kernelbench/parallel.py: timings
# serialized by a GPU gate, compiles and imports overlapped, GPU memory budgeted).
#
#   OUT=/path bash scripts/gpu_kernelbench_solve.sh [BUDGET_S=370] [LEVELS=1,2] [JOBS=auto]
#   (PYTHON=.venv/bin/python DEVICE=cpu ... : a smoke test of the script on a CPU machine)
#   IDS=6,89-93 ... : only these problem ids of the selected levels (the slow-task list)
#   PRECISION=tf32 ... : fp32 convolutions as one tf32 product (relaxed track; solve --precision)
#
# Run from the repository root with the tasks in $ARGUS_KERNELBENCH_DIR (or ../shared/
# kernelbench). Results are written as each task finishes ($OUT/solve/results.jsonl, resumable:
# the same command with the same $OUT judges only what is missing), so a timeout kill keeps
# them. The judge stops starting tasks at BUDGET_S and stops what still runs; the wall time is
# about BUDGET_S + 40 s (composition before, reports and the summary after). Printed last: the
# per-level summary (solved strict / relaxed, Argus share, geomean vs eager, vs eager with
# TF32 off (the strict track's fp32-accurate baseline) and vs torch.compile), the tasks not
# solved with their reason, and where the judging time went.
# Worker logs (one per slot process) stay in $OUT/work/logs.
#
# KB_CACHE=DIR (a folder carried to the device) makes the call judge, not build: DIR/baselines.json
# (eager, eager-TF32-off and torch.compile times of earlier calls; keyed by card, torch, CUDA
# and task text, so they stay valid across Argus commits; a record without eager-TF32-off has
# only that measured) and DIR/argus-cache.tgz (the kernels of every composed
# solution compiled ahead of time on a CPU machine: `argus kernelbench prebuild`, see
# docs/kernelbench.md; the candidates then load cubins instead of running NVRTC). Both come back
# updated in $OUT (baselines.json, argus-cache.tgz with what the GPU compiled on a miss): copy
# them into DIR for the next call.
set -u
OUT=${OUT:-out}
BUDGET=${1:-370}
LEVELS=${2:-1,2}
JOBS=${3:-auto}
DEVICE=${DEVICE:-cuda}     # DEVICE=cpu: a smoke test of this script at reduced sizes
PY=${PYTHON:-python3}
IDS=${IDS:-}               # IDS=6,89-93: a subset of each level's problem ids
PRECISION=${PRECISION:-fp32}   # tf32: fp32 convolutions as one tf32 product (relaxed track)
KB_CACHE=${KB_CACHE:-}
# The judge checks outputs; the verifier runs in CI (its verdicts are keyed by this Argus and
# z3 build, so a device call would verify every kernel again, minutes of z3 on the first runs).
export ARGUS_VERIFY=${ARGUS_VERIFY:-0}
mkdir -p "$OUT/solve"
t0=$SECONDS
if [ -n "$KB_CACHE" ]; then
  export ARGUS_CACHE_DIR=${ARGUS_CACHE_DIR:-${TMPDIR:-/tmp}/argus-kb-cache}   # not under $OUT: it would all come back
  mkdir -p "$ARGUS_CACHE_DIR"
  [ -f "$KB_CACHE/argus-cache.tgz" ] && tar xzf "$KB_CACHE/argus-cache.tgz" -C "$ARGUS_CACHE_DIR"
  [ -f "$KB_CACHE/baselines.json" ] && [ ! -f "$OUT/baselines.json" ] && cp "$KB_CACHE/baselines.json" "$OUT/baselines.json" && chmod u+w "$OUT/baselines.json"
  echo "   cache $KB_CACHE: $(find "$ARGUS_CACHE_DIR/cubin" -name '*.json' 2>/dev/null | wc -l) cubins, baselines of $(grep -c '"task":' "$OUT/baselines.json" 2>/dev/null || echo 0) tasks"
  echo "   $("$PY" -c 'from argus.bench.kernelbench.prebuild import check_manifest; print(check_manifest())' 2>&1 | tail -1)"
fi
echo "== kernelbench solve: levels $LEVELS${IDS:+ ids $IDS}, non-convolution, budget ${BUDGET} s, jobs $JOBS"
echo "   commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
timeout --kill-after=10 $((BUDGET + 60)) "$PY" -u -m argus.bench.kernelbench solve \
  --level "$LEVELS" ${IDS:+--ids "$IDS"} --skip-torch-ops conv --device "$DEVICE" --jobs "$JOBS" --budget-s "$BUDGET" \
  --timeout 180 --out "$OUT/solve" --baseline-cache "$OUT/baselines.json" --precision "$PRECISION" \
  --workdir "$OUT/work" \
  >"$OUT/solve/solve.log" 2>&1
rc=$?
echo "== solve rc=$rc after $((SECONDS - t0)) s; progress (last 25 lines of $OUT/solve/solve.log):"
grep -E '^\[[0-9]+/[0-9]+ ' "$OUT/solve/solve.log" | tail -25 | cut -c1-240
grep -E 'Traceback|Error' "$OUT/solve/solve.log" | grep -v 'runtime_error\|out_of_memory' | head -5
if [ -n "$KB_CACHE" ]; then   # what the GPU compiled on a miss comes back for the next call
  tar czf "$OUT/argus-cache.tgz" -C "$ARGUS_CACHE_DIR" . 2>/dev/null
  if [ "$(stat -c %s "$OUT/argus-cache.tgz" 2>/dev/null || echo 0)" -gt 16000000 ]; then
    echo "   the kernel cache is over 16 MB packed: not returned (rebuild it with argus kernelbench prebuild)"
    rm -f "$OUT/argus-cache.tgz"
  fi
fi
echo
echo "== summary ($(date -u +%FT%TZ))"
"$PY" -m argus.bench.kernelbench summary "$OUT/solve" --phases
