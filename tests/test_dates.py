"""Date generator: hand-written examples per form, determinism, disjoint splits, valid ISO targets."""

from __future__ import annotations

import datetime
import random
import re

import pytest
import torch

from attnbook import dates
from attnbook.dates import (DATE_FORMS, FIRST_YEAR, HELD_OUT_FORMS, HELD_OUT_YEARS, LAST_YEAR, DateTask,
                            SequenceVocab, chinese_digits, chinese_number, format_date)

D = datetime.date(1998, 12, 31)


@pytest.mark.parametrize("form, expected", [
    ("cn_digits", {"一九九八年十二月三十一日"}),
    ("arabic", {"1998年12月31日"}),
    ("short_year", {"98年12月31号"}),
    ("month_first", {"十二月三十一日, 1998", "十二月三十一日，1998"}),
    ("dotted", {"1998.12.31"}),
    ("era_arabic", {"公元1998年12月31日"}),
    ("weekday", {"1998年12月31日 星期四"}),            # 31 December 1998 was a Thursday
    ("era_cn", {"公元一九九八年十二月三十一日"}),
    ("short_cn", {"九八年十二月三十一号"}),
    ("mixed", {"1998年十二月三十一日"}),
])
def test_each_form_on_a_hand_written_example(form, expected):
    seen = {format_date(D, form, random.Random(s)) for s in range(20)}
    assert seen == expected


@pytest.mark.parametrize("form, expected", [
    ("cn_digits", {"二〇〇八年一月五日", "二零零八年一月五日"}),
    ("arabic", {"2008年1月5日", "2008年01月05日"}),
    ("short_year", {"08年1月5号", "08年01月05号"}),
    ("dotted", {"2008.1.5", "2008.01.05"}),
    ("weekday", {"2008年1月5日 星期六", "2008年01月05日 星期六"}),
    ("short_cn", {"〇八年一月五号", "零八年一月五号"}),
    ("mixed", {"2008年一月五日"}),
])
def test_variants_zero_and_padding(form, expected):
    d = datetime.date(2008, 1, 5)
    assert {format_date(d, form, random.Random(s)) for s in range(40)} == expected


@pytest.mark.parametrize("n, text", [(1, "一"), (9, "九"), (10, "十"), (11, "十一"), (19, "十九"), (20, "二十"),
                                     (21, "二十一"), (30, "三十"), (31, "三十一"), (99, "九十九")])
def test_chinese_numbers(n, text):
    assert chinese_number(n) == text


def test_chinese_digits_and_bad_input():
    assert chinese_digits("2031") == "二〇三一" and chinese_digits("1900", "零") == "一九零零"
    for bad in (0, 100, 3.0, True):
        with pytest.raises(ValueError, match="1..99"):
            chinese_number(bad)
    with pytest.raises(ValueError, match="ASCII digits"):
        chinese_digits("19a8")
    with pytest.raises(ValueError, match="zero must be"):
        chinese_digits("1908", "O")
    with pytest.raises(ValueError, match="unknown form 'roman'"):
        format_date(D, "roman")
    with pytest.raises(ValueError, match="year 1900 is outside 1969..2068"):
        format_date(datetime.date(1900, 1, 1), "arabic")


def test_two_digit_years_follow_the_posix_pivot_of_strptime():
    # Independent reference: datetime.strptime's %y maps 69-99 to 19xx and 00-68 to 20xx.
    for year in range(FIRST_YEAR, LAST_YEAR + 1):
        text = format_date(datetime.date(year, 3, 4), "short_year", random.Random(0))
        yy = text.split("年")[0]
        assert datetime.datetime.strptime(yy, "%y").year == year


def test_weekday_matches_isoweekday():
    task = DateTask()
    for ex in task.sample(300, "train", seed=3):
        if ex.form == "weekday":
            day = datetime.date.fromisoformat(ex.target).isoweekday()      # 1 = Monday ... 7 = Sunday
            assert ex.source.endswith("星期" + "一二三四五六日"[day - 1])


