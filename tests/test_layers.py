"""Imports point one way (design.md): cli -> study -> train / evaluate -> runtime -> world -> shapers -> methods
-> core; integrations -> shapers and below. ``io`` (files) and ``core`` (tensors) are the floor everyone may stand on.

Read from the source with ``ast`` (function-level imports included: a late import does not make an upward
arrow acceptable), so the rule is checked without importing anything heavy.
"""

import ast
from pathlib import Path

import pytest

import dynashape

ROOT = Path(dynashape.__file__).parent

FLOOR = {"core", "io"}
# A layer may import from the layers listed for it and from itself. "api" is the package root (`dynashape`'s
# lazy names); a module at the root other than cli would be "api" too.
ALLOWED = {
    "core": {"core"},
    "io": {"io"},
    "methods": FLOOR | {"methods"},
    "losses": FLOOR | {"losses"},
    "rewards": FLOOR | {"rewards"},
    "meds": FLOOR | {"meds"},
    # the length reward terms engines ship (DAPO overlong) are rewards/length.py, a penalty part applies them
    "shapers": FLOOR | {"methods", "meds", "rewards", "shapers"},
    # a problem's key is the MEDS memory's; the world labels answers with the verifier's extraction
    "world": FLOOR | {"meds", "rewards", "world"},
    "runtime": FLOOR | {"meds", "rewards", "world", "runtime"},
    "train": FLOOR | {"methods", "losses", "rewards", "meds", "shapers", "world", "runtime", "train"},
    "evaluate": FLOOR | {"meds", "rewards", "world", "runtime", "evaluate"},
    "study": FLOOR
    | {"methods", "losses", "rewards", "meds", "shapers", "world", "runtime", "train", "evaluate", "study"},
    # engines see the maths and the shapers; shaper state goes to their checkpoints through io
    "integrations": FLOOR | {"methods", "losses", "rewards", "meds", "shapers", "integrations"},
    "testing": FLOOR | {"methods", "shapers", "testing"},
    "api": FLOOR | {"shapers", "api"},
}
LAYERS = (*ALLOWED, "cli")
ALLOWED["cli"] = set(LAYERS)


def layer_of(module: str) -> str:
    """``dynashape.train.loop`` -> "train"; ``dynashape.core.batch`` -> "core"; ``dynashape`` -> "api"."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "api"
    return top if top in LAYERS else "api"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Every ``dynashape...`` module that ``source`` (module ``module``) imports, anywhere in it (relative
    imports resolved)."""
    tree = ast.parse(source)
    here = module.split(".")
    package = here if is_package else here[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append(mod)
            # `from dynashape import train` imports a subpackage
            found += [f"{mod}.{a.name}" for a in node.names if mod == "dynashape"]
    return [m for m in found if m == "dynashape" or m.startswith("dynashape.")]


def test_layer_of_hand_checked():
    assert layer_of("dynashape.core.batch") == "core"
    assert layer_of("dynashape.shapers.recipes") == "shapers"
    assert layer_of("dynashape") == "api"
    assert layer_of("dynashape.world.chain.teacher") == "world"
    assert layer_of("dynashape.integrations.verl.hooks") == "integrations"
    assert layer_of("dynashape.cli") == "cli"
    assert layer_of("dynashape.evaluate.run") == "evaluate"


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path):
    src = layer_of(module_name(path))
    found = imports_of(path.read_text(), module_name(path), is_package=path.name == "__init__.py")
    upward = [m for m in found if m != "dynashape" and layer_of(m) not in ALLOWED[src]]
    assert not upward, f"{module_name(path)} ({src}) imports {upward}"


def test_the_checker_catches_an_upward_import():
    """The rule can fail: a core module that imports the trainer inside a function, or the study through a
    relative import, is caught."""
    source = "def f():\n    from dynashape.train.loop import Trainer\n    from ..study import presets\n"
    found = imports_of(source, "dynashape.shapers.probe")
    assert [m for m in found if layer_of(m) not in ALLOWED["shapers"]] == ["dynashape.train.loop", "dynashape.study"]


