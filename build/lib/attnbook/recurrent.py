"""Recurrent cells written from their equations, a layer that unrolls them, and a bidirectional wrapper.

Parameter names, shapes, gate order and initialisation follow ``torch.nn.RNNCell`` / ``LSTMCell`` /
``GRUCell`` exactly, so ``ours.load_state_dict(torch_cell.state_dict())`` works and the outputs match:

    weight_ih (G*H, D)   weight_hh (G*H, H)   bias_ih (G*H,)   bias_hh (G*H,)
    G = 1 (RNN), 4 (LSTM: gates i, f, g, o), 3 (GRU: gates r, z, n)

Every cell splits its step in two: ``project_input`` (the x-dependent half, one matmul for all time
steps at once) and ``recur`` (the h-dependent half, which must run one step after another).

Shape legend: B batch, T time steps, D input features, H hidden units.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["rnn_step", "lstm_step", "gru_step", "RNNCell", "LSTMCell", "GRUCell", "Recurrent",
           "Bidirectional"]


# ---------------------------------------------------------------- pure steps


def rnn_step(gi: Tensor, h: Tensor, weight_hh: Tensor, bias_hh: Tensor | None,
             nonlinearity: str = "tanh") -> Tensor:
    """One Elman step from a precomputed input projection gi = W_ih x + b_ih.

    Formula: h' = act(W_ih x + b_ih + W_hh h + b_hh)

    Shape:
        gi: (B, H); h: (B, H); weight_hh: (H, H); bias_hh: (H,) -> h' (B, H).
    """
    pre = gi + F.linear(h, weight_hh, bias_hh)
    return torch.tanh(pre) if nonlinearity == "tanh" else torch.relu(pre)


def lstm_step(gi: Tensor, h: Tensor, c: Tensor, weight_hh: Tensor,
              bias_hh: Tensor | None) -> tuple[Tensor, Tensor]:
    """One LSTM step (with forget gate) from gi = W_ih x + b_ih; gates in torch's order i, f, g, o.

    Formula: [i, f, g, o] = gi + W_hh h + b_hh
             c' = σ(f) ⊙ c + σ(i) ⊙ tanh(g);   h' = σ(o) ⊙ tanh(c')

    Shape:
        gi: (B, 4H); h, c: (B, H); weight_hh: (4H, H); bias_hh: (4H,) -> (h', c'), each (B, H).
    """
    i, f, g, o = (gi + F.linear(h, weight_hh, bias_hh)).chunk(4, dim=-1)  # 4 x (B, H)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


def gru_step(gi: Tensor, h: Tensor, weight_hh: Tensor, bias_hh: Tensor | None) -> Tensor:
    """One GRU step from gi = W_ih x + b_ih; gates in torch's order r, z, n.

    Formula: r = σ(W_ir x + b_ir + W_hr h + b_hr);  z = σ(W_iz x + b_iz + W_hz h + b_hz)
             n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))      (r applied AFTER W_hn, as torch)
             h' = (1 - z) ⊙ n + z ⊙ h

    Shape:
        gi: (B, 3H); h: (B, H); weight_hh: (3H, H); bias_hh: (3H,) -> h' (B, H).
    """
    i_r, i_z, i_n = gi.chunk(3, dim=-1)                               # 3 x (B, H)
    h_r, h_z, h_n = F.linear(h, weight_hh, bias_hh).chunk(3, dim=-1)  # 3 x (B, H)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


# ---------------------------------------------------------------- cells


class _Cell(nn.Module):
    """Parameters and checks shared by the three cells; ``gates`` is G above."""

    gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.input_size, self.hidden_size = input_size, hidden_size
        g = self.gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(g, input_size))
        self.weight_hh = nn.Parameter(torch.empty(g, hidden_size))
        if bias:
            self.bias_ih = nn.Parameter(torch.empty(g))
            self.bias_hh = nn.Parameter(torch.empty(g))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's initialisation: every parameter ~ U(-1/sqrt(H), 1/sqrt(H))."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def project_input(self, x: Tensor) -> Tensor:
        """The input half of every gate, W_ih x + b_ih: one matmul for any number of time steps.

        Shape:
            x: (..., D) -> (..., G*H).
        """
        if x.dim() < 1 or x.size(-1) != self.input_size:
            raise ValueError(f"input of shape {tuple(x.shape)} must end in input_size={self.input_size}")
        return F.linear(x, self.weight_ih, self.bias_ih)

    def _check_h(self, h: Tensor, batch: int, name: str = "h") -> None:
        if h.shape != (batch, self.hidden_size):
            raise ValueError(f"{name} of shape {tuple(h.shape)} must be (B={batch}, H={self.hidden_size})")

    def _gi(self, x: Tensor) -> Tensor:
        if x.dim() != 2:
            raise ValueError(f"a cell takes one time step x of shape (B, D), got {tuple(x.shape)}")
        return self.project_input(x)

    def init_state(self, batch: int, like: Tensor):
        """All-zero state (torch's default). Shape: -> (B, H), or a pair of them for the LSTM."""
        return torch.zeros(batch, self.hidden_size, dtype=like.dtype, device=like.device)

    @staticmethod
    def hidden(state) -> Tensor:
        """The output h of a state (the LSTM's state is (h, c)). Shape: -> (B, H)."""
        return state

    def forward(self, x: Tensor, h: Tensor | None = None) -> Tensor:
        """One time step from state h (zeros when None); the LSTM overrides this for its (h, c) state."""
        gi = self._gi(x)
        if h is None:
            h = self.init_state(x.size(0), x)
        self._check_h(h, x.size(0))
        return self.recur(gi, h)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, bias={self.bias_ih is not None}"


class RNNCell(_Cell):
    """Elman cell, h' = tanh(W_ih x + b_ih + W_hh h + b_hh); same parameters as ``torch.nn.RNNCell``.

    Shape:
        x: (B, D); h: (B, H) or None (zeros) -> h' (B, H).
    """

    gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh"):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(input_size, hidden_size, bias)
        self.nonlinearity = nonlinearity

    def recur(self, gi: Tensor, h: Tensor) -> Tensor:
        """The recurrent half of a step, from gi = project_input(x). Shape: gi (B, H), h (B, H) -> (B, H)."""
        return rnn_step(gi, h, self.weight_hh, self.bias_hh, self.nonlinearity)


class LSTMCell(_Cell):
    """LSTM cell with forget gate, gates i, f, g, o; same parameters as ``torch.nn.LSTMCell``.

    Shape:
        x: (B, D); state: (h, c), each (B, H), or None (zeros) -> (h', c'), each (B, H).
    """

    gates = 4

    def recur(self, gi: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """Shape: gi (B, 4H), state (h, c) each (B, H) -> (h', c')."""
        return lstm_step(gi, state[0], state[1], self.weight_hh, self.bias_hh)

    def init_state(self, batch: int, like: Tensor) -> tuple[Tensor, Tensor]:
        zeros = super().init_state(batch, like)
        return zeros, zeros.clone()

    @staticmethod
    def hidden(state: tuple[Tensor, Tensor]) -> Tensor:
        return state[0]

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        gi = self._gi(x)
        if state is None:
            state = self.init_state(x.size(0), x)
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise ValueError("an LSTM state is a pair (h, c)")
        self._check_h(state[0], x.size(0), "h")
        self._check_h(state[1], x.size(0), "c")
        return self.recur(gi, state)


class GRUCell(_Cell):
    """GRU cell, gates r, z, n, h' = (1 - z) ⊙ n + z ⊙ h; same parameters as ``torch.nn.GRUCell``.

    Shape:
        x: (B, D); h: (B, H) or None (zeros) -> h' (B, H).
    """

    gates = 3

    def recur(self, gi: Tensor, h: Tensor) -> Tensor:
        """Shape: gi (B, 3H), h (B, H) -> (B, H)."""
        return gru_step(gi, h, self.weight_hh, self.bias_hh)


# ---------------------------------------------------------------- layers


class Recurrent(nn.Module):
    """Unroll a cell over a batch-first sequence (as ``torch.nn.RNN/LSTM/GRU(batch_first=True)``).

    The input projections of all T steps are one matmul (parallel over time); only the
    recurrence ``recur`` runs step by step. ``reverse=True`` reads the sequence from the end and
    stores each output at its own position t, as the backward half of a bidirectional torch RNN.

    Shape:
        x: (B, T, D); state: the cell's state or None (zeros)
        -> outputs (B, T, H) (h at every step), final state (after the last step read).
    """

    def __init__(self, cell: _Cell, reverse: bool = False):
        super().__init__()
        if not isinstance(cell, _Cell):
            raise ValueError(f"cell must be an attnbook RNNCell, LSTMCell or GRUCell, got {type(cell).__name__}")
        self.cell, self.reverse = cell, reverse

    def forward(self, x: Tensor, state=None):
        if x.dim() != 3 or x.size(1) == 0:
            raise ValueError(f"x must be (B, T, D) with T >= 1, got {tuple(x.shape)}")
        gi = self.cell.project_input(x)  # (B, T, G*H): all time steps at once
        if state is None:
            state = self.cell.init_state(x.size(0), x)
        steps = range(x.size(1) - 1, -1, -1) if self.reverse else range(x.size(1))
        outputs: list[Tensor] = [None] * x.size(1)  # type: ignore[list-item]
        for t in steps:  # the sequential part
            state = self.cell.recur(gi[:, t], state)
            outputs[t] = self.cell.hidden(state)
        return torch.stack(outputs, dim=1), state  # (B, T, H)


class Bidirectional(nn.Module):
    """Two cells, one reading left to right and one right to left; outputs concatenated.

    Output t is [h→_t ; h←_t]: it has seen the whole sequence (Schuster & Paliwal, 1997).

    Shape:
        x: (B, T, D) -> outputs (B, T, 2H), (final forward state, final backward state).
    """

    def __init__(self, forward_cell: _Cell, backward_cell: _Cell):
        super().__init__()
        if type(forward_cell) is not type(backward_cell) or \
                forward_cell.hidden_size != backward_cell.hidden_size:
            raise ValueError("both directions need the same cell type and hidden_size, got "
                             f"{forward_cell!r} and {backward_cell!r}")
        self.forward_layer = Recurrent(forward_cell)
        self.backward_layer = Recurrent(backward_cell, reverse=True)

    def forward(self, x: Tensor, state=None):
        fwd_state, bwd_state = (None, None) if state is None else state
        out_f, fin_f = self.forward_layer(x, fwd_state)   # (B, T, H)
        out_b, fin_b = self.backward_layer(x, bwd_state)  # (B, T, H)
        return torch.cat([out_f, out_b], dim=-1), (fin_f, fin_b)  # (B, T, 2H)
