"""LASER and LASER-D: a bonus for correct answers within a target length, the target set per difficulty
(Liu et al., arXiv 2505.15612). Layer 1: the rewards, the buckets, the monitor's coverage table and the choice of
targets (pure). Layer 2: `LaserDTargets`, the three per-bucket targets, refreshed from a monitor set.

Official code: hkust-nlp/Laser, commit c9e7c4ef: `verl/utils/reward_score/length_penalty.py`
(`compute_length_reward_larse`, `compute_length_reward_larse_d`, `_choose_target_length`, spelt "larse"),
`verl/trainer/ppo/ray_trainer.py` (`_count_accuracy_bands_metrics`, `_calculate_length_coverage_statistics`,
the monitor run once before training and then every `trainer.monitor_freq` steps),
`verl/utils/reward_score/constants.py` (`get_length_threshold`), and the LASER-D scripts
(`scripts/training/laser-d-1.5b/*.sh`: grid 4096..16384 by 1024, monitor_freq 20, n = 8).

The base score (`base`, default "official"): the LASER and LASER-D scripts train with `trainer.format_reward:
True` (`verl/trainer/config/lengthy_ppo_trainer.yaml`; no script overrides it), so each response is scored by
`verl/utils/reward_score/hf_math_verifier.py` (`compute_score`): 1 correct, -0.5 wrong, -1 when the response has
no `\\boxed` answer after its `</think>` or lacks the think tags, whatever its verdict. The length bonus and the
difficulty buckets test `score == 1.0`, so a correct but unformatted answer earns neither. Here the batch's
``formatted`` input says whether an answer is formatted (the library's verifier: a closed `\\boxed{}`; a thinking
model's adapter should also require the think tags, as the code does). `base="binary"` is the paper's 0/1 correctness
(the code's `compute_score_no_format`), which reads no ``formatted``.

Details the code fixes and the paper leaves open:
- Training buckets by group accuracy p: high if p >= 2/3, medium if 1/3 <= p < 2/3, low below.
  The monitor bands differently: low if p <= 1/3, medium if 1/3 < p <= 2/3, high above. Both are kept.
- Coverage of a band at grid length L = the fraction of ALL the band's monitor responses (correct or not) of at
  most L tokens; an empty band covers 0 everywhere.
- A band's target is the smallest grid length L with floor(coverage * n_b) >= expected_n_correct, where n_b is
  int(n * 2/3), int(n * 1/3), 1 for high, medium, low; n = 8 is the function's default and the trainer never
  passes another. If no grid length qualifies, the target is the longest response of the training batch being
  shaped (`int(response_length.max())`), i.e. every correct answer earns the bonus.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from dynashape.core.checks import require_choice, require_range
from dynashape.core.groups import Groups, group_mean
from dynashape.methods._inputs import as_correct, as_lengths, capped_correct, check_rows, require_int

__all__ = [
    "BASE_SCORES",
    "BUCKETS",
    "LaserConfig",
    "LaserDConfig",
    "LaserDTargets",
    "choose_bucket_targets",
    "difficulty_buckets",
    "laser_base_score",
    "laser_d_reward",
    "laser_reward",
    "monitor_coverage",
]

BUCKETS: tuple[str, ...] = ("low", "medium", "high")
RoundMethod = Literal["floor", "ceil"]
BaseScore = Literal["official", "binary"]
BASE_SCORES: tuple[str, ...] = ("official", "binary")
#: The official base score of a formatted wrong answer and of an unformatted one (hf_math_verifier.compute_score).
WRONG_SCORE, UNFORMATTED_SCORE = -0.5, -1.0
_F64 = torch.float64


@dataclass(frozen=True, kw_only=True)
class LaserConfig:
    """LASER's fixed-target bonus."""

    alpha: float = 0.5
    """Bonus added to a correct answer of at most target_length tokens (`length_reward_scalar`, 0.5). >= 0."""
    target_length: int = 4096
    """The target L_T in tokens (the paper's runs: 2048, 4096, 8192). >= 1."""
    base: BaseScore = "official"
    """'official': 1 / -0.5 / -1 by verdict and format (reads ``batch.formatted``); 'binary': the paper's 0/1."""

    def __post_init__(self) -> None:
        require_range("alpha", self.alpha, 0.0, None)
        require_int("target_length", self.target_length, 1)
        require_choice("base", self.base, BASE_SCORES)


