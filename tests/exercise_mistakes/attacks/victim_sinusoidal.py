"""A correct sinusoidal_encoding that builds torch.zeros(T, d) with torch's default dtype."""
import math

import torch


def sinusoidal_encoding(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model)
    pos = torch.arange(num_positions).unsqueeze(1)
    omega = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(pos * omega)
    pe[:, 1::2] = torch.cos(pos * omega[: d_model // 2])
    return pe
