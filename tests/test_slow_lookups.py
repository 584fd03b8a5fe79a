"""code/booktools/slow_lookups.py answers the two third-party lookups as the originals do, only faster."""

from __future__ import annotations

import sys

import pybtex.backends.plaintext
import pybtex.plugin
import pytest
from sphinx.search import zh

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import slow_lookups  # noqa: E402

TEXT = "多头注意力 MHA 与 GQA 的 KV cache：softmax(QK^T/√d) 在 RoPE、ALiBi、being、bias 上"


@pytest.fixture
def searcher():
    original = zh.SearchChinese.latin_terms
    zh.SearchChinese.latin_terms = []
    yield zh.SearchChinese({})
    zh.SearchChinese.latin_terms = original


def test_chinese_search_stems_every_word_as_with_sphinx_list(searcher):
    words = searcher.split(TEXT)
    assert isinstance(searcher.latin_terms, list) and "GQA" in searcher.latin_terms
    before = [searcher.stem(w) for w in words]
    zh.SearchChinese.latin_terms = slow_lookups.TermSet(zh.SearchChinese.latin_terms)
    after = [searcher.stem(w) for w in words]
    assert after == before
    assert "being" in before                       # a Latin word whose stem ("be") would be too short stays whole
    searcher.split("SwiGLU")                      # Sphinx's own extend call still works
    assert "SwiGLU" in zh.SearchChinese.latin_terms


def test_the_membership_test_decides_the_stem(searcher):
    assert searcher.stem("being") == "be"             # not seen by split(): stemmed
    searcher.split("being")
    assert searcher.stem("being") == "being"


def test_setup_makes_the_term_list_a_set_and_registers_the_backend(searcher):
    slow_lookups.setup(app=None)
    assert isinstance(zh.SearchChinese.latin_terms, slow_lookups.TermSet)
    assert "plaintext" in pybtex.plugin._RUNTIME_PLUGINS["pybtex.backends"]
    assert pybtex.plugin.find_plugin("pybtex.backends", "plaintext") is pybtex.backends.plaintext.Backend
