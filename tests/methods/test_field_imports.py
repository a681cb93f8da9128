"""The field package is layer 1-2 math: it imports the core's group statistics and checks, nothing above."""

import ast
from pathlib import Path

import dynashape.methods

ALLOWED = {"dynashape.core.groups", "dynashape.core.checks"}
STDLIB_AND_TORCH = {"torch", "math", "dataclasses", "typing", "collections", "__future__"}
FIELD = Path(dynashape.methods.__file__).parent


def test_field_imports_only_core_math():
    for path in sorted(FIELD.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.startswith("dynashape"):
                    assert name in ALLOWED or name.startswith("dynashape.methods"), f"{path.name} imports {name}"
                else:
                    assert name.split(".")[0] in STDLIB_AND_TORCH, f"{path.name} imports {name}"
