#!/usr/bin/env bash
# The follow-up comparison (docs/results-v2.md), resumable: rerun this script until it has nothing left. PLAN=field
# with its own OUT runs the field comparison the same way (scripts/run_field.sh).
# Each session: seed the base-evaluation cache from the committed copies (a fresh machine would otherwise spend
# 20 base evaluations before the first run), run the plan in the background-friendly way (nice, plain log lines),
# then keep this machine's new base evaluations beside the runs. Commit results/comparison-v2/ (run summaries,
# base evaluations, the log; never checkpoints) and, once runs exist, the page:
#   dynashape results results/comparison-v2 --report docs/results-v2.md
set -euo pipefail
cd "$(dirname "$0")/.."
PLAN=${PLAN:-v2}
OUT=${OUT:-results/comparison-v2}
JOBS=${JOBS:-2}
CACHE=${DYNASHAPE_CACHE:-$HOME/.cache/dynashape}
KEPT="$OUT/base-cache"
mkdir -p "$CACHE" "$KEPT"
cp -rn "$KEPT"/. "$CACHE"/   # -n: a cache entry already here is this machine's own and the same numbers
if [[ -n "${SEED_CACHE:-}" ]]; then cp -rn "$SEED_CACHE"/. "$CACHE"/; fi  # another study's kept evaluations
status=0
nice -n "${NICE:-15}" dynashape compare --plan "$PLAN" --jobs "$JOBS" --out "$OUT" --no-progress || status=$?
for entry in "$CACHE"/base-*/; do
  mkdir -p "$KEPT/$(basename "$entry")"
  cp -n "$entry"eval-*.json "$KEPT/$(basename "$entry")/" 2>/dev/null || true
done
exit "$status"