def test_generator_is_deterministic_and_seeds_differ():
    task = DateTask()
    assert task.sample(500, "train", seed=1) == DateTask().sample(500, "train", seed=1)
    assert task.sample(500, "test", seed=1) == task.sample(500, "test", seed=1)
    assert task.sample(500, "train", seed=1) != task.sample(500, "train", seed=2)


def test_splits_are_disjoint_in_forms_and_dates():
    task = DateTask()
    train, test = task.sample(10_000, "train"), task.sample(3_000, "test")
    assert {e.form for e in train} == set(DATE_FORMS) - set(HELD_OUT_FORMS)
    assert not {int(e.target[:4]) for e in train} & set(HELD_OUT_YEARS)
    # every test example has a form or a year (or both) never seen in training
    assert all(e.form in HELD_OUT_FORMS or int(e.target[:4]) in HELD_OUT_YEARS for e in test)
    assert not {(e.source, e.target) for e in train} & {(e.source, e.target) for e in test}
    groups = [task.group(e) for e in test]
    assert {g: groups.count(g) for g in set(groups)} == {"new year": 1000, "new form": 1000, "new year + form": 1000}
    assert {e.form for e in test} == set(DATE_FORMS)
    # held-out forms reuse training characters only (so no embedding is left untrained)
    assert set("".join(e.source for e in test)) <= set("".join(e.source for e in train))


_CN = {c: i for i, c in enumerate("〇一二三四五六七八九")} | {"零": 0}


def _cn_value(text: str) -> int:
    """Independent reader of 1..99 in Chinese numerals (or plain digits)."""
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, ones = text.split("十")
        return 10 * (_CN[tens] if tens else 1) + (_CN[ones] if ones else 0)
    return _CN[text]


def _parse(source: str) -> datetime.date:
    """A reference parser written separately from the generator: regexes, then numbers."""
    s = re.sub(r" 星期.$", "", source.removeprefix("公元"))
    if m := re.fullmatch(r"(.+)月(.+)日[,，] ?(\d{4})", s):
        month, day, year = m.group(1), m.group(2), m.group(3)
    elif m := re.fullmatch(r"(\d{4})\.(\d+)\.(\d+)", s):
        year, month, day = m.groups()
    else:
        year, month, day = re.fullmatch(r"(.+)年(.+)月(.+)[日号]", s).groups()
    year = "".join(str(_CN.get(c, c)) for c in year)
    y = int(year) if len(year) == 4 else datetime.datetime.strptime(year, "%y").year
    return datetime.date(y, _cn_value(month), _cn_value(day))


def test_every_target_is_a_valid_iso_date_that_the_source_spells():
    task = DateTask()
    for ex in task.sample(1500, "train", seed=5) + task.sample(1500, "test", seed=5):
        d = datetime.date.fromisoformat(ex.target)
        assert d.isoformat() == ex.target and FIRST_YEAR <= d.year <= LAST_YEAR
        assert _parse(ex.source) == d, ex


def test_task_bad_input():
    with pytest.raises(ValueError, match="unknown held-out forms"):
        DateTask(held_out_forms=("nope",))
    with pytest.raises(ValueError, match="held_out_years"):
        DateTask(held_out_years=(1800,))
    with pytest.raises(ValueError, match="split must be"):
        DateTask().sample(3, "valid")
    with pytest.raises(ValueError, match="n must be a positive integer"):
        DateTask().sample(0)
    with pytest.raises(ValueError, match="test split needs"):
        DateTask(held_out_forms=()).sample(3, "test")


def test_vocab_round_trip_and_padding():
    v = SequenceVocab("0123456789-")
    assert (v.PAD, v.BOS, v.EOS) == (0, 1, 2) and len(v) == 14
    ids = v.encode_batch(["1998-12-31", "7"], bos=True, eos=True)
    assert ids.shape == (2, 12)
    assert ids[1].tolist() == [1, v.stoi["7"], 2] + [0] * 9
    assert v.decode(ids[0]) == "1998-12-31" and v.decode(ids[1]) == "7"
    assert v.decode(torch.tensor([v.stoi["1"], 2, v.stoi["9"]])) == "1"      # stops at <eos>
    with pytest.raises(ValueError, match=r"characters \['x'\]"):
        v.encode("19x8")


def test_public_names():
    assert set(dates.__all__) <= set(dir(dates))
