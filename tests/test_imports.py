"""`import dynashape` stays light: engines, plotting, clustering and transformers load only when used."""

import subprocess
import sys

HEAVY = (
    "torch", "sklearn", "hdbscan", "transformers", "matplotlib", "math_verify", "sympy", "verl", "trl", "skyrl", "ray",
)  # fmt: skip


def loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return [m for m in out.strip().split(",") if m]


def test_bare_import_loads_nothing_heavy():
    assert loaded_after("import dynashape") == []


def test_shapers_need_only_torch():
    assert loaded_after("from dynashape import get_shaper, RolloutBatch; get_shaper('lead')") == ["torch"]


def test_the_skyrl_adapter_imports_no_skyrl_and_no_ray_until_it_registers():
    assert loaded_after("import dynashape.integrations.skyrl") == []
    assert "skyrl" not in loaded_after("import dynashape.integrations.skyrl.estimators")


def test_meds_package_and_clustering_math_do_not_import_torch_or_transformers():
    assert loaded_after("import dynashape.meds.clustering") == []


def test_every_public_name_resolves():
    import dynashape
    import dynashape.meds

    for module in (dynashape, dynashape.meds):
        for name in module.__all__:
            assert getattr(module, name) is not None, name
