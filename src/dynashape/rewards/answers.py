"""Answer extraction and the fast equivalence path (no sympy, no eval).

Model output is untrusted: every function here takes any string, never raises on it, and runs in time linear
in its length (one pass of linear regexes or a single token scan; no nested quantifiers). Strings longer than
``FAST_PATH_MAX_CHARS`` are left to math-verify, so the fast path costs microseconds per pair.

The fast path decides only what it can decide with certainty and with the same verdict as math-verify:

* **match** when the normalised strings are equal, when both sides are the same number (integers, decimals,
  fractions, thousands separators, percent read as either ``v`` or ``v/100`` against a plain number), when an
  assignment ``x = v`` on one side equals the other side, or when both are the same multiple-choice letter;
* **mismatch** when both sides are numbers that differ by more than math-verify's float rounding could hide
  (exactly for integers and fractions), when both are closed forms (``2\\sqrt{3}``, ``\\frac{\\pi}{2}``; see
  ``_closed_form``) whose float values differ by more than 1e-6 relative, or when both are different
  multiple-choice letters.

Everything else (symbolic equalities such as ``\\sqrt{12}`` = ``2\\sqrt{3}``, polynomials, sets, intervals,
tuples, matrices, equations...) returns ``None`` and goes to math-verify in a worker process.
"""

from __future__ import annotations

import re
from collections import deque
from fractions import Fraction
from typing import NamedTuple

from dynashape.rewards import _closed_form

__all__ = [
    "FAST_PATH_MAX_CHARS",
    "braces_balanced",
    "extract_answer",
    "fast_equivalent",
    "has_boxed_answer",
    "normalize_answer",
    "strip_delimiters",
]

FAST_PATH_MAX_CHARS = 512
"""Longer answers skip the fast path (no gold answer is that long; math-verify with a timeout decides)."""

# ---------------------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------------------

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# A backslash escapes the next character (so ``\{`` and ``\}`` are literal braces, not grouping), and ``\\``
# is one token, so the brace in ``\\{`` still groups.
_BRACE_TOKEN_RE = re.compile(r"\\.|[{}]", re.DOTALL)
_BARE_ARG_RE = re.compile(r"\s*([^\s${}]+)")
_ANSWER_RE = re.compile(r"(?<![A-Za-z])answer(?:\*\*)?[ \t]*[:：][ \t]*(?:\*\*)?", re.IGNORECASE)
_INLINE_MATH_RE = re.compile(r"\$([^$]+)\$")


def _closing_braces(text: str, start: int) -> dict[int, int]:
    """Map every ``{`` at or after ``start`` to its matching ``}`` (one linear pass with a stack)."""
    stack: list[int] = []
    close_of: dict[int, int] = {}
    for token in _BRACE_TOKEN_RE.finditer(text, start):
        char = token.group()
        if char == "{":
            stack.append(token.start())
        elif char == "}" and stack:
            close_of[stack.pop()] = token.start()
    return close_of


def _first_closing_brace(text: str, open_pos: int) -> int | None:
    depth = 0
    for token in _BRACE_TOKEN_RE.finditer(text, open_pos):
        char = token.group()
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return token.start()
    return None


def _box_content(text: str, after: int, close_of: dict[int, int] | None) -> str | None:
    """Content of the box whose command ends at ``after``; None if its braces never close."""
    pos = after
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos < len(text) and text[pos] == "{":
        close = close_of.get(pos) if close_of is not None else _first_closing_brace(text, pos)
        return None if close is None else text[pos + 1 : close].strip()
    # ``\boxed 5`` / ``\boxed5``: the next run up to whitespace or a math delimiter.
    bare = _BARE_ARG_RE.match(text, after)
    return bare.group(1) if bare else None


