"""Written Chinese dates -> ISO 8601 ``YYYY-MM-DD``: a seeded generator with held-out forms and years.

Each date is written in one of several surface forms, e.g. for 1998-12-31::

    cn_digits   一九九八年十二月三十一日        arabic      1998年12月31日
    short_year  98年12月31号                    month_first 十二月三十一日, 1998
    dotted      1998.12.31                      era_arabic  公元1998年12月31日
    weekday     1998年12月31日 星期四           era_cn      公元一九九八年十二月三十一日
    short_cn    九八年十二月三十一号            mixed       1998年十二月三十一日

A two-digit year follows the POSIX ``%y`` pivot (69-99 -> 19xx, 00-68 -> 20xx), so dates run from
1969-01-01 to 2068-12-31. The test split holds out whole forms (``HELD_OUT_FORMS``: every character
they use occurs in the training forms, only the combination is new) and whole years
(``HELD_OUT_YEARS``); the training split has neither, so the two are disjoint in forms and dates.

Shape legend: N examples, T_src source length, T target length (10 characters + EOS).
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["DATE_FORMS", "TRAIN_FORMS", "HELD_OUT_FORMS", "HELD_OUT_YEARS", "FIRST_YEAR", "LAST_YEAR",
           "chinese_number", "chinese_digits", "format_date", "DateExample", "DateTask", "SequenceVocab"]

FIRST_YEAR, LAST_YEAR = 1969, 2068          # the window of a two-digit year under the %y pivot
HELD_OUT_YEARS = range(2031, 2036)          # five whole years only in the test split
_DIGITS = "〇一二三四五六七八九"
_WEEKDAYS = "一二三四五六日"                 # date.weekday(): Monday = 0 -> 星期一


def chinese_number(n: int) -> str:
    """1..99 in Chinese numerals as written in months and days: 10 十, 12 十二, 20 二十, 31 三十一."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 99:
        raise ValueError(f"chinese_number needs an integer in 1..99, got {n!r}")
    tens, ones = divmod(n, 10)
    head = "" if tens == 0 else ("十" if tens == 1 else _DIGITS[tens] + "十")
    return head + (_DIGITS[ones] if ones else "")


def chinese_digits(digits: str, zero: str = "〇") -> str:
    """Digit by digit, as years are read: '2008' -> 二〇〇八 (or 二零零八 with zero='零')."""
    if not digits.isdigit() or not digits.isascii():
        raise ValueError(f"chinese_digits needs a string of ASCII digits, got {digits!r}")
    if zero not in ("〇", "零"):
        raise ValueError(f"zero must be '〇' or '零', got {zero!r}")
    return "".join(zero if c == "0" else _DIGITS[int(c)] for c in digits)


def _md(d: datetime.date, rng: random.Random) -> tuple[str, str]:
    """Arabic month and day, zero-padded or not (both occur in real text)."""
    pad = rng.random() < 0.5
    return (f"{d.month:02d}", f"{d.day:02d}") if pad else (str(d.month), str(d.day))


def _cn_year(year: str, rng: random.Random) -> str:
    return chinese_digits(year, rng.choice("〇零"))


def _cn_month_day(d: datetime.date, suffix: str = "日") -> str:
    return f"{chinese_number(d.month)}月{chinese_number(d.day)}{suffix}"


def _arabic(d, rng):
    m, dd = _md(d, rng)
    return f"{d.year}年{m}月{dd}日"


def _short_year(d, rng):
    m, dd = _md(d, rng)
    return f"{d.year % 100:02d}年{m}月{dd}号"


def _dotted(d, rng):
    m, dd = _md(d, rng)
    return f"{d.year}.{m}.{dd}"


# form name -> writer(date, rng); the rng picks the free choices (zero padding, 〇 or 零, separators).
DATE_FORMS: dict[str, Callable[[datetime.date, random.Random], str]] = {
    "cn_digits": lambda d, rng: f"{_cn_year(str(d.year), rng)}年{_cn_month_day(d)}",
    "arabic": _arabic,
    "short_year": _short_year,
    "month_first": lambda d, rng: f"{_cn_month_day(d)}{rng.choice([', ', '，'])}{d.year}",
    "dotted": _dotted,
    "era_arabic": lambda d, rng: "公元" + _arabic(d, rng),
    "weekday": lambda d, rng: f"{_arabic(d, rng)} 星期{_WEEKDAYS[d.weekday()]}",
    "era_cn": lambda d, rng: f"公元{_cn_year(str(d.year), rng)}年{_cn_month_day(d)}",
    "short_cn": lambda d, rng: f"{_cn_year(f'{d.year % 100:02d}', rng)}年{_cn_month_day(d, '号')}",
    "mixed": lambda d, rng: f"{d.year}年{_cn_month_day(d)}",
}
HELD_OUT_FORMS = ("era_cn", "short_cn", "mixed")
TRAIN_FORMS = tuple(f for f in DATE_FORMS if f not in HELD_OUT_FORMS)


