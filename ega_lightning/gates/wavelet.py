"""Wavelet energy gates: the paper's EGA-DB2, EGA-DB4, EGA-M-F, EGA-M-P, and learned wavelet packets.

Every embedding coordinate c is a causal signal along the sequence (EGA_SPEC.md
section 1). It is filtered with one L-tap FIR filter psi per layer, shared by all
heads and coordinates,

    y_{c,j} = sum_{m=0}^{L-1} psi_m x_{c,j-m}      (x_{c,i} = 0 for i < 1: left zero-padding only)

which is PyWavelets' own convention (np.convolve(x, dec_hi)), and each head weighs the
squared responses: e_{h,j} = sum_c u_{h,c} y_{c,j}^2. Filter taps come from PyWavelets,
never typed in by hand.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any

import numpy as np
import pywt
import torch
import torch.nn.functional as F
from torch import nn

from ega_lightning.gates.base import Gate
from ega_lightning.gates.registry import register_gate

# Real Morlet psi(t) = exp(-t^2 / 2) cos(5 t) sampled on 16 points of [-4, 4]: spacing 8/15,
# so its 5 rad/unit stays below the Nyquist frequency pi / (8/15) ~ 5.9 rad/unit.
MORLET_SUPPORT = (-4.0, 4.0)
MORLET_TAPS = 16
MORLET_OMEGA = 5.0
MORLET_SIGMA = 1.0

PACKET_INITS = ("db2", "db4")


def causal_fir(x: torch.Tensor, psi: torch.Tensor) -> torch.Tensor:
    """y_{c,j} = sum_m psi_m x_{c,j-m} of x (B, T, C) along T with taps psi (L,) -> (B, T, C)."""
    C, L = x.shape[-1], psi.shape[0]
    x = F.pad(x.transpose(1, 2), (L - 1, 0))  # (B, C, L - 1 + T), zeros on the left only: j never sees j + 1
    # conv1d is a cross-correlation, sum_i w_i x_{j+i}; flipping the taps makes it the convolution above
    weight = psi.flip(0).to(x.dtype).repeat(C, 1, 1)  # (C, 1, L): the same filter for every coordinate
    return F.conv1d(x, weight, groups=C).transpose(1, 2)  # (B, T, C)


def morlet_samples() -> tuple[np.ndarray, np.ndarray]:
    """PyWavelets' real Morlet ('morl') on MORLET_TAPS points of MORLET_SUPPORT: (taps, grid)."""
    wavelet = pywt.ContinuousWavelet("morl")
    wavelet.lower_bound, wavelet.upper_bound = MORLET_SUPPORT
    psi, t = wavelet.wavefun(length=MORLET_TAPS)
    return psi, t


def _check_packet_init(init: str) -> None:
    if init not in PACKET_INITS:
        raise ValueError(f"wavelet_packet gate: init must be one of {', '.join(PACKET_INITS)}, got {init!r}.")


