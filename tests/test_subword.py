"""BPE with Hugging Face tokenizers: the textbook first merge, round trips, unknown characters, tokens per char."""

from __future__ import annotations

import pytest

import attnbook
from attnbook.subword import tokens_per_char, train_bpe


def test_first_merge_is_the_most_frequent_pair():
    tok = train_bpe(["aaabdaaabac"], vocab_size=6, min_frequency=1)    # <unk>, a, b, c, d + one merge
    assert set(tok.get_vocab()) == {"<unk>", "a", "b", "c", "d", "aa"} and tok.token_to_id("<unk>") == 0
    assert tok.encode("aaab").tokens == ["aa", "a", "b"]


@pytest.fixture(scope="module")
def news():
    lines = ["".join(w for w, _ in s) for s in attnbook.load_peoples_daily()[:3000]]
    return lines[:2500], lines[2500:]


@pytest.fixture(scope="module")
def bpe(news):
    return train_bpe(news[0], vocab_size=len(set("".join(news[0]))) + 2000)


def test_every_token_is_two_earlier_tokens_joined(bpe, news):
    vocab = bpe.get_vocab()
    alphabet = set("".join(news[0]))
    assert len(vocab) == len(alphabet) + 2000 and alphabet <= set(vocab)
    by_id = sorted(vocab, key=vocab.get)
    for i, token in enumerate(by_id):
        if token == "<unk>" or token in alphabet:
            continue
        earlier = set(by_id[:i])
        assert any(token[:j] in earlier and token[j:] in earlier for j in range(1, len(token))), token


def test_round_trip_and_unknown_characters(bpe, news):
    for text in news[0][:50] + news[1][:50]:
        ids = bpe.encode(text).ids
        if 0 not in ids:                                                 # every character seen in training
            assert bpe.decode(ids) == text
    assert bpe.encode("\u2603").ids == [0]                               # a snowman never seen: <unk>


def test_tokens_per_char(bpe, news):
    per_char = tokens_per_char(bpe, news[1])
    direct = sum(len(bpe.encode(t).ids) for t in news[1]) / sum(map(len, news[1]))
    assert per_char == pytest.approx(direct, rel=1e-12) and per_char < 0.8
    chars_only = train_bpe(news[0], vocab_size=len(set("".join(news[0]))) + 1)   # no room for merges
    assert tokens_per_char(chars_only, news[0]) == 1.0


@pytest.mark.parametrize("call, words", [
    (lambda: train_bpe("一段文字", 100), "sequence of str"),
    (lambda: train_bpe(["a", 3], 100), "sequence of str"),
    (lambda: train_bpe(["ab"], 1), "vocab_size"),
    (lambda: train_bpe(["abc"], 3), "vocab_size=3 leaves no room.*3 distinct characters"),
    (lambda: tokens_per_char(train_bpe(["ab"], 5), [""]), "no characters"),
])
def test_bad_inputs_raise_value_errors(call, words):
    with pytest.raises(ValueError, match=words):
        call()
