"""Figure style and the plots chapters share. Chinese glyphs come from a font packaged on PyPI."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib import font_manager

CJK_FAMILY = "Noto Sans CJK SC"


def cjk_font_path() -> Path:
    """Noto Sans CJK SC as shipped by the ``mplfonts`` wheel (works on Binder/Colab, which have no CJK font)."""
    import mplfonts

    path = Path(mplfonts.__file__).parent / "fonts" / "NotoSansCJKsc-Regular.otf"
    if not path.exists():
        raise FileNotFoundError(f"mplfonts is installed but {path} is missing")
    return path


def use_book_style() -> None:
    """Register the CJK font and set the book's figure defaults.

    Latin text stays in DejaVu Sans; matplotlib falls back glyph by glyph to the CJK font.
    """
    font_manager.fontManager.addfont(str(cjk_font_path()))
    matplotlib.rcParams.update({
        # Explicit families (not the generic "sans-serif") so matplotlib falls back per glyph.
        "font.family": ["DejaVu Sans", CJK_FAMILY],
        "figure.dpi": 100,
        "savefig.dpi": 100,
        "figure.figsize": (6.4, 3.6),
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
    })


def attention_heatmap(ax, weights, query_labels=None, key_labels=None, title="", cmap="viridis",
                      vmin=0.0, vmax=None, annotate=False):
    """Draw a (Tq, Tk) weight matrix: queries ↓, keys →, with a colour bar.

    Shape: weights (Tq, Tk), a tensor or array.
    """
    w = weights.detach().cpu().numpy() if hasattr(weights, "detach") else weights
    im = ax.imshow(w, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xlabel("keys →")
    ax.set_ylabel("queries ↓")
    ax.grid(False)
    if query_labels is not None:
        ax.set_yticks(range(len(query_labels)), query_labels)
    if key_labels is not None:
        ax.set_xticks(range(len(key_labels)), key_labels)
    if annotate:
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if w[i, j] < 0.5 * (w.max() or 1) else "black")
    ax.set_title(title)
    return im


def probability_bars(ax, probs, labels=None, title="", color="C0"):
    """Bar chart of one probability vector. Shape: probs (n,)."""
    p = probs.detach().cpu().numpy() if hasattr(probs, "detach") else probs
    xs = range(len(p))
    ax.bar(xs, p, color=color)
    ax.set_xticks(list(xs), labels if labels is not None else [str(i) for i in xs])
    ax.set_ylim(0, 1)
    ax.set_ylabel("probability")
    ax.set_title(title)

