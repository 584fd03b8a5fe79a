"""Transformer: layers equal torch.nn.TransformerEncoderLayer / DecoderLayer with copied weights;
the full model is causal in the target and blind to source padding."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnbook
from attnbook import DecoderLayer, Encoder, EncoderLayer, PositionwiseFeedForward, Transformer

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
D, H, FF = 16, 4, 24


def _copy_mha(ours: attnbook.MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """nn.MultiheadAttention stacks W_Q, W_K, W_V into one in_proj (3D, D)."""
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        theirs.out_proj.bias.copy_(ours.w_o.bias)


def _copy_common(ours, theirs, norms) -> None:
    theirs.linear1.load_state_dict(ours.ffn.linear1.state_dict())
    theirs.linear2.load_state_dict(ours.ffn.linear2.state_dict())
    for name in norms:
        getattr(theirs, name).load_state_dict(getattr(ours, name).state_dict())


def _randomise_norms(module: nn.Module, seed: int) -> None:
    """LayerNorm starts at weight 1, bias 0; random values make the parity test see them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g, dtype=m.weight.dtype))
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g, dtype=m.bias.dtype))


def _lengths_mask(lengths, s, device):
    return torch.arange(s, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]  # (B, S)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_torch(norm_first, device):
    torch.manual_seed(0)
    ours = EncoderLayer(D, H, FF, dropout=0.1, norm_first=norm_first).double().to(device).eval()
    _randomise_norms(ours, 1)
    theirs = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=True, norm_first=norm_first,
                                        dtype=torch.float64, device=device).eval()
    _copy_mha(ours.self_attn, theirs.self_attn)
    _copy_common(ours, theirs, ["norm1", "norm2"])
    x = torch.randn(3, 7, D, dtype=torch.float64, device=device)
    keep = _lengths_mask([7, 4, 1], 7, device)                                # (B, S) True = real
    y, w = ours(x, attnbook.padding_to_attention_mask(keep))
    ref = theirs(x, src_key_padding_mask=~keep)                               # torch: True = padded
    torch.testing.assert_close(y[keep], ref[keep], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ours(x)[0], theirs(x), rtol=1e-10, atol=1e-10)   # no mask at all
    assert float(w.detach()[~keep[:, None, None, :].expand_as(w)].abs().max()) == 0.0   # padded keys: weight 0


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_equals_torch(norm_first):
    torch.manual_seed(1)
    ours = DecoderLayer(D, H, FF, dropout=0.1, norm_first=norm_first).double().eval()
    _randomise_norms(ours, 2)
    theirs = nn.TransformerDecoderLayer(D, H, FF, dropout=0.1, batch_first=True, norm_first=norm_first,
                                        dtype=torch.float64).eval()
    _copy_mha(ours.self_attn, theirs.self_attn)
    _copy_mha(ours.cross_attn, theirs.multihead_attn)
    _copy_common(ours, theirs, ["norm1", "norm2", "norm3"])
    x, memory = torch.randn(3, 5, D, dtype=torch.float64), torch.randn(3, 6, D, dtype=torch.float64)
    keep = _lengths_mask([6, 2, 4], 6, "cpu")
    causal = attnbook.causal_mask(5)
    y, self_w, cross_w = ours(x, memory, causal, attnbook.padding_to_attention_mask(keep))
    ref = theirs(x, memory, tgt_mask=~causal, memory_key_padding_mask=~keep)
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)
    assert float(self_w.detach().triu(1).abs().max()) == 0.0                  # no weight on the future


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_equals_torch(norm_first):
    """Embedding aside, our Encoder is torch's TransformerEncoder (pre-LN: with its final LayerNorm)."""
    torch.manual_seed(2)
    ours = Encoder(11, D, H, 3, FF, dropout=0.1, norm_first=norm_first).double().eval()
    _randomise_norms(ours, 3)
    layer = nn.TransformerEncoderLayer(D, H, FF, batch_first=True, norm_first=norm_first, dtype=torch.float64)
    theirs = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(D, dtype=torch.float64) if norm_first else None,
                                   enable_nested_tensor=False).eval()
    for a, b in zip(ours.layers, theirs.layers):
        _copy_mha(a.self_attn, b.self_attn)
        _copy_common(a, b, ["norm1", "norm2"])
    if norm_first:
        theirs.norm.load_state_dict(ours.final_norm.state_dict())
    src = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 0, 0]])
    keep = src != 0
    y, _ = ours(src, attnbook.padding_to_attention_mask(keep))
    ref = theirs(ours.embed_tokens(src), src_key_padding_mask=~keep)
    torch.testing.assert_close(y[keep], ref[keep], rtol=1e-10, atol=1e-10)


