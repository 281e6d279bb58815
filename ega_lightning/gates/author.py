"""The author's published gate (paper1_ega/phase2_ablation.py, phase1_ega4.py): EGA-1, and EGA-2/4 as mixtures.

Read from the author's code (EGA_SPEC.md section 6), where it differs from our `linear` and `multiscale`:
the energy keeps its bias, alpha starts at 2.0, the z-norm divides by the population std floored at 1e-8
(not sqrt(var + 1e-5)), and K scales are K gates of the same x mixed after the sigmoid by softmax weights,
not one energy of K moving averages.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ega_lightning.gates.base import Gate
from ega_lightning.gates.registry import register_gate

AUTHOR_SCALES = (1, 2, 4)  # EGA-1, EGA-2, EGA-4: the K the author's code and paper run
AUTHOR_STD_FLOOR = 1e-8  # their `std(correction=0).clamp(min=1e-8)`


@register_gate("author")
class AuthorGate(Gate):
    """The author's EGA-K: g_{h,j} = sum_k softmax(s_h)_k sigmoid(alpha_{h,k} (z_{h,k,j} - tau_{h,k})),
    z_{h,k} the z-norm of e_{h,k,j} = w_{h,k} . x_j + b_{h,k}.

    ``scales`` K in 1, 2, 4 (EGA-1, EGA-2, EGA-4). Their defaults are this gate's own: tau_init 0, alpha_init
    2.0, s_h = 1/K (``model_init`` False: model.tau_init and model.alpha_init at CharLM's defaults 0.0 and 1.0,
    as base.yaml sets them, leave these in place).
    z, as the author divides: (e_j - mean) / max(std, 1e-8), population std;
    ``znorm: window`` (theirs) takes mean and std over the whole window, later positions included (so z = 0
    when T = 1, their generation guard); ``znorm: prefix`` over e_1..e_j (causal; z_1 = 0), by the running
    sums of `_znorm_continue` centred on e_1.

    Parameters: K (d + 4) per head (w in R^d and b, tau, alpha, s per gate), so n_head K (d + 4) per layer:
    260 a head for the paper's EGA-1 at d = 256. The bias b cancels in z (up to rounding), as in theirs.
    """

    model_init = False
    std_floor = AUTHOR_STD_FLOOR

    def __init__(
        self, n_embd: int, n_head: int, tau_init: float = 0.0, alpha_init: float = 2.0, scales: int = 1
    ) -> None:
        super().__init__(n_embd, n_head, tau_init, alpha_init)
        if isinstance(scales, bool) or scales not in AUTHOR_SCALES:
            choices = ", ".join(map(str, AUTHOR_SCALES))
            raise ValueError(f"author gate: scales must be one of {choices}, got {scales!r}.")
        K = self.energies_per_head = scales
        # row k nh + h: head h's k-th gate (see Gate.energies_per_head)
        self.proj = nn.Linear(n_embd, K * n_head, bias=True)
        self.tau = nn.Parameter(torch.full((K * n_head,), float(tau_init)))
        self.alpha = nn.Parameter(torch.full((K * n_head,), float(alpha_init)))
        self.scale_w = nn.Parameter(torch.full((K * n_head,), 1.0 / K))  # the mixture's logits, softmax over k

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, scales: int = 1, **options: Any) -> int:
        return n_head * scales * (n_embd + 4)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).transpose(1, 2)  # (B, T, K nh) -> (B, K nh, T)

    def log_gate_from_z(self, z: torch.Tensor) -> torch.Tensor:
        K, nh = self.energies_per_head, self.n_head
        z = z.unflatten(1, (K, nh))  # (B, K, nh, T)
        a = self.alpha.view(K, nh, 1) * (z - self.tau.view(K, nh, 1))
        weight = F.log_softmax(self.scale_w.view(K, nh), dim=0)[..., None]  # (K, nh, 1): log softmax(s_h)_k
        # log sum_k w_k sigmoid(a_k), stable: log sigmoid(a) = -softplus(-a)
        return torch.logsumexp(weight - F.softplus(-a), dim=1)  # (B, nh, T)

    def set_identity(self) -> bool:
        with torch.no_grad():
            self.alpha.zero_()  # every gate sigmoid(0): the same factor 1/2 on every key
        return True
