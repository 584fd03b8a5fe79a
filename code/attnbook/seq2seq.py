"""GRU encoder-decoder, with or without additive (Bahdanau) attention; teacher forcing and greedy decoding.

The two variants differ ONLY in the context vector c_t fed to the decoder at step t:
    without attention  c_t = h_S, the encoder's last state, the same at every step (Cho et al., 2014)
    with attention     c_t = Σ_j α_tj h_j,  α_t = softmax_j(vᵀ tanh(W_q s_{t-1} + W_k h_j))  (Bahdanau et al., 2015)
Everything else (embedding, encoder, decoder cell, output layer, initial state s_0 = h_S) is shared.

Shape legend: B batch, T_src source length, T target steps, E embedding size, H hidden size, V vocabulary.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .recurrent import GRUCell, Recurrent
from .scoring import AdditiveScore, attend
from .tasks import BOS, DigitTask

__all__ = ["Seq2Seq", "sequence_loss", "train_seq2seq", "evaluate_seq2seq"]


class Seq2Seq(nn.Module):
    """Encoder-decoder over one shared vocabulary (source and target tokens alike).

    Shape:
        src: (B, T_src) token ids; tgt_in: (B, T) decoder inputs (BOS first)
        -> logits (B, T, V), attention weights (B, T, T_src) or None without attention.
    """

    def __init__(self, vocab_size: int, embed_dim: int = 32, hidden_size: int = 64,
                 attention: bool = True, attention_dim: int | None = None):
        super().__init__()
        self.attention = attention
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.encoder = Recurrent(GRUCell(embed_dim, hidden_size))
        self.decoder = GRUCell(embed_dim + hidden_size, hidden_size)  # reads [emb(y_{t-1}); c_t]
        self.score = AdditiveScore(hidden_size, hidden_size, attention_dim or hidden_size) if attention else None
        self.out = nn.Linear(2 * hidden_size, vocab_size)  # reads [s_t; c_t]

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Shape: src (B, T_src) -> annotations h_1..h_S (B, T_src, H), last state h_S (B, H)."""
        if src.dim() != 2 or src.size(1) == 0:
            raise ValueError(f"src must be (B, T_src) token ids with T_src >= 1, got {tuple(src.shape)}")
        return self.encoder(self.embed(src))

    def step(self, y_prev: Tensor, s: Tensor, annotations: Tensor, last: Tensor):
        """One decoder step. Shape: y_prev (B,), s (B, H) -> logits (B, V), s' (B, H), weights (B, T_src) or None."""
        if self.attention:
            c, w = attend(s.unsqueeze(1), annotations, annotations, self.score)  # (B, 1, H), (B, 1, T_src)
            c, w = c.squeeze(1), w.squeeze(1)  # (B, H), (B, T_src)
        else:
            c, w = last, None  # the fixed-length summary, the same at every step
        s = self.decoder(torch.cat([self.embed(y_prev), c], -1), s)  # (B, E + H) -> (B, H)
        return self.out(torch.cat([s, c], -1)), s, w

    def forward(self, src: Tensor, tgt_in: Tensor):
        """Teacher forcing: step t reads the true previous token tgt_in[:, t].

        Shape: src (B, T_src), tgt_in (B, T) -> logits (B, T, V), weights (B, T, T_src) or None.
        """
        if tgt_in.dim() != 2 or tgt_in.size(0) != src.size(0):
            raise ValueError(f"tgt_in of shape {tuple(tgt_in.shape)} must be (B={src.size(0)}, T)")
        annotations, s = self.encode(src)
        last = s
        logits, weights = [], []
        for t in range(tgt_in.size(1)):
            out, s, w = self.step(tgt_in[:, t], s, annotations, last)
            logits.append(out)
            weights.append(w)
        return torch.stack(logits, 1), (torch.stack(weights, 1) if self.attention else None)

    @torch.no_grad()
    def greedy_decode(self, src: Tensor, steps: int):
        """Feed back the model's own argmax. Shape: -> tokens (B, steps), logits (B, steps, V), weights or None."""
        annotations, s = self.encode(src)
        last = s
        y = torch.full((src.size(0),), BOS, dtype=torch.long, device=src.device)
        tokens, logits, weights = [], [], []
        for _ in range(steps):
            out, s, w = self.step(y, s, annotations, last)
            y = out.argmax(-1)
            tokens.append(y)
            logits.append(out)
            weights.append(w)
        return (torch.stack(tokens, 1), torch.stack(logits, 1),
                torch.stack(weights, 1) if self.attention else None)


