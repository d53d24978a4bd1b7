#!/usr/bin/env bash
# One device call that bisects the smem_scales fp8 trap (issue 18; see
# scripts/gpu_fp8_smem_diag2.py for the hypothesis and each variant). Every variant runs in a
# process of its own (a trap poisons the CUDA context), the raw TMA probes in parallel, each
# with its own compile cache and a time limit (HANG = the load never completed); prints one
# line per variant, probes first, then the GEMMs. Logs: $OUT/diag2/<variant>.log.
#   bash scripts/gpu_fp8_smem_diag2.sh            (~1 min on the H200)
set -u
OUT=${OUT:-out}
PY=${PY:-python3}
LOGS="$OUT/diag2"
mkdir -p "$LOGS"
export ARGUS_VERIFY=${ARGUS_VERIFY:-0}   # the trap is the device's; the verifier runs in CI
run() {  # name, args...: the variant's one line, or what stopped it
  local name=$1; shift
  ARGUS_CACHE_DIR="$LOGS/cache_$name" timeout 90 "$PY" scripts/gpu_fp8_smem_diag2.py "$@" \
    >"$LOGS/$name.log" 2>&1
  local rc=$?
  if ! grep -q "^$name: " "$LOGS/$name.log"; then
    if [ $rc -eq 124 ]; then echo "$name: HANG (killed after 90 s)" >>"$LOGS/$name.log"
    else echo "$name: TRAP rc=$rc $(grep -v '^\s' "$LOGS/$name.log" | tail -1 | cut -c1-160)" \
      >>"$LOGS/$name.log"; fi
  fi
}
probes=$("$PY" scripts/gpu_fp8_smem_diag2.py list)
for p in $probes; do run "$p" probe "$p" & done
gemms=("1000 300 640 smem" "1024 384 512 smem" "129 384 128 smem" "1000 300 640 global")
for g in "${gemms[@]}"; do
  set -- $g
  run "gemm_$4_$1x$2x$3" gemm $g &
done
wait
for p in $probes; do grep "^$p: " "$LOGS/$p.log" | tail -1; done
for g in "${gemms[@]}"; do
  set -- $g
  grep "^gemm_$4_$1x$2x$3: " "$LOGS/gemm_$4_$1x$2x$3.log" | tail -1
done
