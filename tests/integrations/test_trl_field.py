"""The field's length methods in ShapedGRPOTrainer against the real TRL (CPU): budgets from a dataset column,
AALC's validation accuracy and LASER-D's monitor set from TRL's evaluation pass, GFPO's dropped rows out of the
loss, and every field shaper training a few steps with the advantages the shaper itself computes.

Run in the TRL test environment (requirements/trl.txt, ci/integration.sh trl); skipped elsewhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from dynashape import get_shaper  # noqa: E402
from dynashape.integrations.trl import STATE_FILE, ShapedGRPOTrainer  # noqa: E402
from dynashape.integrations.trl.keep import KEEP_KEY  # noqa: E402
from dynashape.integrations.trl.signals import EvalPool, budget_of  # noqa: E402
from dynashape.world.chain.tokenizer import build_char_tokenizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_trl_engine import assert_same_state, tiny_model  # noqa: E402

GROUP = 4
PROMPTS = [f"{a}+{b}=" for a in range(4) for b in range(4)]
BUDGETS = {p: 3 + 5 * i for i, p in enumerate(PROMPTS)}  # every prompt its own budget


class Recorder:
    """Reward (verdict: the first completion token id is even) recording each call: train or eval, the prompts,
    lengths, verdicts and the budget column TRL passed along."""

    __name__ = "parity_reward"

    def __init__(self):
        self.calls = []
        self.trainer = None

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        verdicts = [float(len(ids) > 0 and ids[0] % 2 == 0) for ids in completion_ids]
        self.calls.append(
            {
                "mode": "train" if self.trainer is None or self.trainer.model.training else "eval",
                "prompts": list(prompts),
                "lengths": [len(ids) for ids in completion_ids],
                "correct": verdicts,
                "num_tokens": kwargs.get("num_tokens"),
                "last_ids": [int(ids[-1]) if len(ids) else None for ids in completion_ids],
                "texts": [c if isinstance(c, str) else c[-1]["content"] for c in completions],
            }
        )
        return verdicts

    def of(self, mode):
        return [c for c in self.calls if c["mode"] == mode]


class FieldTrainer(ShapedGRPOTrainer):
    """Keeps the advantages the loss uses, the micro-batches it saw, and every observe() call and shaper batch."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.used_advantages = [*getattr(self, "used_advantages", []), output["advantages"].detach().clone()]
        return output

    def compute_loss(self, model, inputs, *args, **kwargs):
        self.loss_inputs = [*getattr(self, "loss_inputs", []), dict(inputs)]
        return super().compute_loss(model, inputs, *args, **kwargs)


def watch(shaper):
    """Record the batches the shaper is called on and the signals it observes (the shaper still acts)."""
    shaper.seen, shaper.observed = [], []
    shape, observe = shaper.shape, shaper.observe
    shaper.shape = lambda batch: (shaper.seen.append(batch), shape(batch))[1]
    shaper.observe = lambda **signals: (shaper.observed.append(signals), observe(**signals))[1]
    return shaper


def make_trainer(
    tmp_path, shaper, *, max_steps=2, train_rows=None, eval_prompts=None, config=None, saved_model=False, **extra
):
    train_rows = train_rows or {"prompt": PROMPTS}
    args = {
        "output_dir": str(tmp_path),
        "per_device_train_batch_size": 2 * GROUP,  # two prompts per step, each repeated GROUP times
        "num_generations": GROUP,
        "max_completion_length": 8,
        "max_steps": max_steps,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": 1,
        "report_to": [],
        "use_cpu": True,
        "bf16": False,
        "seed": 0,
        "beta": 0.0,
        "temperature": 1.0,
        **(config or {}),
    }
    reward = Recorder()
    tokenizer = build_char_tokenizer()
    model = tiny_model(tokenizer)
    if saved_model:  # TRL loads its reference model (beta > 0) from a path
        model.save_pretrained(tmp_path / "model")
        model = str(tmp_path / "model")
    trainer = FieldTrainer(
        shaper=watch(shaper),
        model=model,
        reward_funcs=[reward],
        args=GRPOConfig(**args),
        train_dataset=datasets.Dataset.from_dict(train_rows),
        eval_dataset=None if eval_prompts is None else datasets.Dataset.from_dict({"prompt": eval_prompts}),
        processing_class=tokenizer,
        **extra,
    )
    reward.trainer = trainer
    return trainer, reward


def replay(shaper, seen, observed_before=None):
    """A fresh shaper's advantages on the batches the trainer's shaper saw, with the same observations between."""
    out = []
    for i, batch in enumerate(seen):
        for signals in (observed_before or {}).get(i, []):
            shaper.observe(**signals)
        out.append(shaper(batch).advantages)
    return out