@dataclass(frozen=True, kw_only=True)
class LaserDConfig:
    """LASER-D's per-difficulty targets and how they are chosen."""

    alpha: float = 0.5
    """Bonus for a correct answer within its bucket's target. >= 0."""
    initial_target: int = 4096
    """Every bucket's target until the first monitor refresh (`length_penalty.target_length`). >= 1."""
    grid: tuple[int, ...] = tuple(range(4096, 16384 + 1, 1024))
    """Candidate targets in tokens, strictly increasing (the LASER-D scripts: 4096 to 16384 by 1024)."""
    refresh_every: int = 20
    """Steps between monitor refreshes (`trainer.monitor_freq`); the first refresh comes before step 0. >= 1."""
    n_rollout: int = 8
    """n in the bucket sizes int(n * 2/3), int(n / 3) (the code's default, never overridden). >= 1."""
    expected_n_correct: float = 1
    """Expected correct answers a target must keep (`length_penalty.expected_n_correct`). > 0."""
    round_method: RoundMethod = "floor"
    """'floor': floor(coverage * int(n_b)); 'ceil': coverage * ceil(n_b) (`length_penalty.round_method`)."""
    base: BaseScore = "official"
    """'official': 1 / -0.5 / -1 by verdict and format (reads ``batch.formatted``); 'binary': the paper's 0/1."""

    def __post_init__(self) -> None:
        require_range("alpha", self.alpha, 0.0, None)
        require_choice("base", self.base, BASE_SCORES)
        for name in ("initial_target", "refresh_every", "n_rollout"):
            require_int(name, getattr(self, name), 1)
        object.__setattr__(self, "grid", tuple(self.grid))
        if not self.grid or any(not isinstance(g, int) or g < 1 for g in self.grid):
            raise ValueError(f"grid={self.grid!r} must be a non-empty tuple of integers >= 1")
        if any(b <= a for a, b in zip(self.grid, self.grid[1:])):
            raise ValueError(f"grid={self.grid!r} must be strictly increasing")
        require_range("expected_n_correct", self.expected_n_correct, 0.0, None, low_open=True)
        require_choice("round_method", self.round_method, ("floor", "ceil"))


def laser_base_score(correct: torch.Tensor, formatted: torch.Tensor | None = None) -> torch.Tensor:
    """The base score: 1 correct, -0.5 wrong, -1 unformatted when `formatted` is given (hkust-nlp/Laser@c9e7c4ef
    `hf_math_verifier.compute_score`, the official runs' `format_reward: True`); the 0/1 verdict when it is None
    (`compute_score_no_format`, the paper's form).

    Args: correct: BoolTensor or 0/1 Tensor [N]. formatted: BoolTensor or 0/1 Tensor [N], or None.
    Returns: float64 Tensor [N].
    """
    c = as_correct(correct)
    if formatted is None:
        return c
    check_rows(correct=correct, formatted=formatted)
    f = as_correct(formatted, "formatted")
    scored = torch.where(c > 0, torch.ones_like(c), torch.full_like(c, WRONG_SCORE))
    return torch.where(f > 0, scored, torch.full_like(c, UNFORMATTED_SCORE))


def laser_reward(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    *,
    target_length: float | torch.Tensor,
    alpha: float = 0.5,
    formatted: torch.Tensor | None = None,
) -> torch.Tensor:
    """LASER reward r = s(y) + alpha * 1[s(y) = 1 and L(y) <= L_T] (LASER Eq. 5, `compute_length_reward_larse`,
    length_reward_type='reward'), s the base score of `laser_base_score`: the official 1 / -0.5 / -1 when
    `formatted` is given, the paper's 0/1 when it is None. The bonus goes to the responses scoring exactly 1, as
    the code's `score_lst[i] == 1.0`: under the official score, correct and formatted.

    Args:
        correct: BoolTensor or 0/1 Tensor [N]. lengths: LongTensor [N].
        target_length: L_T, a number or a float Tensor [N] (LASER-D's per-rollout targets). alpha: the bonus.
        formatted: BoolTensor or 0/1 Tensor [N] (the official score), or None (0/1).
    Returns: float64 Tensor [N] in {-1, -0.5, 1, 1 + alpha} (official) or {0, 1, 1 + alpha}.
    """
    check_rows(correct=correct, lengths=lengths)
    s = laser_base_score(correct, formatted)
    return s + alpha * capped_correct((s == 1.0).to(_F64), as_lengths(lengths), target_length)


