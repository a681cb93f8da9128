#!/usr/bin/env bash
# The pre-registered comparison (issue 15) on the frozen world, resumable: rerun this script to continue.
# Seed 0 of grpo and lead in both regimes first (issue 12's one-seed measurement), then the full plan.
# Writes results/comparison/ (run summaries are committed; weights are not) and docs/results.md / .json.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/comparison}
JOBS=${JOBS:-2}
CACHE=${CACHE:-}
extra=()
if [ -n "$CACHE" ]; then extra+=(--cache-dir "$CACHE"); fi
dynashape compare --plan full --methods grpo,lead --seeds 0, --jobs "$JOBS" --out "$OUT" --report docs/results.md "${extra[@]}"
dynashape compare --plan full --jobs "$JOBS" --out "$OUT" --report docs/results.md "${extra[@]}"
