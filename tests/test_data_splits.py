"""People's Daily split by line: disjoint, complete, deduplicated, reproducible, shifted by the seed."""

from __future__ import annotations

import pytest

import attnbook
from attnbook.data import peoples_daily_splits


def test_splits_partition_the_distinct_lines():
    splits = peoples_daily_splits(seed=0)
    lines = {"".join(w for w, _ in s) for s in attnbook.load_peoples_daily()}
    parts = [set(splits[k]) for k in ("train", "val", "test")]
    assert sum(map(len, parts)) == len(lines) == len(set().union(*parts))       # disjoint and complete
    assert all(len(set(splits[k])) == len(splits[k]) for k in splits)          # no line twice
    assert len(splits["val"]) == len(splits["test"]) == round(0.05 * len(lines))
    assert splits["train"][0] in lines and "迈向充满希望的新世纪——一九九八年新年讲话（附图片１张）" in lines


def test_same_seed_same_split_other_seed_other_split():
    a, b, c = peoples_daily_splits(seed=3), peoples_daily_splits(seed=3), peoples_daily_splits(seed=4)
    assert a == b and a["val"] != c["val"]


def test_small_input_and_bad_fractions():
    toy = [(("a", "n"),), (("b", "n"),), (("a", "n"),), (("c", "n"), ("d", "v"))]
    s = peoples_daily_splits(seed=0, val_fraction=1 / 3, test_fraction=1 / 3, sentences=toy)
    assert sorted(s["train"] + s["val"] + s["test"]) == ["a", "b", "cd"]
    with pytest.raises(ValueError, match="val_fraction"):
        peoples_daily_splits(val_fraction=1.2)
    with pytest.raises(ValueError, match="leaves no training data"):
        peoples_daily_splits(val_fraction=0.5, test_fraction=0.5)