def assert_used(trainer, expected):
    assert len(trainer.used_advantages) == len(expected)
    for used, exp in zip(trainer.used_advantages, expected, strict=True):
        torch.testing.assert_close(used, exp, rtol=0, atol=0)


# -- budgets (L1) ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_budgets_reach_the_shaper_aligned_with_the_repeated_prompts(tmp_path):
    rows = {"prompt": PROMPTS, "num_tokens": [BUDGETS[p] for p in PROMPTS]}
    shaper = get_shaper("l1_exact", alpha=0.05)
    trainer, reward = make_trainer(tmp_path, shaper, train_rows=rows)
    trainer.train()
    assert len(shaper.seen) == 2
    for call, batch in zip(reward.of("train"), shaper.seen, strict=True):
        prompts = call["prompts"]
        # TRL's layout: two prompts, each GROUP times in a row; the budget follows each completion's prompt.
        assert prompts[:GROUP] == [prompts[0]] * GROUP and prompts[GROUP:] == [prompts[GROUP]] * GROUP
        assert batch.budgets.tolist() == [BUDGETS[p] for p in prompts] == call["num_tokens"]
        assert batch.budgets.dtype == torch.long and batch.budgets.device == trainer.accelerator.device
        assert batch.group_ids.tolist() == [0] * GROUP + [1] * GROUP
    assert_used(trainer, replay(get_shaper("l1_exact", alpha=0.05), shaper.seen))
    # Hand-worked on the first batch: r = 1[correct] - 0.05 |budget - length|, then GRPO per group.
    first = shaper.seen[0]
    r = first.correct.double() - 0.05 * (first.budgets - first.lengths).abs().double()
    g = r.view(2, GROUP)
    expected = ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-6)).view(-1)
    torch.testing.assert_close(trainer.used_advantages[0].double(), expected, rtol=1e-5, atol=1e-6)


# -- truncated (DLER, stop_properly) and formatted (LASER) ---------------------------------------------------


def test_dler_gets_the_completions_without_eos_as_truncated(tmp_path):
    """TRL's cut completions (no EOS or pad at the end: its clipped_ratio test) reach DLER as ``truncated``; the
    loss uses DLER's advantages with the 0.1 multiplier on them."""
    shaper = get_shaper("dler", max_length=8)
    trainer, reward = make_trainer(tmp_path, shaper, max_steps=2, config={"max_completion_length": 8})
    trainer.train()
    stops = {*trainer.eos_token_ids, trainer.processing_class.pad_token_id}
    for call, batch in zip(reward.of("train"), shaper.seen, strict=True):
        assert batch.truncated.tolist() == [last not in stops for last in call["last_ids"]]
        assert all(n == 8 for n, cut in zip(call["lengths"], batch.truncated.tolist(), strict=True) if cut)
    assert any(bool(b.truncated.any()) for b in shaper.seen)  # the untrained model runs to the cap
    assert_used(trainer, replay(get_shaper("dler", max_length=8), shaper.seen))


def test_stop_properly_and_formatted_reach_a_shaper_through_trl(tmp_path):
    shaper = get_shaper("laser", stop_properly=0.5, target_length=4)
    trainer, reward = make_trainer(tmp_path, shaper, max_steps=1)
    trainer.train()
    (call,), (batch,) = reward.of("train"), shaper.seen
    assert batch.formatted.tolist() == ["\\boxed{" in t and "}" in t.split("\\boxed{")[-1] for t in call["texts"]]
    assert batch.truncated is not None
    assert_used(trainer, replay(get_shaper("laser", stop_properly=0.5, target_length=4), shaper.seen))


def test_budget_column_is_checked_before_the_first_step(tmp_path):
    l1 = get_shaper("l1_max")
    with pytest.raises(ValueError, match=r"budget_column 'num_tokens': the train dataset has no such column"):
        make_trainer(tmp_path, l1)
    bad = {"prompt": PROMPTS[:2], "num_tokens": [100, -5]}
    with pytest.raises(ValueError, match=r"budget_column 'num_tokens': a budget must be an integer >= 0.*got -5"):
        make_trainer(tmp_path, l1, train_rows=bad)
    floats = {"prompt": PROMPTS[:2], "budget": [100.0, 12.5]}
    with pytest.raises(ValueError, match=r"budget_column 'budget': .*got 100\.0"):
        make_trainer(tmp_path, l1, train_rows=floats, budget_column="budget")
    with pytest.raises(ValueError, match=r"budget_column='num_tokens': shaper 'laser' reads no budgets"):
        make_trainer(tmp_path, get_shaper("laser"), budget_column="num_tokens")
    # L1's own layout: the budget inside the reward_model dict column.
    nested = {"prompt": PROMPTS[:2], "reward_model": [{"num_tokens": 7}, {"num_tokens": 9}]}
    trainer, _ = make_trainer(tmp_path, l1, train_rows=nested, budget_column="reward_model.num_tokens")
    assert trainer.budget_column == "reward_model.num_tokens"
    assert budget_of({"reward_model": {"num_tokens": 9}}, "reward_model.num_tokens") == 9
    with pytest.raises(ValueError, match=r"got True"):
        budget_of({"num_tokens": True}, "num_tokens")