def _answer_line(text: str) -> str | None:
    tail = deque(_ANSWER_RE.finditer(text), maxlen=1)  # the last match, in one linear pass
    if not tail:
        return None
    last = tail[0]
    rest = text[last.end() :]
    lines = rest.split("\n", 2)
    content = lines[0].strip()
    if not content and len(lines) > 1:  # "Answer:\n42"
        content = lines[1].strip()
    content = content.strip("*").strip()
    if not content:
        return None
    # "The final answer is $5$. I hope it is correct." -> the last inline math span.
    spans = _INLINE_MATH_RE.findall(content)
    if spans and re.search(r"[A-Za-z]{2,}", _INLINE_MATH_RE.sub("", content)):
        return spans[-1].strip()
    return content.rstrip(".").strip() or None


def _boxed(text: str) -> str | None:
    """The content of the last box that closes (see `extract_answer`), or None."""
    boxes = list(_BOX_RE.finditer(text))
    if not boxes:
        return None
    # Common case: the last box closes; scan forward from it only.
    content = _box_content(text, boxes[-1].end(), None)
    if content is not None:
        return content
    # The last box never closes (truncated output): one linear pass matches all braces, then take the last
    # box that does close, which is what math-verify would also pick.
    close_of = _closing_braces(text, boxes[0].start())
    for box in reversed(boxes[:-1]):
        content = _box_content(text, box.end(), close_of)
        if content is not None:
            return content
    return None


def has_boxed_answer(text: str) -> bool:
    """Whether a response gives its final answer in a ``\\boxed{...}`` (or ``\\fbox``) that closes: the
    format the library's prompts ask for, which LASER's official score requires (``batch.formatted``).

    An ``Answer: ...`` line, which `extract_answer` also reads, is not the asked format. Non-strings give False.
    """
    return isinstance(text, str) and _boxed(text) is not None


def extract_answer(text: str) -> str | None:
    """The final answer written in a model response.

    The content of the last ``\\boxed{...}`` / ``\\fbox{...}`` whose braces balance (nested braces allowed,
    ``\\{``/``\\}`` are literal), or ``\\boxed 5`` without braces; failing any box, the last ``Answer: ...``
    line (the last inline ``$...$`` span when the line is prose, as in Minerva's "The final answer is $5$").

    Args:
        text: model output; any string (huge, unbalanced, binary junk). Non-strings give None.

    Returns:
        The stripped answer text, ``""`` for an empty box, or None when the response has no answer. Runs in
        time linear in ``len(text)`` and never raises.
    """
    if not isinstance(text, str):
        return None
    if _BOX_RE.search(text):
        return _boxed(text)
    return _answer_line(text)


# ---------------------------------------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------------------------------------

_DELIMS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_TEXT_CMD = r"\\(?:text|textrm|textbf|textit|mbox|mathrm|mathbf|operatorname)"
_UNIT_SUFFIX_RE = re.compile(_TEXT_CMD + r"\{[^{}]*\}(?:\^\{?[23]\}?)?$")
_TEXT_WRAP_RE = re.compile(_TEXT_CMD + r"\{([^{}]*)\}")
# ``\\`` (a row break) is matched first so that its second backslash never starts a spacing command.
_SPACING_RE = re.compile(r"\\\\|\\[!,;: ]|\\q?quad(?![A-Za-z])|~|\\displaystyle(?![A-Za-z])")
_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right)(?![A-Za-z])")
_DEGREE_RE = re.compile(r"(?:\^\{?\\circ\}?|\\circ|°|\\degree(?![A-Za-z]))$")
_FRAC_CMD_RE = re.compile(r"\\[dt]frac(?![A-Za-z])")
_FRAC_SHORT_RE = re.compile(r"\\frac(\d)(\d)")
_SQRT_SHORT_RE = re.compile(r"\\sqrt(\d)")
_FRAC_HALF_SHORT_RE = re.compile(r"\\frac\{([^{}]*)\}(\d)|\\frac(\d)\{([^{}]*)\}")
_SPACE_RE = re.compile(r"\s+")
_DROP_SPACE_RE = re.compile(r"(?<![A-Za-z]) | (?![A-Za-z])")
# Bare unit words after a number ("5 cm", "12 square units"); math-verify strips these too.
_UNIT_WORDS = (
    "units?|square units?|sq units?|cubic units?|cm|mm|km|meters?|centimeters?|kilometers?|inch(?:es)?|"
    "feet|foot|ft|yards?|miles?|mph|seconds?|minutes?|hours?|days?|weeks?|years?|degrees?|dollars?|cents?|"
    "pounds?|ounces?|grams?|kg|cups?|points?"
)
_UNIT_WORD_RE = re.compile(r"(?<=[\d}.%])\s+(?:" + _UNIT_WORDS + r")(?:\^\{?[23]\}?|²|³)?$")


