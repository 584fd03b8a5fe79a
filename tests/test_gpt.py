"""DecoderOnlyLM: torch's pre-LN encoder stack with a causal mask and a tied output layer as reference;
causality, KV cache = no cache, generation, tied-weight saving, teacher forcing, bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnbook import causal_mask
from attnbook.gpt import DecoderOnlyLM, kv_cache_bytes, next_token_loss
from attnbook.sampling import sampling_probs

V, D, H, N, FF = 23, 16, 4, 3, 32


def lm(kv=None, rope=10000.0, tie=True, seed=0):
    torch.manual_seed(seed)
    model = DecoderOnlyLM(V, D, H, N, FF, dropout=0.1, num_kv_heads=kv, rope_base=rope, tie_weights=tie).double()
    with torch.no_grad():                                # non-trivial norms, so a skipped one shows
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
    return model.eval()


def ids_of(b=3, t=10, seed=1):
    return torch.randint(0, V, (b, t), generator=torch.Generator().manual_seed(seed))


def test_equals_torch_pre_ln_stack_with_causal_mask_and_tied_output():
    model = lm(rope=None)
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=True, dtype=torch.float64)
    stack = nn.TransformerEncoder(layer, N, norm=nn.LayerNorm(D, dtype=torch.float64),
                                  enable_nested_tensor=False).eval()
    with torch.no_grad():
        for ours, theirs in zip(model.layers, stack.layers):
            a = ours.self_attn
            theirs.self_attn.in_proj_weight.copy_(torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight]))
            theirs.self_attn.in_proj_bias.copy_(torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias]))
            theirs.self_attn.out_proj.load_state_dict(a.w_o.state_dict())
            theirs.linear1.load_state_dict(ours.ffn.linear1.state_dict())
            theirs.linear2.load_state_dict(ours.ffn.linear2.state_dict())
            theirs.norm1.load_state_dict(ours.norm1.state_dict())
            theirs.norm2.load_state_dict(ours.norm3.state_dict())
        stack.norm.load_state_dict(model.final_norm.state_dict())
        ids = ids_of()
        ref = stack(model.embed.weight[ids], mask=~causal_mask(10)) @ model.embed.weight.T   # (B, T, V)
        torch.testing.assert_close(model(ids), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kv", [1, 2, 4])
def test_future_tokens_do_not_change_earlier_logits(kv):
    model, ids = lm(kv), ids_of()
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % V
    with torch.no_grad():
        a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :6], b[:, :6], rtol=0, atol=0)
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-3


def test_rope_makes_the_model_see_order():
    """Without positions a causal model still sees order through the mask; RoPE adds relative positions."""
    model, ids = lm(rope=10000.0), ids_of(b=1, t=6)
    swapped = ids[:, [1, 0, 2, 3, 4, 5]]
    with torch.no_grad():
        assert (model(ids)[:, 2:] - model(swapped)[:, 2:]).abs().max() > 1e-3


@pytest.mark.parametrize("kv", [1, 2, 4])
@pytest.mark.parametrize("rope", [None, 10000.0])
def test_kv_cache_equals_no_cache(kv, rope):
    model, ids = lm(kv, rope), ids_of(t=12)
    with torch.no_grad():
        full = model(ids)
        cache = model.new_cache()
        parts = [model(ids[:, :5], cache)] + [model(ids[:, t:t + 1], cache) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-10, atol=1e-10)
    assert len(cache) == 12
    nbytes = sum(layer.self_attn.nbytes() for layer in cache.layers)
    assert nbytes == kv_cache_bytes(N, 3, 12, kv, D // H, 8) == 2 * N * 3 * 12 * kv * (D // H) * 8


@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=0.9, top_k=5, top_p=0.9)])
def test_generate_with_and_without_the_cache_gives_the_same_tokens(sampling):
    model, prompt = lm(2), ids_of(b=2, t=4)
    out = {c: model.generate(prompt, 15, generator=torch.Generator().manual_seed(7), use_cache=c, **sampling)
           for c in (True, False)}
    assert torch.equal(out[True], out[False]) and out[True].shape == (2, 19)
    assert torch.equal(out[True][:, :4], prompt)


def test_greedy_generation_takes_the_argmax_of_the_full_forward():
    model, ids = lm(), ids_of(b=2, t=3)
    out = model.generate(ids, 6, temperature=0.0)
    with torch.no_grad():
        for _ in range(6):
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, ids)


@pytest.mark.parametrize("use_cache", [True, False])
def test_cropped_generation_reads_only_the_last_window_like_nanogpt(use_cache):
    model, ids = lm(2), ids_of(b=2, t=3)
    out = model.generate(ids, 9, temperature=0.0, max_context=5, use_cache=use_cache)
    with torch.no_grad():
        for _ in range(9):                                              # nanoGPT: idx[:, -block_size:]
            ids = torch.cat([ids, model(ids[:, -5:])[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, ids)
    assert not torch.equal(out, model.generate(ids[:, :3], 9, temperature=0.0))   # uncropped reads further back


def test_attn_mask_causal_is_the_default_and_a_window_reads_only_the_last_w_tokens():
    from attnbook.sliding_window import band_mask
    model, ids = lm(2), ids_of(b=2, t=12)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, attn_mask=causal_mask(12)), model(ids), rtol=0, atol=0)
        del model.layers[1:]                                            # one layer: the window is all it reads
        windowed = model(ids, attn_mask=band_mask(12, 4))                # (B, T, V)
        for i in range(12):                                             # RoPE is relative: same as re-reading
            alone = model(ids[:, max(0, i - 3):i + 1])[:, -1]           # the last 4 tokens from position 0
            torch.testing.assert_close(windowed[:, i], alone, rtol=1e-10, atol=1e-10)
        assert not torch.allclose(windowed[:, -1], model(ids)[:, -1])


def test_last_only_is_the_last_row_of_the_full_logits():
    model, ids = lm(2), ids_of()
    with torch.no_grad():
        torch.testing.assert_close(model(ids, last_only=True), model(ids)[:, -1:], rtol=1e-12, atol=1e-12)


def test_sampled_tokens_come_from_the_filtered_distribution():
    model, prompt = lm(), ids_of(b=1, t=5)
    with torch.no_grad():
        allowed = sampling_probs(model(prompt)[:, -1], 1.0, top_k=3) > 0
    firsts = {int(model.generate(prompt, 1, top_k=3, generator=torch.Generator().manual_seed(s))[0, -1])
              for s in range(60)}
    assert firsts <= set(allowed[0].nonzero().flatten().tolist()) and len(firsts) > 1


def test_tied_weights_share_one_matrix_and_save_v_times_d_parameters():
    tied, untied = lm(tie=True), lm(tie=False)
    assert tied.lm_head.weight is tied.embed.weight
    count = lambda m: sum(p.numel() for p in m.parameters())          # parameters() skips the shared copy
    assert count(untied) - count(tied) == V * D


def test_start_from_unigram_makes_the_output_the_smoothed_unigram_when_the_weights_are_zero():
    torch.manual_seed(0)
    model = DecoderOnlyLM(V, D, H, N, FF, output_bias=True).double().eval()
    counts = torch.arange(V, dtype=torch.float64) ** 2                # one zero count
    model.start_from_unigram(counts, alpha=0.25)
    with torch.no_grad():
        model.embed.weight.zero_()                                     # tied: the head's weights too
        p = model(ids_of()).softmax(-1)                                # (B, T, V)
    expected = (counts + 0.25) / (counts + 0.25).sum()
    torch.testing.assert_close(p, expected.expand_as(p), rtol=1e-12, atol=1e-15)
    assert lm().lm_head.bias is None                                   # no bias unless asked for


def test_next_token_loss_is_prefix_by_prefix_cross_entropy():
    model, ids = lm(2), ids_of(b=2, t=8)
    with torch.no_grad():
        loss = next_token_loss(model, ids)
        per = [F.cross_entropy(model(ids[:, :t + 1])[:, -1], ids[:, t + 1], reduction="none") for t in range(7)]
    torch.testing.assert_close(loss, torch.stack(per).mean(), rtol=1e-12, atol=1e-12)


def test_mode_is_restored_after_generate():
    model = lm().train()
    model.generate(ids_of(b=1, t=2), 2)
    assert model.training


@pytest.mark.parametrize("call, words", [
    (lambda m: m(torch.tensor([[0, V]])), f"ids must lie in \\[0, {V}\\)"),
    (lambda m: m(torch.tensor([[-1, 2]])), "min -1"),
    (lambda m: m(torch.tensor([1, 2])), r"\(B, T\) int64"),
    (lambda m: m(torch.zeros(2, 3)), "float32"),
    (lambda m: m(torch.zeros(2, 0, dtype=torch.long)), "T >= 1"),
    (lambda m: m.generate(ids_of(), -1), "max_new_tokens"),
    (lambda m: m.generate(ids_of(), 2, max_context=0), "max_context"),
    (lambda m: next_token_loss(m, torch.zeros(2, 1, dtype=torch.long)), r"\(B, T \+ 1\)"),
    (lambda m: DecoderOnlyLM(V, D, H, N, FF, num_kv_heads=3), "num_kv_heads=3"),
    (lambda m: DecoderOnlyLM(0, D, H, N, FF), "vocab_size"),
    (lambda m: m.start_from_unigram(torch.ones(V)), "output_bias=True"),
    (lambda m: DecoderOnlyLM(V, D, H, N, FF, output_bias=True).start_from_unigram(torch.ones(V - 1)),
     rf"non-negative \({V},\) tensor, got \({V - 1},\)"),
    (lambda m: DecoderOnlyLM(V, D, H, N, FF, output_bias=True).start_from_unigram(-torch.ones(V)), "non-negative"),
    (lambda m: DecoderOnlyLM(V, D, H, N, FF, output_bias=True).start_from_unigram(torch.ones(V), 0.0), "alpha"),
    (lambda m: kv_cache_bytes(2, 1, -4, 1, 8), "seq_len"),
    (lambda m: m(ids_of(t=4), attn_mask=causal_mask(5)), r"attn_mask must be a \(4, 4\)"),
    (lambda m: m(ids_of(t=4), attn_mask=causal_mask(4).float()), "torch.bool"),
    (lambda m: m(ids_of(t=1), m.new_cache(), attn_mask=causal_mask(1)), "with a cache"),
])
def test_bad_inputs_raise_value_errors(call, words):
    with pytest.raises(ValueError, match=words):
        call(lm())
