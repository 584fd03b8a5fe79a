"""Boolean masks against independent constructions and their effect in attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

import attnbook
from attnbook import causal_mask, combine_masks, padding_mask, padding_to_attention_mask


@pytest.mark.parametrize("n", [0, 1, 5])
def test_causal_mask_is_lower_triangular(n):
    m = causal_mask(n)
    assert m.dtype == torch.bool and m.shape == (n, n)
    ref = torch.tensor([[j <= i for j in range(n)] for i in range(n)], dtype=torch.bool).reshape(n, n)
    assert torch.equal(m, ref)


def test_causal_mask_reproduces_sdpa_is_causal_and_mha_causal_mask():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(6)), ref)
    torch.testing.assert_close(attnbook.scaled_dot_product_attention(q, k, v, causal_mask(6))[0], ref)
    # nn.Transformer's float mask has -inf exactly where ours is False
    square = torch.nn.Transformer.generate_square_subsequent_mask(6)
    assert torch.equal(causal_mask(6), square == 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_masks_follow_the_device():
    assert causal_mask(3, device="cuda").is_cuda
    assert padding_mask(torch.tensor([1, 2], device="cuda")).is_cuda


@pytest.mark.parametrize("lengths, max_len", [([3, 1, 4], None), ([2, 0], 5), (torch.tensor([1, 1]), 1)])
def test_padding_mask_matches_pad_sequence(lengths, max_len):
    m = padding_mask(lengths, max_len)
    lens = [int(n) for n in lengths]
    ref = pad_sequence([torch.ones(n) for n in lens], batch_first=True).bool()
    T = max(lens) if max_len is None else max_len
    ref = torch.cat([ref, torch.zeros(len(lens), T - ref.size(1), dtype=torch.bool)], 1)
    assert m.dtype == torch.bool and torch.equal(m, ref)


def test_padded_batch_equals_each_sequence_attended_alone():
    g = torch.Generator().manual_seed(1)
    lengths = [5, 2, 4]
    x = torch.randn(3, 5, 4, generator=g, dtype=torch.float64)
    pad = padding_mask(lengths)                                   # (B, T)
    mask = combine_masks(causal_mask(5), padding_to_attention_mask(pad, heads=False))  # (B, T, T)
    assert mask.shape == (3, 5, 5)
    out, _ = attnbook.scaled_dot_product_attention(x, x, x, mask)
    for b, n in enumerate(lengths):
        alone = F.scaled_dot_product_attention(x[b, :n], x[b, :n], x[b, :n], is_causal=True)
        torch.testing.assert_close(out[b, :n], alone)


def test_padding_mask_agrees_with_multihead_attention_key_padding_mask():
    torch.manual_seed(2)
    mha = torch.nn.MultiheadAttention(4, num_heads=2, batch_first=True, dtype=torch.float64)
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    pad = padding_mask([5, 3])
    ref, _ = mha(x, x, x, key_padding_mask=~pad)  # MHA: True = padding
    attn = padding_to_attention_mask(pad)          # (B, 1, 1, T) against (B, H, T, T)
    assert attn.shape == (2, 1, 1, 5)
    w = mha.in_proj_weight.split(4)
    b = mha.in_proj_bias.split(4)
    q, k, v = (F.linear(x, wi, bi).view(2, 5, 2, 2).transpose(1, 2) for wi, bi in zip(w, b))  # (B, H, T, 2)
    out, _ = attnbook.scaled_dot_product_attention(q, k, v, attn)
    out = mha.out_proj(out.transpose(1, 2).reshape(2, 5, 4))      # (B, T, H * 2)
    torch.testing.assert_close(out, ref)


def test_combine_masks_is_a_broadcast_and():
    a = torch.tensor([[True, False], [True, True]])
    b = torch.tensor([True, False])
    assert torch.equal(combine_masks(a, None, b), torch.tensor([[True, False], [True, False]]))
    assert combine_masks(None, None) is None


@pytest.mark.parametrize("call, message", [
    (lambda: causal_mask(-1), "n must be a non-negative integer"),
    (lambda: causal_mask(2.5), "n must be a non-negative integer"),
    (lambda: padding_mask([[1, 2]]), r"1-D integer sequence, got shape \(1, 2\)"),
    (lambda: padding_mask([1.0, 2.0]), "1-D integer"),
    (lambda: padding_mask([2, -1]), "lengths must be >= 0"),
    (lambda: padding_mask([2, 6], max_len=4), r"max_len=4 is shorter than the longest sequence \(6\)"),
    (lambda: padding_to_attention_mask(torch.ones(2, 3)), r"\(B, Tk\) torch.bool"),
    (lambda: combine_masks(torch.ones(2, 3, dtype=torch.bool), torch.ones(4, dtype=torch.bool)),
     r"masks of shapes \(2, 3\), \(4,\) do not broadcast"),
    (lambda: combine_masks(torch.ones(2)), "torch.bool"),
])
def test_bad_inputs_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------- gaps found by mutation testing (make mutation)


def test_padding_mask_of_an_empty_batch_is_empty():
    # B = 0 sequences: max_len defaults to 0 (the longest of none), else the given width.
    none = torch.zeros(0, dtype=torch.int64)
    assert padding_mask(none).shape == (0, 0)
    assert padding_mask(none, max_len=3).shape == (0, 3)


@pytest.mark.parametrize("call, message", [
    (lambda: padding_mask([1], max_len=-1), "^max_len must be a non-negative integer"),
    (lambda: padding_mask(torch.tensor([True, False])), "1-D integer sequence.*torch.bool"),
    (lambda: padding_to_attention_mask(torch.ones(2, 3)), r"got torch.float32 tensor of shape \(2, 3\)"),
    (lambda: padding_to_attention_mask([[True]]), "got list"),
    (lambda: combine_masks(torch.ones(2)), "got torch.float32"),
    (lambda: combine_masks([True]), "got list"),
])
def test_errors_name_what_was_received(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_causal_mask_is_built_on_the_requested_device():
    assert causal_mask(3, device="meta").device.type == "meta"  # meta stands in for CUDA
