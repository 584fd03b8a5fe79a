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
from .book import device_name, pick_device, provenance, seed_everything, start_chapter
from .masks import causal_mask, combine_masks, padding_mask, padding_to_attention_mask
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
from .positional_experiment import PositionTaskModel, previous_token_batch, train_position_model
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
from .widgets import DkScalingWidget, SinusoidalExplorerWidget, SoftmaxTemperatureWidget

__version__ = "0.1.0"

__all__ = [
    "device_name", "pick_device", "provenance", "seed_everything", "start_chapter",
    "cross_entropy", "entmax15", "entropy", "log_softmax", "logsumexp", "masked_softmax",
    "naive_softmax", "softmax", "softmax_jacobian", "sparsemax", "topk_softmax",
    "SoftmaxTemperatureWidget",
    "ManualAttentionFunction", "SelfAttention", "attention_backward", "manual_attention",
    "scaled_dot_product_attention",
    "causal_mask", "combine_masks", "padding_mask", "padding_to_attention_mask",
    "DkScalingWidget",
    "LearnedPositionalEmbedding", "SinusoidalPositionalEncoding", "apply_rotary", "sinusoidal_encoding",
    "sinusoidal_encoding_at", "sinusoidal_encoding_loop", "sinusoidal_frequencies", "sinusoidal_shift_matrix",
    "PositionTaskModel", "previous_token_batch", "train_position_model",
    "ShawRelativeKeys", "T5RelativeBias", "alibi_bias", "alibi_slopes", "attention_with_bias",
    "clipped_relative_index", "relative_positions", "shaw_scores", "t5_relative_position_bucket",
    "transformer_xl_score_terms", "SinusoidalExplorerWidget",
]
