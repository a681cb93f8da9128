"""The end-to-end SkyRL test's assets: a tiny fitted policy and SkyRL's prompt parquet (test-local).

The policy is the verl end-to-end test's (tests/integrations/test_verl_e2e.py): a 2-layer Qwen2 (hidden 64) with
SmolLM2's real BPE tokenizer and chat template, fitted for a few seconds, here to end its answer the way
skyrl-gym's ``gsm8k`` environment scores it (``#### 3`` or ``#### 4``, after a varying preamble: mixed verdicts
and lengths).
"""

from __future__ import annotations

from pathlib import Path

import torch

QUESTIONS = [
    ("What is 1 + 2?", "3"),
    ("What is 2 + 2?", "4"),
    ("What is 6 - 3?", "3"),
    ("What is 8 - 4?", "4"),
    ("What is 1 * 3?", "3"),
    ("What is 2 * 2?", "4"),
    ("What is 0 + 3?", "3"),
    ("What is 5 - 1?", "4"),
]


def fit_policy(out: Path) -> None:
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
        for question, _ in QUESTIONS:
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
            )
            for preamble in ("", "So ", "So, so "):
                for digit in "34":
                    text = f"{preamble}the answer is:\n#### {digit}"
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


def write_data(path: Path) -> None:
    """SkyRL's prompt dataset: chat messages, the environment class and its reward spec per row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "prompt": [{"role": "user", "content": q}],
            "env_class": "gsm8k",
            "reward_spec": {"method": "rule", "ground_truth": a},
        }
        for q, a in QUESTIONS
    ]
    pq.write_table(pa.Table.from_pylist(rows), str(path))