def strip_delimiters(answer: str) -> str:
    """Remove surrounding ``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]`` and whitespace."""
    s = answer.strip()
    changed = True
    while changed:
        changed = False
        for left, right in _DELIMS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s = s[len(left) : len(s) - len(right)].strip()
                changed = True
    return s


def normalize_answer(answer: str) -> str:
    """Canonical string form of an answer for the fast path.

    Drops math delimiters, ``\\left``/``\\right``, spacing commands, ``\\dfrac``/``\\tfrac`` (to ``\\frac``),
    ``\\text{}``-style wrappers, trailing units and degrees, dollar signs, ``{,}`` thousands groups, a
    trailing full stop, and whitespace except between two letters (``\\pi r`` keeps its space). Linear time.
    """
    s = strip_delimiters(answer)
    s = s.replace("\u2212", "-").replace("\\%", "%").replace("\\$", "").replace("{,}", ",")
    s = _SPACING_RE.sub(_space_or_row_break, s)
    s = _LEFT_RIGHT_RE.sub("", s)
    s = _FRAC_CMD_RE.sub(r"\\frac", s)
    s = _FRAC_SHORT_RE.sub(r"\\frac{\1}{\2}", s)
    s = _SQRT_SHORT_RE.sub(r"\\sqrt{\1}", s)
    s = _FRAC_HALF_SHORT_RE.sub(_expand_half_short_frac, s)
    s = s.strip().rstrip(".").strip()
    s = _DEGREE_RE.sub("", s).strip()
    # A text wrapper after a number is a unit ("15\mbox{ cm}^2"); elsewhere it is just a wrapper.
    unit = _UNIT_SUFFIX_RE.search(s)
    if unit is not None and unit.start() > 0 and (s[unit.start() - 1].isdigit() or s[unit.start() - 1] in " }"):
        s = s[: unit.start()].strip()
    s = _TEXT_WRAP_RE.sub(r"\1", s)
    s = _UNIT_WORD_RE.sub("", s)
    s = _DEGREE_RE.sub("", s.strip())
    s = _SPACE_RE.sub(" ", s).strip()
    s = _DROP_SPACE_RE.sub("", s)
    return s.rstrip(".")


def _space_or_row_break(match: re.Match[str]) -> str:
    return match.group() if match.group() == "\\\\" else " "