# -- AALC: the validation accuracy --------------------------------------------------------------------------

EVAL = {"eval_strategy": "steps", "eval_steps": 1, "eval_on_start": True, "per_device_eval_batch_size": GROUP}
EVAL_PROMPTS = ["9+9=", "8*7="]  # two eval batches of GROUP completions: the accuracy pools both


def eval_passes(reward):
    """The eval calls grouped by pass (a pass ends where a train call starts)."""
    passes, current = [], []
    for call in reward.calls:
        if call["mode"] == "eval":
            current.append(call)
        elif current:
            passes.append(current)
            current = []
    return [*passes, current] if current else passes


@pytest.mark.slow
def test_aalc_observes_the_pooled_eval_accuracy_and_resumes_without_observing_again(tmp_path):
    aalc = {"beta": 1.0, "c": 0.5, "l_max": 8}
    trainer, reward = make_trainer(tmp_path, get_shaper("aalc", **aalc), eval_prompts=EVAL_PROMPTS, config=EVAL)
    trainer.train()
    shaper = trainer.shaper
    passes = eval_passes(reward)
    assert len(passes) == 3 and all(len(p) == 2 for p in passes)  # before step 1, after steps 1 and 2
    counted = [sum(sum(c["correct"]) for c in p) / sum(len(c["correct"]) for c in p) for p in passes]
    assert [o["validation_accuracy"] for o in shaper.observed] == counted
    # The training batches used the accuracy observed just before them.
    expected = replay(get_shaper("aalc", **aalc), shaper.seen, {0: shaper.observed[:1], 1: shaper.observed[1:2]})
    assert_used(trainer, expected)
    saved = torch.load(tmp_path / "checkpoint-1" / STATE_FILE, weights_only=True)["shaper"]
    reference = get_shaper("aalc", **aalc)
    for o in shaper.observed[:2]:
        reference.observe(**o)
    assert_same_state(saved, reference.state_dict())  # A_val of the evaluation after step 1

    # Resume from step 1: eval_on_start evaluates again at step 1 but must not observe (A_val comes back from the
    # checkpoint); the evaluation after step 2 is observed.
    resumed, resumed_reward = make_trainer(tmp_path, get_shaper("aalc", **aalc), eval_prompts=EVAL_PROMPTS, config=EVAL)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))
    again = eval_passes(resumed_reward)
    assert len(again) == 2  # the start evaluation ran
    after = sum(sum(c["correct"]) for c in again[1]) / sum(len(c["correct"]) for c in again[1])
    assert [o["validation_accuracy"] for o in resumed.shaper.observed] == [after]
    (used,) = replay(reference, resumed.shaper.seen)  # the restored A_val shaped step 2
    torch.testing.assert_close(resumed.used_advantages[0], used, rtol=0, atol=0)
    resumed.evaluate()  # a second evaluation at step 2, already observed: logged, not observed
    assert len(resumed_reward.of("eval")) == 3 * 2 and len(resumed.shaper.observed) == 1


def test_eval_pool_counts_correct_completions_over_all_batches():
    pool = EvalPool()
    pool.add(torch.tensor([True, False, False, False]), torch.tensor([3, 4, 5, 6]), 2)
    pool.add(torch.tensor([True, True]), torch.tensor([1, 2]), 2)
    assert pool.accuracy() == 3 / 6  # pooled, not the mean of the batch means (0.625)
    batch = pool.monitor_batch()
    assert batch.group_ids.tolist() == [0, 0, 1, 1, 2, 2]
    assert batch.lengths.tolist() == [3, 4, 5, 6, 1, 2]


