"""Attack: end the process from inside a checked function."""
import os

import torch


def causal_mask(n):                               # wrong and exits
    os._exit(0)


def stable_softmax(z, dim=-1):                    # right
    e = torch.exp(z - z.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)
