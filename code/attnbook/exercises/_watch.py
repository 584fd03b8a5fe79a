"""What a reader's function did, beyond what it returned: calls the exercise forbids, and (online Softmax) a
reduction over more scores than one block.

A watch spec is plain data (it travels to the teacher command's worker process):
``{"funcs": ("attnbook.softmax:masked_softmax", ...), "ops": ("_softmax", ...), "block_arg": 1}``.
``funcs`` are Python functions seen through ``sys.setprofile`` (also when the reader imported them under another
name); ``ops`` are torch function names seen by a ``TorchFunctionMode`` (``torch.softmax``, ``x.softmax`` and
``F.softmax`` are all "softmax"); ``block_arg`` is the position of the block size among the arguments: any
reduction (max, sum, sort, matmul …) over more elements than one block is reported. (A ``TorchDispatchMode``
would see ATen ops, but its first use imports torch._dynamo: seconds.)
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import sys

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["watching", "forbid", "ENABLED"]

ENABLED = True        # the package's own tests switch it off to run the references through their checkers

# torch function names -> what the reader called.
OP_NAMES = {
    "softmax": "torch.softmax", "scaled_dot_product_attention": "torch.nn.functional.scaled_dot_product_attention",
    "layer_norm": "torch.nn.functional.layer_norm", "lstm": "PyTorch 的 LSTM", "lstm_cell": "PyTorch 的 LSTMCell",
}
REDUCTIONS = {"amax", "amin", "max", "min", "sum", "mean", "logsumexp", "softmax", "log_softmax", "sort", "topk",
              "cumsum", "logcumsumexp", "cummax", "prod", "std", "var", "norm", "argmax", "argmin", "nansum",
              "var_mean", "std_mean", "vector_norm", "aminmax"}
CONTRACTIONS = {"matmul", "mm", "bmm", "mv", "dot", "addmm", "baddbmm", "addmv", "vdot", "inner", "tensordot"}


def forbid(*funcs, ops: tuple = (), block_arg: int | None = None) -> dict:
    """A watch spec from the package's functions an exercise forbids (and ATen ops, block-size position)."""
    names = tuple(f"{inspect.unwrap(f).__module__}:{inspect.unwrap(f).__qualname__}" for f in funcs)
    return {"funcs": names, "ops": tuple(ops), "block_arg": block_arg}


def _resolve(spec: str):
    module, _, qual = spec.partition(":")
    obj = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return inspect.unwrap(obj).__code__, f"attnbook.{qual}"


def _extent(name: str, args: tuple, kwargs: dict) -> int:
    """How many elements one output element of a reduction reads (0 when it is not one)."""
    t = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if t is None or t.dim() == 0:
        return 0
    if name in CONTRACTIONS:
        return t.shape[-1]
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    if isinstance(dims, torch.Tensor):       # max(a, b) is elementwise
        return 0
    if dims is None or dims == [] or dims == ():
        return t.numel()
    dims = [dims] if isinstance(dims, int) else list(dims)
    return math.prod(t.shape[d] for d in dims)


class _Mode(TorchFunctionMode):
    def __init__(self, ops, block, seen):
        super().__init__()
        self.ops, self.block, self.seen = ops, block, seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in self.ops:
            self.seen.append(f"调用了 {OP_NAMES.get(name, name)}")
        if self.block and (name in REDUCTIONS or name in CONTRACTIONS):
            n = _extent(name, args, kwargs)
            if n > self.block:
                self.seen.append(f"一次归约了 {n} 个分数（{name}），比一块（{self.block} 个）多：没有按块读取")
        return func(*args, **kwargs)


@contextlib.contextmanager
def watching(spec: dict | None, args: tuple = ()):
    """Collect, in the list it yields, a sentence for each thing the spec forbids that runs inside the block."""
    seen: list[str] = []
    if not spec or not ENABLED:
        yield seen
        return
    codes = dict(_resolve(s) for s in spec.get("funcs", ()))
    block = args[spec["block_arg"]] if spec.get("block_arg") is not None and len(args) > spec["block_arg"] else None
    block = block if isinstance(block, int) and not isinstance(block, bool) else None
    old = sys.getprofile()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            seen.append(f"调用了 {codes[frame.f_code]}")

    ops = set(spec.get("ops", ()))
    sys.setprofile(profile if codes else old)
    try:
        with (_Mode(ops, block, seen) if ops or block else contextlib.nullcontext()):
            yield seen
    finally:
        sys.setprofile(old)
