"""Typical wrong solutions, written the way a reader would, independently of the checkers' own versions.

Test data for tests/test_exercises.py. A function named ``<exercise>__<mistake>`` must fail
``attnbook.exercises.check(<exercise>, fn)`` with ``result.mistake == <mistake>`` (the message meant for it).
"""

import math

import torch
import torch.nn.functional as F


# --- lstm_cell ------------------------------------------------------------------------------------------
def _gates(x, h, w_ih, w_hh, b_ih, b_hh):
    return F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)


def lstm_cell__gate_order(x, h, c, w_ih, w_hh, b_ih, b_hh):
    i, f, o, g = _gates(x, h, w_ih, w_hh, b_ih, b_hh).chunk(4, 1)      # the i, f, o, g order of some papers
    c2 = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c2.tanh(), c2


def lstm_cell__no_tanh_h(x, h, c, w_ih, w_hh, b_ih, b_hh):
    i, f, g, o = _gates(x, h, w_ih, w_hh, b_ih, b_hh).chunk(4, 1)
    c2 = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c2, c2


def lstm_cell__sigmoid_g(x, h, c, w_ih, w_hh, b_ih, b_hh):
    i, f, g, o = _gates(x, h, w_ih, w_hh, b_ih, b_hh).sigmoid().chunk(4, 1)
    c2 = f * c + i * g
    return o * c2.tanh(), c2


def lstm_cell__no_forget(x, h, c, w_ih, w_hh, b_ih, b_hh):
    i, f, g, o = _gates(x, h, w_ih, w_hh, b_ih, b_hh).chunk(4, 1)
    c2 = c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c2.tanh(), c2


# --- additive_score ---------------------------------------------------------------------------------------
def additive_score__no_tanh(q, k, w_q, w_k, v):
    return (q @ w_q.T @ v)[..., :, None] + (k @ w_k.T @ v)[..., None, :]


def additive_score__tanh_outside(q, k, w_q, w_k, v):
    return torch.tanh((q @ w_q.T @ v)[..., :, None] + (k @ w_k.T @ v)[..., None, :])


def additive_score__diagonal(q, k, w_q, w_k, v):
    return torch.tanh(q @ w_q.T + k @ w_k.T) @ v


def additive_score__relu(q, k, w_q, w_k, v):
    hidden = F.relu((q @ w_q.T)[..., :, None, :] + (k @ w_k.T)[..., None, :, :])
    return (hidden * v).sum(-1)


# --- kernel_regression -------------------------------------------------------------------------------------
def kernel_regression__unnormalised(queries, keys, values, width):
    w = torch.exp(-(queries[:, None] - keys) ** 2 / (2 * width ** 2))
    return (w * values).sum(1)


def kernel_regression__width_not_squared(queries, keys, values, width):
    return torch.softmax(-(queries[:, None] - keys) ** 2 / (2 * width), dim=1) @ values


def kernel_regression__naive(queries, keys, values, width):
    w = torch.exp(-(queries[:, None] - keys) ** 2 / (2 * width ** 2))
    return (w / w.sum(1, keepdim=True)) @ values


def kernel_regression__abs_distance(queries, keys, values, width):
    return torch.softmax(-(queries[:, None] - keys).abs() / (2 * width ** 2), dim=1) @ values


# --- stable_softmax ----------------------------------------------------------------------------------------
def stable_softmax__naive(z, dim=-1):
    return z.exp() / z.exp().sum(dim=dim, keepdim=True)


def stable_softmax__global_max(z, dim=-1):
    e = (z - z.max()).exp()
    return e / e.sum(dim=dim, keepdim=True)


