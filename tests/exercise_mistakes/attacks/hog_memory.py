"""Attack: allocate far more memory than the worker's limit."""
import torch


def causal_mask(n):
    big = torch.ones(64, 2 ** 30, dtype=torch.uint8)       # 64 GiB
    return big[:n, :n].bool().tril()
