"""Measuring attention: peak memory, interleaved timings, ATen calls, which SDPA kernel ran, a results table.

Peak memory counts the bytes torch's allocator hands out while a call runs, beyond what was
allocated before it (the output included): on CUDA ``torch.cuda.max_memory_allocated``; on CPU,
which keeps no such counter, the allocation and free events recorded by ``torch.profiler`` with
``profile_memory=True``, summed in time order. Both count tensor bytes, not the process's RSS.
"""

from __future__ import annotations

import datetime
import math
import os
import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F

from .attention import scaled_dot_product_attention
from .book import device_name
from .efficient import tiled_attention

__all__ = ["peak_memory", "memory_timeline", "time_interleaved", "aten_calls", "sdpa_backend", "attention_methods",
           "attention_benchmark", "results_markdown"]

MIB = 2**20
# Chinese display names of the compared methods and of the SDPA kernels (printed tables are read by the reader)
METHOD_NAMES = {"eager": "逐字实现", "tiled": "分块实现", "sdpa": "SDPA（默认内核）", "sdpa_math": "SDPA（math 后端）",
                "tiled_calls": "分块实现的空循环"}
KERNEL_NAMES = {"flash (CPU)": "flash（CPU）", "memory-efficient": "省内存内核", "unknown": "未知"}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory(fn: Callable, *args, device: torch.device | str | None = None, **kwargs) -> int:
    """Peak extra bytes allocated while ``fn(*args, **kwargs)`` runs (its result included).

    ``device`` defaults to the device of the first tensor argument.

    Shape:
        any -> int (bytes)
    """
    if device is None:
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
    device = torch.device(device)
    if device.type == "cuda":
        _sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        result = fn(*args, **kwargs)
        _sync(device)
        peak = torch.cuda.max_memory_allocated(device) - base
        del result
        return int(peak)
    if device.type != "cpu":
        raise ValueError(f"peak_memory supports cpu and cuda, got {device}")
    live = peak = 0
    for _, nbytes, _ in _cpu_memory_events(fn, args, kwargs):   # + allocation, - free, in time order
        live += nbytes
        peak = max(peak, live)
    return int(peak)


def _cpu_memory_events(fn, args, kwargs, with_ops: bool = False) -> list[tuple[int, int, str]]:
    """(time ns, +/- bytes, op) of every CPU allocation and free while fn runs, in time order."""
    from torch.profiler import ProfilerActivity, profile

    os.environ.setdefault("KINETO_LOG_LEVEL", "6")   # else Kineto writes start/stop lines to stderr
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn(*args, **kwargs)
    del result
    events = prof.profiler.kineto_results.events()
    ops = [(e.start_ns(), e.end_ns(), e.name()) for e in events if e.name() != "[memory]"] if with_ops else []
    out = []
    for e in events:
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU:
            t = e.start_ns()
            inner = [o for o in ops if o[0] <= t <= o[1]]              # ops running at that moment
            out.append((t, e.nbytes(), max(inner)[2] if inner else ""))  # innermost: latest start
    return sorted(out, key=lambda x: x[0])                              # stable for equal times


def memory_timeline(fn: Callable, *args, **kwargs) -> list[tuple[str, int, int]]:
    """Every CPU allocation (+) and free (-) while ``fn`` runs: (op, bytes, live bytes after it).

    For small calls (it attributes each event to the innermost running op, O(events * ops)).
    """
    live, out = 0, []
    for _, nbytes, op in _cpu_memory_events(fn, args, kwargs, with_ops=True):
        live += nbytes
        out.append((op, int(nbytes), live))
    return out


def time_interleaved(fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1,
                     device: torch.device | str = "cpu") -> dict[str, list[float]]:
    """Seconds per call of each function, measured round-robin so drifts in load hit all alike.

    Every function runs ``warmup`` times first; then ``repeats`` rounds call each once in turn
    (CUDA is synchronised around every call). Report the median of each list.

    Shape:
        {name: fn} -> {name: [seconds] * repeats}
    """
    device = torch.device(device)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return times


def aten_calls(fn: Callable, *args, **kwargs) -> list[str]:
    """Names of the ATen operators ``fn(*args, **kwargs)`` dispatches, in call order (views included).

    A count of work that does not depend on the machine: one fused kernel is one call, a Python loop
    over blocks issues a dozen small calls per block.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            calls.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    calls: list[str] = []
    with _Record():
        fn(*args, **kwargs)
    return calls


def sdpa_backend(q, k, v, backend=None, **kwargs) -> str:
    """Which kernel ``F.scaled_dot_product_attention`` actually runs for these inputs (profiled once).

    ``backend`` (a ``torch.nn.attention.SDPBackend``) restricts the choice as ``sdpa_kernel`` does.
    """
    from torch.nn.attention import sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if q.is_cuda else [])
    with profile(activities=acts) as prof:
        if backend is None:
            F.scaled_dot_product_attention(q, k, v, **kwargs)
        else:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, **kwargs)
    names = {e.name() for e in prof.profiler.kineto_results.events()}
    for op, label in (("_scaled_dot_product_flash_attention_for_cpu", "flash (CPU)"),
                      ("_scaled_dot_product_cudnn_attention", "cuDNN"),
                      ("_scaled_dot_product_flash_attention", "flash"),
                      ("_scaled_dot_product_efficient_attention", "memory-efficient"),
                      ("_scaled_dot_product_attention_math", "math")):
        if any(op in n for n in names):
            return label
    return "unknown"


def attention_methods(causal: bool, block_size: int = 128) -> dict[str, tuple[Callable, object]]:
    """The compared implementations: name -> (fn(q, k, v), SDPBackend or None for ours/default)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def eager(q, k, v):
        mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril() if causal else None
        return scaled_dot_product_attention(q, k, v, mask)[0]

    def tiled(q, k, v):
        return tiled_attention(q, k, v, block_size=block_size, causal=causal)

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def sdpa_math(q, k, v):
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    tiny: dict = {}

    def tiled_calls(q, k, v):
        # the tiled loop's skeleton: the same blocks, loop and ATen calls (one batch entry, one head,
        # 2x2 blocks of size-1 vectors), so almost no arithmetic: its time is the per-call overhead
        key = (q.size(-2), k.size(-2), q.dtype, q.device)
        if key not in tiny:
            gen = torch.Generator().manual_seed(0)
            tiny[key] = tuple(torch.randn(1, 1, 2 * math.ceil(n / block_size), 1, generator=gen).to(q.device, q.dtype)
                              for n in (q.size(-2), k.size(-2), k.size(-2)))
        return tiled_attention(*tiny[key], block_size=2, causal=causal)

    return {"eager": (eager, None), "tiled": (tiled, None), "sdpa": (sdpa, "default"),
            "sdpa_math": (sdpa_math, SDPBackend.MATH), "tiled_calls": (tiled_calls, None)}


