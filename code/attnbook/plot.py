"""Figure style and the plots chapters share. Chinese glyphs come from a font packaged on PyPI.

In the book build (``ATTNBOOK_GLUE`` set, see ``book.py``) every figure a cell shows is also checked as it
is drawn: a glyph missing from the fonts (a tofu box) raises :class:`MissingGlyphError`, and the text the
figure drew rides along in the output's metadata (``attnbook_text``), where the build collects it
(``code/booktools/figure_text.py``) for the test that keeps English out of figures.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib import font_manager
from matplotlib.figure import Figure
from matplotlib.text import Text

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

    The CJK font comes first: a label that mixes Chinese and maths ("序列长度 $T$") is drawn whole by mathtext,
    whose text font is the first family, with no per-glyph fallback. Its Latin letters and digits are Noto's own;
    DejaVu Sans stays as the fallback for symbols the CJK font lacks.
    """
    font_manager.fontManager.addfont(str(cjk_font_path()))
    matplotlib.rcParams.update({
        # Explicit families (not the generic "sans-serif") so matplotlib falls back per glyph.
        "font.family": [CJK_FAMILY, "DejaVu Sans"],
        "figure.dpi": 100,
        "savefig.dpi": 100,
        "figure.figsize": (6.4, 3.6),
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
    })


QUERY_AXIS, KEY_AXIS = "查询 ↓", "键 →"  # rows are queries, columns are keys


def attention_heatmap(ax, weights, query_labels=None, key_labels=None, title="", cmap="viridis",
                      vmin=0.0, vmax=None, annotate=False):
    """Draw a (Tq, Tk) weight matrix: queries ↓ (查询), keys → (键), with a colour bar.

    Shape: weights (Tq, Tk), a tensor or array.
    """
    w = weights.detach().cpu().numpy() if hasattr(weights, "detach") else weights
    im = ax.imshow(w, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xlabel(KEY_AXIS)
    ax.set_ylabel(QUERY_AXIS)
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
    ax.set_ylabel("概率")
    ax.set_title(title)


# --- Checks in the book build ----------------------------------------------------------------------------------

# matplotlib's messages for a character no font has: text warns ("Glyph 3585 (\\N{THAI CHARACTER KO KAI}) missing
# from font(s) DejaVu Sans, Noto Sans CJK SC."); mathtext logs "Font 'rm' does not have a glyph for …" on the
# "matplotlib.mathtext" logger instead of warning. drawn_checked turns both into MissingGlyphError.
MISSING_GLYPH = r"(Glyph .* missing from font|.* does not have a glyph for)"
TEXT_METADATA = "attnbook_text"


class MissingGlyphError(ValueError):
    """A figure drew a character that none of its fonts has: the page would show an empty box."""


class _MissingGlyphLog(logging.Handler):
    """Collects mathtext's missing-glyph log records while a figure is drawn."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if re.match(MISSING_GLYPH, record.getMessage()):
            self.messages.append(record.getMessage())


def figure_text(fig: Figure) -> list[str]:
    """Every non-empty visible text the figure drew last, in artist order: titles, suptitle, axis and tick
    labels, legends, annotations, colour-bar labels. Draw the figure first: tick labels are set at draw time."""
    current, ticks = set(), set()
    for ax in fig.get_axes():
        for axis in filter(None, (ax.xaxis, ax.yaxis, getattr(ax, "zaxis", None))):
            for tick in axis.majorTicks + axis.minorTicks:
                ticks.update((id(tick.label1), id(tick.label2)))
            # the ticks in view now (older Tick objects may keep stale text)
            current.update(id(t) for t in axis.get_majorticklabels() + axis.get_minorticklabels())
    out = []
    for t in fig.findobj(Text):
        text = t.get_text()
        if text.strip() and t.get_visible() and (id(t) not in ticks or id(t) in current):
            out.append(text)
    return out


def drawn_checked(draw, fig: Figure, *args, **kwargs):
    """``draw(fig, …)`` (a display formatter) with missing glyphs as :class:`MissingGlyphError`; returns
    ``(data, metadata)`` with the figure's text under ``metadata["attnbook_text"]``."""
    logged = _MissingGlyphLog()
    mathtext_log = logging.getLogger("matplotlib.mathtext")
    mathtext_log.addHandler(logged)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=MISSING_GLYPH, category=UserWarning)
        try:
            result = draw(fig, *args, **kwargs)
        except UserWarning as w:
            if not re.match(MISSING_GLYPH, str(w)):
                raise
            raise MissingGlyphError(f"{w} — in a figure with the text {figure_text(fig)!r}") from None
        finally:
            mathtext_log.removeHandler(logged)
    if logged.messages:
        raise MissingGlyphError(f"{logged.messages[0]} — in a figure with the text {figure_text(fig)!r}")
    data, metadata = result if isinstance(result, tuple) else (result, {})
    return data, {**(metadata or {}), TEXT_METADATA: figure_text(fig)}


def check_shown_figures(shell=None) -> int:
    """Route every figure IPython displays through :func:`drawn_checked` (the book build calls this from
    ``start_chapter``). Returns how many display formats were wrapped; 0 outside IPython."""
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    if shell is None:
        return 0
    # pyplot picks its backend at the first figure; the inline backend registers its display formats then.
    plt.switch_backend(matplotlib.get_backend())
    if not getattr(shell, "_attnbook_checks_figures", False):  # again after a later `%config InlineBackend…`
        shell.events.register("post_run_cell", lambda result: _wrap_formatters(shell))
        shell._attnbook_checks_figures = True
    return _wrap_formatters(shell)


def _wrap_formatters(shell) -> int:
    wrapped = 0
    for formatter in shell.display_formatter.formatters.values():
        draw = formatter.type_printers.get(Figure)
        if draw is not None and not getattr(draw, "_attnbook_checked", False):
            checked = functools.partial(drawn_checked, draw)
            checked._attnbook_checked = True
            formatter.for_type(Figure, checked)
            wrapped += 1
    return wrapped