def stable_softmax__ignores_dim(z, dim=-1):
    e = (z - z.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


# --- masked_softmax -----------------------------------------------------------------------------------------
def masked_softmax__fill_inf(scores, mask):
    return F.softmax(torch.where(mask, scores, torch.tensor(-math.inf, dtype=scores.dtype)), dim=-1)


def masked_softmax__fill_1e9(scores, mask):
    keep = mask.to(scores.dtype)
    return F.softmax(scores * keep - 1e9 * (1 - keep), dim=-1)     # the seed's code


def masked_softmax__multiply_after(scores, mask):
    return F.softmax(scores, dim=-1) * mask.to(scores.dtype)


def masked_softmax__inverted(scores, mask):
    e = torch.exp(scores - scores.masked_fill(mask, -math.inf).amax(-1, keepdim=True).clamp_min(-1e30)) * ~mask
    s = e.sum(-1, keepdim=True)
    return torch.where(s > 0, e / s, torch.zeros_like(e))


# --- causal_mask ------------------------------------------------------------------------------------------
def causal_mask__no_diagonal(n):
    i = torch.arange(n)
    return i[None, :] < i[:, None]


def causal_mask__upper(n):
    return torch.triu(torch.ones(n, n)).bool()


def causal_mask__inverted(n):
    return torch.ones(n, n, dtype=torch.bool).triu(diagonal=1)       # the "True = hide" convention


def causal_mask__float(n):
    return torch.tril(torch.ones(n, n))


# --- scaled_dot_product_attention ---------------------------------------------------------------------------
def _masked_weights(s, mask):
    if mask is None:
        return torch.softmax(s, -1)
    mask = mask.expand_as(s)
    w = torch.softmax(s.masked_fill(~mask, -math.inf), -1)
    return w.nan_to_num(0.0)


def scaled_dot_product_attention__no_scale(q, k, v, mask=None):
    return _masked_weights(q @ k.transpose(-1, -2), mask) @ v


def scaled_dot_product_attention__scale_dk(q, k, v, mask=None):
    return _masked_weights(q @ k.transpose(-1, -2) / q.shape[-1], mask) @ v


def scaled_dot_product_attention__softmax_dim(q, k, v, mask=None):
    s = q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    return torch.softmax(s, dim=-2).nan_to_num(0.0) @ v


def scaled_dot_product_attention__mask_ignored(q, k, v, mask=None):
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1]), -1) @ v


def scaled_dot_product_attention__fill_inf(q, k, v, mask=None):
    s = q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ v


# --- sinusoidal_encoding ---------------------------------------------------------------------------------------
def sinusoidal_encoding__swapped(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model)
    for pos in range(num_positions):
        for j in range(0, d_model, 2):
            angle = pos / 10000 ** (j / d_model)
            pe[pos, j] = math.cos(angle)
            if j + 1 < d_model:
                pe[pos, j + 1] = math.sin(angle)
    return pe


