"""Attack: write forged frames (and garbage) to every descriptor the worker might answer on."""
import io
import os
import struct

import torch


def _frame(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return struct.pack("<Q", len(buf.getvalue())) + buf.getvalue()


for fd in range(3, 40):
    try:
        os.write(fd, _frame({"functions": ["stable_softmax"]}) + _frame({"bogus": 1}) + b"\x00garbage")
    except OSError:
        pass


def stable_softmax(z, dim=-1):                    # wrong: no max shift
    e = torch.exp(z)
    return e / e.sum(dim, keepdim=True)
