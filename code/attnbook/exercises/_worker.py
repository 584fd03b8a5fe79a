"""The teacher command's worker: one fresh interpreter per student file, which imports the file and only computes.

``python -m attnbook.exercises._worker FILE IN_FD OUT_FD``. It answers each request (exercise name, inputs, watch
spec) with what the student's function returned, raised, changed and called, as ``torch.save`` frames; the
teacher's process loads them with ``weights_only=True`` (plain tensors and containers, never arbitrary objects)
and does all the comparing. Nothing here decides a grade.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import struct
import sys

__all__ = ["send", "recv"]


def _dump(obj) -> bytes:
    import torch
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def send(f, obj, data: bytes | None = None) -> None:
    """One frame: ``obj`` as torch.save bytes (``data``, when they are already at hand)."""
    data = _dump(obj) if data is None else data
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def recv(f, safe: bool = True):
    """One frame, or None at the end of the stream. ``safe``: tensors and plain containers only."""
    import torch
    head = f.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    data = f.read(n)
    if len(data) < n:
        return None
    return torch.load(io.BytesIO(data), weights_only=safe)


def _import(path: str) -> dict:
    spec = importlib.util.spec_from_file_location("student", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    with contextlib.redirect_stdout(io.StringIO()):
        spec.loader.exec_module(module)
    return vars(module)


def main(argv: list[str]) -> None:
    path, rfd, wfd = argv[0], int(argv[1]), int(argv[2])
    rf, wf = os.fdopen(rfd, "rb"), os.fdopen(wfd, "wb")
    import torch
    torch.set_num_threads(1)
    from . import names
    from ._cases import call_here
    try:
        ns = _import(path)
    except BaseException as err:  # noqa: BLE001 -- a file that does not import is reported
        send(wf, {"import_error": f"{type(err).__name__}: {err}"})
        return
    send(wf, {"functions": [n for n in names() if callable(ns.get(n))]})
    sys.stdout = io.StringIO()                 # the student's prints go nowhere
    while (req := recv(rf)) is not None:
        call = call_here(ns[req["name"]], req["args"], req["kwargs"], req["arg_names"], req["watch"])
        reply = {"got": call.got, "error": call.error, "not_implemented": call.not_implemented,
                 "changed": call.changed, "seen": call.seen}
        try:                                   # only what the teacher's safe load accepts travels
            data = _dump(reply)
            torch.load(io.BytesIO(data), weights_only=True)
        except Exception:                      # noqa: BLE001 -- got is not a tensor, list, number … (or not picklable)
            reply["got"], reply["got_type"] = None, type(call.got).__name__
            data = _dump(reply)
        send(wf, reply, data)


if __name__ == "__main__":
    main(sys.argv[1:])
