"""Test-side recorder for the end-to-end verl runs: what each training step's advantages were computed from.

Loaded by :mod:`verl_cpu_harness` in every verl process when ``DYNASHAPE_VERL_E2E_RECORD=DIR`` is set; it acts
only in the process that builds the trainer. It wraps verl 0.9.1's ``PPOTrainer._compute_advantage``
(``verl/trainer/ppo/v1/trainer_base.py``; the ``dynashape`` trainer mode calls it through ``super()``) and, after
it ran, reads from TransferQueue what verl's step holds for every row (uid, prompt and response tokens, the
reward, the verifier's ``acc``, the advantages written back, and the MEDS answer positions and fingerprints
when the trainer mode took them). One file per step: ``DIR/step_<global_steps>.pt``.

Loaded on its own (``VERL_USE_EXTERNAL_MODULES=verl_e2e_recorder``, as scripts/gpu_check_verl.py runs verl on a GPU
without the CPU harness), it installs itself.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

OPTIONAL_FIELDS = ("dynashape_answer_pos", "dynashape_answer_target", "dynashape_fingerprints")
FIELDS = ("uid", "prompts", "responses", "response_mask", "rm_scores", "advantages", "raw_prompt", "extra_fields")


def _rows(value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        if value.is_nested:
            return [t.detach().clone() for t in value.unbind()]
        return [t.detach().clone() for t in value]
    return list(value)


def _record(trainer: Any, batch: Any, folder: str) -> None:
    import transfer_queue as tq

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=list(FIELDS))
    record = {name: _rows(data[name]) for name in FIELDS}
    for name in OPTIONAL_FIELDS:
        try:
            extra = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=[name])
            record[name] = _rows(extra[name])
        except Exception:  # not taken in this mode
            pass
    record["keys"] = list(batch.keys)
    record["tags"] = list(getattr(batch, "tags", None) or [])
    record["global_steps"] = int(trainer.global_steps)
    os.makedirs(folder, exist_ok=True)
    torch.save(record, os.path.join(folder, f"step_{int(trainer.global_steps)}.pt"))


def install(folder: str) -> None:
    from dynashape.integrations._post_import import when_imported

    def patch(module: Any) -> None:
        cls = module.PPOTrainer
        original = cls._compute_advantage
        if getattr(original, "_e2e_recorder", False):
            return

        @functools.wraps(original)
        def _compute_advantage(self: Any, batch: Any, metrics: dict) -> Any:
            batch = original(self, batch, metrics)
            _record(self, batch, folder)
            return batch

        _compute_advantage._e2e_recorder = True  # type: ignore[attr-defined]
        cls._compute_advantage = _compute_advantage

    when_imported("verl.trainer.ppo.v1.trainer_base", patch)


if __name__ == "verl_e2e_recorder" and os.environ.get("VERL_USE_EXTERNAL_MODULES") == __name__:
    install(os.environ["DYNASHAPE_VERL_E2E_RECORD"])