def sinusoidal_encoding__exponent_i(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model)
    for pos in range(num_positions):
        for j in range(0, d_model, 2):
            angle = pos / 10000 ** ((j // 2) / d_model)
            pe[pos, j] = math.sin(angle)
            if j + 1 < d_model:
                pe[pos, j + 1] = math.cos(angle)
    return pe


def sinusoidal_encoding__per_feature(num_positions, d_model):
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    j = torch.arange(d_model, dtype=torch.float64)
    angle = pos / 10000 ** (j / d_model)
    return torch.where(j % 2 == 0, angle.sin(), angle.cos()).float()


def sinusoidal_encoding__concat(num_positions, d_model):
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    w = 10000 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.cat([(pos * w).sin(), (pos * w).cos()[:, : d_model // 2]], 1).float()


# --- apply_rotary ----------------------------------------------------------------------------------------------
def _angles(positions, d):
    return positions.double()[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)


def apply_rotary__rotate_half(x, positions):
    a = _angles(positions, x.shape[-1])
    cos, sin = torch.cat([a.cos(), a.cos()], -1).float(), torch.cat([a.sin(), a.sin()], -1).float()
    x1, x2 = x.float().chunk(2, -1)
    return (x.float() * cos + torch.cat([-x2, x1], -1) * sin).to(x.dtype)


def apply_rotary__reversed(x, positions):
    a = _angles(positions, x.shape[-1])
    xe, xo = x.float()[..., ::2], x.float()[..., 1::2]
    c, s = a.cos().float(), a.sin().float()
    return torch.stack([xe * c + xo * s, -xe * s + xo * c], -1).flatten(-2).to(x.dtype)


def apply_rotary__ignores_positions(x, positions):
    a = _angles(torch.arange(x.shape[-2]), x.shape[-1])
    xe, xo = x.float()[..., ::2], x.float()[..., 1::2]
    c, s = a.cos().float(), a.sin().float()
    return torch.stack([xe * c - xo * s, xe * s + xo * c], -1).flatten(-2).to(x.dtype)


# --- skipgram_pairs --------------------------------------------------------------------------------------------
def skipgram_pairs__includes_self(tokens, window):
    return [(w, tokens[j]) for i, w in enumerate(tokens)
            for j in range(max(0, i - window), min(len(tokens), i + window + 1))]


def skipgram_pairs__window_short(tokens, window):
    return [(w, tokens[j]) for i, w in enumerate(tokens)
            for j in range(max(0, i - window + 1), min(len(tokens), i + window)) if j != i]


def skipgram_pairs__right_only(tokens, window):
    return [(w, c) for i, w in enumerate(tokens) for c in tokens[i + 1:i + 1 + window]]


# --- cosine_nearest ------------------------------------------------------------------------------------------
def cosine_nearest__dot(query, vectors, k):
    return torch.argsort(vectors @ query, descending=True)[:k]


def cosine_nearest__ascending(query, vectors, k):
    return torch.argsort(F.cosine_similarity(vectors, query[None], dim=1))[:k]


def cosine_nearest__euclidean(query, vectors, k):
    return torch.cdist(query[None], vectors)[0].argsort()[:k]


# --- split_heads ------------------------------------------------------------------------------------------
def split_heads__reshape(x, num_heads):
    b, t, d = x.shape
    return x.reshape(b, num_heads, t, d // num_heads)


def split_heads__interleaved(x, num_heads):
    return torch.stack([x[..., h::num_heads] for h in range(num_heads)], dim=1)


def split_heads__no_transpose(x, num_heads):
    return x.unflatten(-1, (num_heads, -1))


# --- multihead_attention ------------------------------------------------------------------------------------
def _mha(x, w_q, w_k, w_v, w_o, h, split, merge, scale_by_model=False, use_o=True):
    b, t, d = x.shape
    q, k, v = (split(x @ w, b, t, d, h) for w in (w_q, w_k, w_v))
    dk = d if scale_by_model else d // h
    o = torch.softmax(q @ k.transpose(-1, -2) / dk ** 0.5, -1) @ v
    o = merge(o, b, t, d, h)
    return o @ w_o if use_o else o


def _split_ok(y, b, t, d, h):
    return y.view(b, t, h, d // h).permute(0, 2, 1, 3)


def _merge_ok(o, b, t, d, h):
    return o.permute(0, 2, 1, 3).reshape(b, t, d)


def multihead_attention__split_reshape(x, w_q, w_k, w_v, w_o, num_heads):
    return _mha(x, w_q, w_k, w_v, w_o, num_heads, lambda y, b, t, d, h: y.view(b, h, t, d // h), _merge_ok)


def multihead_attention__merge_reshape(x, w_q, w_k, w_v, w_o, num_heads):
    return _mha(x, w_q, w_k, w_v, w_o, num_heads, _split_ok, lambda o, b, t, d, h: o.reshape(b, t, d))


def multihead_attention__scale_d(x, w_q, w_k, w_v, w_o, num_heads):
    return _mha(x, w_q, w_k, w_v, w_o, num_heads, _split_ok, _merge_ok, scale_by_model=True)


def multihead_attention__no_output_projection(x, w_q, w_k, w_v, w_o, num_heads):
    return _mha(x, w_q, w_k, w_v, w_o, num_heads, _split_ok, _merge_ok, use_o=False)


# --- masked_mean --------------------------------------------------------------------------------------------
def masked_mean__mean_all(x, mask):
    return torch.mean(x, dim=1)


def masked_mean__divide_by_t(x, mask):
    return (x * mask.unsqueeze(-1)).mean(dim=1)


def masked_mean__zero_division(x, mask):
    keep = mask.unsqueeze(-1).float()
    return (x * keep).sum(1) / keep.sum(1)


def masked_mean__inverted(x, mask):
    keep = (~mask).unsqueeze(-1).float()
    return (x * keep).sum(1) / keep.sum(1).clamp(min=1)


# --- layer_norm --------------------------------------------------------------------------------------------
def layer_norm__unbiased(x, weight, bias, eps=1e-5):
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * weight + bias


def layer_norm__eps_outside(x, weight, bias, eps=1e-5):
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, unbiased=False, keepdim=True) + eps) * weight + bias


def layer_norm__no_affine(x, weight, bias, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], eps=eps)


def layer_norm__one_pass(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = (x ** 2).mean(-1, keepdim=True) - mean ** 2
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


# --- label_smoothed_cross_entropy ------------------------------------------------------------------------------
def label_smoothed_cross_entropy__others(logits, target, smoothing):
    logp = logits.log_softmax(-1)
    v = logits.shape[-1]
    q = torch.full_like(logp, smoothing / (v - 1)).scatter(1, target[:, None], 1 - smoothing)
    return -(q * logp).sum(-1).mean()


def label_smoothed_cross_entropy__no_uniform(logits, target, smoothing):
    return (1 - smoothing) * F.cross_entropy(logits, target)


def label_smoothed_cross_entropy__sum(logits, target, smoothing):
    return F.cross_entropy(logits, target, label_smoothing=smoothing, reduction="sum")


def label_smoothed_cross_entropy__naive_log(logits, target, smoothing):
    logp = torch.log(F.softmax(logits, -1))
    v = logits.shape[-1]
    q = F.one_hot(target, v) * (1 - smoothing) + smoothing / v
    return -(q * logp).sum(-1).mean()


# --- kv_cache_step ----------------------------------------------------------------------------------------
def kv_cache_step__attend_before_append(q, k_new, v_new, k_cache, v_cache):
    out = F.scaled_dot_product_attention(q, k_cache, v_cache) if k_cache.size(1) else torch.zeros_like(q[..., :v_new.size(-1)])
    return out, torch.cat([k_cache, k_new], 1), torch.cat([v_cache, v_new], 1)


def kv_cache_step__prepend(q, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_new, k_cache], 1), torch.cat([v_new, v_cache], 1)
    return F.scaled_dot_product_attention(q, k, v), k, v


def kv_cache_step__no_scale(q, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], 1), torch.cat([v_cache, v_new], 1)
    return torch.softmax(q @ k.transpose(1, 2), -1) @ v, k, v


def kv_cache_step__causal_first_row(q, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], 1), torch.cat([v_cache, v_new], 1)
    t = k.size(1)
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))[:1]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), k, v


# --- next_token_loss ----------------------------------------------------------------------------------------
def next_token_loss__no_shift(logits, tokens):
    return F.cross_entropy(logits.flatten(0, 1), tokens.flatten())


def next_token_loss__shift_backwards(logits, tokens):
    return F.cross_entropy(logits[:, 1:].flatten(0, 1), tokens[:, :-1].flatten())


def next_token_loss__sum(logits, tokens):
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="sum")


