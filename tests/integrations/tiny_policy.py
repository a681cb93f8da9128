"""The engines' end-to-end tests' policy: a 2-layer Qwen2 (hidden 64) with SmolLM2's real BPE tokenizer and chat
template, fitted for a few seconds to end its answer in the form the engine's reward reads, after a varying
preamble (so that rollouts have mixed verdicts and lengths). Test-local: tests/integrations/test_verl_e2e.py and
tests/integrations/skyrl_e2e_assets.py fit it, each with its own questions and answer form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

__all__ = ["fit_tiny_policy"]


def fit_tiny_policy(out: Path, questions: Sequence[tuple[str, str]], answer_line: Callable[[str], str]) -> None:
    """Fit the policy and save it, with its tokenizer, to ``out`` (deterministic: seeded, the global RNG kept).

    Args:
        questions: (question, gold answer) pairs; each question is trained with every preamble and both
            answers, 3 and 4, so that the policy answers right or wrong.
        answer_line: the answer's last line for a digit (verl's reward: ``\\boxed{3}``; skyrl-gym's gsm8k:
            ``#### 3``).
    """
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from dynashape.runtime.models import packaged_gguf

    gguf = packaged_gguf("smollm2")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
        gen = torch.Generator().manual_seed(0)
        rows = []
        for question, _ in questions:
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
            )
            for preamble in ("", "So ", "So, so "):
                for digit in "34":
                    text = f"{preamble}the answer is:\n{answer_line(digit)}"
                    p = tok(prompt, add_special_tokens=False)["input_ids"]
                    r = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                    rows.append((p, r))
        optim = torch.optim.Adam(model.parameters(), lr=3e-3)
        for _ in range(120):
            pick = torch.randint(len(rows), (8,), generator=gen)
            width = max(len(rows[i][0]) + len(rows[i][1]) for i in pick)
            ids = torch.full((8, width), tok.pad_token_id, dtype=torch.long)
            labels = torch.full((8, width), -100, dtype=torch.long)
            for j, i in enumerate(pick):
                p, r = rows[i]
                ids[j, : len(p) + len(r)] = torch.tensor(p + r)
                labels[j, len(p) : len(p) + len(r)] = torch.tensor(r)
            loss = model(input_ids=ids, labels=labels).loss
            optim.zero_grad()
            loss.backward()
            optim.step()
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