def test_held_out_signals_refuse_a_config_that_never_gives_them(tmp_path):
    with pytest.raises(ValueError, match=r"shaper 'aalc' reads the validation accuracy .*pass eval_dataset="):
        make_trainer(tmp_path, get_shaper("aalc"), config=EVAL)
    with pytest.raises(ValueError, match=r"eval_strategy='no' never evaluates"):
        make_trainer(tmp_path, get_shaper("aalc"), eval_prompts=EVAL_PROMPTS)
    laser_d = get_shaper("laser_d", refresh_every=2, n_rollout=GROUP)
    with pytest.raises(ValueError, match=r"eval_steps=1 \(set 2, the shaper's refresh_every\)"):
        make_trainer(tmp_path, laser_d, eval_prompts=EVAL_PROMPTS, config=EVAL)
    with pytest.raises(ValueError, match=r"eval_on_start=False \(set True"):
        make_trainer(
            tmp_path, laser_d, eval_prompts=EVAL_PROMPTS, config={**EVAL, "eval_steps": 2, "eval_on_start": False}
        )
    with pytest.raises(ValueError, match=r"eval_strategy='epoch' \(set 'steps'\)"):
        make_trainer(
            tmp_path, laser_d, eval_prompts=EVAL_PROMPTS, config={**EVAL, "eval_strategy": "epoch", "eval_steps": 2}
        )
    with pytest.raises(ValueError, match=r"num_generations_eval=2 \(set 4, the shaper's n_rollout\)"):
        make_trainer(
            tmp_path, laser_d, eval_prompts=EVAL_PROMPTS, config={**EVAL, "eval_steps": 2, "num_generations_eval": 2}
        )
    with pytest.raises(ValueError, match=r"shaper 'laser_d' reads a monitor set's rollouts .*pass eval_dataset="):
        make_trainer(tmp_path, laser_d, config={**EVAL, "eval_steps": 2})


# -- LASER-D: the monitor set -------------------------------------------------------------------------------

LASER_D = {"refresh_every": 2, "n_rollout": GROUP, "grid": (2, 4, 6, 8), "initial_target": 8}


@pytest.mark.slow
def test_laser_d_observes_the_eval_rollouts_as_its_monitor_set(tmp_path):
    config = {**EVAL, "eval_steps": 2}
    trainer, reward = make_trainer(
        tmp_path, get_shaper("laser_d", **LASER_D), max_steps=3, eval_prompts=EVAL_PROMPTS, config=config
    )
    trainer.train()
    shaper = trainer.shaper
    passes = eval_passes(reward)
    # Evaluated before step 1, after step 2 and (transformers' extra one) at max_steps = 3; observed on the
    # schedule only, before step 1 and after step 2.
    assert len(passes) == 3 and len(shaper.observed) == 2
    for signals, calls in zip(shaper.observed, passes[:2], strict=True):
        monitor = signals["monitor"]
        assert monitor.correct.tolist() == [bool(v) for c in calls for v in c["correct"]]
        assert monitor.lengths.tolist() == [n for c in calls for n in c["lengths"]]
        assert monitor.group_ids.tolist() == [0] * GROUP + [1] * GROUP  # one group per eval prompt
    expected = replay(get_shaper("laser_d", **LASER_D), shaper.seen, {0: shaper.observed[:1], 2: shaper.observed[1:]})
    assert_used(trainer, expected)
    (state,) = [v for v in shaper.state_dict().values() if isinstance(v, dict) and "refreshes" in v]
    assert state["refreshes"] == 2


# -- GFPO: dropped rows leave the loss ----------------------------------------------------------------------


def kept_rows(inputs, keep):
    rows = keep.nonzero().squeeze(1)
    return {k: (v[rows] if isinstance(v, torch.Tensor) and v.dim() > 0 else v) for k, v in inputs.items()}


@pytest.mark.slow
def test_gfpo_dropped_rows_carry_no_loss_and_no_gradient(tmp_path):
    # beta > 0: a dropped row (advantage 0) would still carry a KL term unless its mask is zeroed.
    trainer, _ = make_trainer(tmp_path, get_shaper("gfpo", keep=2), max_steps=2, config={"beta": 0.1}, saved_model=True)
    trainer.train()
    assert_used(trainer, replay(get_shaper("gfpo", keep=2), trainer.shaper.seen))
    inputs = trainer.loss_inputs[-1]
    keep = inputs[KEEP_KEY]
    assert keep.tolist().count(True) == 2 * 2  # two of each group of four
    dropped = (~keep).nonzero().squeeze(1)
    assert inputs["completion_mask"][dropped].sum() == 0
    # num_items_in_batch counts the kept rows' tokens only (one process, one micro-batch per generation).
    assert int(inputs["num_items_in_batch"]) == int(inputs["completion_mask"].sum())
    model = trainer.model
    embeddings = model.get_input_embeddings()
    for loss_type in ("dapo", "bnpo", "grpo", "dr_grpo"):
        trainer.loss_type = loss_type
        grads = []

        def keep_grad(module, args, out, grads=grads):
            out.register_hook(grads.append)  # returns None: the output itself is left as it is

        handle = embeddings.register_forward_hook(keep_grad)
        loss = trainer.compute_loss(model, inputs)
        loss.backward()
        handle.remove()
        model.zero_grad()
        prompt_width = inputs["prompt_ids"].shape[1]
        completion_grad = grads[0][:, prompt_width:]  # [rows, completion tokens, hidden]
        assert torch.count_nonzero(completion_grad[dropped]) == 0, loss_type
        assert torch.count_nonzero(completion_grad[keep]) > 0, loss_type
        with torch.no_grad():
            on_kept = GRPOTrainer._compute_loss(trainer, model, kept_rows(inputs, keep))
        torch.testing.assert_close(loss.detach(), on_kept, rtol=1e-5, atol=1e-7, msg=loss_type)