def attention_benchmark(lengths, heads: int = 8, head_dim: int = 64, batch: int = 1,
                        dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                        causal: bool = False, block_size: int = 128, repeats: int = 5, warmup: int = 1,
                        methods=("eager", "tiled", "sdpa", "sdpa_math", "tiled_calls"), memory: bool = True,
                        max_dense_mib: float = math.inf, seed: int = 0) -> dict:
    """Time (median of interleaved repeats) and peak memory of each method at each length T.

    Every method at one T sees the same q, k, v. Methods that build the (T, T) matrix (eager,
    sdpa_math) are skipped where one such fp32 matrix of B*H*T*T entries would exceed
    ``max_dense_mib``. ``tiled_calls`` runs the tiled loop with the same number of blocks on tiny
    inputs: the same ATen calls (counted, ``aten_calls`` in its row and in tiled's) with next to no
    arithmetic, so its time is the tiled loop's per-call overhead. Returns a JSON-ready dict: the
    setting, device, torch version, date and one row per (T, method) with the SDPA kernel that ran.

    Shape:
        q, k, v: (batch, heads, T, head_dim) for each T in ``lengths``
    """
    device = torch.device(device)
    table = attention_methods(causal, block_size)
    unknown = [m for m in methods if m not in table]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {sorted(table)}")
    gen = torch.Generator().manual_seed(seed)
    rows = []
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    for t in lengths:
        q, k, v = (torch.randn(batch, heads, t, head_dim, generator=gen).to(device, dtype) for _ in range(3))
        dense_mib = batch * heads * t * t * 4 / MIB
        chosen = [m for m in methods if m in ("tiled", "sdpa", "tiled_calls") or dense_mib <= max_dense_mib]
        fns = {m: (lambda f=table[m][0]: f(q, k, v)) for m in chosen}
        with torch.no_grad():
            times = time_interleaved(fns, repeats=repeats, warmup=warmup, device=device)
            for m in chosen:
                backend = table[m][1]
                row = {"T": t, "method": m, "median_ms": 1e3 * statistics.median(times[m]),
                       "min_ms": 1e3 * min(times[m]), "max_ms": 1e3 * max(times[m]),
                       "times_ms": [1e3 * x for x in times[m]],                  # round by round
                       "sdpa_backend": None if backend is None else
                       sdpa_backend(q, k, v, None if backend == "default" else backend, is_causal=causal)}
                flops = 4 * batch * heads * t * t * head_dim * (0.5 if causal else 1.0)
                row["tflops"] = None if m == "tiled_calls" else flops / (row["median_ms"] / 1e3) / 1e12
                if m in ("tiled", "tiled_calls"):
                    row["aten_calls"] = len(aten_calls(table[m][0], q, k, v))
                if memory:
                    row["peak_mib"] = peak_memory(table[m][0], q, k, v) / MIB
                rows.append(row)
        del q, k, v
    return {"device": device_name(device), "device_type": device.type, "torch": torch.__version__,
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "dtype": str(dtype).removeprefix("torch."), "causal": causal, "batch": batch, "heads": heads,
            "head_dim": head_dim, "block_size": block_size, "repeats": repeats, "warmup": warmup,
            "threads": torch.get_num_threads(), "loadavg_before": load_before,
            "loadavg_after": os.getloadavg() if hasattr(os, "getloadavg") else None, "rows": rows}


def results_markdown(results: dict, baseline: str = "sdpa") -> str:
    """One Markdown table per results dict (Chinese headers and method names): T, method, SDPA kernel,
    median ms, time relative to ``baseline``, TFLOP/s, peak MiB."""
    base = {r["T"]: r["median_ms"] for r in results["rows"] if r["method"] == baseline}
    lines = [f"| T | 实现 | SDPA 内核 | 用时中位数（毫秒） | 相对{METHOD_NAMES.get(baseline, baseline)} | TFLOP/s | 峰值内存（MiB） |",
             "|---:|---|---|---:|---:|---:|---:|"]
    for r in results["rows"]:
        ratio = r["median_ms"] / base[r["T"]] if r["T"] in base else float("nan")
        mem = f"{r['peak_mib']:.1f}" if r.get("peak_mib") is not None else "–"
        kernel = KERNEL_NAMES.get(r["sdpa_backend"], r["sdpa_backend"]) if r["sdpa_backend"] else "–"
        tflops = "–" if r.get("tflops") is None else f"{r['tflops']:.3f}"
        lines.append(f"| {r['T']} | {METHOD_NAMES.get(r['method'], r['method'])} | {kernel} | {r['median_ms']:.2f} | "
                     f"{ratio:.2f} | {tflops} | {mem} |")
    return "\n".join(lines)
