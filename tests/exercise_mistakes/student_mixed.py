"""A student's file for the teacher command's test: right, wrong, crashing, looping and unfinished solutions."""

import torch


def stable_softmax(z, dim=-1):                    # right
    e = torch.exp(z - z.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def masked_softmax(scores, mask):                 # wrong: the seed's -1e9
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)


def causal_mask(n):                               # right
    return torch.ones(n, n, dtype=torch.bool).tril()


def scaled_dot_product_attention(q, k, v, mask=None):   # unfinished
    raise NotImplementedError


def repeat_kv(x, n_rep):                          # crashes
    return x.repeat_interleave(n_rep, dim=7)


def online_softmax(x, block_size):                # never returns
    while True:
        pass


def helper(x):                                    # not an exercise: ignored
    return x