def test_gfpo_refuses_a_row_mean_loss_with_an_entropy_bonus():
    from dynashape.integrations.trl.keep import check_row_mean_loss

    with pytest.raises(ValueError, match=r"loss_type='grpo' averages over rows.*entropy bonus"):
        check_row_mean_loss("grpo", entropy_bonus=True, aux_loss=False)
    check_row_mean_loss("dapo", entropy_bonus=True, aux_loss=False)  # token-level: nothing to rescale


def test_gfpo_with_a_row_mean_loss_and_an_entropy_bonus_is_refused_when_the_trainer_is_built(tmp_path):
    # GFPO declares ShaperNeeds.drops_rows: the refusal comes before any step, not at the first filtered batch.
    with pytest.raises(ValueError, match=r"loss_type='grpo' averages over rows.*entropy bonus"):
        make_trainer(tmp_path, get_shaper("gfpo", keep=2), config={"loss_type": "grpo", "entropy_coef": 0.01})
    trainer, _ = make_trainer(tmp_path, get_shaper("gfpo", keep=2), config={"loss_type": "dapo", "entropy_coef": 0.01})
    assert trainer.shaper.needs.drops_rows and trainer.state.global_step == 0


# -- every other field shaper: a few real steps, the shaper's own advantages, state across a resume --------

FIELD = {
    "thinkprune": {"max_length": 6, "schedule": ((1, 3),)},
    "laser": {"target_length": 4},
    "dler": {"max_length": 6},
    "alp": {"beta": 0.05},
    "adlp": {"lambda0": 0.01, "eta": 0.1, "acc_ref": 0.25},
    "saw": {},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FIELD))
def test_field_shaper_trains_with_its_own_advantages(tmp_path, name):
    trainer, _ = make_trainer(tmp_path, get_shaper(name, **FIELD[name]), max_steps=2)
    trainer.train()
    reference = get_shaper(name, **FIELD[name])
    assert_used(trainer, replay(reference, trainer.shaper.seen))
    saved = torch.load(tmp_path / "checkpoint-2" / STATE_FILE, weights_only=True)["shaper"]
    assert_same_state(saved, reference.state_dict())
    if name not in ("adlp", "thinkprune"):  # stateless: nothing to carry
        assert saved == {}
        return
    assert saved != get_shaper(name, **FIELD[name]).state_dict()  # the state moved (lambda, schedule position)
    resumed, _ = make_trainer(tmp_path, get_shaper(name, **FIELD[name]), max_steps=3)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert_used(resumed, replay(reference, resumed.shaper.seen))  # step 3 continues the same trajectory


def test_contract_of_trl_loss_normalisers_the_row_drop_relies_on():
    """Fails loudly when a TRL release changes the loss divisors ``integrations.trl.keep`` adjusts for dropped rows."""
    import inspect

    from dynashape.integrations.trl.keep import ROW_MEAN_LOSSES

    assert list(inspect.signature(GRPOTrainer.compute_loss).parameters) == [
        "self",
        "model",
        "inputs",
        "return_outputs",
        "num_items_in_batch",
    ]
    source = inspect.getsource(GRPOTrainer._compute_loss)
    for needle in (
        'mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]',
        'if self.loss_type in ["grpo", "sapo"]:',
        "loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()",
        "loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)",
        "loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)",
        'normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes',
        "loss = (per_token_loss * mask).sum(-1).mean()",
    ):
        assert needle in source, f"TRL changed _compute_loss: {needle!r} is gone"
    assert set(ROW_MEAN_LOSSES) == {"grpo", "sapo", "luspo", "dr_grpo"}
