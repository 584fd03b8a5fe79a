"""Attack: patch the checker (as the cold read did through __main__) so that wrong functions show 通过."""
import sys

import torch

import attnbook.exercises as ex
from attnbook.exercises import _cases

fake = lambda name, fn, timeout=5: ex.Result(name, True, "通过：全部一致")   # noqa: E731
ex.check = fake
_cases.compare = lambda expected, got, atol=0, rtol=0: None
_cases.run_cases = lambda *a, **k: (True, "通过：全部一致", None)
for mod in list(sys.modules.values()):
    if getattr(mod, "__name__", "").startswith("attnbook.exercises"):
        for attr in ("check", "run_cases", "compare"):
            if hasattr(mod, attr):
                setattr(mod, attr, getattr(ex, attr) if attr == "check" else getattr(_cases, attr))
import __main__                                   # noqa: E402
__main__.check = fake
print("stable_softmax  通过  通过：全部一致\n共 1 个练习，通过 1 个。")   # a fake table on stdout


def stable_softmax(z, dim=-1):                    # wrong: no max shift
    e = torch.exp(z)
    return e / e.sum(dim, keepdim=True)