def difficulty_buckets(correct: torch.Tensor, groups: Groups) -> torch.Tensor:
    """Each rollout's training bucket from its group's accuracy p: 0 low (p < 1/3), 1 medium (1/3 <= p < 2/3),
    2 high (p >= 2/3), the comparisons of `compute_length_reward_larse_d`. p = count / size in float64 is the
    correctly rounded quotient, as Python's, so p = 2/3 exactly lands in high. Returns LongTensor [N]."""
    acc = groups.gather(group_mean(as_correct(correct), groups))
    return (acc >= 1.0 / 3.0).long() + (acc >= 2.0 / 3.0).long()


def monitor_coverage(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    groups: Groups,
    grid: Sequence[int],
) -> torch.Tensor:
    """The monitor's coverage table (`_count_accuracy_bands_metrics`): row b (low, medium, high by the monitor's
    bands p <= 1/3, 1/3 < p <= 2/3, p > 2/3), column j = the fraction of the band's responses, correct or not,
    with length <= grid[j]; 0 for an empty band.

    Args: correct, lengths: [N] over the monitor prompts' rollouts; groups: their Groups; grid: G lengths.
    Returns: float64 Tensor [3, G].
    """
    check_rows(correct=correct, lengths=lengths, group_index=groups.index)
    c, length = as_correct(correct), as_lengths(lengths)
    acc = groups.gather(group_mean(c, groups))
    band = (acc > 1.0 / 3.0).long() + (acc > 2.0 / 3.0).long()
    one_hot = torch.nn.functional.one_hot(band, 3).to(_F64)  # [N, 3]
    within = (length.unsqueeze(1) <= torch.tensor(grid, dtype=_F64, device=length.device)).to(_F64)  # [N, G]
    covered = one_hot.T @ within  # counts, exact in float64
    total = one_hot.sum(0).unsqueeze(1)
    return torch.where(total > 0, covered / total.clamp_min(1), torch.zeros_like(covered))


def choose_bucket_targets(
    coverage: torch.Tensor,
    grid: Sequence[int],
    *,
    n_rollout: int = 8,
    expected_n_correct: float = 1,
    round_method: RoundMethod = "floor",
) -> tuple[int | None, int | None, int | None]:
    """Per bucket (low, medium, high), the smallest grid length whose coverage keeps the expected number of
    correct answers (`_choose_target_length`), or None where no grid length does (the caller then uses the
    batch's longest response, as the code).

    floor: floor(coverage * int(n * k/3)) >= expected_n_correct with k = 2 (high), 1 (medium), and n_b = 1 for
    low. ceil: coverage * ceil(n * k/3) >= expected_n_correct.
    Args: coverage: float Tensor [3, G] from `monitor_coverage`; grid: the G lengths it was computed on.
    """
    require_choice("round_method", round_method, ("floor", "ceil"))
    if tuple(coverage.shape) != (3, len(grid)):
        raise ValueError(f"coverage must have shape (3, {len(grid)}), got {tuple(coverage.shape)}")
    rounding = int if round_method == "floor" else math.ceil
    sizes = (1, rounding(n_rollout * 1 / 3), rounding(n_rollout * 2 / 3))
    table = coverage.to(_F64).tolist()  # 3 x G Python floats: the code's own arithmetic, not a per-rollout loop
    chosen: list[int | None] = []
    for row, size in zip(table, sizes):
        kept = [ratio * size if round_method == "ceil" else int(ratio * size) for ratio in row]
        passing = [length for length, k in zip(grid, kept) if k >= expected_n_correct]
        chosen.append(min(passing) if passing else None)
    return chosen[0], chosen[1], chosen[2]


