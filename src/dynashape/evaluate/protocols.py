"""The papers' evaluation protocols as data: sampling settings and samples per benchmark (each paper's own).

* ``lead``: LEAD follows Sober Reasoning: temperature 0.8, top-p 0.9, avg@10 on AIME 2024 / 2025 and AMC 2023,
  avg@3 on MATH-500 and OlympiadBench; the headline length is the unweighted mean of the benchmarks' mean lengths
  and AES is taken against the base model before RL.
* ``meds``: pass@k up to k = 128 at temperature 1.0, top-p 1.0 (128 samples per problem), plus the top-1 eigen
  ratio of the wrong answers' fingerprints.
* ``custom``: temperature 1.0, top-p 1.0, pass@k for k = 1, 2, 4, ... up to the samples (4 unless overridden).

A user's benchmark file gets the protocol's n by its name (``canonical_benchmark``): ``AIME_2024.jsonl`` is
``aime24``, ``amc2023-test.jsonl`` is ``amc23``. Every protocol reports pass@k for k = 1, 2, 4, ... up to a
benchmark's n (and n itself), with ``metrics.pass_at_k_curve``'s default ks.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PROTOCOLS", "Protocol", "canonical_benchmark", "get_protocol"]

# canonical name -> the normalised spellings (lower case, letters and digits only) a file name may start with
_ALIASES: dict[str, tuple[str, ...]] = {
    "aime24": ("aime24", "aime2024"),
    "aime25": ("aime25", "aime2025"),
    "amc23": ("amc23", "amc2023"),
    "math500": ("math500",),
    "olympiadbench": ("olympiadbench", "olympiad"),
    "gsm8k": ("gsm8k",),
}


def canonical_benchmark(name: str) -> str:
    """The benchmark a name stands for: ``AIME_2024`` -> ``aime24``, ``OlympiadBench-test`` -> ``olympiadbench``;
    a name matching none is returned normalised (lower case, letters and digits only)."""
    flat = re.sub(r"[^a-z0-9]", "", name.lower())
    # longest spelling first, so that "aime2024" is not read as a prefix of something shorter
    for canon, spellings in _ALIASES.items():
        if any(flat.startswith(s) for s in sorted(spellings, key=len, reverse=True)):
            return canon
    return flat


@dataclass(frozen=True, kw_only=True)
class Protocol:
    """Sampling settings of an evaluation protocol; ``dataclasses.replace`` gives the command line's overrides."""

    name: str
    """lead, meds or custom (recorded in results.json)."""
    temperature: float
    """Softmax temperature of the samples (> 0)."""
    top_p: float
    """Nucleus mass kept, in (0, 1] (1.0 = off)."""
    samples: int
    """Samples per problem on a benchmark the protocol does not name (>= 1)."""
    samples_by_benchmark: Mapping[str, int] = field(default_factory=dict)
    """Samples per problem on the benchmarks the protocol names (canonical names, see ``canonical_benchmark``)."""
    max_new_tokens: int = 32768
    """Response cap in tokens (>= 1); a response without EOS by then is truncated (and counts as wrong)."""
    seed: int = 0
    """Seed of every draw: the same seed, model and settings give the same samples."""
    eigen_ratio: bool = False
    """Report the top-1 eigen ratio of the wrong answers' MEDS fingerprints (transformers backend only)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        for name, value in (("samples", self.samples), ("max_new_tokens", self.max_new_tokens)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for bench, n in self.samples_by_benchmark.items():
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"samples_by_benchmark[{bench!r}] must be an int >= 1, got {n!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an int, got {self.seed!r}")

    def samples_for(self, benchmark: str) -> int:
        """Samples per problem on ``benchmark`` (any spelling ``canonical_benchmark`` reads)."""
        return self.samples_by_benchmark.get(canonical_benchmark(benchmark), self.samples)

    def with_overrides(self, **values: Any) -> Protocol:
        """This protocol with the given settings replaced (None = keep); ``samples`` then applies to every
        benchmark, named ones included (the command line's ``--samples N`` means N everywhere)."""
        values = {k: v for k, v in values.items() if v is not None}
        if "samples" in values:
            values["samples_by_benchmark"] = {}
        return dataclasses.replace(self, **values)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["samples_by_benchmark"] = dict(self.samples_by_benchmark)
        return out


PROTOCOLS: dict[str, Protocol] = {
    # Sober Reasoning's settings as LEAD reports them; benchmarks it does not name (GSM8K, a user's file) get
    # MATH-500's avg@3. The 32K cap is Sober Reasoning's; set --max-new-tokens for a smaller model.
    "lead": Protocol(
        name="lead",
        temperature=0.8,
        top_p=0.9,
        samples=3,
        samples_by_benchmark={"aime24": 10, "aime25": 10, "amc23": 10, "math500": 3, "olympiadbench": 3},
    ),
    "meds": Protocol(name="meds", temperature=1.0, top_p=1.0, samples=128, eigen_ratio=True),
    "custom": Protocol(name="custom", temperature=1.0, top_p=1.0, samples=4),
}


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name``; a ValueError names the known ones."""
    if name not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {name!r}")
    return PROTOCOLS[name]
