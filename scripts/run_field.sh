#!/usr/bin/env bash
# The field comparison (docs/results-field.md), resumable: rerun this script until it has nothing left. Its base
# evaluations are the follow-up's (the same base, evaluation seeds and registered evaluation), so the follow-up's
# kept copies seed this machine's cache. Commit results/comparison-field/ as the runs land (summaries, the log;
# never checkpoints).
set -euo pipefail
cd "$(dirname "$0")/.."
PLAN=field OUT="${OUT:-results/comparison-field}" SEED_CACHE=results/comparison-v2/base-cache exec scripts/run_followup.sh
