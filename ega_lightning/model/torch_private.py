"""Every use of torch's private API in ega_lightning, in one place, each with why no public API serves
(`lightning_private`'s twin for torch, in the model room so that the model may use it).

Checked against torch ``TORCH_CHECKED``. tests/test_torch_private.py holds each row of ``PRIVATE_USES``
to the installed torch (the name is there and means what this module relies on) and finds no other
private torch name in the package. A new private use gets a row here and a test there; a row no code
uses any more is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from torch.nn.modules import module as hooks

TORCH_CHECKED = "2.13.0"


@dataclass(frozen=True)
class PrivateUse:
    name: str  # the private name, as its module and attributes spell it in torch
    used_by: str  # where ega_lightning uses it
    why: str  # why no public API does it


_HOOKS_WHY = (
    "whether calling a module runs hooks: torch has no public query, and a path that calls a gate's arithmetic "
    "instead of the module (the copy-free write, the compiled model) must leave a probed gate to the plain call."
)

PRIVATE_USES = (
    *(
        PrivateUse(f"torch.nn.Module.{name}", "has_hooks (a module's own hooks)", _HOOKS_WHY)
        for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    ),
    *(
        PrivateUse(f"torch.nn.modules.module.{name}", "has_hooks (every module's hooks)", _HOOKS_WHY)
        for name in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks")
    ),
)


def has_hooks(module: nn.Module) -> bool:
    """Whether calling `module` would run hooks of its own or global module hooks: the one test of a
    "hooked" (probed) gate, for the paths that would skip calling it (the copy-free write, the compiled model)."""
    own = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks, module._backward_pre_hooks)
    every = (hooks._global_forward_hooks, hooks._global_forward_pre_hooks, hooks._global_backward_hooks)
    return any(bool(h) for h in (*own, *every))
