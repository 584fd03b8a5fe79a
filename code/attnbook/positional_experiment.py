"""Which position encoding lets a tiny attention model work on sequences longer than it was trained on?

Task ("copy the previous token"): a sequence of random tokens x_0 .. x_{T-1}; at every position
m >= 1 predict y_m = x_{m-1}. The answer depends on position only (which key n is exactly one step
back), never on the tokens' values, so a model without positions gets only the shortest prefixes right.

The model is one layer of causal multi-head self-attention (with a residual connection), a
LayerNorm and a linear read-out; the schemes differ only in how position enters:

    none        no position information at all
    sinusoidal  sinusoidal encoding added to the token embeddings
    learned     learned absolute embeddings added (table of eval_len rows; rows >= train_len never trained)
    t5          learned bias per (head, distance bucket) added to the scores; causal buckets
    rope        rotary embedding of q and k
    alibi       fixed linear penalty -s_h (m - n) added to the scores

A RoPE model's frequencies can be swapped after training (``model.rope_scaling``, attnbook.rope_scaling),
then evaluated (:func:`position_accuracy`) or fine-tuned (:func:`fit_position_model`) at a longer length.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .masks import causal_mask
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, apply_rotary
from .relative_position import T5RelativeBias, alibi_bias, attention_with_bias
from .rope_scaling import apply_rotary_frequencies

__all__ = ["SCHEMES", "previous_token_batch", "PositionTaskModel", "PositionRunResult",
           "train_position_model", "fit_position_model", "position_accuracy",
           "position_attention_weights"]

SCHEMES = ("none", "sinusoidal", "learned", "t5", "rope", "alibi")
IGNORE = -100  # target of positions with no answer (F.cross_entropy's ignore_index)


def previous_token_batch(batch: int, length: int, vocab: int, generator: torch.Generator,
                         device=None) -> tuple[Tensor, Tensor]:
    """Random tokens and their targets y_i = x_{i-1} (y_0 = IGNORE).

    Shape:
        -> tokens (batch, length) int64, targets (batch, length) int64
    """
    if length < 2:
        raise ValueError(f"length must be >= 2 for a previous token to exist, got {length}")
    x = torch.randint(0, vocab, (batch, length), generator=generator)
    y = torch.full_like(x, IGNORE)
    y[:, 1:] = x[:, :-1]  # (B, T-1): shift right by one
    return x.to(device), y.to(device)


class PositionTaskModel(nn.Module):
    """Embedding -> [+ absolute positions] -> one causal multi-head attention layer -> LayerNorm -> logits.

    ``rope_scaling``: None (RoPE with base 10000), or (inv_freq (Dh / 2,), attention_factor) from
    attnbook.rope_scaling, applied to q and k by :func:`attnbook.apply_rotary_frequencies`.

    Shape:
        tokens: (B, T) int64 -> logits (B, T, vocab)
    """

    def __init__(self, scheme: str, vocab: int = 16, d_model: int = 32, num_heads: int = 4,
                 max_len: int = 32, t5_max_distance: int = 16):
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
        if d_model % num_heads or (d_model // num_heads) % 2:
            raise ValueError(f"d_model={d_model} must split into {num_heads} heads of even size")
        self.scheme, self.num_heads, self.head_dim = scheme, num_heads, d_model // num_heads
        self.embed = nn.Embedding(vocab, d_model)
        self.absolute = {"sinusoidal": SinusoidalPositionalEncoding(d_model),
                         "learned": LearnedPositionalEmbedding(max_len, d_model)}.get(scheme)
        # Causal T5 buckets: 16 buckets, exact up to distance 7, log-spaced up to t5_max_distance.
        self.t5 = T5RelativeBias(num_heads, False, 16, t5_max_distance) if scheme == "t5" else None
        if self.t5 is not None:
            nn.init.zeros_(self.t5.bias.weight)  # start as "no bias"
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, vocab)
        self.rope_scaling: tuple[Tensor, float] | None = None

    def forward(self, tokens: Tensor) -> Tensor:
        h, a, _ = self.attend(tokens)
        B, T = tokens.shape
        h = h + self.out(a.transpose(1, 2).reshape(B, T, -1))  # (B, H, T, Dh) -> (B, T, D)
        return self.readout(self.norm(h))  # (B, T, vocab)

    def attend(self, tokens: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The layer's input h (B, T, D), the heads' outputs (B, H, T, Dh) and attention weights (B, H, T, T)."""
        B, T = tokens.shape
        h = self.embed(tokens)  # (B, T, D)
        if self.absolute is not None:
            h = self.absolute(h)
        # (B, T, 3D) -> (B, T, 3, H, Dh) -> (3, B, H, T, Dh)
        q, k, v = self.qkv(h).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        mask = causal_mask(T, tokens.device)  # (T, T)
        if self.scheme == "rope" and self.rope_scaling is None:
            q, k = apply_rotary(q), apply_rotary(k)
        elif self.scheme == "rope":
            inv_freq, factor = self.rope_scaling  # (Dh / 2,), scores scaled by factor^2
            q, k = (apply_rotary_frequencies(t, inv_freq, attention_factor=factor) for t in (q, k))
        if self.scheme in ("t5", "alibi"):
            bias = self.t5(T, T) if self.t5 is not None else alibi_bias(self.num_heads, T, T, tokens.device)
            a, w = attention_with_bias(q, k, v, bias, mask)  # bias (H, T, T) broadcasts over B
        else:
            a, w = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, Dh)
        return h, a, w