def _expand_half_short_frac(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return "\\frac{" + match.group(1) + "}{" + match.group(2) + "}"
    return "\\frac{" + match.group(3) + "}{" + match.group(4) + "}"


# ---------------------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------------------

_NUM = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|[+-]?\.\d+"
_NUMBER_RE = re.compile(r"(" + _NUM + r")(%?)")
_SLASH_RE = re.compile(r"([+-]?)(" + _NUM + r")/(" + _NUM + r")(%?)")
_FRAC_RE = re.compile(r"([+-]?)\\frac\{(" + _NUM + r")\}\{(" + _NUM + r")\}(%?)")
_MAX_NUMBER_CHARS = 80  # Fraction arithmetic on longer literals is pointless for gold answers
# math-verify rounds floats to 6 decimals before comparing; a gap at least this large can never be rounded away.
_FLOAT_GAP = Fraction(1, 10**6)
_FLOAT_REL_GAP = Fraction(1, 10**9)
# Float evaluation errs by ~1e-15 relative; math-verify's 6-decimal rounding hides gaps below 1e-6.
_CLOSED_FORM_REL_GAP = 1e-6


class _Number(NamedTuple):
    value: Fraction
    exact: bool  # no decimal point: math-verify compares such numbers exactly
    percent: bool


def _literal(text: str) -> tuple[Fraction, bool]:
    clean = text.replace(",", "")
    if clean.endswith("."):
        clean = clean[:-1]
    return Fraction(clean), "." not in clean


def _parse_number(s: str) -> _Number | None:
    if len(s) > _MAX_NUMBER_CHARS:
        return None
    m = _NUMBER_RE.fullmatch(s)
    if m is not None:
        value, exact = _literal(m.group(1))
        return _Number(value, exact, bool(m.group(2)))
    m = _SLASH_RE.fullmatch(s) or _FRAC_RE.fullmatch(s)
    if m is None:
        return None
    num, num_exact = _literal(m.group(2))
    den, den_exact = _literal(m.group(3))
    if den == 0:
        return None
    value = num / den
    return _Number(-value if m.group(1) == "-" else value, num_exact and den_exact, bool(m.group(4)))


def _numbers_equivalent(gold: _Number, pred: _Number) -> bool | None:
    """True/False when certain, None when math-verify's float rounding could go either way."""
    candidates = [(gold.value, pred.value)]
    if gold.percent != pred.percent:  # math-verify reads 50% as 50 or as 1/2 against a plain number
        candidates.append((gold.value / 100, pred.value) if gold.percent else (gold.value, pred.value / 100))
    if any(a == b for a, b in candidates):
        return True
    if gold.exact and pred.exact:
        return False
    for a, b in candidates:
        gap = abs(a - b)
        if gap < _FLOAT_GAP or gap < _FLOAT_REL_GAP * max(abs(a), abs(b)):
            return None
    return False


_CHOICE_RE = re.compile(r"\(?([A-Z])\)?")
_ASSIGNMENT_RE = re.compile(r"[A-Za-z]=([^=<>]+)")


def fast_equivalent(gold: str, pred: str) -> bool | None:
    """Decide ``pred == gold`` without sympy when that is certain; None hands the pair to math-verify.

    Args:
        gold: the reference answer (not a full solution).
        pred: the extracted model answer.

    Returns:
        True (match), False (mismatch) or None (undecided). Never raises; linear time.
    """
    if not isinstance(gold, str) or not isinstance(pred, str):
        return None
    if len(gold) > FAST_PATH_MAX_CHARS or len(pred) > FAST_PATH_MAX_CHARS:
        return None
    g, p = normalize_answer(gold), normalize_answer(pred)
    if not g or not p:
        return None
    if g == p:
        return True
    # "x = 5" against "5" (either side): math-verify compares the right-hand side of an assignment.
    if "=" in g and "=" not in p:
        m = _ASSIGNMENT_RE.fullmatch(g)
        g = m.group(1) if m else g
    elif "=" in p and "=" not in g:
        m = _ASSIGNMENT_RE.fullmatch(p)
        p = m.group(1) if m else p
    if g == p:
        return True
    gold_num, pred_num = _parse_number(g), _parse_number(p)
    if gold_num is not None and pred_num is not None:
        return _numbers_equivalent(gold_num, pred_num)
    # Closed forms (2\sqrt{3}, \frac{\pi}{2}, ...): floats prove two values different, never equal (equal
    # floats may still differ symbolically, which is math-verify's to say).
    if "%" not in g and "%" not in p:
        a = float(gold_num.value) if gold_num is not None else _closed_form.evaluate(g)
        b = float(pred_num.value) if pred_num is not None else _closed_form.evaluate(p)
        if a is not None and b is not None and abs(a - b) > _CLOSED_FORM_REL_GAP * max(1.0, abs(a), abs(b)):
            return False
    gold_choice, pred_choice = _CHOICE_RE.fullmatch(g), _CHOICE_RE.fullmatch(p)
    if gold_choice and pred_choice:
        return gold_choice.group(1) == pred_choice.group(1)
    return None


def braces_balanced(text: str) -> bool:
    """Whether every ``{`` has its ``}`` (escaped braces ``\\{``/``\\}`` are literal). Linear time."""
    depth = 0
    for token in _BRACE_TOKEN_RE.finditer(text):
        char = token.group()
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0
