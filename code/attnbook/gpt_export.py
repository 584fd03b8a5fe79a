"""A trained :class:`attnbook.DecoderOnlyLM` and its characters as one JavaScript file for the static page.

The payload is a JSON object: the model's sizes (``config``), its characters (``itos``, id -> character), and
every tensor of its ``state_dict`` (the tied output matrix once) as float16, little-endian, concatenated and
base64-encoded (``data``), each named with its shape and offset in ``tensors``. The file assigns it to
``globalThis.attnbookGptWeights[<file name>]``; a page loads it with ``<script src>``, so it works from
``file://`` and offline, without ``fetch``. :func:`load_weights` rebuilds the torch model from a payload: the
model the browser runs, with the float16-rounded weights.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import torch

from .gpt import DecoderOnlyLM

__all__ = ["export_weights", "load_weights", "weights_script", "read_weights_script", "write_weights_js"]

GLOBAL = "attnbookGptWeights"
_ASSIGN = re.compile(r'^\(globalThis\.attnbookGptWeights \|\|= \{\}\)\[("[^"]+")\] = (.*);\n?$', re.S)


def export_weights(model: DecoderOnlyLM, itos) -> dict:
    """The model's sizes, characters and float16 weights as a JSON-able dict (see the module docstring)."""
    if not isinstance(model, DecoderOnlyLM):
        raise ValueError(f"export_weights needs an attnbook.DecoderOnlyLM, got {type(model).__name__}")
    itos = [str(c) for c in itos]
    if len(itos) != model.vocab_size:
        raise ValueError(f"itos has {len(itos)} characters, the model's vocabulary {model.vocab_size}")
    attn = model.layers[0].self_attn
    tied = model.lm_head.weight is model.embed.weight
    config = dict(vocab_size=model.vocab_size, d_model=attn.d_model, num_heads=attn.num_heads,
                  num_kv_heads=attn.num_kv_heads, num_layers=len(model.layers),
                  d_ff=model.layers[0].ffn.linear1.out_features, rope_base=attn.rope_base, tie_weights=tied,
                  output_bias=model.lm_head.bias is not None)
    tensors, chunks, offset = [], [], 0
    for name, t in model.state_dict().items():
        if tied and name == "lm_head.weight":
            continue                                                      # the embedding, stored once
        half = t.detach().to("cpu", torch.float16).contiguous().numpy().astype("<f2")
        tensors.append({"name": name, "shape": list(t.shape), "offset": offset})
        chunks.append(half.tobytes())
        offset += half.size
    return {"format": "fp16", "config": config, "itos": itos, "tensors": tensors,
            "data": base64.b64encode(b"".join(chunks)).decode("ascii")}


def load_weights(weights: dict) -> DecoderOnlyLM:
    """The torch model a payload describes, in eval mode, with its float16 weights as float32."""
    c = weights["config"]
    model = DecoderOnlyLM(c["vocab_size"], c["d_model"], c["num_heads"], c["num_layers"], c["d_ff"],
                          num_kv_heads=c["num_kv_heads"], rope_base=c["rope_base"], tie_weights=c["tie_weights"],
                          output_bias=c["output_bias"])
    flat = np.frombuffer(base64.b64decode(weights["data"]), dtype="<f2")
    state = {}
    for t in weights["tensors"]:
        n = int(np.prod(t["shape"], dtype=np.int64))
        state[t["name"]] = torch.from_numpy(flat[t["offset"]:t["offset"] + n].astype(np.float32)).reshape(t["shape"])
    if c["tie_weights"]:
        state["lm_head.weight"] = state["embed.weight"]
    model.load_state_dict(state)
    return model.eval()


def weights_script(weights: dict, name: str) -> str:
    """The JavaScript file's text: one assignment of the payload under the file's name."""
    if not re.fullmatch(r"[\w.-]+\.js", name):
        raise ValueError(f"the weights file name must be a plain file name ending in .js, got {name!r}")
    return f"(globalThis.{GLOBAL} ||= {{}})[{json.dumps(name)}] = {json.dumps(weights, ensure_ascii=False)};\n"


def read_weights_script(text: str) -> tuple[str, dict]:
    """The file's name and payload back from :func:`weights_script`'s text."""
    match = _ASSIGN.match(text)
    if match is None:
        raise ValueError("not a weights file written by attnbook.gpt_export.weights_script")
    return json.loads(match.group(1)), json.loads(match.group(2))


def write_weights_js(model: DecoderOnlyLM, itos, path) -> Path:
    """Write the model and its characters to ``path`` (a ``.js`` file); return the path."""
    path = Path(path)
    path.write_text(weights_script(export_weights(model, itos), path.name), encoding="utf-8")
    return path