# --- top_p_filter -------------------------------------------------------------------------------------------
def top_p_filter__drops_crossing(logits, p):
    probs, order = logits.softmax(-1).sort(-1, descending=True)
    drop = probs.cumsum(-1) >= p
    drop[..., 0] = False
    return logits.scatter(-1, order, logits.gather(-1, order).masked_fill(drop, -math.inf))


def top_p_cum_le_p(logits, p):
    # cum <= p instead of cum < p: differs from the strict rule only when the sum lands on p (p = 1); once named
    # "no_ties" because the tie test was never re-checked on the later cases (cold read, 2026-11-28)
    probs, order = logits.softmax(-1).sort(-1, descending=True)
    keep = probs.cumsum(-1) <= p
    return logits.masked_fill(~torch.zeros_like(keep).scatter(-1, order, keep), -math.inf)


def top_p_filter__no_ties(logits, p):
    # Hugging Face's TopPLogitsWarper
    sorted_logits, idx = logits.sort(-1, descending=False)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    remove = cum <= (1 - p)
    remove[..., -1] = False
    return logits.masked_fill(remove.scatter(-1, idx, remove), -math.inf)


def top_p_filter__zero_fill(logits, p):
    probs = logits.softmax(-1)
    sp = probs.sort(-1, descending=True).values
    m = ((sp.cumsum(-1) - sp) < p).sum(-1, keepdim=True)
    return logits.masked_fill(probs < sp.gather(-1, m - 1), 0.0)


