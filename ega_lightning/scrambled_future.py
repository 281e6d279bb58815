"""The leak, measured directly (issue 67): how much a model's loss before a cut owes to the text after it.

Each window of the validation split is cut at position c; the inputs from c on are replaced by text from elsewhere in
the split (a donor window, drawn from a fixed seed), and the loss at positions 0 .. c - 1 is read against their true
targets, beside the same positions of the window as it is. The input at c is the target of position c - 1, so it is
replaced too: no position before the cut sees its own target. A causal model's logits before c are functions of
inputs before c alone, so its loss there does not move (to the last bit on a path whose kernels take the same
arithmetic for a row whatever its masked keys hold, and to rounding on any path); a model whose gate reads the whole
window (the author's z-norm over the window, `znorm: window`) moves by what it reads of the future.

``delta`` is loss(scrambled) - loss(true) per position: positive where the model's loss rises when the future is
taken away, i.e. where the true future lowered it. It is averaged per cut over the positions before the cut, and each
mean is given with a Student-t interval over the windows (windows are independent draws of the split's text; the
positions of one window are not, so the interval is over windows, not positions).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

DONOR_SEED = 1234  # the generator of the windows and donors: every checkpoint is read on the same text


@dataclass(frozen=True)
class CutReading:
    """One cut's reading over the windows: the mean of delta over the positions before it, with its interval."""

    cut: int
    windows: int
    loss_true: float  # the mean loss at positions 0 .. cut - 1, as the window is
    loss_scrambled: float  # the same positions with the inputs from cut on replaced
    delta: float  # loss_scrambled - loss_true
    low: float
    high: float
    level: float
    delta_by_position: list[float]  # per position 0 .. cut - 1, mean over the windows


@dataclass(frozen=True)
class Total:
    """Every cut together: per window the mean of its cuts' means, over the windows, with its interval."""

    cuts: list[int]
    windows: int
    delta: float
    low: float
    high: float
    level: float


def t_interval(values: torch.Tensor, level: float) -> tuple[float, float, float]:
    """The mean of ``values`` (n,) and its Student-t interval at ``level`` (NaN bounds for one value)."""
    from scipy import stats

    n, mean = len(values), values.mean().item()
    if n < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * values.std().item() / math.sqrt(n)
    return mean, mean - half, mean + half


def draw_windows(split: torch.Tensor, block: int, n: int, seed: int = DONOR_SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` windows of ``block`` + 1 characters of the split and, for each, a donor window of ``block`` characters
    from elsewhere in it (starting at least a block away), both (n, ...) int64, drawn from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    last = len(split) - block - 1
    starts = torch.randint(0, last, (n,), generator=gen)
    shift = torch.randint(block + 1, max(block + 2, last - block), (n,), generator=gen)
    donors = (starts + shift) % last
    windows = torch.stack([split[s : s + block + 1] for s in starts.tolist()]).long()
    donor = torch.stack([split[s : s + block] for s in donors.tolist()]).long()
    return windows, donor


@torch.no_grad()
def position_losses(lm: Any, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int) -> torch.Tensor:
    """The loss at every position (n, T) of ``lm`` in eval mode on ``inputs`` against ``targets``, in fp32."""
    out = []
    for i in range(0, len(inputs), batch_size):
        logits = lm(inputs[i : i + batch_size]).float()  # (b, T, vocab)
        loss = F.cross_entropy(logits.transpose(1, 2), targets[i : i + batch_size], reduction="none")
        out.append(loss)  # (b, T)
    return torch.cat(out)


def scramble(windows: torch.Tensor, donors: torch.Tensor, cut: int) -> torch.Tensor:
    """The inputs (n, T) of ``windows`` (n, T + 1) with positions cut .. T - 1 replaced by the donors' text."""
    inputs = windows[:, :-1].clone()
    inputs[:, cut:] = donors[:, cut:]
    return inputs


def read_cuts(
    lm: Any, windows: torch.Tensor, donors: torch.Tensor, cuts: list[int], batch_size: int = 32, level: float = 0.95
) -> tuple[list[CutReading], Total]:
    """Each cut's `CutReading` of ``lm`` (put in eval mode) on ``windows`` (n, T + 1) and their ``donors``, and
    their `Total`."""
    lm.eval()
    inputs, targets = windows[:, :-1], windows[:, 1:]
    true = position_losses(lm, inputs, targets, batch_size).double()  # (n, T)
    readings, per_cut = [], []
    for cut in cuts:
        scrambled = position_losses(lm, scramble(windows, donors, cut), targets, batch_size).double()
        delta = (scrambled - true)[:, :cut]  # (n, cut)
        per_cut.append(delta.mean(dim=1))  # (n,): each window's mean before the cut
        mean, low, high = t_interval(per_cut[-1], level)
        readings.append(
            CutReading(
                cut=cut,
                windows=len(windows),
                loss_true=true[:, :cut].mean().item(),
                loss_scrambled=scrambled[:, :cut].mean().item(),
                delta=mean,
                low=low,
                high=high,
                level=level,
                delta_by_position=delta.mean(dim=0).tolist(),
            )
        )
    mean, low, high = t_interval(torch.stack(per_cut).mean(dim=0), level)
    return readings, Total(cuts=list(cuts), windows=len(windows), delta=mean, low=low, high=high, level=level)


def as_data(readings: list[CutReading], total: Total) -> dict[str, Any]:
    return {"cuts": [asdict(r) for r in readings], "total": asdict(total)}
