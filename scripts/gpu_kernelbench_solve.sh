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
#
# Run from the repository root with the tasks in $ARGUS_KERNELBENCH_DIR (or ../shared/
# kernelbench). Results are written as each task finishes ($OUT/solve/results.jsonl, resumable:
# the same command with the same $OUT judges only what is missing), so a timeout kill keeps
# them. The judge stops starting tasks at BUDGET_S and stops what still runs; the wall time is
# about BUDGET_S + 40 s (composition before, reports and the summary after). Printed last: the
# per-level summary (solved strict / relaxed, Argus share, geomean vs eager and
# torch.compile), the tasks not solved with their reason, and where the judging time went.
# Worker logs (one per slot process) stay in $OUT/work/logs.
set -u
OUT=${OUT:-out}
BUDGET=${1:-370}
LEVELS=${2:-1,2}
JOBS=${3:-auto}
DEVICE=${DEVICE:-cuda}     # DEVICE=cpu: a smoke test of this script at reduced sizes
PY=${PYTHON:-python3}
IDS=${IDS:-}               # IDS=6,89-93: a subset of each level's problem ids
mkdir -p "$OUT/solve"
t0=$SECONDS
echo "== kernelbench solve: levels $LEVELS${IDS:+ ids $IDS}, non-convolution, budget ${BUDGET} s, jobs $JOBS"
echo "   commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
timeout --kill-after=10 $((BUDGET + 60)) "$PY" -u -m argus.bench.kernelbench solve \
  --level "$LEVELS" ${IDS:+--ids "$IDS"} --skip-torch-ops conv --device "$DEVICE" --jobs "$JOBS" --budget-s "$BUDGET" \
  --timeout 180 --out "$OUT/solve" --baseline-cache "$OUT/baselines.json" \
  --workdir "$OUT/work" \
  >"$OUT/solve/solve.log" 2>&1
rc=$?
echo "== solve rc=$rc after $((SECONDS - t0)) s; progress (last 25 lines of $OUT/solve/solve.log):"
grep -E '^\[[0-9]+/[0-9]+ ' "$OUT/solve/solve.log" | tail -25 | cut -c1-240
grep -E 'Traceback|Error' "$OUT/solve/solve.log" | grep -v 'runtime_error\|out_of_memory' | head -5
echo
echo "== summary ($(date -u +%FT%TZ))"
"$PY" -m argus.bench.kernelbench summary "$OUT/solve" --phases
