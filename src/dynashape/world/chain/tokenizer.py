"""A character-level tokenizer built locally: a real ``PreTrainedTokenizerFast``, no download.

Every printable ASCII character (plus newline and tab) is one token, so any text of the toy task and most
plain-text math datasets round-trip exactly. Special tokens: ``<pad>`` (id 0), ``<bos>``, ``<eos>``,
``<unk>``. The tokenizer goes through the same ``transformers`` code paths as a real model's tokenizer
(``__call__``, ``decode``, ``save_pretrained``), which is the point: the trainer never special-cases it.
"""

from __future__ import annotations

import string

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)
# Sorted for a stable id assignment: the ids are part of a cached base model's identity.
CHARACTERS: tuple[str, ...] = tuple(sorted(set(string.printable) - {"\r", "\x0b", "\x0c"}))


def build_char_tokenizer():  # -> transformers.PreTrainedTokenizerFast
    """Return a character-level ``PreTrainedTokenizerFast`` over printable ASCII.

    Ids: the four special tokens first (pad = 0), then the characters in sorted order; unknown characters
    map to ``<unk>``. ``decode`` concatenates characters without inserted spaces.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Split every character (newline included, hence [\s\S]) into its own pre-token.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",  # prompts are left-padded so that generation continues from aligned ends
        clean_up_tokenization_spaces=False,
    )
    return tok
