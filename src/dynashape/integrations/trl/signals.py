"""What the field's shapers read beyond a training batch, as TRL provides it (``ShaperNeeds``).

- budgets (L1): each prompt's token budget, from a dataset column. TRL's samplers repeat every row
  ``num_generations`` times in a row, and ``_generate_and_score_completions`` receives those rows
  (``inputs``) aligned with the local completions, so row i's column value is completion i's budget.
- the validation accuracy (AALC) and a monitor set (LASER-D): both come from TRL's evaluation pass.
  ``EvalPool`` collects the gathered verdicts and lengths of every evaluation batch; after the pass it gives
  the pooled share of correct completions and the monitor's ``RolloutBatch``.
- the options those signals need (an eval dataset, a step schedule), checked before TRL loads a model.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import torch

from dynashape.core.batch import RolloutBatch
from dynashape.shapers import Shaper

__all__ = ["DEFAULT_BUDGET_COLUMN", "EvalPool", "budget_of", "check_budget_column", "check_eval_signal_options"]

#: L1's datasets keep each prompt's budget in ``reward_model.num_tokens``; flattened, its column is this.
DEFAULT_BUDGET_COLUMN = "num_tokens"


def budget_of(row: Mapping[str, Any], column: str) -> int:
    """The budget in ``row[column]``; a dotted name reads into dict columns (``"reward_model.num_tokens"``).

    Raises:
        ValueError: naming the column and the value when it is missing, not an integer (a bool or a float
            is refused: a budget is a token count) or negative.
    """
    value: Any = row
    for part in _path(row, column):
        if not isinstance(value, Mapping) or part not in value:
            raise ValueError(f"budget_column {column!r}: a dataset row has no such column (keys {sorted(row)})")
        value = value[part]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"budget_column {column!r}: a budget must be an integer >= 0 tokens, got {value!r}")
    return int(value)


def _path(row: Mapping[str, Any], column: str) -> list[str]:
    # A column whose own name holds a dot wins over the nested reading.
    return [column] if column in row or "." not in column else column.split(".")


def check_budget_column(dataset: Any, column: str) -> None:
    """Refuse a train dataset without the budget column, or (map-style datasets) with a bad value in it.

    Checked at construction, before the first step; an iterable dataset is checked row by row as it streams.
    """
    names = getattr(dataset, "column_names", None)
    if names is None:  # an iterable dataset of unknown columns, or a plain list: checked per batch
        return
    top = column if column in names or "." not in column else column.split(".")[0]
    if top not in names:
        raise ValueError(
            f"budget_column {column!r}: the train dataset has no such column (columns {list(names)}); the shaper "
            "reads each prompt's token budget from it"
        )
    for row in dataset.select_columns([top]) if hasattr(dataset, "select_columns") else dataset:
        budget_of(row, column)


def _strategy(value: Any) -> str:
    return str(getattr(value, "value", value))


def check_eval_signal_options(shaper: Shaper, args: Any, eval_dataset: Any) -> None:
    """Refuse a configuration under which TRL's evaluation pass cannot give the shaper its held-out signal.

    AALC reads the validation accuracy: it needs an eval dataset and an evaluation schedule. LASER-D's monitor
    set is the eval pass, so it must run before the first step (``eval_on_start=True``) and every
    ``refresh_every`` steps (``eval_strategy="steps"``, ``eval_steps=refresh_every``) with the config's
    ``n_rollout`` completions per prompt (``num_generations_eval``).
    """
    needs = shaper.needs
    if not (needs.validation_accuracy or needs.monitor_rollouts):
        return
    reads = "a monitor set's rollouts" if needs.monitor_rollouts else "the validation accuracy"
    where = f"ShapedGRPOTrainer: shaper {shaper.name!r} reads {reads} from TRL's evaluation pass"
    if eval_dataset is None:
        raise ValueError(f"{where}: pass eval_dataset= (the held-out prompts)")
    if isinstance(eval_dataset, Mapping):
        raise ValueError(f"{where}: pass one eval_dataset, not a dict of {len(eval_dataset)} datasets")
    strategy = "no" if args is None else _strategy(args.eval_strategy)
    if not needs.monitor_rollouts:
        if strategy == "no":
            raise ValueError(f"{where}: eval_strategy='no' never evaluates; set eval_strategy='steps' and eval_steps")
        return
    refresh = shaper.config.refresh_every
    problems = []
    if strategy != "steps":
        problems.append(f"eval_strategy={strategy!r} (set 'steps')")
    eval_steps = None if args is None else args.eval_steps
    if eval_steps != refresh:
        problems.append(f"eval_steps={eval_steps!r} (set {refresh}, the shaper's refresh_every)")
    if args is None or not args.eval_on_start:
        problems.append("eval_on_start=False (set True: the targets are chosen before the first step)")
    if args is not None:
        per_prompt = args.num_generations_eval or args.num_generations
        if per_prompt != shaper.config.n_rollout:
            problems.append(
                f"num_generations_eval={per_prompt!r} (set {shaper.config.n_rollout}, the shaper's n_rollout)"
            )
    if problems:
        raise ValueError(f"{where}, on its own schedule: " + "; ".join(problems))


class EvalPool:
    """The verdicts and lengths of one TRL evaluation pass, batch by batch (every process holds all of them).

    TRL's eval sampler repeats each prompt ``num_generations_eval`` times in a row, so within a gathered eval
    batch the group of completion i is i // num_generations_eval; batches are numbered on, so groups never
    mix prompts of different batches.
    """

    def __init__(self) -> None:
        self.correct: list[torch.Tensor] = []
        self.lengths: list[torch.Tensor] = []
        self.group_ids: list[torch.Tensor] = []
        self._groups = 0

    def add(self, correct: torch.Tensor, lengths: torch.Tensor, num_generations: int) -> None:
        """One gathered eval batch: correct BoolTensor [M], lengths LongTensor [M], M a multiple of the group."""
        groups = torch.arange(correct.shape[0], device=correct.device) // num_generations
        self.correct.append(correct.cpu())
        self.lengths.append(lengths.cpu())
        self.group_ids.append((groups + self._groups).cpu())
        self._groups += int(groups.max()) + 1 if groups.numel() else 0

    def __len__(self) -> int:
        return sum(c.shape[0] for c in self.correct)

    def accuracy(self) -> float:
        """The pooled share of correct completions over the whole pass (not a mean of batch means)."""
        correct = torch.cat(self.correct)
        return float(correct.float().mean())

    def monitor_batch(self) -> RolloutBatch:
        """The pass as one RolloutBatch: correct, lengths and group ids [M] (one group per eval prompt)."""
        return RolloutBatch(
            group_ids=torch.cat(self.group_ids),
            correct=torch.cat(self.correct),
            lengths=torch.cat(self.lengths),
        )