class WaveletGate(Gate):
    """e_{h,j} = sum_c u_{h,c} y_{c,j}^2 with y = the causal psi-filtered x (see the module docstring).

    Subclasses say what the taps psi are (``taps``) and set ``receptive_field`` = L.
    Parameters of this part: d + 2 per head (u_h in R^d, tau_h, alpha_h), n_head (d + 2) per layer.
    """

    def __init__(self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 1.0) -> None:
        super().__init__(n_embd, n_head, tau_init, alpha_init)
        self.u = nn.Linear(n_embd, n_head, bias=False)  # row h is u_h

    @abstractmethod
    def taps(self) -> torch.Tensor:
        """The filter psi (L,), psi_0 applied to the current position."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        y = causal_fir(x, self.taps())  # (B, T, C)
        return self.u(y.square()).transpose(1, 2)  # (B, T, nh) -> (B, nh, T)


class FixedWaveletGate(WaveletGate):
    """A wavelet gate whose taps are a constant buffer: saved with the model, never trained."""

    def __init__(self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 1.0) -> None:
        super().__init__(n_embd, n_head, tau_init, alpha_init)
        self.register_buffer("psi", torch.tensor(self.fixed_taps(), dtype=torch.float32))  # (L,)
        self.receptive_field = self.psi.shape[0]

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return n_head * (n_embd + 2)

    @staticmethod
    @abstractmethod
    def fixed_taps() -> np.ndarray:
        """The taps, from PyWavelets."""

    def taps(self) -> torch.Tensor:
        return self.psi


@register_gate("db2")
class DB2Gate(FixedWaveletGate):
    """EGA-DB2: e_{h,j} = sum_c u_{h,c} (psi * x_c)_j^2 with psi = pywt.Wavelet('db2').dec_hi (4 taps, fixed).

    Parameters: d + 2 per head (u_h, tau_h, alpha_h), so n_head (d + 2) per layer.
    """

    @staticmethod
    def fixed_taps() -> np.ndarray:
        return np.asarray(pywt.Wavelet("db2").dec_hi)


@register_gate("db4")
class DB4Gate(FixedWaveletGate):
    """EGA-DB4: e_{h,j} = sum_c u_{h,c} (psi * x_c)_j^2 with psi = pywt.Wavelet('db4').dec_hi (8 taps, fixed).

    Parameters: d + 2 per head (u_h, tau_h, alpha_h), so n_head (d + 2) per layer.
    """

    @staticmethod
    def fixed_taps() -> np.ndarray:
        return np.asarray(pywt.Wavelet("db4").dec_hi)


@register_gate("morlet")
class MorletGate(FixedWaveletGate):
    """EGA-M-F: e_{h,j} = sum_c u_{h,c} (psi * x_c)_j^2, psi the fixed real Morlet exp(-t^2/2) cos(5t).

    psi is PyWavelets' 'morl' sampled on 16 points of [-4, 4] (``morlet_samples``). As a causal
    filter its centre t = 0 lies 7.5 positions back: e_j is the band energy around j - 7.5.
    Parameters: d + 2 per head (u_h, tau_h, alpha_h), so n_head (d + 2) per layer.
    """

    @staticmethod
    def fixed_taps() -> np.ndarray:
        return morlet_samples()[0]


@register_gate("morlet_param")
class ParametricMorletGate(WaveletGate):
    """EGA-M-P: as ``morlet`` with psi(t) = exp(-t^2 / (2 sigma^2)) cos(omega t) and learned omega, sigma.

    One centre frequency omega and one width sigma per layer, on the fixed 16-point grid of
    [-4, 4]; sigma = exp(log_sigma) stays positive. At omega = 5, sigma = 1 (the init) the
    taps are exactly the ``morlet`` gate's.
    Parameters: d + 2 per head (u_h, tau_h, alpha_h) plus omega and log_sigma per layer,
    so n_head (d + 2) + 2 per layer.
    """

    receptive_field = MORLET_TAPS

    def __init__(self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 1.0) -> None:
        super().__init__(n_embd, n_head, tau_init, alpha_init)
        self.register_buffer("t", torch.tensor(morlet_samples()[1], dtype=torch.float32))  # (L,) sample points
        self.omega = nn.Parameter(torch.tensor(MORLET_OMEGA))
        self.log_sigma = nn.Parameter(torch.tensor(math.log(MORLET_SIGMA)))

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return n_head * (n_embd + 2) + 2

    def taps(self) -> torch.Tensor:
        sigma = self.log_sigma.exp()
        return torch.exp(-self.t.square() / (2 * sigma.square())) * torch.cos(self.omega * self.t)  # (L,)


@register_gate("wavelet_packet")
class WaveletPacketGate(WaveletGate):
    """Learned wavelet packet (beyond the paper): as ``db2`` / ``db4`` with the L taps psi learned.

    psi starts at pywt.Wavelet(init).dec_hi (init 'db2': L = 4, 'db4': L = 8). With
    orthonormal_penalty = lambda > 0, ``penalty()`` adds
        lambda [ (sum_m psi_m^2 - 1)^2 + sum_{k>=1} (sum_m psi_m psi_{m+2k})^2 ],
    the conditions for an orthonormal wavelet filter: 0 at the init, > 0 once psi leaves them.
    Parameters: d + 2 per head (u_h, tau_h, alpha_h) plus the L taps per layer, so
    n_head (d + 2) + L per layer.
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        tau_init: float = 0.0,
        alpha_init: float = 1.0,
        init: str = "db2",
        orthonormal_penalty: float = 0.0,
    ) -> None:
        super().__init__(n_embd, n_head, tau_init, alpha_init)
        _check_packet_init(init)
        if orthonormal_penalty < 0:
            raise ValueError(f"wavelet_packet gate: orthonormal_penalty must be >= 0, got {orthonormal_penalty}.")
        self.orthonormal_penalty = float(orthonormal_penalty)
        self.psi = nn.Parameter(torch.tensor(pywt.Wavelet(init).dec_hi, dtype=torch.float32))  # (L,)
        self.receptive_field = self.psi.shape[0]

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, init: str = "db2", **options: Any) -> int:
        _check_packet_init(init)
        return n_head * (n_embd + 2) + pywt.Wavelet(init).dec_len

    def taps(self) -> torch.Tensor:
        return self.psi

    def penalty(self) -> torch.Tensor | None:
        if self.orthonormal_penalty == 0:
            return None
        h = self.psi
        unit_norm = (h.square().sum() - 1).square()
        # orthogonal to its own even shifts, the condition for a two-channel orthonormal filter bank
        shifts = [(h[: -2 * k] * h[2 * k :]).sum().square() for k in range(1, (len(h) - 1) // 2 + 1)]
        return self.orthonormal_penalty * (unit_norm + sum(shifts))
