"""Attack: end the process before anything is graded (the old command then exited 0 with no table)."""
import os

import torch


def masked_softmax(scores, mask):                 # wrong: the seed's -1e9
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)


os._exit(0)
