"""Whole models against independent references, in float64 with dropout off (eval mode):
attnbook.Transformer vs torch.nn.Transformer with copied weights (outputs and gradients), the embedding
stage and the output projection vs their formulas, SelfAttentionClassifier vs nn.MultiheadAttention.

Masks: attnbook's are True = may attend; torch's key-padding and causal masks are True = hidden."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnbook import SelfAttentionClassifier, Transformer

F64, D, H, FF, L = torch.float64, 16, 4, 24, 2
SRC_V, TGT_V, PAD = 13, 11, 0
TOL = dict(rtol=1e-10, atol=1e-10)


def sinusoid(n: int, d: int) -> torch.Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)). Shape: -> (n, d)."""
    angle = torch.arange(n, dtype=F64)[:, None] / 10000 ** (torch.arange(0, d, 2, dtype=F64) / d)  # (n, d/2)
    pe = torch.stack([angle.sin(), angle.cos()], -1).reshape(n, d)           # interleave sin, cos
    return pe.float().double()   # attnbook stores its table in float32 (~5e-8 off) even in a .double() model


def embed(ids: torch.Tensor, table: torch.Tensor, scale: float, start: int = 0) -> torch.Tensor:
    """x_t = E[ids_t] * scale + PE[start + t] (pad row gets no gradient). Shape: (B, T) -> (B, T, D)."""
    pe = sinusoid(start + ids.size(1), table.size(1))[start:]               # (T, D)
    return F.embedding(ids, table, padding_idx=PAD) * scale + pe


def mha_pairs(ours, theirs) -> list:
    """(our params, torch param) pairs: nn.MultiheadAttention stacks W_Q, W_K, W_V into in_proj (3D, D)."""
    return [((ours.w_q.weight, ours.w_k.weight, ours.w_v.weight), theirs.in_proj_weight),
            ((ours.w_q.bias, ours.w_k.bias, ours.w_v.bias), theirs.in_proj_bias),
            ((ours.w_o.weight,), theirs.out_proj.weight), ((ours.w_o.bias,), theirs.out_proj.bias)]


def layer_pairs(ours, theirs, attn: dict[str, str], norms: list[str]) -> list:
    pairs = [p for a, b in attn.items() for p in mha_pairs(getattr(ours, a), getattr(theirs, b))]
    for lin in ("linear1", "linear2"):
        pairs += [((getattr(ours.ffn, lin).weight,), getattr(theirs, lin).weight),
                  ((getattr(ours.ffn, lin).bias,), getattr(theirs, lin).bias)]
    for n in norms:
        pairs += [((getattr(ours, n).weight,), getattr(theirs, n).weight),
                  ((getattr(ours, n).bias,), getattr(theirs, n).bias)]
    return pairs


def copy_weights(pairs) -> None:
    """torch param <- concatenation of our params."""
    with torch.no_grad():
        for ours, theirs in pairs:
            theirs.copy_(torch.cat(ours))


def assert_grads_equal(pairs) -> None:
    for ours, theirs in pairs:
        torch.testing.assert_close(torch.cat([p.grad for p in ours]), theirs.grad, **TOL)


