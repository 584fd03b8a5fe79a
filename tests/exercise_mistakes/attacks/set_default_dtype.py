"""Attack (a common habit, not malice): change torch's defaults at top level; it must not reach another file."""
import torch

torch.set_default_dtype(torch.float64)


def causal_mask(n):                               # right
    return torch.ones(n, n, dtype=torch.bool).tril()