@torch.no_grad()
def test_ffn_is_the_two_layer_formula():
    torch.manual_seed(3)
    ffn = PositionwiseFeedForward(D, FF).double()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    w1, b1, w2, b2 = ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight, ffn.linear2.bias
    torch.testing.assert_close(ffn(x), torch.clamp(x @ w1.T + b1, min=0) @ w2.T + b2)
    # position-wise: each position alone gives the same row
    torch.testing.assert_close(ffn(x)[:, 2], ffn(x[:, 2:3])[:, 0])


def _model(norm_first=False, seed=0, device="cpu"):
    torch.manual_seed(seed)
    return Transformer(13, 11, D, H, 2, FF, dropout=0.1, norm_first=norm_first).double().to(device).eval()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_causality_future_targets_do_not_change_earlier_logits(norm_first, device):
    model = _model(norm_first, device=device)
    g = torch.Generator().manual_seed(4)
    src = torch.randint(1, 13, (2, 6), generator=g).to(device)
    tgt = torch.randint(1, 11, (2, 8), generator=g).to(device)
    base = model(src, tgt)
    assert base.shape == (2, 8, 11)
    for t in range(7):
        changed = tgt.clone()
        changed[:, t + 1:] = torch.randint(1, 11, (2, 7 - t), generator=g).to(device)
        out = model(src, changed)
        torch.testing.assert_close(out[:, :t + 1], base[:, :t + 1], rtol=1e-12, atol=1e-12)
    # ... while the past does matter: changing token 0 changes every position
    changed = tgt.clone()
    changed[:, 0] = (tgt[:, 0] % 10) + 1
    assert float((model(src, changed) - base).abs().amin(-1).amax()) > 1e-6


@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_appending_source_padding_leaves_logits_unchanged(norm_first):
    model = _model(norm_first, seed=5)
    g = torch.Generator().manual_seed(6)
    src = torch.randint(1, 13, (3, 5), generator=g)
    src[1, 3:] = 0                                   # a shorter sequence, already padded
    tgt = torch.randint(1, 11, (3, 4), generator=g)
    base = model(src, tgt)
    for extra in (1, 4):
        padded = torch.cat([src, torch.zeros(3, extra, dtype=torch.long)], 1)
        torch.testing.assert_close(model(padded, tgt), base, rtol=1e-12, atol=1e-12)
    # batching: the short sequence alone, unpadded, gives the same logits as inside the batch
    torch.testing.assert_close(model(src[1:2, :3], tgt[1:2]), base[1:2], rtol=1e-12, atol=1e-12)
    # a real token where the pad was does change the logits (the test can fail)
    filled = src.clone()
    filled[1, 3] = 7
    assert float((model(filled, tgt) - base)[1].abs().max()) > 1e-6


@torch.no_grad()
def test_teacher_forcing_pass_equals_prefix_by_prefix():
    """One pass over T target positions gives what T separate prefix passes give."""
    model = _model(seed=7)
    src, tgt = torch.randint(1, 13, (2, 6)), torch.randint(1, 11, (2, 6))
    full = model(src, tgt)
    for t in range(6):
        torch.testing.assert_close(model(src, tgt[:, :t + 1])[:, -1], full[:, t], rtol=1e-12, atol=1e-12)


