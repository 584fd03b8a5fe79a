"""attnbook: every component of 《注意力机制：从 Softmax 到 Transformer》, tested against independent references.

Shape legend used in every docstring: B batch, H heads, T (Tq, Tk) sequence lengths, D feature size.
Masks are boolean with True = may attend / keep (as in ``torch.nn.functional.scaled_dot_product_attention``).
"""

from .attention import (
    ManualAttentionFunction,
    SelfAttention,
    attention_backward,
    manual_attention,
    scaled_dot_product_attention,
)
from .benchmark import (
    attention_benchmark,
    memory_timeline,
    peak_memory,
    results_markdown,
    sdpa_backend,
    time_interleaved,
)
from .book import device_name, generator, glue, pick_device, provenance, seed, seed_everything, seed_shift, start_chapter
from .claims import ClaimError, TimingWarning, check
from .classifier import (
    CharVocab,
    LogisticRegression,
    SelfAttentionClassifier,
    char_ngrams,
    confusion_matrix,
    encode_texts,
    length_batches,
    masked_mean,
    predict,
    tfidf_features,
    train_classifier,
    train_logistic_regression,
)
from .data import load_peoples_daily, peoples_daily_splits, peoples_daily_words
from .embeddings import (
    Vocab,
    WordVectors,
    analogy,
    analogy_accuracy,
    analogy_questions,
    bag_of_words,
    cosine_similarity,
    nearest_neighbors,
    one_hot,
    pca,
    tfidf,
)
from .efficient import (
    TiledAttentionFunction,
    online_softmax,
    online_softmax_stats,
    sliding_window_mask,
    strided_attention,
    strided_mask,
    tiled_attention,
    tiled_attention_recompute,
)
from .fasttext import FastText
from .glove import GloVe, cooccurrence_matrix, glove_loss, train_glove
from .kv_cache import KVCache
from .latent_attention import (
    MultiHeadLatentAttention,
    absorb_projections,
    kv_cache_bytes_per_token,
    mla_absorbed_attention,
    mla_attention,
    mla_decode_flops,
    split_kv_up,
)
from .linear_attention import (
    attention_flops,
    elu_feature_map,
    linear_attention_chunked,
    linear_attention_noncausal,
    linear_attention_quadratic,
    linear_attention_recurrent,
)
from .rope_scaling import (
    apply_rotary_frequencies,
    dynamic_ntk_scaling,
    linear_scaling,
    SCALINGS,
    rope_frequencies,
    scaled_frequencies,
    score_vs_distance,
    yarn_mscale,
    yarn_scaling,
)
from .sliding_window import RollingKVCache, band_mask, band_mask_at, rolling_lm_forward
from .gradient_paths import graph_depth, jacobian_norms
from .recurrent import Bidirectional, GRUCell, LSTMCell, Recurrent, RNNCell, gru_step, lstm_step, rnn_step
from .scoring import (
    AdditiveScore,
    MultiplicativeScore,
    additive_score,
    attend,
    cosine_score,
    dot_score,
    multiplicative_score,
    scaled_dot_score,
)
from .seq2seq import Seq2Seq, evaluate_seq2seq, sequence_loss, train_seq2seq
from .tasks import DigitTask
from .masks import causal_mask, combine_masks, padding_mask, padding_to_attention_mask
from .multihead import MultiHeadAttention, merge_heads, multihead_macs, repeat_kv, split_heads
from .grouped_query import GroupedQueryAttention
from .positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    sinusoidal_encoding,
    sinusoidal_encoding_at,
    sinusoidal_encoding_loop,
    sinusoidal_frequencies,
    sinusoidal_shift_matrix,
)
from .pretrained import load_minilm
from .positional_experiment import (
    PositionTaskModel,
    fit_position_model,
    position_accuracy,
    position_attention_weights,
    previous_token_batch,
    train_position_model,
)
from .relative_position import (
    ShawRelativeKeys,
    T5RelativeBias,
    alibi_bias,
    alibi_slopes,
    attention_with_bias,
    clipped_relative_index,
    relative_positions,
    shaw_scores,
    t5_relative_position_bucket,
    transformer_xl_score_terms,
)
from .softmax import (
    cross_entropy,
    entmax15,
    entropy,
    log_softmax,
    logsumexp,
    masked_softmax,
    naive_softmax,
    softmax,
    softmax_jacobian,
    sparsemax,
    topk_softmax,
)
from .word2vec import CBOW, SkipGram, cbow_loss, sgns_loss, train_word2vec
from .dates import DateExample, DateTask, SequenceVocab, format_date
from .decoding import beam_search, greedy_decode, sequence_log_prob, shift_right
from .gpt import DecoderOnlyLM, kv_cache_bytes, next_token_loss
from .muon import Muon, muon_param_groups, newton_schulz
from .ngram import KneserNeyLM
from .sampling import (
    apply_temperature,
    filter_logits,
    greedy_next,
    sample_next,
    sampling_probs,
    top_k_filter,
    top_p_filter,
)
from .subword import tokens_per_char, train_bpe
from .train import (
    clip_grad_norm,
    fit,
    label_smoothed_cross_entropy,
    noam_lr,
    teacher_forcing_loss,
    warmup_linear_decay_lr,
)
from .transformer import (
    DecoderCache,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    Decoder,
    LayerCache,
    PositionwiseFeedForward,
    Transformer,
)
from .widgets import (AttentionHeadBrowser, CrossAttentionWidget, DkScalingWidget, GptChatWidget, KernelRegressionWidget,
                      OnlineSoftmaxWidget, RopeScalingWidget, RotaryWidget, SamplingWidget,
                      SinusoidalExplorerWidget, SoftmaxTemperatureWidget, TileMapWidget)

