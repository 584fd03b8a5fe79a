"""Chinese glyphs in figures: the packaged CJK font must cover them on any machine; in the book build a
missing glyph fails and each figure's text is recorded."""

import logging
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
    assert ax.get_xlabel() == "键 →" and ax.get_ylabel() == "查询 ↓"    # rows are queries, columns keys
    assert len(fig.axes) == 2  # the heatmap and its colour bar
    assert ax.images[0].get_array().shape == (3, 4)
    plt.close(fig)


def test_probability_bars_label_in_chinese():
    fig, ax = plt.subplots()
    plot.probability_bars(ax, torch.tensor([0.2, 0.8]))
    assert ax.get_ylabel() == "概率"
    plt.close(fig)


# --- the build's checks: missing glyphs and the recorded text ------------------------------------------------

LACKING = "ก"  # THAI CHARACTER KO KAI: in neither DejaVu Sans nor Noto Sans CJK SC


def _png(fig):
    from IPython.core.pylabtools import print_figure

    return print_figure(fig, fmt="png", base64=True)


def test_the_packaged_fonts_lack_the_test_glyph():
    from matplotlib.ft2font import FT2Font

    plot.use_book_style()
    for path in (plot.cjk_font_path(), font_manager.findfont("DejaVu Sans")):
        assert ord(LACKING) not in FT2Font(str(path)).get_charmap() and ord("键") in FT2Font(
            str(plot.cjk_font_path())).get_charmap()


@pytest.mark.parametrize("bad, message, good", [
    (f"注意力 {LACKING}", r"Glyph 3585 .* missing from font.*注意力", CHINESE),     # text warns
    (f"${LACKING}$", r"does not have a glyph for", r"$\sqrt{d_k}$"),               # mathtext logs instead
])
def test_a_missing_glyph_fails_and_its_control_passes(bad, message, good):
    plot.use_book_style()
    fig, ax = plt.subplots()
    ax.set_title(bad)
    with pytest.raises(plot.MissingGlyphError, match=message):
        plot.drawn_checked(_png, fig)
    ax.set_title(good)
    data, metadata = plot.drawn_checked(_png, fig)      # the control renders
    assert data and good in metadata[plot.TEXT_METADATA]
    assert not logging.getLogger("matplotlib.mathtext").handlers   # the log handler is removed again
    plt.close(fig)


def test_figure_text_collects_what_the_figure_draws():
    plot.use_book_style()
    fig, (ax, ax2) = plt.subplots(1, 2)
    plot.attention_heatmap(ax, torch.eye(2), ["甲", "乙"], ["丙", "丁"], title="标题")
    ax2.plot([0, 1], [0, 1], label="图例")
    ax2.legend()
    ax2.annotate("注释", (0.5, 0.5))
    ax2.set_xticks([0, 1], ["左", "右"])
    fig.suptitle("总标题")
    fig.colorbar(ax.images[0], ax=ax2).set_label("色条")
    _, metadata = plot.drawn_checked(_png, fig)
    texts = metadata[plot.TEXT_METADATA]
    for expected in ("标题", "键 →", "查询 ↓", "甲", "丁", "图例", "注释", "左", "右", "总标题", "色条", "1.0"):
        assert expected in texts, expected
    ax2.set_xticks([0.5], ["中"])                        # retired tick labels are not reported
    fig.canvas.draw()
    assert "左" not in plot.figure_text(fig) and "中" in plot.figure_text(fig)
    plt.close(fig)


def test_shown_figures_are_checked_in_an_ipython_shell():
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.pylabtools import select_figure_formats

    shell = InteractiveShell.instance()
    try:
        select_figure_formats(shell, {"png"})
        assert plot.check_shown_figures(shell) == 1 and plot.check_shown_figures(shell) == 0  # wrapped once
        fig, ax = plt.subplots()
        ax.set_title("图")
        data, metadata = shell.display_formatter.format(fig)
        assert "image/png" in data and "图" in metadata["image/png"][plot.TEXT_METADATA]
        ax.set_title(LACKING)
        data, _ = shell.display_formatter.format(fig)    # IPython shows the traceback instead of the image
        assert "image/png" not in data
        plt.close(fig)
    finally:
        InteractiveShell.clear_instance()                # later tests run outside IPython again


def _mathtext_missing(label: str, family, caplog) -> list[str]:
    import io
    import logging

    import matplotlib.pyplot as plt

    caplog.clear()
    with matplotlib.rc_context({"font.family": family}), \
            caplog.at_level(logging.WARNING, logger="matplotlib.mathtext"):
        fig, ax = plt.subplots()
        ax.set_xlabel(label)
        fig.savefig(io.BytesIO(), format="png")
        plt.close(fig)
    return [r.getMessage() for r in caplog.records if "does not have a glyph" in r.getMessage()]


def test_a_label_mixing_chinese_and_maths_has_every_glyph(caplog):
    """mathtext draws the whole label, Chinese included, in the first font family (no per-glyph fallback)."""
    plot.use_book_style()
    assert _mathtext_missing("序列长度 $T$（$d_k=64$）", matplotlib.rcParams["font.family"], caplog) == []
    # The control: with DejaVu Sans first (the old order) every Chinese character of such a label is lost.
    lost = _mathtext_missing("峰值内存 $M$", ["DejaVu Sans", plot.CJK_FAMILY], caplog)
    assert len(lost) == len("峰值内存")
