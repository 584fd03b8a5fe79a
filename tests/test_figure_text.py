"""Every figure of the book speaks Chinese: the text each figure drew in the build (``_build/figure-text.json``,
code/booktools/figure_text.py) has no English word that is not on the allow-list (symbols, maths, names)."""

from __future__ import annotations

import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import attnbook.plot as plot  # noqa: E402
from conftest import ROOT, chapter_pages  # noqa: E402
from figure_words import english_words, load_allowed, load_chapter_words  # noqa: E402

RECORD = ROOT / "_build" / "figure-text.json"


def test_every_allowed_word_has_a_reason():
    allowed = load_allowed()
    assert len(allowed) > 20
    for word, reason in [*allowed.items(), *(i for words in load_chapter_words().values() for i in words.items())]:
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", word), word
        assert isinstance(reason, str) and len(reason.strip()) >= 8, f"{word}: say why it may stay"


def _drawn_text(title: str) -> list[str]:
    """The text the build records for a small heatmap figure with this title."""
    from IPython.core.pylabtools import print_figure

    plot.use_book_style()
    fig, ax = plt.subplots()
    plot.attention_heatmap(ax, torch.softmax(torch.randn(3, 3), -1), ["我", "吃", "苹果"], ["我", "吃", "苹果"],
                           title=title)
    _, metadata = plot.drawn_checked(lambda f: print_figure(f, fmt="png"), fig)
    plt.close(fig)
    return metadata[plot.TEXT_METADATA]


def test_an_english_title_fails_and_a_chinese_one_passes():
    allowed = load_allowed()
    english = [w for t in _drawn_text("Gradients at initialisation") for w in english_words(t, allowed)]
    assert english == ["Gradients", "at", "initialisation"]                   # the control: it can fail
    chinese = _drawn_text("初始化时的梯度：softmax(q·k / √d_k)，$\\tau = 0.5$，GPT 的第 1 个头")
    assert [w for t in chinese for w in english_words(t, allowed)] == []


@pytest.mark.book
def test_no_english_in_the_books_figures(built_html):
    if not RECORD.exists():
        pytest.fail(f"{RECORD} is missing: the book build writes it (make book)")
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    # The recording works: every chapter page that shows a figure has recorded text.
    with_figures = {p.relative_to(built_html).with_suffix("").as_posix() for p in chapter_pages(built_html)
                    if "_images/" in p.read_text(encoding="utf-8") and p.stem not in ("gallery",)}
    assert not [d for d in with_figures if d in record and not record[d]], "figures without recorded text"
    allowed, chapter_words = load_allowed(), load_chapter_words()
    found = {}
    for docname, texts in record.items():
        ok = {**allowed, **chapter_words.get(docname, {})}
        bad = {t: english_words(t, ok) for t in texts}
        bad = {t: w for t, w in bad.items() if w}
        if bad:
            found[docname] = bad
    assert not found, "\n".join(f"{d}: {len(b)} strings: " + "; ".join(f"{t!r}" for t in list(b)[:40])
                                for d, b in sorted(found.items()))


@pytest.mark.slow
def test_in_a_build_kernel_a_missing_glyph_is_an_error_the_build_sees():
    """As the book build runs a chapter (ATTNBOOK_GLUE=1, a fresh kernel): the figure's text lands in the
    output's metadata, and a glyph no packaged font has leaves an error output, which figure_text reports."""
    import sys

    import nbformat

    sys.path.insert(0, str(ROOT / "code" / "booktools"))
    from figure_text import error_outputs, notebook_figure_text
    from run_notebooks import Run, execute_all

    def run(title):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (
            "import attnbook, matplotlib.pyplot as plt\nattnbook.start_chapter();",
            f"fig, ax = plt.subplots()\nax.set_title({title!r});")])
        (done,) = execute_all([Run("glyphs", nb, env={"ATTNBOOK_GLUE": "1"})], timeout=300)
        assert done.error is None
        return done.notebook

    good = run("中文标题")
    assert error_outputs(good) == [] and "中文标题" in notebook_figure_text(good)
    bad = run("中文 ก")
    assert [e.split(":")[0] for e in error_outputs(bad)] == ["MissingGlyphError"]