def format_date(d: datetime.date, form: str, rng: random.Random | None = None) -> str:
    """Write ``d`` in surface form ``form`` (see DATE_FORMS); ``rng`` picks padding and variants."""
    if form not in DATE_FORMS:
        raise ValueError(f"unknown form {form!r}; choose one of {sorted(DATE_FORMS)}")
    if not FIRST_YEAR <= d.year <= LAST_YEAR:
        raise ValueError(f"year {d.year} is outside {FIRST_YEAR}..{LAST_YEAR}, where a two-digit "
                         f"year is unambiguous")
    return DATE_FORMS[form](d, rng or random.Random(0))


@dataclass(frozen=True)
class DateExample:
    source: str   # e.g. 一九九八年十二月三十一日
    target: str   # e.g. 1998-12-31
    form: str     # key of DATE_FORMS


class DateTask:
    """Seeded train/test pairs; the test split = held-out forms or held-out years, never both absent.

    Args:
        held_out_forms: forms that occur only in the test split.
        held_out_years: years that occur only in the test split.
    """

    def __init__(self, held_out_forms: Sequence[str] = HELD_OUT_FORMS,
                 held_out_years: Sequence[int] = HELD_OUT_YEARS):
        unknown = set(held_out_forms) - set(DATE_FORMS)
        if unknown:
            raise ValueError(f"unknown held-out forms {sorted(unknown)}")
        if any(not FIRST_YEAR <= y <= LAST_YEAR for y in held_out_years):
            raise ValueError(f"held_out_years must lie in {FIRST_YEAR}..{LAST_YEAR}, got {list(held_out_years)}")
        self.held_out_forms = tuple(held_out_forms)
        self.held_out_years = tuple(held_out_years)
        self.train_forms = tuple(f for f in DATE_FORMS if f not in self.held_out_forms)
        if not self.train_forms or len(self.held_out_years) == LAST_YEAR - FIRST_YEAR + 1:
            raise ValueError("nothing is left for training")
        first, last = datetime.date(FIRST_YEAR, 1, 1).toordinal(), datetime.date(LAST_YEAR, 12, 31).toordinal()
        days = [datetime.date.fromordinal(o) for o in range(first, last + 1)]
        self.train_dates = [d for d in days if d.year not in self.held_out_years]
        self.test_dates = [d for d in days if d.year in self.held_out_years]

    def sample(self, n: int, split: str = "train", seed: int = 0) -> list[DateExample]:
        """n examples; the same (n, split, seed) always gives the same list.

        Test examples fall in three equal-sized groups (see :meth:`group`): a held-out year in a
        training form, a training year in a held-out form, and a held-out year in a held-out form.
        """
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        rng = random.Random(f"{split}-{seed}")   # str seeds hash deterministically (not PYTHONHASHSEED)
        out = []
        for i in range(n):
            if split == "train":
                dates, forms = self.train_dates, self.train_forms
            else:
                kind = i % 3
                dates = self.test_dates if kind != 1 else self.train_dates
                forms = self.train_forms if kind == 0 else self.held_out_forms
                if not forms or not dates:
                    raise ValueError("the test split needs held-out forms and held-out years")
            d, form = rng.choice(dates), rng.choice(forms)
            out.append(DateExample(format_date(d, form, rng), d.isoformat(), form))
        return out

    def group(self, example: DateExample) -> str:
        """'new year' / 'new form' / 'new year + form' for a test example, 'train' otherwise."""
        new_year = int(example.target[:4]) in self.held_out_years
        new_form = example.form in self.held_out_forms
        return {(False, False): "train", (True, False): "new year", (False, True): "new form",
                (True, True): "new year + form"}[(new_year, new_form)]


class SequenceVocab:
    """Characters <-> ids, with <pad> = 0, <bos> = 1, <eos> = 2 first, then ``chars`` in sorted order.

    Shape:
        encode_batch: N strings -> (N, max length [+ 2 with bos/eos]) int64, right-padded with 0.
    """

    PAD, BOS, EOS = 0, 1, 2
    SPECIALS = ("<pad>", "<bos>", "<eos>")

    def __init__(self, chars):
        self.itos = list(self.SPECIALS) + sorted(set(chars))
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        missing = sorted({c for c in text if c not in self.stoi})
        if missing:
            raise ValueError(f"characters {missing} of {text!r} are not in the vocabulary")
        return [self.BOS] * bos + [self.stoi[c] for c in text] + [self.EOS] * eos

    def encode_batch(self, texts: Sequence[str], bos: bool = False, eos: bool = False) -> Tensor:
        rows = [self.encode(t, bos, eos) for t in texts]
        ids = torch.full((len(rows), max(map(len, rows))), self.PAD, dtype=torch.long)  # (N, T_src)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        return ids

    def decode(self, ids) -> str:
        """Characters up to the first <eos>; <pad> and <bos> are skipped."""
        out = []
        for i in (ids.tolist() if isinstance(ids, Tensor) else ids):
            if i == self.EOS:
                break
            if i not in (self.PAD, self.BOS):
                out.append(self.itos[i])
        return "".join(out)