@contextmanager
def _threads(n: int | None):
    """Temporarily set torch's intra-op threads (None = leave as is)."""
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def sequence_loss(logits: Tensor, target: Tensor) -> Tensor:
    """Mean token cross-entropy. Shape: logits (B, T, V), target (B, T) -> ()."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))  # (B*T, V), (B*T,)


def train_seq2seq(model: Seq2Seq, task: DigitTask, steps: int, batch_size: int = 64, lr: float = 1e-2,
                  clip: float = 1.0, seed: int = 0, log_every: int = 0, num_threads: int | None = 1,
                  decay_lr: bool = False) -> dict:
    """Adam with teacher forcing; each step draws one training length uniformly, then a batch of it.

    ``decay_lr`` lowers the learning rate linearly from ``lr`` (first step) to ``lr / steps`` (last step):
    at a constant rate Adam keeps jumping around the minimum, so the model that the last step leaves
    depends on where that step happened to land.

    Shape: the task's strings, (batch_size, L) with L drawn from task.train_lengths.

    Progress (every ``log_every`` steps, 0 = silent) goes to stdout. ``num_threads`` (default 1)
    applies while training: the per-step matrices are tiny, so extra intra-op threads only add
    synchronisation, and on a busy machine they can make a step ten times slower.
    Returns {"loss": per-step losses, "lr": per-step learning rates, "seconds": wall-clock, "sequences": strings seen}.
    """
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be >= 1, got {steps}, {batch_size}")
    with _threads(num_threads):
        return _train(model, task, steps, batch_size, lr, clip, seed, log_every, decay_lr)


def _train(model, task, steps, batch_size, lr, clip, seed, log_every, decay_lr) -> dict:
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    lo, hi = task.train_lengths
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # one kernel per tensor
    # factor 1, (steps-1)/steps, ..., 1/steps on steps 0..steps-1
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1 - i / steps) if decay_lr else None
    model.train()
    losses, rates, start = [], [], time.perf_counter()
    for i in range(steps):
        length = int(torch.randint(lo, hi + 1, (1,), generator=g))
        src, tgt = task.sample(batch_size, length, "train", generator=g)
        tgt_in, tgt_out = task.decoder_io(tgt)  # (B, T+1) each
        src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)
        logits, _ = model(src, tgt_in)
        loss = sequence_loss(logits, tgt_out)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        if schedule is not None:
            schedule.step()
        losses.append(loss.item())
        if log_every and (i + 1) % log_every == 0:
            print(f"第 {i + 1}/{steps} 步  损失 {sum(losses[-log_every:]) / log_every:.3f}", file=sys.stdout)
    model.eval()
    return {"loss": losses, "lr": rates, "seconds": time.perf_counter() - start, "sequences": steps * batch_size}


@torch.no_grad()
def evaluate_seq2seq(model: Seq2Seq, task: DigitTask, lengths, n: int = 200, seed: int = 1,
                     num_threads: int | None = 1) -> dict:
    """Greedy decoding on held-out strings of each length; accuracy over the T+1 outputs (EOS included).

    Shape: n held-out strings (n, L) per length L -> greedy outputs (n, L+1) compared with [y, EOS].

    Returns {"length": [...], "token_accuracy": [...], "sequence_accuracy": [...]}.
    """
    with _threads(num_threads):
        return _evaluate(model, task, lengths, n, seed)


def _evaluate(model, task, lengths, n, seed) -> dict:
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    model.eval()
    result = {"length": [], "token_accuracy": [], "sequence_accuracy": []}
    for length in lengths:
        src, tgt = task.sample(n, length, "test", generator=g)
        _, tgt_out = task.decoder_io(tgt)                     # (n, T+1)
        tokens, _, _ = model.greedy_decode(src.to(device), length + 1)
        correct = tokens.cpu() == tgt_out                       # (n, T+1)
        result["length"].append(length)
        result["token_accuracy"].append(correct.float().mean().item())
        result["sequence_accuracy"].append(correct.all(-1).float().mean().item())
    return result
