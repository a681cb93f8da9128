"""Float value of a small closed-form LaTeX expression, to prove two answers different without sympy.

Grammar (on ``answers.normalize_answer`` output): decimal numbers, ``+ - * / ^``, ``\\cdot``, ``\\times``,
``\\div``, parentheses and braces, ``\\frac{a}{b}``, ``\\sqrt{x}``, ``\\sqrt[n]{x}``, ``\\pi`` and implicit
multiplication (``2\\sqrt{3}``, ``3\\pi``). Anything else (letters, ``i``, ``e``, commas, other commands, a
number directly before ``\\frac``, which math-verify reads as a mixed number) returns None.

A recursive-descent parser over at most ``MAX_CHARS`` characters with a nesting limit; floats cannot hang
(``10^{10^{10}}`` overflows at once and returns None). Nothing is ever passed to eval.
"""

from __future__ import annotations

import math
import re

__all__ = ["MAX_CHARS", "evaluate"]

MAX_CHARS = 200
_MAX_DEPTH = 40
_MAX_MAGNITUDE = 1e100
_TOKEN_RE = re.compile(r"\d+(?:\.\d*)?|\.\d+|\\[A-Za-z]+|[-+*/^(){}\[\]]")
_MULTIPLY = {"*", "\\cdot", "\\times"}
_ATOM_START = {"(", "{", "\\frac", "\\sqrt", "\\pi"}


class _Bail(Exception):
    """Outside the grammar, or not a finite real number of sane size."""


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise _Bail
        self.pos += 1
        return token

    def expr(self) -> float:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise _Bail
        value = self.term()
        while self.peek() in ("+", "-"):
            value = _checked(value + self.term() if self.take() == "+" else value - self.term())
        self.depth -= 1
        return value

    def term(self) -> float:
        value = self.signed()
        while True:
            token = self.peek()
            if token in _MULTIPLY:
                self.take()
                value = _checked(value * self.signed())
            elif token in ("/", "\\div"):
                self.take()
                divisor = self.signed()
                if divisor == 0:
                    raise _Bail
                value = _checked(value / divisor)
            elif token in _ATOM_START:
                if token == "\\frac" and self.tokens[self.pos - 1][0].isdigit():
                    raise _Bail  # "2\frac{1}{4}" is a mixed number to math-verify, not a product
                value = _checked(value * self.power())
            else:
                return value

    def signed(self) -> float:
        if self.peek() in ("+", "-"):
            return -self.signed() if self.take() == "-" else self.signed()
        return self.power()

    def power(self) -> float:
        base = self.atom()
        if self.peek() != "^":
            return base
        self.take()
        # TeX: an unbraced exponent is one token, so 2^10 is 2^1 * 0; refuse that reading outright.
        token = self.peek()
        if token is not None and token[0].isdigit():
            if len(token) > 1:
                raise _Bail
            exponent = float(self.take())
        else:
            exponent = self.atom()
        if base < 0 and not exponent.is_integer():
            raise _Bail
        try:
            return _checked(math.pow(base, exponent))
        except (OverflowError, ValueError, ZeroDivisionError):
            raise _Bail from None

    def braced(self) -> float:
        self.take("{")
        value = self.expr()
        self.take("}")
        return value

    def atom(self) -> float:
        token = self.take()
        if token[0].isdigit() or token[0] == ".":
            return float(token)
        if token == "(":
            value = self.expr()
            self.take(")")
            return value
        if token == "{":
            value = self.expr()
            self.take("}")
            return value
        if token == "\\pi":
            return math.pi
        if token == "\\frac":
            numerator = self.braced()
            denominator = self.braced()
            if denominator == 0:
                raise _Bail
            return _checked(numerator / denominator)
        if token == "\\sqrt":
            index = 2.0
            if self.peek() == "[":
                self.take()
                index = self.expr()
                self.take("]")
                if not index.is_integer() or index < 2:
                    raise _Bail
            radicand = self.braced()
            if radicand < 0:
                raise _Bail
            return _checked(radicand ** (1.0 / index))
        raise _Bail


def _checked(value: float) -> float:
    if not math.isfinite(value) or abs(value) > _MAX_MAGNITUDE:
        raise _Bail
    return value


def evaluate(latex: str) -> float | None:
    """The real value of a normalised closed-form answer, or None when it is not one (never raises)."""
    if len(latex) > MAX_CHARS or not latex:
        return None
    tokens = _TOKEN_RE.findall(latex)
    if sum(map(len, tokens)) != len(latex):  # something outside the grammar (a letter, a comma, a space)
        return None
    parser = _Parser(tokens)
    try:
        value = parser.expr()
        if parser.pos != len(tokens):
            return None
    except (_Bail, RecursionError, OverflowError, ValueError, ZeroDivisionError):
        return None
    return value
