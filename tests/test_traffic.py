"""Memory traffic of attention: the algorithm counts (attnbook.traffic.hbm_traffic) against the closed forms of the
FlashAttention paper (Dao et al. 2022, Algorithm 0 and Theorem 2), and the per-operator count (tensor_traffic)
against PyTorch's own SDPA kernels: the math backend (S and P materialised) and the fused CPU flash kernel."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnbook.benchmark import aten_calls, attention_methods
from attnbook.traffic import hbm_traffic, tensor_traffic


@pytest.mark.parametrize("t,d", [(1, 1), (100, 16), (1024, 64), (4096, 128)])
def test_standard_attention_is_algorithm_0(t, d):
    # read Q, K; write S; read S; write P; read P, V; write O
    assert hbm_traffic("standard", t, d) == {"read": 2 * t * t + 3 * t * d, "write": 2 * t * t + t * d}
    assert hbm_traffic("standard", t, d, causal=True) == hbm_traffic("standard", t, d)


@pytest.mark.parametrize("t,b", [(1024, 128), (1000, 128), (7, 3), (5, 8)])
def test_tiled_reads_q_once_and_k_v_once_per_query_block(t, b):
    d, n = 16, math.ceil(t / b)
    assert hbm_traffic("tiled", t, d, b) == {"read": t * d + 2 * t * d * n, "write": t * (d + 1)}


def test_causal_tiling_reads_only_the_blocks_on_and_below_the_diagonal():
    t, b, d = 1024, 128, 64
    n = t // b
    assert hbm_traffic("tiled", t, d, b, causal=True)["read"] == t * d + 2 * b * d * n * (n + 1) // 2


def test_theorem_2_orders():
    # standard: Theta(T d + T^2); tiled with b = M / (4 d) (Q, K, V, O blocks in M elements): Theta(T^2 d^2 / M)
    ratios_std, ratios_tiled = [], []
    for t in (2048, 4096, 16384):
        for d in (32, 64, 128):
            for m in (2**14, 2**15, 2**16):
                std = hbm_traffic("standard", t, d)
                ratios_std.append((std["read"] + std["write"]) / (t * d + t * t))
                tiled = hbm_traffic("tiled", t, d, m // (4 * d))
                ratios_tiled.append((tiled["read"] + tiled["write"]) / (t * t * d * d / m))
    assert min(ratios_std) >= 4 - 1e-12 and max(ratios_std) <= 4 + 1e-12
    assert 8 <= min(ratios_tiled) and max(ratios_tiled) < 11   # 8 T^2 d^2 / M plus lower-order terms (T / b >= 4)
    # so tiled moves less than standard (about 4 T^2) once 8 T^2 d^2 / M is smaller: here, wherever b = M / (4d) >= d
    def total(*a):
        c = hbm_traffic(*a)
        return c["read"] + c["write"]
    assert all(total("tiled", 4096, d, m // (4 * d)) < total("standard", 4096, d)
               for d in (32, 64, 128) for m in (2**14, 2**15, 2**16) if m >= 4 * d * d)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="method must be"):
        hbm_traffic("flash", 8, 4)
    with pytest.raises(ValueError, match="block_size must be a positive integer, got 0"):
        hbm_traffic("tiled", 8, 4, 0)
    with pytest.raises(ValueError, match="t must be a positive integer"):
        hbm_traffic("standard", 0, 4)


def test_tensor_traffic_counts_inputs_and_outputs_not_views():
    a, b = torch.zeros(3, 5), torch.zeros(5, 7)
    assert tensor_traffic(torch.matmul, a, b) == {"read": 4 * (15 + 35), "write": 4 * 21}
    assert tensor_traffic(lambda x: x.view(5, 3).transpose(0, 1), a) == {"read": 0, "write": 0}
    assert tensor_traffic(lambda x: (x + 1) * 2, a) == {"read": 2 * 60, "write": 2 * 60}


def test_pytorch_math_backend_moves_algorithm_0_and_the_flash_kernel_moves_q_k_v_o_once():
    t, d = 64, 16
    q, k, v = (torch.randn(1, 1, t, d) for _ in range(3))
    with torch.no_grad():
        with sdpa_kernel(SDPBackend.MATH):
            math_bytes = tensor_traffic(F.scaled_dot_product_attention, q, k, v)
        flash_bytes = tensor_traffic(F.scaled_dot_product_attention, q, k, v)
    std = hbm_traffic("standard", t, d)
    # the math backend scales q and k by d^(-1/4) first: one more read and write of each
    assert math_bytes == {"read": 4 * (std["read"] + 2 * t * d), "write": 4 * (std["write"] + 2 * t * d)}
    one_block = hbm_traffic("tiled", t, d, block_size=t)   # one query block reads K and V once
    assert flash_bytes == {"read": 4 * one_block["read"], "write": 4 * one_block["write"]}


@pytest.mark.parametrize("t,causal", [(1024, False), (500, False), (500, True), (256, True)])
def test_the_tiled_loops_skeleton_makes_the_same_aten_calls(t, causal):
    methods = attention_methods(causal, block_size=128)
    q, k, v = (torch.randn(1, 2, t, 8) for _ in range(3))
    with torch.no_grad():
        methods["tiled_calls"][0](q, k, v)          # the first call makes its tiny inputs, once per shape
        assert aten_calls(methods["tiled_calls"][0], q, k, v) == aten_calls(methods["tiled"][0], q, k, v)
