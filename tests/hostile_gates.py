"""Gates a hostile but fair user might write: each breaks one promise, and `ega` must say so.

Importable as ``tests.hostile_gates`` from the repository root; tests copy it into a working
directory and name its gates as ``hostile_gates.<Class>``, as a user names their own.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ega_lightning.gates import Gate
from ega_lightning.gates.output import HeadwiseOutputGate


class _Projected(Gate):
    """A per-head linear energy e = w_h . x_j, for the gates below to distort."""

    def __init__(self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 1.0) -> None:
        super().__init__(n_embd, n_head, tau_init, alpha_init)
        self.proj = nn.Linear(n_embd, n_head, bias=False)

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return n_head * (n_embd + 2)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).transpose(1, 2)  # (B, nh, T)


class ReflectConvGate(_Projected):
    """A 3-tap convolution over time, left-padded with ``mode="reflect"``: position 0 reads x_1 and x_2.

    Only position 0's energy leaks, and z_0 is 0 whatever it is; but through the prefix statistics the
    log-gate at position 1 then depends on x_2, the token after it.
    """

    receptive_field = 3

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        p = self.proj(x).transpose(1, 2)  # (B, nh, T)
        padded = F.pad(p, (2, 0), mode="reflect")  # [p2, p1, p0, p1, ...]
        return padded[..., :-2] + 0.5 * padded[..., 1:-1] + 0.25 * padded[..., 2:]


class WrongShapeGate(_Projected):
    """Returns the energy as (B, T, nh), forgetting the transpose."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class RaisingInitGate(_Projected):
    """Its constructor fails, as a gate with a bug in __init__ does."""

    def __init__(self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 1.0) -> None:
        super().__init__(n_embd, n_head, tau_init, alpha_init)
        raise RuntimeError("my gate is not ready")


class NanAfterGate(_Projected):
    """Turns its energy into NaN after ``EGA_TEST_NAN_AFTER`` training forward passes (default 1): at step 1."""

    def __init__(self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 1.0) -> None:
        super().__init__(n_embd, n_head, tau_init, alpha_init)
        self.calls = 0

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():  # a training step's forward, each layer's gate its own
            self.calls += 1
        e = super().energy(x)
        return e * torch.nan if self.calls > int(os.environ.get("EGA_TEST_NAN_AFTER", "1")) else e


class WrongShapeOutputGate(HeadwiseOutputGate):
    """The headwise output gate returning its factor as (B, T, nh, 1): the transpose forgotten."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(x))[..., None]


class IntEnergyGate(_Projected):
    """Returns its energy as integers (int64): no gradient reaches its projection, and attention fails on it."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return super().energy(x).round().long()


class NanEnergyGate(_Projected):
    """Its energy is NaN everywhere, always: every comparison with it is False, so a check that only looks for a
    difference larger than its tolerance passes it."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return super().energy(x) * torch.nan


class BatchStatsGate(_Projected):
    """Centres its energy on the mean over the batch (as a batch norm does): causal, since every sequence keeps its
    own past, but a sequence's gate moves with the other sequences it is batched with."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        e = super().energy(x)  # (B, nh, T)
        return e - e.mean(dim=0, keepdim=True)


class TrainOnlyLeakGate(_Projected):
    """Centres its energy on the mean over the whole window in training mode only (later positions included): causal
    in evaluation, reading the future while it trains (issue 72: check-gate checked eval mode only)."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        e = super().energy(x)
        return e - e.mean(dim=-1, keepdim=True) if self.training else e


class BigBatchStatsGate(_Projected):
    """Centres its energy on the mean over the batch from a batch of 4 on (issue 72: check-gate checked a batch
    of 3)."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        e = super().energy(x)
        return e - e.mean(dim=0, keepdim=True) if e.shape[0] >= 4 else e


class LongWindowLeakGate(_Projected):
    """Reads the whole window's mean once the window is longer than 32 (issue 72: check-gate's default window was 32,
    below every shipped block)."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        e = super().energy(x)
        return e - e.mean(dim=-1, keepdim=True) if e.shape[-1] > 32 else e