@torch.no_grad()
def test_dropout_only_in_training_mode():
    model = _model(seed=8)
    src, tgt = torch.randint(1, 13, (2, 6)), torch.randint(1, 11, (2, 5))
    torch.testing.assert_close(model(src, tgt), model(src, tgt))
    model.train()
    assert float((model(src, tgt) - model(src, tgt)).abs().max()) > 1e-6


@torch.no_grad()
def test_attention_maps_and_padding_weights():
    model = _model(seed=9)
    src = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 9]])
    tgt = torch.randint(1, 11, (2, 3))
    maps = model.attention_maps(src, tgt)
    assert [m.shape for m in maps["cross"]] == [(2, H, 3, 4)] * 2
    for m in maps["cross"] + maps["encoder"]:
        assert float(m[0, ..., 3].abs().max()) == 0.0                  # the pad key gets no weight
        torch.testing.assert_close(m.sum(-1), torch.ones_like(m.sum(-1)))


def test_bad_inputs():
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        Transformer(10, 10, 16, 3, 1, 32)
    with pytest.raises(ValueError, match="pad_id=12"):
        Transformer(10, 20, 16, 4, 1, 32, pad_id=12)
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        Transformer(10, 10, 16, 4, 0, 32)
    model = Transformer(10, 10, 16, 4, 1, 32, max_len=8).eval()
    with pytest.raises(ValueError, match=r"src \(2, 3\) and tgt \(3, 4\)"):
        model(torch.ones(2, 3, dtype=torch.long), torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="exceed max_len=8"):
        model(torch.ones(1, 9, dtype=torch.long), torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="int64"):
        model(torch.ones(1, 3), torch.ones(1, 2, dtype=torch.long))


# ---------------------------------------------------------------- gaps found by mutation testing (make mutation)


@pytest.mark.parametrize("num_kv_heads, rope_base", [(None, None), (1, None), (None, 100.0), (2, 100.0)])
def test_decoder_only_layer_cached_steps_equal_the_causal_pass(num_kv_heads, rope_base):
    # The layer attnbook.gpt stacks: GQA and/or RoPE self-attention, no cross-attention.
    torch.manual_seed(4)
    layer = DecoderLayer(D, H, FF, 0.25, cross_attention=False, num_kv_heads=num_kv_heads,
                         rope_base=rope_base).double().eval()
    sa = layer.self_attn
    assert (sa.num_kv_heads, sa.rope_base, sa.dropout.p) == (num_kv_heads or H, rope_base, 0.25)
    assert layer.ffn.dropout.p == 0.25 and layer.cross_attn is None
    x = torch.randn(2, 6, D, dtype=torch.float64)
    full, _, _ = layer(x, None, attnbook.causal_mask(6))
    cache = attnbook.LayerCache()
    steps = [layer(x[:, t:t + 1], None, cache=cache)[0] for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-10, atol=1e-12)


def test_documented_defaults():
    enc_layer = EncoderLayer(D, H, FF)  # dropout 0.1 everywhere, post-LN
    assert enc_layer.norm_first is False and enc_layer.self_attn.dropout.p == enc_layer.ffn.dropout.p == 0.1
    enc = Encoder(11, D, H, 1, FF)
    assert isinstance(enc.final_norm, nn.Identity) and enc.embed.padding_idx == 0 and enc.pe.shape == (512, D)
    assert "pe" not in enc.state_dict()  # recomputed, not saved in checkpoints
    layer = DecoderLayer(D, H, FF)
    assert layer.norm_first is False and layer.cross_attn.dropout.p == 0.1 and layer.ffn.dropout.p == 0.1
    dec = attnbook.Decoder(11, D, H, 1, FF)  # dropout 0.1, post-LN, pad_id 0, max_len 512
    assert dec.dropout.p == 0.1 and isinstance(dec.final_norm, nn.Identity)
    assert dec.embed.padding_idx == 0 and dec.pe.shape == (512, D)
    model = Transformer(11, 11, D, H, 1, FF)
    assert model.norm_first is False and model.decoder.pe.shape == (512, D)


