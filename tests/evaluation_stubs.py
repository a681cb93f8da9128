"""Verifiers that stand in for the math verifier in the tests of ``dynashape evaluate`` (transformers and vLLM
backends alike)."""

from __future__ import annotations


class ParityVerifier:
    """Right when the text's character sum is even: a random tiny model then has both right and wrong answers."""

    name = "parity"  # the cache's key names the verifier

    def verify(self, golds, responses):
        from dynashape.rewards import Reason, Verdict

        return [Verdict(sum(map(ord, r)) % 2 == 0, None, Reason.MATCH) for r in responses]


class KilledAfter(ParityVerifier):
    """Stands in for a kill: raises on its ``calls``-th batch, after the earlier batches were cached."""

    def __init__(self, calls: int) -> None:
        self.left = calls

    def verify(self, golds, responses):
        self.left -= 1
        if self.left == 0:
            raise KeyboardInterrupt("killed")
        return super().verify(golds, responses)
