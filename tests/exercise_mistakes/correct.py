"""Correct solutions of every exercise, written independently of attnbook (PyTorch built-ins, loops).

Test data for tests/test_exercises.py: each function must pass ``attnbook.exercises.check``.
"""

import math

import torch
import torch.nn.functional as F


def lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
    i, f, g, o = torch.einsum("...j,kj->...k", x, w_ih).add(b_ih + h @ w_hh.T + b_hh).chunk(4, dim=-1)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


def additive_score(q, k, w_q, w_k, v):
    out = torch.empty(*q.shape[:-2], q.size(-2), k.size(-2))
    for i in range(q.size(-2)):
        for j in range(k.size(-2)):
            out[..., i, j] = torch.tanh(q[..., i, :] @ w_q.T + k[..., j, :] @ w_k.T) @ v
    return out


def kernel_regression(queries, keys, values, width):
    out = []
    for qv in queries.tolist():
        logw = [-(qv - kv) ** 2 / (2 * width ** 2) for kv in keys.tolist()]
        m = max(logw)
        w = [math.exp(s - m) for s in logw]
        out.append(sum(wi * vi for wi, vi in zip(w, values.tolist())) / sum(w))
    return torch.tensor(out)


def stable_softmax(z, dim=-1):                 # exp(z - logsumexp), computed in float64 inside
    return torch.exp(z.double() - torch.logsumexp(z.double(), dim, keepdim=True)).to(z.dtype)


def masked_softmax(scores, mask):
    mask = mask.expand_as(scores)
    s = scores.float().masked_fill(~mask, float("-inf"))
    out = torch.softmax(s, dim=-1).nan_to_num(0.0)          # an all -inf row gives nan -> 0
    return out.to(scores.dtype)


def causal_mask(n):
    i = torch.arange(n)
    return i[None, :] <= i[:, None]


def scaled_dot_product_attention(q, k, v, mask=None):       # einsum, q scaled first
    s = torch.einsum("...qd,...kd->...qk", q / q.size(-1) ** 0.5, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)              # a query that sees nothing: zero weights
    return torch.einsum("...qk,...kd->...qd", w, v)


def sinusoidal_encoding(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model, dtype=torch.float64)
    for pos in range(num_positions):
        for j in range(d_model):
            angle = pos / 10000 ** ((j - j % 2) / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe.float()


def apply_rotary(x, positions):
    d = x.size(-1)
    theta = positions.double()[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    rot = torch.polar(torch.ones_like(theta), theta)                       # e^{i theta}
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * rot).reshape(x.shape).to(x.dtype)


def skipgram_pairs(tokens, window):
    return [(tokens[i], tokens[j]) for i in range(len(tokens)) for j in range(len(tokens))
            if i != j and abs(i - j) <= window]


def cosine_nearest(query, vectors, k):
    sims = F.cosine_similarity(vectors, query[None, :], dim=-1)
    return torch.argsort(sims, descending=True)[:k]


def split_heads(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


def multihead_attention(x, w_q, w_k, w_v, w_o, num_heads):
    d = x.size(-1)
    mha = torch.nn.MultiheadAttention(d, num_heads, bias=False, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))
        mha.out_proj.weight.copy_(w_o.T)
        return mha(x, x, x, need_weights=False)[0]


def masked_mean(x, mask):
    out = torch.zeros(x.size(0), x.size(2))
    for b in range(x.size(0)):
        rows = x[b][mask[b]]
        if len(rows):
            out[b] = rows.mean(0)
    return out


def layer_norm(x, weight, bias, eps=1e-5):                 # rsqrt of the biased variance
    mu = x.mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + eps) * weight + bias


def label_smoothed_cross_entropy(logits, target, smoothing):
    return F.cross_entropy(logits, target, label_smoothing=smoothing)


def kv_cache_step(q, k_new, v_new, k_cache, v_cache):
    k = torch.cat([k_cache, k_new], dim=1)
    v = torch.cat([v_cache, v_new], dim=1)
    return F.scaled_dot_product_attention(q, k, v), k, v


def next_token_loss(logits, tokens):
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:])


def top_p_filter(logits, p):
    probs = torch.softmax(logits.double(), -1)
    out = logits.clone()
    for row, prow in zip(out.view(-1, out.size(-1)), probs.view(-1, probs.size(-1))):
        order = sorted(range(len(prow)), key=lambda i: -prow[i].item())
        total, last = 0.0, None
        for i in order:
            total += prow[i].item()
            last = prow[i].item()
            if total >= p - 1e-12:
                break
        row[prow < last * (1 - 1e-9)] = float("-inf")
    return out


def repeat_kv(x, n_rep):
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


def online_softmax(x, block_size):
    m = torch.full(x.shape[:-1], -math.inf)
    s = torch.zeros(x.shape[:-1])
    for start in range(0, x.size(-1), block_size):
        blk = x[..., start:start + block_size]
        m_new = torch.maximum(m, blk.max(-1).values)
        s = s * torch.exp(m - m_new) + torch.exp(blk - m_new[..., None]).sum(-1)
        m = m_new
    return torch.exp(x - m[..., None]) / s[..., None]


def sliding_window_mask(n, window):
    return torch.tensor([[0 <= i - j < window for j in range(n)] for i in range(n)], dtype=torch.bool).reshape(n, n)


def linear_attention_recurrent(q, k, v):
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    S = torch.zeros(*q.shape[:-2], q.size(-1), v.size(-1))
    z = torch.zeros(*q.shape[:-2], q.size(-1))
    outs = []
    for i in range(q.size(-2)):
        S = S + fk[..., i, :, None] * v[..., i, None, :]
        z = z + fk[..., i, :]
        outs.append((fq[..., i, None, :] @ S).squeeze(-2) / (fq[..., i, :] * z).sum(-1, keepdim=True))
    return torch.stack(outs, dim=-2)
