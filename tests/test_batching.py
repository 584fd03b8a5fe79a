"""Continuous batching: ragged sequences in one paged forward pass equal each sequence decoded alone
(attnbook.DecoderOnlyLM with its own contiguous cache), and the scheduler's greedy outputs equal generate()."""

from __future__ import annotations

import pytest
import torch

from attnbook import DecoderOnlyLM
from attnbook.batching import BatchScheduler, Request, paged_forward
from attnbook.paged_cache import PagedKVCache


def _model(num_kv_heads=2, seed=0):
    torch.manual_seed(seed)
    return DecoderOnlyLM(40, 32, 4, 2, 64, num_kv_heads=num_kv_heads, output_bias=True).eval()


def _cache(model, num_blocks=200, block_size=4):
    mha = model.layers[0].self_attn
    return PagedKVCache(num_blocks, block_size, mha.num_kv_heads, mha.d_head, num_layers=len(model.layers))


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("block_size", [1, 3, 8])
def test_ragged_batch_equals_each_sequence_alone(num_kv_heads, block_size):
    model = _model(num_kv_heads)
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 40, (n,), generator=g) for n in (1, 6, 13, 4)]
    cache = _cache(model, block_size=block_size)
    for i in range(4):
        cache.add(i)
    # pass 1: different prompt lengths; pass 2..: some prefill more while others decode one token
    schedule = [[1, 2, 5, 4], [0, 1, 1, 0], [0, 3, 7, 0], [0, 0, 0, 0]]
    done = [0] * 4
    for feed in schedule:
        active = [i for i in range(4) if feed[i] > 0]
        if not active:
            continue
        outs = paged_forward(model, cache, active, [seqs[i][done[i]:done[i] + feed[i]] for i in active])
        for i, out in zip(active, outs):
            done[i] += feed[i]
            with torch.no_grad():
                alone = model(seqs[i][None, :done[i]])[0, -feed[i]:]           # the sequence on its own, no cache
            torch.testing.assert_close(out, alone, rtol=1e-5, atol=1e-5)
    assert [cache.length(i) for i in range(4)] == done


def test_one_token_decode_equals_the_models_own_cache():
    model = _model()
    prompts = [torch.tensor([3, 4, 5]), torch.tensor([7]), torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9])]
    cache = _cache(model, block_size=2)
    own = [model.new_cache() for _ in prompts]
    for i, p in enumerate(prompts):
        cache.add(i)
    last = paged_forward(model, cache, [0, 1, 2], prompts)
    with torch.no_grad():
        refs = [model(p[None], own[i])[0] for i, p in enumerate(prompts)]
    for step in range(6):
        for i in range(3):
            torch.testing.assert_close(last[i][-1], refs[i][-1], rtol=1e-5, atol=1e-5)
        nxt = [z[-1].argmax().reshape(1) for z in last]
        last = paged_forward(model, cache, [0, 1, 2], nxt)
        with torch.no_grad():
            refs = [model(n[None], own[i])[0] for i, n in enumerate(nxt)]


@pytest.mark.parametrize("continuous", [True, False])
def test_scheduler_outputs_equal_greedy_generate_and_blocks_come_back(continuous):
    model = _model()
    g = torch.Generator().manual_seed(2)
    reqs = [Request(i, torch.randint(0, 40, (int(torch.randint(1, 6, (), generator=g)),), generator=g),
                    int(torch.randint(1, 15, (), generator=g))) for i in range(10)]
    cache = _cache(model, num_blocks=24, block_size=4)
    sched = BatchScheduler(model, cache, max_batch=3, continuous=continuous)
    for r in reqs:
        sched.submit(r)
    sched.run()
    for r in reqs:
        want = model.generate(r.prompt[None], r.max_new_tokens, temperature=0.0)[0, r.prompt.numel():]
        assert r.output == want.tolist()
    assert all(b <= 3 for b, _ in sched.passes)
    assert cache.used_blocks() == 0 and len(cache.free_blocks) == 24 and len(cache) == 0
    assert sched.peak_blocks <= 24
    # a count-only run (no model) makes the same passes
    dry = BatchScheduler(None, _cache(model, num_blocks=24, block_size=4), max_batch=3, continuous=continuous)
    for r in reqs:
        dry.submit(Request(r.name, r.prompt, r.max_new_tokens))
    dry.run()
    assert dry.passes == sched.passes and dry.peak_blocks == sched.peak_blocks
    # every token fed is one cached token: prompt + all generated but the last
    assert sum(t for _, t in sched.passes) == sum(r.prompt.numel() + r.max_new_tokens - 1 for r in reqs)


def test_continuous_batching_needs_fewer_passes_than_static():
    model = _model()
    lengths = [20, 2, 2, 2, 2, 2, 2, 2, 20, 2, 2, 2]
    passes = {}
    for continuous in (True, False):
        cache = _cache(model, num_blocks=100, block_size=4)
        sched = BatchScheduler(model, cache, max_batch=4, continuous=continuous)
        for i, n in enumerate(lengths):
            sched.submit(Request(i, torch.tensor([1, 2]), n))
        sched.run()
        passes[continuous] = len(sched.passes)
    # static: batches of 4 wait for their longest member: 20 + 2 + 20 passes
    assert passes[False] == 42
    assert passes[True] < passes[False]


def test_bad_inputs_raise_value_errors():
    model = _model()
    cache = _cache(model)
    cache.add(0)
    with pytest.raises(ValueError, match="one tensor of new ids per sequence"):
        paged_forward(model, cache, [0], [])
    with pytest.raises(ValueError, match="non-empty 1-D int64"):
        paged_forward(model, cache, [0], [torch.tensor([], dtype=torch.long)])
    with pytest.raises(ValueError, match="cache has 1 layers, the model 2"):
        paged_forward(model, PagedKVCache(4, 2, 2, 8), [0], [torch.tensor([1])])
    with pytest.raises(ValueError, match="max_batch must be a positive integer"):
        BatchScheduler(model, cache, 0)
