"""No study module dispatches on a method's name (issue 48): what a method is comes from its declaration (display
name, trajectory, needs, the run's config.yaml), and what a study compares against from its data file (its roles,
``study.roles``). A string literal in ``src/dynashape/study/*.py`` (docstrings aside) that equals a registered
shaper's or a preset's name, or a ``startswith`` on a prefix of one, is such a dispatch.

The allow-list says why each remaining literal stays; it only shrinks: an entry no longer found fails the test
until it is taken off, so a fix is recorded and no new name slips in."""

from __future__ import annotations

import ast
from pathlib import Path

import dynashape
from dynashape.shapers import available_shapers
from dynashape.train.presets import PRESETS

STUDY = Path(dynashape.__file__).parent / "study"

ALLOWED: dict[str, set[str]] = {
    # the LEAD and MEDS papers' published numbers, keyed as the papers name their rows: quoted data, not dispatch
    "tables.py": {"lead", "grpo", "dapo", "meds"},
}  # fmt: skip


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip


def method_names_in(source: str, names: set[str]) -> set[str]:
    """The registered names ``source`` spells as a string literal (docstrings aside), and the prefixes of one it
    tests with ``startswith``/``endswith`` (as ``"<prefix>*"``)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if node.value in names:
                found.add(node.value)
        if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith") and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
            and any(n.startswith(node.args[0].value) or n.endswith(node.args[0].value) for n in names)
        ):  # fmt: skip
            found.add(f"{node.args[0].value}*")
    return found


def _registered() -> set[str]:
    return set(available_shapers()) | set(PRESETS)


def test_no_study_module_spells_a_method_name():
    names = _registered()
    found = {p.name: method_names_in(p.read_text(), names) for p in sorted(STUDY.glob("*.py"))}
    found = {k: v for k, v in found.items() if v}
    new = {k: sorted(v - ALLOWED.get(k, set())) for k, v in found.items() if v - ALLOWED.get(k, set())}
    assert new == {}, "declare it where the method is defined (dynashape.shapers) or in the study file (roles)"
    gone = {k: sorted(v - found.get(k, set())) for k, v in ALLOWED.items() if v - found.get(k, set())}
    assert gone == {}, "no longer spelled there: take them off ALLOWED"


def test_the_check_finds_a_dispatch_and_skips_docstrings():
    names = {"dler", "lead", "grpo"}
    source = '''
"""The dler page, about lead and grpo."""
def f(method, rows):
    """Compares with grpo."""
    if method != "dler":
        return [m for m in rows if not m.startswith("lea")]
    return f"{method} beside grpo"
'''
    assert method_names_in(source, names) == {"dler", "lea*"}