def laser_d_reward(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    groups: Groups,
    *,
    targets: Sequence[float | None],
    alpha: float = 0.5,
    formatted: torch.Tensor | None = None,
) -> torch.Tensor:
    """LASER-D reward: LASER's bonus with L_T = the target of the rollout's difficulty bucket
    (`compute_length_reward_larse_d`). A None target is the batch's longest response. The buckets count the
    responses scoring exactly 1 (the code's `id2acc`), so under the official score (`formatted` given) a correct
    but unformatted answer does not count as solved.

    Args:
        correct: BoolTensor or 0/1 Tensor [N]. lengths: LongTensor [N]. groups: the batch's Groups.
        targets: (low, medium, high) targets in tokens, or None.
        formatted: BoolTensor or 0/1 Tensor [N] (the official score), or None (0/1).
    Returns: float64 Tensor [N].
    """
    if len(targets) != 3:
        raise ValueError(f"targets must give (low, medium, high), got {len(targets)} values")
    check_rows(correct=correct, lengths=lengths, group_index=groups.index)
    length = as_lengths(lengths)
    longest = float(length.max())
    per_bucket = torch.tensor([longest if t is None else float(t) for t in targets], dtype=_F64, device=length.device)
    solved = laser_base_score(correct, formatted) == 1.0
    per_rollout = per_bucket.index_select(0, difficulty_buckets(solved, groups))
    return laser_reward(correct, lengths, target_length=per_rollout, alpha=alpha, formatted=formatted)


class LaserDTargets:
    """LASER-D's three targets, refreshed from a monitor set every `refresh_every` steps.

    Learned state: `targets_` (tuple of three int or None: low, medium, high) and `refreshes_` (int). Until the
    first `refresh` every target is `initial_target`. `due(step)` says whether step (0-based) is a refresh step:
    step 0 and every multiple of refresh_every, as the code's monitor before training and at
    global_step % monitor_freq == 0.
    """

    def __init__(self, config: LaserDConfig | None = None) -> None:
        self.config = config or LaserDConfig()
        self.reset()

    def reset(self) -> None:
        t = self.config.initial_target
        self.targets_: tuple[int | None, int | None, int | None] = (t, t, t)
        self.refreshes_ = 0

    def due(self, step: int) -> bool:
        return step % self.config.refresh_every == 0

    def refresh(self, correct: torch.Tensor, lengths: torch.Tensor, group_ids: torch.Tensor) -> None:
        """Choose new targets from a monitor set's rollouts (correct, lengths, group_ids: [M])."""
        cfg = self.config
        coverage = monitor_coverage(correct, lengths, Groups.from_ids(group_ids), cfg.grid)
        self.targets_ = choose_bucket_targets(
            coverage,
            cfg.grid,
            n_rollout=cfg.n_rollout,
            expected_n_correct=cfg.expected_n_correct,
            round_method=cfg.round_method,
        )
        self.refreshes_ += 1

    def reward(
        self, correct: torch.Tensor, lengths: torch.Tensor, groups: Groups, formatted: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The LASER-D reward of a training batch under the current targets (no state change); `formatted` as
        in `laser_d_reward`."""
        return laser_d_reward(
            correct, lengths, groups, targets=self.targets_, alpha=self.config.alpha, formatted=formatted
        )

    def state_dict(self) -> dict[str, Any]:
        return {"targets": list(self.targets_), "refreshes": self.refreshes_}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            targets = tuple(None if t is None else int(t) for t in state["targets"])
            refreshes = int(state["refreshes"])
        except (KeyError, TypeError, ValueError) as err:
            msg = "LASER-D state must hold 'targets' (3 ints or None) and 'refreshes' (int)"
            raise ValueError(f"{msg}: {err}") from err
        if len(targets) != 3 or refreshes < 0 or any(t is not None and t < 1 for t in targets):
            raise ValueError(f"LASER-D state is corrupt: targets={targets}, refreshes={refreshes}")
        self.targets_ = (targets[0], targets[1], targets[2])
        self.refreshes_ = refreshes
