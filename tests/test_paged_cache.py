"""PagedKVCache: attention through block tables equals the contiguous KVCache and torch's causal SDPA, for every
block size and ragged lengths; shared prefixes with reference counts and copy-on-write keep every output."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnbook import KVCache
from attnbook.paged_cache import OutOfBlocks, PagedKVCache, gather_blocks

F64 = torch.float64


def _tokens(h, t, d, seed):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(h, t, d, generator=g, dtype=F64) for _ in range(3))


@pytest.mark.parametrize("block_size", [1, 2, 3, 5, 16, 64])
def test_paged_equals_contiguous_for_ragged_interleaved_sequences(block_size):
    lengths, chunks = [1, 7, 16, 33], [[1], [3, 1, 1, 2], [16], [5, 1, 9, 1, 17]]
    cache = PagedKVCache(num_blocks=64, block_size=block_size, num_heads=2, head_dim=4, dtype=F64)
    data = {s: _tokens(2, lengths[s], 4, seed=s) for s in range(4)}
    refs = {s: KVCache() for s in range(4)}
    for s in range(4):
        cache.add(s)
    done, outs = {s: 0 for s in range(4)}, {s: [] for s in range(4)}
    for step in range(max(map(len, chunks))):                 # the sequences take turns writing into one pool
        for s in range(4):
            if step >= len(chunks[s]):
                continue
            a, b = done[s], done[s] + chunks[s][step]
            q, k, v = (x[:, a:b] for x in data[s])
            out = cache.attend(s, q, k, v)
            ref, _ = refs[s].attend(q[None], k[None], v[None])
            torch.testing.assert_close(out, ref[0], rtol=1e-12, atol=1e-12)
            outs[s].append(out)
            done[s] = b
    for s, n in enumerate(lengths):
        q, k, v = data[s]
        torch.testing.assert_close(cache.keys(s), k, rtol=0, atol=0)      # read back through the block table
        torch.testing.assert_close(cache.values(s), v, rtol=0, atol=0)
        full = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]   # (H, n, D)
        torch.testing.assert_close(torch.cat(outs[s], 1), full, rtol=1e-12, atol=1e-12)
        assert len(cache.block_table(s)) == -(-n // block_size)          # whole blocks, the last one maybe partial


@pytest.mark.parametrize("block_size", [1, 4, 7])
def test_memory_is_whole_blocks_and_waste_is_less_than_one_block(block_size):
    cache = PagedKVCache(num_blocks=40, block_size=block_size, num_heads=3, head_dim=8, num_layers=2)
    per_token = 2 * 2 * 3 * 8 * 4                                     # K and V, 2 layers, Hkv 3, Dh 8, float32
    assert cache.block_nbytes() == block_size * per_token
    assert cache.allocated_nbytes() == 40 * block_size * per_token
    for s, n in enumerate([1, 5, 12]):
        cache.add(s)
        cache.append(s, torch.randn(2, 3, n, 8), torch.randn(2, 3, n, 8))
        held = cache.held_nbytes(s)
        assert held == -(-n // block_size) * cache.block_nbytes()
        assert 0 <= held - n * per_token < cache.block_nbytes()
    assert cache.held_nbytes() == sum(-(-n // block_size) for n in [1, 5, 12]) * cache.block_nbytes()


def test_free_returns_blocks_and_they_are_reused():
    cache = PagedKVCache(num_blocks=4, block_size=2, num_heads=1, head_dim=2)
    cache.add("a")
    cache.append("a", torch.ones(1, 5, 2), torch.ones(1, 5, 2))       # 3 blocks
    assert len(cache.free_blocks) == 1
    cache.add("b")
    with pytest.raises(OutOfBlocks):
        cache.append("b", torch.ones(1, 3, 2), torch.ones(1, 3, 2))
    assert cache.length("b") == 0 and len(cache.free_blocks) == 1     # a failed append changes nothing
    cache.free("a")
    assert len(cache.free_blocks) == 4 and cache.used_blocks() == 0
    cache.append("b", torch.full((1, 8, 2), 2.0), torch.full((1, 8, 2), 3.0))
    torch.testing.assert_close(cache.keys("b"), torch.full((1, 8, 2), 2.0))
    with pytest.raises(ValueError, match="unknown sequence 'a'"):
        cache.keys("a")


@pytest.mark.parametrize("block_size, prompt_len", [(4, 10), (4, 8), (1, 3), (16, 10)])
def test_shared_prefix_copy_on_write_keeps_every_sequence_exact(block_size, prompt_len):
    """n sequences fork one prompt, then each writes its own tokens: outputs equal unshared caches,
    the prompt's full blocks stay shared, and a partly filled shared block is copied once per writer."""
    n_seq, H, D = 3, 2, 4
    prompt = _tokens(H, prompt_len, D, seed=10)
    cache = PagedKVCache(num_blocks=50, block_size=block_size, num_heads=H, head_dim=D, dtype=F64)
    cache.add("prompt")
    cache.attend("prompt", *prompt)
    for i in range(n_seq):
        cache.fork("prompt", i)
    shared_blocks = -(-prompt_len // block_size)
    assert cache.used_blocks() == shared_blocks                      # forking copies nothing
    partial = prompt_len % block_size != 0
    refs = {}
    for i in range(n_seq):
        refs[i] = KVCache()
        refs[i].attend(*(x[None] for x in prompt))
    for step in range(3):
        for i in range(n_seq):
            q, k, v = _tokens(H, 1 + i, D, seed=100 * step + i)       # different lengths per sequence
            out = cache.attend(i, q, k, v)
            ref, _ = refs[i].attend(q[None], k[None], v[None])
            torch.testing.assert_close(out, ref[0], rtol=1e-12, atol=1e-12)
    for i in range(n_seq):
        torch.testing.assert_close(cache.keys(i), refs[i].keys[0], rtol=0, atol=0)
    torch.testing.assert_close(cache.keys("prompt"), prompt[1], rtol=0, atol=0)   # the prompt is untouched
    assert cache.copies == (n_seq if partial else 0)
    full = prompt_len // block_size
    table = cache.block_table("prompt").tolist()
    assert all(cache.ref_count[b] == n_seq + 1 for b in table[:full])            # full prompt blocks stay shared
    for i in range(n_seq):
        assert cache.block_table(i).tolist()[:full] == table[:full]
    cache.free("prompt")
    assert all(cache.ref_count[b] == n_seq for b in table[:full])
    for i in range(n_seq):
        cache.free(i)
    assert cache.used_blocks() == 0 and len(cache.free_blocks) == 50


def test_shared_prompt_memory_is_counted_once():
    block_size, prompt_len, n_seq = 4, 20, 8
    cache = PagedKVCache(num_blocks=100, block_size=block_size, num_heads=1, head_dim=2)
    cache.add("p")
    cache.append("p", torch.randn(1, prompt_len, 2), torch.randn(1, prompt_len, 2))
    for i in range(n_seq):
        cache.fork("p", i)
        cache.append(i, torch.randn(1, 3, 2), torch.randn(1, 3, 2))
    shared = cache.used_blocks()
    assert shared == prompt_len // block_size + n_seq                 # 5 shared + one own block each
    unshared = n_seq * -(-(prompt_len + 3) // block_size)
    assert unshared == 48 and shared == 13


def test_gather_blocks_reads_a_sequence_that_ends_mid_block():
    pool = torch.arange(5 * 1 * 3 * 2, dtype=F64).reshape(5, 1, 3, 2)   # 5 blocks of 3 slots
    table = torch.tensor([4, 0, 2])
    got = gather_blocks(pool, table, 7)
    want = torch.cat([pool[4, 0], pool[0, 0], pool[2, 0, :1]])[None]
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="at least ceil"):
        gather_blocks(pool, table, 10)


@pytest.mark.parametrize("kwargs, words", [
    (dict(num_blocks=0, block_size=4, num_heads=1, head_dim=2), "num_blocks must be a positive integer, got 0"),
    (dict(num_blocks=4, block_size=2.5, num_heads=1, head_dim=2), "block_size must be a positive integer, got 2.5"),
])
def test_bad_sizes_raise_value_errors(kwargs, words):
    with pytest.raises(ValueError, match=words):
        PagedKVCache(**kwargs)


def test_bad_appends_name_the_shapes():
    cache = PagedKVCache(num_blocks=4, block_size=2, num_heads=2, head_dim=4)
    cache.add("a")
    with pytest.raises(ValueError, match=r"\(L=1, Hkv, Tn, Dh\)"):
        cache.append("a", torch.randn(2, 3), torch.randn(2, 3))
    with pytest.raises(ValueError, match=r"\(Hkv, Dh\) = \(2, 4\)"):
        cache.append("a", torch.randn(1, 3, 3, 4), torch.randn(1, 3, 3, 4))
    with pytest.raises(ValueError, match="already exists"):
        cache.add("a")
