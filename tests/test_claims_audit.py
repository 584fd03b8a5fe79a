"""Claims audit (code/booktools/claims_audit.py): every number, comparison and superlative in the prose is backed."""

from __future__ import annotations

import sys
import textwrap

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "booktools"))
import claims_audit  # noqa: E402

PATTERNS, ALLOW = claims_audit.load_allow()


def audit(text: str, allowed: dict | None = None) -> list[str]:
    found, _ = claims_audit.audit_text("demo", textwrap.dedent(text).lstrip("\n"), {}, allowed or {})
    return [f.text if f.problem == "unbacked" else f.problem for f in found]


@pytest.mark.parametrize("chapter", claims_audit.chapter_names())
def test_every_claim_in_the_chapter_is_backed(chapter):
    findings = claims_audit.audit([chapter])
    assert not findings, "unbacked claims (glue, assert with % claim:, cite, or claims_allow.toml):\n" + \
        "\n".join(map(str, findings))


def test_every_allow_list_entry_has_a_reason_of_a_known_kind():
    entries = list(PATTERNS.items()) + [kv for chapter in ALLOW.values() for kv in chapter.items()]
    assert entries
    bad = [(k, v) for k, v in entries if claims_audit.reason_problem(v)]
    assert not bad, bad
    assert set(ALLOW) <= set(claims_audit.chapter_names()), set(ALLOW) - set(claims_audit.chapter_names())


def test_hand_typed_digits_and_comparisons_are_found():
    assert audit("模型的准确率是 0.93。\n") == ["模型的准确率是 0.93。"]
    assert audit("RoPE 外推时下降最少。\n") == ["RoPE 外推时下降最少。"]
    assert audit("分块版比朴素版更快，\n而且省内存。第二句没有论断。\n") == ["分块版比朴素版更快，而且省内存。"]
    assert audit("- 第一项，几乎为零\n- 第二项\n") == ["- 第一项，几乎为零"]


def test_glue_backs_a_comparison_but_not_a_digit_beside_it():
    assert audit("快 {glue:text}`ratio:.0f` 倍。\n") == []
    assert audit("在 1000 个位置上最大误差 {glue:text}`err:.0e`。\n") == \
        ["在 1000 个位置上最大误差 {glue:text}`err:.0e`。"]


def test_cite_and_allow_list_back_a_sentence():
    assert audit("原论文用了 8 个头 {cite}`vaswani2017attention`。\n") == []
    assert audit("表开到 2048 行。\n", {"表开到 2048": "setup: the table size chosen in the cell"}) == []


def test_a_claim_marker_must_name_a_check_of_the_chapter():
    chapter = """
    ```{code-cell} ipython3
    attnbook.check("RoPE 在未见位置上的准确率高于 0.98", acc, 0.98)
    assert err < 1e-6  # claim: exact-shift
    ```

    RoPE 在未见位置上几乎全对。
    % claim: RoPE 在未见位置上

    平移是精确的旋转，误差低于 1e-6。
    % claim: exact-shift
    """
    assert audit(chapter) == []
    assert audit(chapter.replace("% claim: RoPE 在未见位置上", "% claim: ALiBi 在未见位置上")) == \
        ["claim id matches no check()/# claim: in this chapter"]
    assert audit(chapter.replace("% claim: exact-shift", "")) == ["平移是精确的旋转，误差低于 1e-6。"]
    assert audit(chapter.replace("1e-6。\n", "1e-6。\n\n")) == \
        ["a claim marker must directly follow its paragraph", "平移是精确的旋转，误差低于 1e-6。"]


def test_code_math_quotes_headings_and_references_are_not_prose():
    chapter = """
    ---
    budget_seconds: 60
    ---
    # 第 3 个标题里有数字 42
    ```{code-cell} ipython3
    x = 12345  # 最快
    ```
    $$
    \\sigma(z)_1 = 0.5
    $$

    变量 `d_model = 512` 与公式 $T = 1024$ 不算正文，资料说“快了 10 倍”也不算。

    ## 参考文献

    Vaswani 等，2017，第 5998 页。
    """
    assert audit(chapter) == []


def test_allow_entries_that_match_nothing_are_stale(tmp_path):
    allow = tmp_path / "allow.toml"
    allow.write_text('[patterns]\n[softmax]\n"这句话不在书里" = "setup: a sentence that was removed"\n',
                     encoding="utf-8")
    found = claims_audit.audit(["softmax"], allow)
    assert any(f.problem.startswith("entry matches no sentence") for f in found)


def test_reasons_need_a_kind_and_words():
    assert claims_audit.reason_problem("setup: 1000 positions, fixed in the cell") is None
    assert claims_audit.reason_problem("") == "no reason"
    assert claims_audit.reason_problem("because") is not None
    assert claims_audit.reason_problem("setup:") is not None


def test_main_text_length_leaves_out_collapsed_blocks_and_exercises():
    page = textwrap.dedent("""
    # 标题

    正文五个字

    :::{admonition} 勘误
    :class: dropdown
    折叠起来的内容
    :::

    :::{admonition} 注意
    展开的框
    :::

    ## 练习

    练习里的文字
    """)
    assert claims_audit.main_text_length(page) == len("正文五个字") + len("展开的框")


def test_main_text_counts_collapsed_blocks_only_when_asked_and_never_solutions():
    import main_text
    page = textwrap.dedent("""
    正文

    :::{admonition} 旁注
    :class: dropdown
    折叠
    :::

    ::::{solution} ex
    :class: dropdown
    答案不算
    ::::

    ```{code-cell} ipython3
    # 代码不算
    ```

    :::{solution-start} ex2
    :class: dropdown
    :::

    门控的答案也不算

    :::{solution-end}
    :::

    尾
    """)
    count = lambda collapsed: len(main_text.CJK.findall(main_text.main_text(page, collapsed)))
    assert count(False) == len("正文") + len("尾")
    assert count(True) == len("正文") + len("折叠") + len("尾")
