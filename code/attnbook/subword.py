"""Subword tokens: byte-pair encoding (BPE, Sennrich et al., 2016) trained with Hugging Face ``tokenizers``.

BPE starts from single characters and repeatedly merges the most frequent adjacent pair of tokens into
a new token, until the vocabulary has ``vocab_size`` entries. Frequent words and phrases become one
token; rare ones stay split into smaller pieces, down to single characters, so no text is out of
vocabulary except characters never seen in training (they become ``<unk>``).

Shape legend: a text is a str; its tokens a list of ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral

__all__ = ["train_bpe", "tokens_per_char"]


def _check_texts(texts, name: str = "texts") -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence) or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"{name} must be a sequence of str, got {type(texts).__name__}")
    return list(texts)


def train_bpe(texts: Sequence[str], vocab_size: int, unk_token: str = "<unk>", min_frequency: int = 2):
    """A ``tokenizers.Tokenizer`` with a BPE model trained on ``texts`` (whole lines, no pre-splitting:
    Chinese has no spaces, so merges may span what a reader would call words).

    Its vocabulary holds ``unk_token`` (id 0), every character of the texts and the learned merges,
    at most ``vocab_size`` entries; ``decode(encode(text).ids)`` gives the text back when every
    character was seen. Needs ``pip install tokenizers``.
    """
    texts = _check_texts(texts)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, Integral) or vocab_size < 2:
        raise ValueError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
    from tokenizers import Tokenizer, decoders, models, trainers

    alphabet = sorted(set("".join(texts)))
    if vocab_size < len(alphabet) + 1:
        raise ValueError(f"vocab_size={vocab_size} leaves no room for {unk_token} and the texts' {len(alphabet)} "
                         f"distinct characters: pass at least {len(alphabet) + 1}")
    tokenizer = Tokenizer(models.BPE(unk_token=unk_token))
    trainer = trainers.BpeTrainer(vocab_size=int(vocab_size), min_frequency=min_frequency,
                                  special_tokens=[unk_token], initial_alphabet=alphabet,
                                  limit_alphabet=len(alphabet) + 1, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.decoder = decoders.Fuse()          # decode joins the pieces with nothing between them
    return tokenizer


def tokens_per_char(tokenizer, texts: Sequence[str]) -> float:
    """Tokens the tokenizer makes per character of ``texts`` (1 for characters, smaller for BPE)."""
    texts = _check_texts(texts)
    chars = sum(map(len, texts))
    if chars == 0:
        raise ValueError("texts hold no characters")
    return sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)) / chars
