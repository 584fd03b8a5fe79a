"""Attention benchmark: ``make bench`` (extra flags: ``make bench BENCH_ARGS="--lengths 1024 4096"``).

Our eager attention (attnbook.scaled_dot_product_attention), our tiled attention
(attnbook.tiled_attention) and torch's F.scaled_dot_product_attention (default kernel choice and
the math backend), in one process on the same inputs: warm-up, interleaved repeats, medians, the
SDPA kernel that ran, peak memory (see attnbook.benchmark). Writes a JSON results file that the
chapter 「高效注意力」 renders: chapters/data/bench-<cpu|cuda>.json by default.

Defaults: CPU fp32, non-causal, B=1, H=8, D=64; CUDA bf16, causal, B=4, H=16, D=128.
On Linux, ``--rss-check T`` also measures the peak RSS of eager and tiled attention at length T,
each in a fresh subprocess (VmHWM after resetting it through /proc/self/clear_refs), as an
independent check of the allocator-level numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

import attnbook
from attnbook.benchmark import MIB, attention_benchmark, results_markdown

ROOT = Path(__file__).resolve().parents[2]

RSS_CHILD = r"""
import json, sys, torch, attnbook
method, t, heads, d, causal, bs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1", int(sys.argv[6])
fn = attnbook.benchmark.attention_methods(causal, bs)[method][0]
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
with torch.no_grad():
    w = torch.randn(1, heads, 256, d)
    fn(w, w, w)                                     # libraries initialised before the baseline
    q, k, v = (torch.randn(1, heads, t, d) for _ in range(3))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                                # reset the peak RSS to the current RSS
    base = status("VmRSS")
    out = fn(q, k, v)
    print(json.dumps({"extra_bytes": status("VmHWM") - base}))
"""


def cpu_model() -> str | None:
    """The CPU's model name (Linux /proc/cpuinfo), recorded next to the results."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def rss_check(method: str, t: int, heads: int, head_dim: int, causal: bool, block_size: int) -> float | None:
    """Peak RSS growth (MiB) of one call in a fresh CPU process; None where Linux's counters are unavailable."""
    cmd = [sys.executable, "-c", RSS_CHILD, method, str(t), str(heads), str(head_dim),
           "1" if causal else "0", str(block_size)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"  rss check {method} T={t} failed: {proc.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])["extra_bytes"] / MIB


def main(argv=None) -> None:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None)
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--lengths", type=int, nargs="+", default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--head-dim", type=int, default=None)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    p.add_argument("--max-dense-mib", type=float, default=None,
                   help="skip eager/math where one fp32 (B, H, T, T) matrix exceeds this")
    p.add_argument("--no-memory", action="store_true", help="timings only")
    p.add_argument("--rss-check", type=int, nargs="*", default=None, metavar="T",
                   help="CPU: peak RSS of eager and tiled at these T in fresh processes")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)

    device = torch.device(a.device)
    on_gpu = device.type == "cuda"
    dtype = getattr(torch, a.dtype or ("bfloat16" if on_gpu else "float32"))
    causal = on_gpu if a.causal is None else a.causal
    lengths = a.lengths or ([1024, 2048, 4096, 8192, 16384] if on_gpu else [256, 512, 1024, 2048, 4096, 8192])
    batch = a.batch or (4 if on_gpu else 1)
    heads = a.heads or (16 if on_gpu else 8)
    head_dim = a.head_dim or (128 if on_gpu else 64)
    max_dense = a.max_dense_mib or (8192 if on_gpu else 2048)   # eager needs ~4 such matrices
    out = a.out or ROOT / "chapters" / "data" / f"bench-{device.type}.json"
    if a.threads:
        torch.set_num_threads(a.threads)

    print(f"attention benchmark on {attnbook.device_name(device)}, torch {torch.__version__}, {dtype}, "
          f"causal={causal}, B={batch}, H={heads}, D={head_dim}, T={lengths}, threads={torch.get_num_threads()}")
    rows = []
    results = None
    for t in lengths:                   # one T at a time so progress shows; same settings throughout
        part = attention_benchmark([t], heads=heads, head_dim=head_dim, batch=batch, dtype=dtype,
                                   device=device, causal=causal, block_size=a.block_size, repeats=a.repeats,
                                   warmup=a.warmup, memory=not a.no_memory, max_dense_mib=max_dense)
        if results is None:
            results = part
        rows += part["rows"]
        for r in part["rows"]:
            mem = f", peak {r['peak_mib']:.1f} MiB" if "peak_mib" in r else ""
            print(f"  T={t:6d} {r['method']:10s} {r['median_ms']:10.2f} ms ({r['sdpa_backend'] or 'ours'}){mem}",
                  flush=True)
    results.update(rows=rows, loadavg_after=part["loadavg_after"], cpu_model=cpu_model(), produced_by="make bench "
                   "(code/booktools/bench.py), not by the book build", command=" ".join(sys.argv[1:]))
    if a.rss_check and device.type == "cpu":
        results["rss_check"] = []
        for t in a.rss_check:
            for method in ("eager", "tiled"):
                mib = rss_check(method, t, heads, head_dim, causal, a.block_size)
                results["rss_check"].append({"T": t, "method": method, "rss_extra_mib": mib})
                print(f"  rss check T={t} {method}: {mib if mib is None else round(mib, 1)} MiB")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(results_markdown(results))
    print(f"wrote {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    main()
