"""The generation cache: every finished batch's samples appended to a JSONL file, so a rerun continues.

One line per sample: ``key`` (the hash of everything that decides the draws: model, protocol settings, prompt
rendering, backend and batch layout), ``benchmark``, ``problem_id``, ``sample``, ``text``, ``length``,
``truncated``, ``correct`` and, under the MEDS protocol, ``fingerprint``. A batch's lines are written and
fsynced together after the batch is verified, so a kill loses at most the batch being sampled; a torn last
line is skipped and a batch whose lines are not all there is sampled again (with the same seed, so the same
draws). Lines of another key (other settings) are kept in the file and ignored.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dynashape.io import state

__all__ = ["GenerationCache", "SampleKey", "settings_key"]

log = logging.getLogger(__name__)

SampleKey = tuple[str, str, int]
"""(benchmark, problem_id, sample)."""


def settings_key(settings: Mapping[str, Any]) -> str:
    """16 hex characters of the SHA-256 of ``settings`` as sorted JSON."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


class GenerationCache:
    """Append-only JSONL of sample records under one settings ``key``.

    Args:
        path: the file (created with its folder on the first append).
        key: ``settings_key`` of the evaluation; only lines with this key are read back.
    """

    def __init__(self, path: str | Path, key: str) -> None:
        self.path = Path(path)
        self.key = key

    def load(self) -> dict[SampleKey, dict[str, Any]]:
        """The cached records of this key by (benchmark, problem_id, sample); unreadable lines are skipped."""
        out: dict[SampleKey, dict[str, Any]] = {}
        if not self.path.exists():
            return out
        skipped = 0
        with self.path.open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    skipped += 1  # a line torn by a kill mid-write
                    continue
                if isinstance(record, dict) and record.get("key") == self.key:
                    out[(record["benchmark"], record["problem_id"], int(record["sample"]))] = record
        if skipped:
            log.warning("%s: skipped %d torn line(s)", self.path, skipped)
        return out

    def append(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Append the records (tagged with the key) and fsync, so that they survive a kill after this returns."""
        lines = "".join(json.dumps({"key": self.key, **r}) + "\n" for r in records)
        if not lines:
            return
        state.append_text(self.path, lines)
