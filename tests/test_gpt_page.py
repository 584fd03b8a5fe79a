"""The GPT chapter builds its model on the page (LM, CausalSelfAttention, Block): with the same weights, the
package's DecoderOnlyLM gives the same logits, so the page's model and the one the chapter generates with are one."""

from __future__ import annotations

import math

import jupytext
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnbook
from conftest import ROOT

V, D = 37, 16


def page_namespace() -> dict:
    """Run the chapter's cells that define the page's classes, with a small vocabulary and width."""
    cells = [c.source for c in jupytext.read(ROOT / "chapters" / "gpt.md").cells if c.cell_type == "code"]
    wanted = ("class LM(", "class CausalSelfAttention(", "class Block(")
    sources = [next(src for src in cells if w in src) for w in wanted]
    ns = {"torch": torch, "nn": nn, "F": F, "math": math, "attnbook": attnbook}
    for src in sources:
        code = "\n".join(line for line in src.splitlines()
                         if not line.startswith(("d = ", "unigram_counts", "log_unigram")))
        exec(code, ns)                                    # the page's code, verbatim but for its data-bound globals
    ns.update(V=V, d=D, log_unigram=torch.randn(V).log_softmax(0))
    return ns


@pytest.mark.parametrize("heads, layers, d_ff", [(4, 2, 64), (2, 1, 32)])
def test_page_model_equals_decoder_only_lm(heads, layers, d_ff):
    ns = page_namespace()
    torch.manual_seed(0)
    page = ns["LM"]([ns["Block"](heads, d_ff) for _ in range(layers)]).double()
    with torch.no_grad():                                  # non-trivial norms and biases, so a skipped one shows
        for p in page.parameters():
            p.add_(0.3 * torch.randn_like(p))
    package = attnbook.DecoderOnlyLM(V, D, heads, layers, d_ff, output_bias=True).double()
    assert sorted(package.state_dict()) == sorted(page.state_dict())
    package.load_state_dict(page.state_dict())
    ids = torch.randint(0, V, (3, 19), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(package.eval()(ids), page.eval()(ids), rtol=0, atol=1e-10)
        assert package.lm_head.weight is package.embed.weight


def test_page_model_without_layers_is_a_bigram_and_starts_from_the_unigram():
    ns = page_namespace()
    torch.manual_seed(0)
    lm = ns["LM"]([])
    ids = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = lm(ids)
        torch.testing.assert_close(logits[0, 3], lm(ids[0:1, 3:4])[0, 0])     # the current token alone decides
        assert float((logits.log_softmax(-1) - ns["log_unigram"]).abs().mean()) < 0.15   # small embeddings: ~ unigram


@pytest.mark.parametrize("d_ff", [None, 32])
def test_a_fresh_page_block_is_the_identity(d_ff):
    """The last projection of each sublayer starts at zero, so a model with fresh blocks is the no-layer model."""
    ns = page_namespace()
    torch.manual_seed(0)
    block = ns["Block"](2, d_ff)
    x = torch.randn(3, 7, D)
    with torch.no_grad():
        torch.testing.assert_close(block(x), x, rtol=0, atol=0)
        for p in block.parameters():                       # after a change, it is no longer the identity
            p.add_(0.1)
        assert float((block(x) - x).abs().max()) > 1e-3