__version__ = "0.1.0"

__all__ = [
    "device_name", "generator", "glue", "pick_device", "provenance", "seed", "seed_everything", "seed_shift",
    "start_chapter", "ClaimError", "TimingWarning", "check",
    "cross_entropy", "entmax15", "entropy", "log_softmax", "logsumexp", "masked_softmax",
    "naive_softmax", "softmax", "softmax_jacobian", "sparsemax", "topk_softmax",
    "SoftmaxTemperatureWidget",
    "ManualAttentionFunction", "SelfAttention", "attention_backward", "manual_attention",
    "scaled_dot_product_attention",
    "causal_mask", "combine_masks", "padding_mask", "padding_to_attention_mask",
    "DkScalingWidget",
    "online_softmax", "online_softmax_stats", "tiled_attention", "TiledAttentionFunction",
    "tiled_attention_recompute", "sliding_window_mask", "strided_mask", "strided_attention",
    "OnlineSoftmaxWidget", "TileMapWidget",
    "KVCache", "CrossAttentionWidget",
    "attention_benchmark", "memory_timeline", "peak_memory", "results_markdown", "sdpa_backend", "time_interleaved",
    "MultiHeadAttention", "merge_heads", "multihead_macs", "repeat_kv", "split_heads", "GroupedQueryAttention",
    "CharVocab", "LogisticRegression", "SelfAttentionClassifier", "char_ngrams", "confusion_matrix",
    "encode_texts", "length_batches", "masked_mean", "predict", "tfidf_features", "train_classifier",
    "train_logistic_regression",
    "LearnedPositionalEmbedding", "SinusoidalPositionalEncoding", "apply_rotary", "sinusoidal_encoding",
    "sinusoidal_encoding_at", "sinusoidal_encoding_loop", "sinusoidal_frequencies", "sinusoidal_shift_matrix",
    "PositionTaskModel", "previous_token_batch", "train_position_model", "fit_position_model", "position_accuracy",
    "position_attention_weights",
    "ShawRelativeKeys", "T5RelativeBias", "alibi_bias", "alibi_slopes", "attention_with_bias",
    "clipped_relative_index", "relative_positions", "shaw_scores", "t5_relative_position_bucket",
    "transformer_xl_score_terms", "SinusoidalExplorerWidget", "RotaryWidget",
    "RNNCell", "LSTMCell", "GRUCell", "Recurrent", "Bidirectional", "rnn_step", "lstm_step", "gru_step",
    "dot_score", "scaled_dot_score", "cosine_score", "additive_score", "multiplicative_score",
    "AdditiveScore", "MultiplicativeScore", "attend", "KernelRegressionWidget",
    "Seq2Seq", "sequence_loss", "train_seq2seq", "evaluate_seq2seq", "DigitTask",
    "jacobian_norms", "graph_depth",
    "AttentionHeadBrowser",
    "load_peoples_daily", "peoples_daily_splits", "peoples_daily_words", "Vocab", "WordVectors", "analogy",
    "analogy_accuracy",
    "analogy_questions", "bag_of_words", "cosine_similarity", "nearest_neighbors", "one_hot", "pca", "tfidf",
    "SkipGram", "CBOW", "sgns_loss", "cbow_loss", "train_word2vec", "GloVe", "cooccurrence_matrix", "glove_loss",
    "train_glove", "FastText", "load_minilm",
    "PositionwiseFeedForward", "EncoderLayer", "DecoderLayer", "Encoder", "Decoder", "Transformer",
    "LayerCache", "DecoderCache", "greedy_decode", "beam_search", "sequence_log_prob", "shift_right",
    "DateExample", "DateTask", "SequenceVocab", "format_date",
    "label_smoothed_cross_entropy", "teacher_forcing_loss", "noam_lr", "warmup_linear_decay_lr",
    "clip_grad_norm", "fit",
    "DecoderOnlyLM", "kv_cache_bytes", "next_token_loss", "Muon", "muon_param_groups", "newton_schulz",
    "KneserNeyLM", "apply_temperature", "filter_logits",
    "greedy_next", "sample_next", "sampling_probs", "top_k_filter", "top_p_filter", "tokens_per_char", "train_bpe",
    "SamplingWidget", "GptChatWidget",
    "MultiHeadLatentAttention", "absorb_projections", "kv_cache_bytes_per_token", "mla_absorbed_attention",
    "mla_attention", "mla_decode_flops", "split_kv_up", "attention_flops", "elu_feature_map",
    "linear_attention_chunked", "linear_attention_noncausal", "linear_attention_quadratic",
    "linear_attention_recurrent", "apply_rotary_frequencies", "dynamic_ntk_scaling", "linear_scaling",
    "rope_frequencies", "scaled_frequencies", "SCALINGS", "rolling_lm_forward", "score_vs_distance", "yarn_mscale", "yarn_scaling", "RopeScalingWidget", "RollingKVCache",
    "band_mask", "band_mask_at",
]
