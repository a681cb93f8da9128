#!/usr/bin/env bash
# The frontier study (studies/frontiers.toml, docs/results-frontiers.md) runs for about 15 hours on 2 cores, longer
# than a working session; this script starts or resumes it in the background and saves what finished into git.
#
#   scripts/frontier_study.sh start   # resume (or begin) the study in the background, its log appended to
#                                     # results/comparison-frontiers.log
#   scripts/frontier_study.sh save    # stage the finished runs' summaries, the study's records and the base
#                                     # evaluations' cache (then commit them)
#   scripts/frontier_study.sh status  # how many runs finished, which are running
#
# The runs train at the code of the commit that registered them (STUDY_COMMIT), checked out in a worktree of its
# own, so that work on main while the study runs changes none of its runs. A finished run is one with eval.json:
# `dynashape compare` skips it on resume; a run cut off mid-way resumes from its last checkpoint on the same machine,
# from step 0 on a fresh one (its history.jsonl says so, and the page discloses it).
set -euo pipefail

STUDY_COMMIT=faa2b13bbcab95aeb7e3c1b1707317dda534b8fa
ROOT=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
OUT=$ROOT/results/comparison-frontiers
WORKTREE=${FRONTIER_WORKTREE:-$ROOT/../wt-study}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/dynashape
BASE_KEY=base-88082b43b9b20aa3

case "${1:-}" in
start)
  if [ ! -d "$WORKTREE" ]; then
    git -C "$ROOT" worktree add --detach "$WORKTREE" "$STUDY_COMMIT"
  fi
  test "$(git -C "$WORKTREE" rev-parse HEAD)" = "$STUDY_COMMIT" || { echo "$WORKTREE is not at $STUDY_COMMIT" >&2; exit 1; }
  # the base model's evaluations, saved by `save`: a fresh machine need not evaluate the base again
  if [ -d "$OUT/base-cache/$BASE_KEY" ]; then
    mkdir -p "$CACHE/$BASE_KEY" && cp -n "$OUT/base-cache/$BASE_KEY"/eval-*.json "$CACHE/$BASE_KEY"/ 2>/dev/null || true
  fi
  cd "$WORKTREE"
  PYTHONPATH="$WORKTREE/src" nohup "$PYTHON" -m dynashape.cli compare --plan frontiers --out "$OUT" --jobs 2 \
    --no-progress >>"$ROOT/results/comparison-frontiers.log" 2>&1 &
  echo "started (pid $!); log: results/comparison-frontiers.log"
  ;;
save)
  cd "$ROOT"
  mkdir -p "$OUT/base-cache/$BASE_KEY"
  cp -n "$CACHE/$BASE_KEY"/eval-*.json "$OUT/base-cache/$BASE_KEY"/ 2>/dev/null || true
  git add -f "$OUT/base-cache" results/comparison-frontiers.log
  git add "$OUT/comparison.json" "$OUT/runs.json" 2>/dev/null || true
  for eval_json in "$OUT"/runs/*/*/eval.json; do
    [ -e "$eval_json" ] || continue
    run=$(dirname "$eval_json")
    git add "$run"/config.yaml "$run"/eval.json "$run"/eval_base.json "$run"/history.jsonl "$run"/metrics.jsonl
  done
  git status --short "$OUT" | head -5
  echo "staged $(git diff --cached --name-only -- "$OUT/runs" | grep -c eval.json || true) finished runs' eval.json"
  ;;
status)
  finished=$( (find "$OUT/runs" -name eval.json 2>/dev/null || true) | wc -l)
  echo "finished: $finished of 185"
  grep -E "^[0-9:]+ (start|\[)" "$ROOT/results/comparison-frontiers.log" | tail -3 || true
  ;;
*)
  echo "usage: $0 start|save|status" >&2
  exit 2
  ;;
esac