def randomise_norms(model: nn.Module, seed: int) -> None:
    """LayerNorms start at weight 1, bias 0; random values let the comparison see every norm."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g, dtype=F64))
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g, dtype=F64))


class TorchTransformer(nn.Module):
    """Reference: embedding formula -> torch.nn.Transformer -> x W^T + b, weights copied from ``ours``."""

    def __init__(self, ours: Transformer):
        super().__init__()
        self.src_table = nn.Parameter(torch.empty_like(ours.encoder.embed.weight))
        self.tgt_table = nn.Parameter(torch.empty_like(ours.decoder.embed.weight))
        with warnings.catch_warnings():   # pre-LN: "enable_nested_tensor is True, but ..." (irrelevant here)
            warnings.simplefilter("ignore", UserWarning)
            self.core = nn.Transformer(D, H, L, L, FF, dropout=0.1, batch_first=True,
                                       norm_first=ours.norm_first, dtype=F64)
        if not ours.norm_first:
            # Post-LN (the paper): each layer already ends in LayerNorm and attnbook adds no final norm;
            # nn.Transformer always appends one, so remove it (None = skipped in TransformerEncoder/Decoder).
            self.core.encoder.norm = self.core.decoder.norm = None
        self.out = nn.Linear(D, TGT_V, dtype=F64)
        enc, dec = self.core.encoder, self.core.decoder
        self.pairs = [((ours.encoder.embed.weight,), self.src_table), ((ours.decoder.embed.weight,), self.tgt_table),
                      ((ours.generator.weight,), self.out.weight), ((ours.generator.bias,), self.out.bias)]
        for a, b in zip(ours.encoder.layers, enc.layers):
            self.pairs += layer_pairs(a, b, {"self_attn": "self_attn"}, ["norm1", "norm2"])
        for a, b in zip(ours.decoder.layers, dec.layers):
            self.pairs += layer_pairs(a, b, {"self_attn": "self_attn", "cross_attn": "multihead_attn"},
                                      ["norm1", "norm2", "norm3"])
        if ours.norm_first:
            for ours_norm, theirs_norm in ((ours.encoder.final_norm, enc.norm), (ours.decoder.final_norm, dec.norm)):
                self.pairs += [((ours_norm.weight,), theirs_norm.weight), ((ours_norm.bias,), theirs_norm.bias)]
        copy_weights(self.pairs)

    def forward(self, src, tgt, tgt_padding: bool = True):
        """Shape: src (B, S), tgt (B, T) -> memory (B, S, D), states (B, T, D), logits (B, T, V)."""
        scale = math.sqrt(D)
        x_src, x_tgt = embed(src, self.src_table, scale), embed(tgt, self.tgt_table, scale)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1)).isinf()   # (T, T) True = future
        memory = self.core.encoder(x_src, src_key_padding_mask=src == PAD)
        states = self.core.decoder(x_tgt, memory, tgt_mask=causal, memory_key_padding_mask=src == PAD,
                                   tgt_key_padding_mask=(tgt == PAD) if tgt_padding else None)
        return memory, states, self.out(states)


def make_transformer(norm_first: bool, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(SRC_V, TGT_V, D, H, L, FF, dropout=0.1, pad_id=PAD, norm_first=norm_first).double().eval()
    randomise_norms(model, seed + 1)
    return model


# Right-padded batches: source lengths 7, 4, 2; target lengths 6, 3, 5.
SRC = torch.tensor([[3, 5, 7, 9, 11, 2, 4], [6, 8, 10, 12, 0, 0, 0], [1, 3, 0, 0, 0, 0, 0]])
TGT = torch.tensor([[1, 4, 2, 8, 5, 7], [1, 9, 3, 0, 0, 0], [1, 6, 10, 2, 3, 0]])


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_equals_torch_transformer(norm_first):
    model = make_transformer(norm_first)
    ref = TorchTransformer(model).eval()
    src_real, tgt_real = SRC != PAD, TGT != PAD                             # (B, S), (B, T)

    memory, src_mask = model.encode(SRC)
    states = model.decoder(TGT, memory, src_mask)[0]
    logits = model(SRC, TGT)                                                # (B, T, V)
    memory_ref, states_ref, logits_ref = ref(SRC, TGT)
    torch.testing.assert_close(memory[src_real], memory_ref[src_real], **TOL)  # padded rows: unused
    torch.testing.assert_close(states[tgt_real], states_ref[tgt_real], **TOL)
    torch.testing.assert_close(logits[tgt_real], logits_ref[tgt_real], **TOL)
    # attnbook masks no target keys: with right padding the causal mask hides pads from real queries,
    # so it equals torch without a target key-padding mask at every position, pads included.
    torch.testing.assert_close(logits, ref(SRC, TGT, tgt_padding=False)[2], **TOL)

    # gradients of the same scalar, a random weighting of the real positions' logits, w.r.t. every weight
    r = torch.randn(logits.shape, generator=torch.Generator().manual_seed(7), dtype=F64) * tgt_real[..., None]
    (logits * r).sum().backward()
    (logits_ref * r).sum().backward()
    assert_grads_equal(ref.pairs)
    assert sum(p.numel() for ours, _ in ref.pairs for p in ours) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_embedding_and_output_projection_are_the_formulas(norm_first):
    model = make_transformer(norm_first, seed=3)
    scale = math.sqrt(D)                                                    # the paper: E[ids] * sqrt(d_model)
    for stack, ids in ((model.encoder, SRC), (model.decoder, TGT)):
        torch.testing.assert_close(stack.embed_tokens(ids), embed(ids, stack.embed.weight, scale), **TOL)
        # incremental decoding: the same tokens at positions 3 .. 3+T-1
        torch.testing.assert_close(stack.embed_tokens(ids, start=3), embed(ids, stack.embed.weight, scale, 3), **TOL)
    # logits = states W^T + b, states = the decoder stack's output (B, T, D)
    memory, src_mask = model.encode(SRC)
    states = model.decoder(TGT, memory, src_mask)[0]
    w, b = model.generator.weight, model.generator.bias                     # (V, D), (V,)
    torch.testing.assert_close(model(SRC, TGT), states @ w.T + b, **TOL)


def test_classifier_equals_torch_attention_layernorm_and_mean():
    """x = E[ids] + PE (no sqrt(D) here); h = LayerNorm(x + MHA(x)); logits = mean_real(h) W^T + b."""
    torch.manual_seed(4)
    model = SelfAttentionClassifier(vocab_size=SRC_V, num_classes=3, d_model=D, num_heads=H, max_len=16,
                                    dropout=0.3, attn_dropout=0.2, pad_id=PAD).double().eval()
    randomise_norms(model, 5)
    mha = nn.MultiheadAttention(D, H, dropout=0.2, batch_first=True, dtype=F64).eval()
    table = nn.Parameter(torch.empty_like(model.embed.weight))
    pairs = mha_pairs(model.attn, mha) + [((model.embed.weight,), table)]
    copy_weights(pairs)
    shared = [model.norm.weight, model.norm.bias, model.head.weight, model.head.bias]  # used by both sides
    pairs += [((p,), p) for p in shared]
    real = SRC != PAD                                                       # (B, T)

    logits, weights = model(SRC)                                            # (B, C), (B, H, T, T)
    x = embed(SRC, table, 1.0)
    a, weights_ref = mha(x, x, x, key_padding_mask=~real, average_attn_weights=False)
    h = F.layer_norm(x + a, (D,), model.norm.weight, model.norm.bias)       # (B, T, D)
    pooled = (h * real[..., None]).sum(1) / real.sum(1, keepdim=True)      # mean over real tokens, (B, D)
    logits_ref = pooled @ model.head.weight.T + model.head.bias             # (B, C)
    torch.testing.assert_close(weights, weights_ref, **TOL)
    torch.testing.assert_close(logits, logits_ref, **TOL)

    r = torch.randn(logits.shape, generator=torch.Generator().manual_seed(8), dtype=F64)
    grads = torch.autograd.grad((logits * r).sum(), [p for ours, _ in pairs for p in ours])
    grads_ref = torch.autograd.grad((logits_ref * r).sum(), [theirs for _, theirs in pairs])
    flat = iter(grads)
    for (ours, _), g_ref in zip(pairs, grads_ref):
        torch.testing.assert_close(torch.cat([next(flat) for _ in ours]), g_ref, **TOL)
