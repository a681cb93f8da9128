"""One MathVerifier pool for all verifier tests (worker start-up costs about a second per worker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dynashape.rewards import MathVerifier

SHARED_TIMEOUT_S = 5.0


@pytest.fixture(scope="session")
def verifier() -> Iterator[MathVerifier]:
    with MathVerifier(timeout=SHARED_TIMEOUT_S, workers=2) as shared:
        yield shared


@pytest.fixture(scope="session")
def math_verify_only() -> Iterator[MathVerifier]:
    """Every answered pair goes to math-verify: the reference the fast path must agree with."""
    with MathVerifier(timeout=SHARED_TIMEOUT_S, workers=1, fast_path=False) as slow:
        yield slow