# --- repeat_kv --------------------------------------------------------------------------------------------
def repeat_kv__tile(x, n_rep):
    return torch.cat([x] * n_rep, dim=1)


def repeat_kv__time_axis(x, n_rep):
    return torch.repeat_interleave(x, n_rep, dim=-2)


def repeat_kv__batch_axis(x, n_rep):
    return x.repeat_interleave(n_rep, 0)


# --- online_softmax ---------------------------------------------------------------------------------------
def online_softmax__no_rescale(x, block_size):
    m, s = None, 0.0
    for blk in x.split(block_size, dim=-1):
        m = blk.amax(-1, keepdim=True) if m is None else torch.maximum(m, blk.amax(-1, keepdim=True))
        s = s + (blk - m).exp().sum(-1, keepdim=True)
    return (x - m).exp() / s


def online_softmax__first_block_max(x, block_size):
    m = x[..., :block_size].amax(-1, keepdim=True)
    s = sum((blk - m).exp().sum(-1, keepdim=True) for blk in x.split(block_size, dim=-1))
    return (x - m).exp() / s


def online_softmax__per_block(x, block_size):
    return torch.cat([b.softmax(-1) for b in torch.split(x, block_size, -1)], -1)


# --- sliding_window_mask ------------------------------------------------------------------------------------
def sliding_window_mask__one_too_many(n, window):
    return torch.ones(n, n, dtype=torch.bool).tril() & ~torch.ones(n, n, dtype=torch.bool).tril(-window - 1)


def sliding_window_mask__not_causal(n, window):
    i = torch.arange(n)
    return (i[:, None] - i[None, :]).abs() < window


def sliding_window_mask__excludes_self(n, window):
    return torch.ones(n, n, dtype=torch.bool).tril(-1) & ~torch.ones(n, n, dtype=torch.bool).tril(-window - 1)


# --- linear_attention_recurrent ------------------------------------------------------------------------------
def _linear(q, k, v, phi, causal=True, normalise=True, update_after=False):
    fq, fk = phi(q), phi(k)
    outs = []
    S = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    z = torch.zeros(*q.shape[:-2], q.shape[-1])
    if not causal:
        S = torch.einsum("...td,...te->...de", fk, v)
        z = fk.sum(-2)
    for i in range(q.shape[-2]):
        if causal and not update_after:
            S = S + torch.einsum("...d,...e->...de", fk[..., i, :], v[..., i, :])
            z = z + fk[..., i, :]
        num = torch.einsum("...d,...de->...e", fq[..., i, :], S)
        den = (fq[..., i, :] * z).sum(-1, keepdim=True)
        outs.append(num / den if normalise else num)
        if update_after:
            S = S + torch.einsum("...d,...e->...de", fk[..., i, :], v[..., i, :])
            z = z + fk[..., i, :]
    return torch.stack(outs, -2)


def linear_attention_recurrent__elu_only(q, k, v):
    return _linear(q, k, v, F.elu)


def linear_attention_recurrent__non_causal(q, k, v):
    return _linear(q, k, v, lambda x: F.elu(x) + 1, causal=False)


def linear_attention_recurrent__no_normaliser(q, k, v):
    return _linear(q, k, v, lambda x: F.elu(x) + 1, normalise=False)


def linear_attention_recurrent__update_after(q, k, v):
    return _linear(q, k, v, lambda x: F.elu(x) + 1, update_after=True)