def position_attention_weights(model: PositionTaskModel, length: int, vocab: int, n: int, seed: int,
                      device=None) -> Tensor:
    """Mean attention weights over n fresh sequences of ``length`` (generator seeded with ``seed``).

    Shape:
        -> (H, length, length): head, query position m, key position n
    """
    x, _ = previous_token_batch(n, length, vocab, torch.Generator().manual_seed(seed), device)
    with torch.no_grad():
        return model.attend(x)[2].mean(0)


@dataclass(frozen=True)
class PositionRunResult:
    scheme: str
    seed: int
    acc_train_len: float  # accuracy on sequences of length L (all positions with a target)
    acc_double_len: float  # accuracy on sequences of length 2L
    acc_unseen_positions: float  # accuracy on positions L .. 2L-1 of those sequences
    acc_by_position: tuple[float, ...]  # at length 2L, position by position (position 0: nan, no target)
    final_loss: float
    seconds: float


def position_accuracy(model: nn.Module, length: int, vocab: int, n: int, seed: int,
                      device=None) -> tuple[float, Tensor]:
    """Accuracy on n fresh sequences of ``length`` (generator seeded with ``seed``), over all positions
    with a target; and the (n, length) boolean tensor of correct predictions. Runs without gradients.
    """
    g = torch.Generator().manual_seed(seed)
    x, y = previous_token_batch(n, length, vocab, g, device)
    with torch.no_grad():
        correct = model(x).argmax(-1) == y  # (n, T)
    valid = y != IGNORE
    return float(correct[valid].float().mean()), correct


def fit_position_model(model: nn.Module, max_len: int, vocab: int, steps: int, batch: int, lr: float,
                       generator: torch.Generator, device=None, min_len: int = 3) -> float:
    """Adam on the previous-token task, one length drawn from min_len .. max_len per step (in train mode,
    eval mode after). Returns the last loss. Also the short fine-tune at a longer length.
    """
    if not 2 <= min_len <= max_len or steps < 1:
        raise ValueError(f"need 2 <= min_len <= max_len and steps >= 1, got {min_len}, {max_len}, {steps}")
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # one kernel per tensor
    model.train()
    for _ in range(steps):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=generator))
        x, y = previous_token_batch(batch, length, vocab, generator, device)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE)  # (B*T, V), (B*T,)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


def train_position_model(scheme: str, train_len: int = 16, vocab: int = 16, d_model: int = 32,
                         num_heads: int = 4, steps: int = 300, batch: int = 64, lr: float = 1e-2,
                         seed: int = 0, eval_sequences: int = 500, device=None,
                         t5_max_distance: int | None = None, return_model: bool = False):
    """Train on lengths drawn from 3 .. train_len, then evaluate at train_len and 2 * train_len.

    Each step draws one length for the whole batch. Evaluation uses fixed seeds, so every
    scheme sees the same test sequences. ``t5_max_distance`` defaults to ``train_len``: every
    T5 bucket is then reached in training. Runs on one CPU thread (restored afterwards).
    ``return_model``: return (result, trained model) instead of the result.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices of a few dozen rows: extra threads only add synchronisation
    try:
        result, model = _train(scheme, train_len, vocab, d_model, num_heads, steps, batch, lr, seed,
                               eval_sequences, device, t5_max_distance)
        return (result, model) if return_model else result
    finally:
        torch.set_num_threads(threads)


def _train(scheme, train_len, vocab, d_model, num_heads, steps, batch, lr, seed, eval_sequences, device,
           t5_max_distance) -> tuple[PositionRunResult, PositionTaskModel]:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = PositionTaskModel(scheme, vocab, d_model, num_heads, max_len=2 * train_len,
                              t5_max_distance=t5_max_distance or train_len).to(device)
    start = time.perf_counter()
    loss = fit_position_model(model, train_len, vocab, steps, batch, lr, g, device)
    seconds = time.perf_counter() - start
    acc_l, _ = position_accuracy(model, train_len, vocab, eval_sequences, 10_000 + seed, device)
    acc_2l, correct = position_accuracy(model, 2 * train_len, vocab, eval_sequences, 20_000 + seed, device)
    by_position = correct.float().mean(0)  # (2L,)
    by_position[0] = float("nan")
    return PositionRunResult(scheme, seed, acc_l, acc_2l, float(correct[:, train_len:].float().mean()),
                             tuple(by_position.tolist()), loss, seconds), model
