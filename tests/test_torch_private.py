"""torch's private API that ega_lightning uses, held to the installed torch: each row of
`model.torch_private.PRIVATE_USES` is there and means what `has_hooks` relies on, and no other private
name of torch is used in the package."""

from __future__ import annotations

import ast
import importlib

import pytest
from torch import nn

from ega_lightning.model.torch_private import PRIVATE_USES, has_hooks

from .helpers import REPO

PACKAGE = REPO / "ega_lightning"


def test_every_row_names_something_torch_has():
    layer = nn.Linear(2, 2)
    for row in PRIVATE_USES:
        owner, name = row.name.rsplit(".", 1)
        if owner == "torch.nn.Module":  # set on each module by Module.__init__
            assert isinstance(getattr(layer, name), dict), row.name
        else:
            assert isinstance(getattr(importlib.import_module(owner), name), dict), row.name


HOOKS = {  # each kind of hook has_hooks must see, registered through torch's public API; True: on every module
    "forward": (lambda m: m.register_forward_hook(lambda *_: None), False),
    "forward pre": (lambda m: m.register_forward_pre_hook(lambda *_: None), False),
    "backward": (lambda m: m.register_full_backward_hook(lambda *_: None), False),
    "backward pre": (lambda m: m.register_full_backward_pre_hook(lambda *_: None), False),
    "global forward": (lambda m: nn.modules.module.register_module_forward_hook(lambda *_: None), True),
    "global forward pre": (lambda m: nn.modules.module.register_module_forward_pre_hook(lambda *_: None), True),
    "global backward": (lambda m: nn.modules.module.register_module_full_backward_hook(lambda *_: None), True),
}


@pytest.mark.parametrize("kind", HOOKS)
def test_has_hooks_sees_each_kind_of_hook_while_it_is_registered(kind):
    register, every_module = HOOKS[kind]
    layer, other = nn.Linear(2, 2), nn.Linear(2, 2)
    assert not has_hooks(layer) and not has_hooks(other)
    handle = register(layer)
    try:
        assert has_hooks(layer)
        assert has_hooks(other) == every_module
    finally:
        handle.remove()
    assert not has_hooks(layer) and not has_hooks(other)


def _torch_names(tree: ast.Module) -> set[str]:
    """The local names a module binds to torch or to one of its modules (``torch``, ``nn``, ``F``, ``hooks``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "torch"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            names |= {a.asname or a.name for a in node.names}
    return names


def private_torch_names(tree: ast.Module) -> set[str]:
    """The ``_name``s a module reads on torch or a torch module (``torch._dynamo``, ``hooks._global_forward_hooks``),
    imports from torch (``from torch.x import _y``), or reads on a module object it is handed (``m._forward_hooks``:
    the attributes torch's Module keeps)."""
    torch_names, used = _torch_names(tree), set()
    module_private = {row.name.rsplit(".", 1)[1] for row in PRIVATE_USES if row.name.startswith("torch.nn.Module.")}
    module_private |= {"_parameters", "_buffers", "_modules", "_forward_hooks_with_kwargs", "_state_dict_hooks"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and (base.id in torch_names or node.attr in module_private):
                used.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            used |= {a.name for a in node.names if a.name.startswith("_")}
            used |= {part for part in (node.module or "").split(".") if part.startswith("_")}
    return used


def test_no_private_torch_name_is_used_outside_the_table():
    listed = {row.name.rsplit(".", 1)[1] for row in PRIVATE_USES}
    used_anywhere = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        used = private_torch_names(ast.parse(path.read_text()))
        used_anywhere |= used
        where = path.relative_to(REPO)
        assert not used - listed, f"{where} uses {sorted(used - listed)}: name each in torch_private.PRIVATE_USES"
        if path.name != "torch_private.py":
            assert not used, f"{where} uses {sorted(used)}: only model/torch_private.py uses torch's private API"
    assert listed <= used_anywhere, f"{sorted(listed - used_anywhere)}: no code uses them, delete their rows"
    # the check sees each kind of use
    planted = ast.parse(
        "import torch\nfrom torch import nn\nfrom torch._dynamo import config\nfrom torch.nn.modules.module import "
        "_global_forward_hooks\nx = torch._C._get_tracing_state()\ny = nn.modules.module._global_backward_hooks\n"
        "def f(m): return m._forward_pre_hooks\n"
    )
    expected = {"_dynamo", "_global_forward_hooks", "_C", "_get_tracing_state", "_global_backward_hooks"}
    expected |= {"_forward_pre_hooks"}
    assert private_torch_names(planted) == expected
