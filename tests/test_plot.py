"""Chinese glyphs in figures: the packaged CJK font must cover them on any machine."""

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib import font_manager  # noqa: E402

import attnbook.plot as plot  # noqa: E402

CHINESE = "注意力机制：查询、键、值与概率"


def _missing_glyph_warnings(family) -> list[str]:
    with matplotlib.rc_context({"font.family": family}), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig, ax = plt.subplots()
        ax.set_title(CHINESE)
        ax.set_xlabel("keys → 键")
        fig.canvas.draw()
        plt.close(fig)
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


def test_book_style_renders_every_chinese_glyph():
    plot.use_book_style()
    assert _missing_glyph_warnings(matplotlib.rcParams["font.family"]) == []


def test_without_the_cjk_font_glyphs_go_missing():
    # The control: the check above can fail, because DejaVu Sans alone has no CJK glyphs.
    assert len(_missing_glyph_warnings(["DejaVu Sans"])) >= len(set(CHINESE) - set("：、"))


def test_cjk_glyphs_render_on_a_machine_without_system_fonts(monkeypatch):
    # Colab and Binder have no CJK font: keep only the fonts that wheels ship, then draw.
    import mplfonts

    wheel_dirs = (str(Path(matplotlib.__file__).parent), str(Path(mplfonts.__file__).parent))
    bare = [f for f in font_manager.fontManager.ttflist if f.fname.startswith(wheel_dirs)]
    monkeypatch.setattr(font_manager.fontManager, "ttflist", bare)
    font_manager.fontManager._findfont_cached.cache_clear()
    try:
        plot.use_book_style()
        found = font_manager.findfont(font_manager.FontProperties(family=plot.CJK_FAMILY),
                                      fallback_to_default=False)
        assert Path(found) == plot.cjk_font_path()
        assert _missing_glyph_warnings(matplotlib.rcParams["font.family"]) == []
    finally:
        font_manager.fontManager._findfont_cached.cache_clear()


def test_attention_heatmap_labels_axes_and_adds_colorbar():
    plot.use_book_style()
    fig, ax = plt.subplots()
    w = torch.softmax(torch.randn(3, 4), dim=-1)
    plot.attention_heatmap(ax, w, ["q1", "q2", "q3"], ["k1", "k2", "k3", "k4"], title="t")
    assert ax.get_xlabel() == "keys →" and ax.get_ylabel() == "queries ↓"
    assert len(fig.axes) == 2  # the heatmap and its colour bar
    assert ax.images[0].get_array().shape == (3, 4)
    plt.close(fig)