def test_the_package_writes_nowhere_by_its_own_location():
    """No module finds a place to write from its own path (``parents[3]``, the repository): only package data
    is read beside a module."""
    offenders = [
        str(p.relative_to(ROOT))
        for p in ROOT.rglob("*.py")
        if "parents[" in p.read_text() and "__file__" in p.read_text()
    ]
    assert offenders == []


def test_every_module_folder_is_a_package_a_wheel_ships():
    """A folder without ``__init__.py`` is skipped by ``find_packages`` (pyproject's discovery): a wheel would
    lack it although an editable install imports it."""
    from setuptools import find_packages

    found = set(find_packages(str(ROOT.parent)))
    folders = {module_name(p.parent / "__init__.py") for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts}
    assert folders - found == set()


def test_the_shipped_base_model_and_rules_are_package_data():
    import fnmatch

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = ROOT.parents[1] / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("installed without its source checkout")
    patterns = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["dynashape"]
    shipped = [p for p in (ROOT / "world" / "chain" / "base_model").iterdir()] + [
        ROOT / "world" / "chain" / "rules.json"
    ]
    assert len(shipped) >= 6
    for path in shipped:
        rel = str(path.relative_to(ROOT))
        assert any(fnmatch.fnmatch(rel, pat) for pat in patterns), f"{rel} is not package data"


# Calls that write, delete or move files. Receivers named here only when the name alone would be ambiguous
# (``str.replace`` is not ``os.replace``); ``state.*`` is io's own module imported under its name.
_WRITING_METHODS = {"savefig", "mkdir", "write_text", "write_bytes", "touch", "unlink", "rmdir", "symlink_to"}
_WRITING_CALLS = {
    ("os", "replace"), ("os", "rename"), ("os", "remove"), ("os", "makedirs"), ("os", "mkdir"), ("os", "unlink"),
    ("torch", "save"), ("json", "dump"), ("shutil", "copy"), ("shutil", "copyfile"), ("shutil", "copytree"),
    ("shutil", "move"), ("shutil", "rmtree"),
}  # fmt: skip
_IO_NAMES = {"state", "state_files"}


def file_writes(source: str) -> list[str]:
    """Each call in ``source`` that writes, moves or deletes a file by itself (not through ``dynashape.io``):
    ``"line: call"``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        receiver = ast.unparse(fn.value) if isinstance(fn, ast.Attribute) else None
        name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
        method = receiver is not None and name in _WRITING_METHODS and receiver not in _IO_NAMES
        writes = (receiver, name) in _WRITING_CALLS or method
        if name in ("open", "rename") and receiver not in _IO_NAMES | {"os"}:
            mode = node.args[1] if name == "open" and receiver is None and len(node.args) > 1 else None
            mode = mode or (node.args[0] if name == "open" and receiver is not None and node.args else None)
            mode = next((k.value for k in node.keywords if k.arg == "mode"), mode)
            writes = name == "rename" or (isinstance(mode, ast.Constant) and bool(set(str(mode.value)) & set("wax+")))
        if writes:
            found.append(f"{node.lineno}: {ast.unparse(fn)}")
    return found


def test_only_io_writes_files():
    """Every file the package writes goes through ``dynashape.io`` (atomic replace, fsync, one error type). Two
    writers stay outside by design, each into a folder io made: transformers' ``save_pretrained`` inside
    ``io.state.atomic_folder``, and TensorBoard's event writer in a run's ``tb/``."""
    offenders = {
        str(p.relative_to(ROOT)): found
        for p in sorted(ROOT.rglob("*.py"))
        if p.relative_to(ROOT).parts[0] != "io" and (found := file_writes(p.read_text()))
    }
    assert offenders == {}


def test_the_writes_checker_catches_each_kind_of_write():
    source = (
        "def f(p, fig, x):\n"
        "    p.write_text('a')\n    fig.savefig(p)\n    p.parent.mkdir(parents=True)\n    open(p, 'w')\n"
        "    p.open('ab')\n    os.replace(p, p)\n    torch.save(x, p)\n    p.rename(p)\n"
        "    state.write_text(p, 'a')\n    open(p)\n    p.open('rb')\n    'a'.replace('a', 'b')\n"
        "    dataclasses.replace(x)\n    write_text(p, 'a')\n"
    )
    assert [line.split(":")[0] for line in file_writes(source)] == ["2", "3", "4", "5", "6", "7", "8", "9"]
