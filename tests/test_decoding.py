"""Decoding: beam size 1 is greedy, the KV cache changes nothing but the cost, and a wide beam
finds the best sequence found by enumerating every sequence of a tiny model."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnbook import Transformer, beam_search, greedy_decode, sequence_log_prob, shift_right

PAD, BOS, EOS = 0, 1, 2
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _model(seed=0, tgt_vocab=9, sharpen=1.0, norm_first=False, device="cpu"):
    torch.manual_seed(seed)
    model = Transformer(10, tgt_vocab, 16, 4, 2, 32, dropout=0.1, norm_first=norm_first).double()
    with torch.no_grad():
        model.generator.weight.mul_(sharpen)     # peakier next-token distributions
    return model.to(device).eval()


def _src(b=4, s=6, seed=1, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 10, (b, s), generator=g)
    if b > 1:
        src[1, 4:] = PAD
    return src.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_kv_cache_decoding_equals_full_recomputation(norm_first, device):
    model = _model(3, norm_first=norm_first, device=device)
    src = _src(device=device)
    full_tokens, full_logits = greedy_decode(model, src, 12, use_cache=False)
    cached_tokens, cached_logits = greedy_decode(model, src, 12, use_cache=True)
    assert torch.equal(full_tokens, cached_tokens)
    torch.testing.assert_close(cached_logits, full_logits, rtol=1e-10, atol=1e-10)
    # past <eos> too: with stop_at_eos=False both run all 20 steps and still agree
    long_full = greedy_decode(model, src, 20, use_cache=False, stop_at_eos=False)[1]
    long_cached = greedy_decode(model, src, 20, use_cache=True, stop_at_eos=False)[1]
    assert long_full.shape == (4, 20, 9)
    torch.testing.assert_close(long_cached, long_full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("beam_size, alpha", [(2, 0.0), (4, 0.0), (5, 0.6)])
def test_cached_beam_search_equals_the_uncached_one(beam_size, alpha, device):
    """Reordering the cache with the beams gives the tokens and scores of re-reading every prefix."""
    for seed in range(3):
        model = _model(seed, sharpen=0.5, device=device)     # flatter distributions: beams reorder often
        src = _src(b=3, seed=seed, device=device)
        full = beam_search(model, src, beam_size, 9, length_penalty=alpha)
        cached = beam_search(model, src, beam_size, 9, length_penalty=alpha, use_cache=True)
        assert torch.equal(cached[0], full[0])
        torch.testing.assert_close(cached[1], full[1], rtol=1e-10, atol=1e-10)


def test_cache_step_by_step_equals_a_full_forward_pass():
    """Feeding an arbitrary target one token at a time reproduces every row of model(src, tgt)."""
    model = _model(4)
    src = _src()
    tgt = torch.randint(3, 9, (4, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        reference = model(src, tgt)                                       # (B, T, V), one pass
        memory, src_mask = model.encode(src)
        cache = model.new_cache()
        for t in range(tgt.size(1)):
            step = model.decode(tgt[:, t:t + 1], memory, src_mask, cache)  # (B, 1, V)
            assert len(cache) == t + 1
            torch.testing.assert_close(step[:, 0], reference[:, t], rtol=1e-10, atol=1e-10)
    assert cache.layers[0].memory_kv[0].shape == (4, 4, 6, 4)             # (B, H, S, D/H), projected once


@pytest.mark.parametrize("seed", range(4))
def test_beam_size_one_is_greedy(seed):
    model = _model(seed, sharpen=3.0)
    src = _src(seed=seed + 10)
    greedy, _ = greedy_decode(model, src, 10)
    beam, score = beam_search(model, src, beam_size=1, max_len=10)
    assert torch.equal(beam, greedy)
    torch.testing.assert_close(score, sequence_log_prob(model, src, greedy), rtol=1e-10, atol=1e-10)


def _all_hypotheses(max_len, symbols):
    """Every output beam search can return: ... <eos> within max_len, or max_len tokens without <eos>."""
    for n in range(1, max_len + 1):
        for body in itertools.product(symbols, repeat=n - 1):
            yield list(body) + [EOS]
            if n == max_len:
                yield from (list(body) + [s] for s in symbols)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_returns_the_best_of_all_enumerated_sequences(alpha):
    max_len, symbols = 4, [3, 4]                     # vocabulary: pad, bos, eos, a, b
    hyps = list(_all_hypotheses(max_len, symbols))
    assert len(hyps) == 1 + 2 + 4 + 8 + 16
    beaten = 0
    for seed in range(6):
        model = _model(seed, tgt_vocab=5, sharpen=4.0)
        src = _src(b=1, seed=seed)
        tokens = torch.full((len(hyps), max_len), PAD, dtype=torch.long)
        for i, h in enumerate(hyps):
            tokens[i, :len(h)] = torch.tensor(h)
        logp = sequence_log_prob(model, src.expand(len(hyps), -1), tokens)           # (N,)
        lengths = torch.tensor([len(h) for h in hyps], dtype=torch.float64)
        score = logp / ((5 + lengths) / 6) ** alpha
        best = int(score.argmax())
        out, beam_score = beam_search(model, src, beam_size=len(hyps), max_len=max_len, length_penalty=alpha)
        assert out[0, :len(hyps[best])].tolist() == hyps[best]
        assert torch.all(out[0, len(hyps[best]):] == PAD)
        assert abs(float(beam_score) - float(score[best])) < 1e-10
        greedy, _ = greedy_decode(model, src, max_len)
        g = greedy[0][greedy[0] != PAD].tolist()
        beaten += float(score[hyps.index(g)]) < float(score[best]) - 1e-9
    assert beaten >= 1        # on some model greedy is not optimal, so the test can tell them apart


def test_sequence_log_prob_sums_the_step_log_probabilities():
    model = _model(6)
    src = _src()
    tokens, logits = greedy_decode(model, src, 7)
    logp = torch.log_softmax(logits.masked_fill(torch.tensor([True, True] + [False] * 7), float("-inf")), -1)
    picked = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)                     # (B, L)
    alive = (tokens == EOS).cumsum(1) - (tokens == EOS).long() == 0
    ref = torch.where(alive & (tokens != PAD), picked, torch.zeros_like(picked)).sum(1)
    torch.testing.assert_close(sequence_log_prob(model, src, tokens), ref, rtol=1e-10, atol=1e-10)


def test_decoding_restores_the_training_mode_and_ignores_dropout():
    model = _model(7).train()
    src = _src()
    a, _ = greedy_decode(model, src, 6)
    b, _ = beam_search(model, src, 3, 6)
    assert model.training
    assert torch.equal(a, greedy_decode(model, src, 6)[0]) and torch.equal(b, beam_search(model, src, 3, 6)[0])


def test_outputs_are_padded_after_eos():
    model = _model(8, sharpen=3.0)
    tokens, _ = greedy_decode(model, _src(b=8, seed=3), 10)
    for row in tokens.tolist():
        if EOS in row:
            assert all(t == PAD for t in row[row.index(EOS) + 1:])
        assert BOS not in row


def test_bad_inputs():
    model = _model()
    with pytest.raises(ValueError, match="src must be a"):
        greedy_decode(model, torch.zeros(2, 3), 5)
    with pytest.raises(ValueError, match="max_len must be a positive integer, got 0"):
        greedy_decode(model, _src(), 0)
    with pytest.raises(ValueError, match="beam_size must be a positive integer, got 0"):
        beam_search(model, _src(), 0, 5)
    with pytest.raises(ValueError, match="must be distinct"):
        beam_search(model, _src(), 2, 5, bos_id=2, eos_id=2)


# ---------------------------------------------------------------- gaps found by mutation testing (make mutation)


def test_bad_sources_and_lengths_are_named():
    model = _model()
    for src, got in [(torch.zeros(2, 3), r"torch.float32 \(2, 3\)"), ([[3, 4]], "list"),
                     (torch.zeros(1, 0, dtype=torch.long), r"torch.int64 \(1, 0\)")]:
        with pytest.raises(ValueError, match=f"^src must be a \\(B, T_src\\) int64 tensor with T_src >= 1, got {got}"):
            greedy_decode(model, src, 5)
    with pytest.raises(ValueError, match="^max_len must be a positive integer, got True"):
        greedy_decode(model, _src(), True)
    tokens, logits = greedy_decode(model, torch.tensor([[5]]), 1)  # the shortest source and output
    assert tokens.shape == (1, 1) and logits.shape == (1, 1, 9)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_next_log_probs_in_float32_or_better_without_touching_the_logits(dtype):
    from attnbook.decoding import _next_log_probs

    logits = torch.randn(3, 7, generator=torch.Generator().manual_seed(2)).to(dtype)
    before = logits.clone()
    lp = _next_log_probs(logits, 1, 0)
    assert torch.equal(logits, before) and lp.dtype == torch.float32
    ref = logits.float()
    ref[:, [1, 0]] = float("-inf")
    torch.testing.assert_close(lp, torch.log_softmax(ref, -1))


def test_shift_right_puts_bos_first_and_drops_the_last_token():
    tokens = torch.tensor([[5, 6, 7, EOS], [8, EOS, PAD, PAD]])
    expected = torch.tensor([[BOS, 5, 6, 7], [BOS, 8, EOS, PAD]])
    assert torch.equal(shift_right(tokens, BOS), expected)
    assert torch.equal(shift_right(tokens[:, :1], BOS), torch.full((2, 1), BOS))
    for bad, got in [(torch.zeros(2, 0, dtype=torch.long), r"\(2, 0\)"), (torch.zeros(3, dtype=torch.long), r"\(3,\)"),
                     ([[1, 2]], "list")]:
        with pytest.raises(ValueError, match=f"^tokens must be a \\(B, L\\) tensor with L >= 1, got {got}"):
            shift_right(bad, BOS)
