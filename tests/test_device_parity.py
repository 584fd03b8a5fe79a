"""The package gives the same numbers on CUDA as on the CPU (skipped where there is no CUDA)."""

from __future__ import annotations

import pytest
import torch

import attnbook

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 4, 33, 16, generator=g) for _ in range(3))
    return q, k, v


CASES = {
    "softmax": lambda q, k, v: attnbook.softmax(q, temperature=0.7),
    "log_softmax": lambda q, k, v: attnbook.log_softmax(q),
    "masked_softmax": lambda q, k, v: attnbook.masked_softmax(q, q > 0),
    "sparsemax": lambda q, k, v: attnbook.sparsemax(q),
    "entmax15": lambda q, k, v: attnbook.entmax15(q),
    "sdpa": lambda q, k, v: attnbook.scaled_dot_product_attention(q, k, v, mask=attnbook.causal_mask(33))[0],
    "attention_backward": lambda q, k, v: torch.cat(attnbook.attention_backward(q, k, v, v), dim=-1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_and_cuda_agree(name):
    fn = CASES[name]
    cpu = fn(*_inputs())
    cuda = fn(*(t.cuda() for t in _inputs()))
    assert cuda.device.type == "cuda"
    torch.testing.assert_close(cuda.cpu(), cpu, rtol=1e-4, atol=1e-5)


def _transformer_outputs(device: str):
    """Logits and KV-cached greedy tokens of the same seeded model (built on the CPU, then moved)."""
    torch.manual_seed(0)
    model = attnbook.Transformer(20, 15, 32, 4, 2, 64).eval().to(device)
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(3, 20, (4, 9), generator=g), torch.randint(3, 15, (4, 7), generator=g)
    src[0, 6:] = 0                                                    # source padding
    with torch.no_grad():
        logits = model(src.to(device), tgt.to(device))
    tokens, _ = attnbook.greedy_decode(model, src.to(device), max_len=8, use_cache=True)
    return logits.cpu(), tokens.cpu()


def test_transformer_and_cached_decoding_agree():
    cpu_logits, cpu_tokens = _transformer_outputs("cpu")
    cuda_logits, cuda_tokens = _transformer_outputs("cuda")
    torch.testing.assert_close(cuda_logits, cpu_logits, rtol=1e-4, atol=1e-4)
    assert torch.equal(cuda_tokens, cpu_tokens)