def test_embedding_init_and_padding_row():
    # N(0, 1/D) entries (so embedding * sqrt(D) has unit size), the pad row zero and never updated.
    torch.manual_seed(5)
    enc = Encoder(1000, 64, 4, 1, 32, pad_id=3).eval()
    w = enc.embed.weight
    assert enc.embed.padding_idx == 3 and (w[3] == 0).all()
    assert 0.95 < float(w.detach().std()) * 64 ** 0.5 < 1.05  # 64,000 draws: the sample std spreads by 0.3 %
    enc.embed_tokens(torch.tensor([[3, 5, 3]])).sum().backward()
    assert (w.grad[3] == 0).all() and (w.grad[5] != 0).all()


def test_stack_arguments_are_checked_and_named():
    for args, kwargs, message in [((0, D, H, 1, FF), {}, "^vocab_size must be a positive integer"),
                                  ((11, 0, H, 1, FF), {}, "^d_model must be a positive integer"),
                                  ((11, D, H, 1, 0), {}, "^d_ff must be a positive integer"),
                                  ((11, D, H, True, FF), {}, "^num_layers must be a positive integer, got True"),
                                  ((11, D, H, 1, FF), {"max_len": 0}, "^max_len must be a positive integer")]:
        with pytest.raises(ValueError, match=message):
            Encoder(*args, **kwargs)
    for kwargs, message in [({"num_heads": True}, "^num_heads must be a positive integer, got True"),
                            ({"pad_id": True}, "^pad_id=True"),
                            ({"pad_id": 5}, "^pad_id=5 must be a valid id of src_vocab_size=5"),
                            ({"pad_id": 7, "src_vocab_size": 9}, "^pad_id=7 must be a valid id of tgt_vocab_size=5")]:
        full = {"src_vocab_size": 5, "tgt_vocab_size": 5, "d_model": D, "num_heads": H, "num_layers": 1,
                "d_ff": FF} | kwargs
        with pytest.raises(ValueError, match=message):
            Transformer(**full)
    model = Transformer(10, 10, D, H, 1, FF, max_len=6).eval()
    assert model(torch.ones(1, 6, dtype=torch.long), torch.ones(1, 6, dtype=torch.long)).shape == (1, 6, 10)
    with pytest.raises(ValueError, match=r"^positions 0\.\.6 exceed max_len=6"):
        model(torch.ones(1, 7, dtype=torch.long), torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^src \(2,\) and tgt \(2, 3\)"):
        model(torch.ones(2, dtype=torch.long), torch.ones(2, 3, dtype=torch.long))


def test_decoder_self_attention_maps_are_causal():
    model = _model(seed=10)
    maps = model.attention_maps(torch.tensor([[3, 4, 5, 0]]), torch.tensor([[1, 2, 3]]))
    assert set(maps) == {"encoder", "decoder_self", "cross"}
    for w in maps["decoder_self"]:
        assert w.shape == (1, H, 3, 3) and (w.triu(1) == 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


def test_reorder_moves_the_cross_attention_keys_with_their_rows():
    model = _model(seed=11)
    memory, src_mask = model.encode(torch.tensor([[3, 4, 5], [6, 7, 8]]))
    cache = model.new_cache()
    model.decode(torch.tensor([[1], [1]]), memory, src_mask, cache)
    before = [tuple(t.clone() for t in layer.memory_kv) for layer in cache.layers]
    index = torch.tensor([1, 0])
    cache.reorder(index)
    for layer, (k, v) in zip(cache.layers, before):
        assert torch.equal(layer.memory_kv[0], k[index]) and torch.equal(layer.memory_kv[1], v[index])


def test_the_model_runs_on_the_inputs_device():
    model = Transformer(11, 11, D, H, 1, FF, dropout=0.0).to("meta")  # meta stands in for CUDA
    src = torch.ones(2, 5, dtype=torch.long, device="meta")
    assert model(src, src).device.type == "meta"
