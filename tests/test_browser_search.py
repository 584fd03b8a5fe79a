"""The built book's search page finds Chinese terms (jieba + the glossary as its dictionary), offline."""

from __future__ import annotations

import sys
from urllib.parse import quote

import pytest

from conftest import ROOT, visit

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import search_terms  # noqa: E402

pytestmark = [pytest.mark.book, pytest.mark.browser]

# term -> the chapter that is its home (where the glossary entry points)
HOME = {
    "缩放": "scaled_attention", "温度": "softmax", "束搜索": "transformer", "位置编码": "positional_encoding",
    "掩码": "softmax", "交叉熵": "softmax", "梯度消失": "sequence_models", "长短期记忆网络": "sequence_models",
    "加性注意力": "attention_basics", "自注意力": "scaled_attention", "多头注意力": "multihead",
    "旋转位置编码": "positional_encoding", "词向量": "word_vectors", "跳字模型": "word_vectors",
    "标签平滑": "transformer", "稀疏注意力": "efficient_attention", "分块注意力": "efficient_attention",
    "文本分类": "text_classification",
}


def test_glossary_terms_are_read_from_glossary_blocks_only():
    text = "正文 温度\n\n```{glossary}\n温度\ntemperature\n  定义 束搜索。\n\nKV 缓存\n  定义。\n```\n"
    assert search_terms.glossary_terms(text) == ["温度", "KV缓存"]


def test_search_finds_each_terms_home_chapter(browser, book_url):
    missing = {}
    for term, chapter in HOME.items():
        page, errors, _ = visit(browser, f"{book_url}/search.html?q={quote(term)}")
        page.wait_for_function("() => document.querySelector('#search-results p.search-summary')"
                               " && !document.querySelector('#search-results').textContent.includes('Searching')",
                               timeout=20_000)
        found = page.evaluate("() => [...document.querySelectorAll('#search-results ul.search li a')]"
                              ".map(a => a.getAttribute('href'))")
        page.close()
        assert errors == [], errors
        if not any(f"chapters/{chapter}.html" in href for href in found):
            missing[term] = (chapter, found[:5])
    assert missing == {}, missing
