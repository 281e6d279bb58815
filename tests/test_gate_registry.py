"""Finding a gate: registered names, entry points, import paths, and what each mistake says."""

import shutil
import sys

import pytest
import torch

from ega_lightning import CharLM
from ega_lightning.commands import gates as list_gates
from ega_lightning.commands.check_gate import main as check_gate_main
from ega_lightning.errors import UserError
from ega_lightning.gates import Gate, GateError, build_gate, gate_class, gate_names, register_gate
from ega_lightning.gates.linear import LinearGate

from .helpers import REPO, TINY_MODEL, TINY_VOCAB, write_gate_package

EXAMPLE = REPO / "examples" / "my_gates.py"


def test_import_path_finds_a_gate_in_the_working_directory(gate_sandbox):
    shutil.copy(EXAMPLE, gate_sandbox)
    assert "" not in sys.path and str(gate_sandbox) not in sys.path  # as under the `ega` script
    cls = gate_class("my_gates.AbsEnergyGate")
    assert cls.__name__ == "AbsEnergyGate" and issubclass(cls, Gate)
    assert gate_class("my_gates:AbsEnergyGate") is cls  # the entry-point spelling too
    torch.manual_seed(0)
    model = CharLM(TINY_VOCAB, **TINY_MODEL, gate="my_gates.AbsEnergyGate")
    assert [type(g) for g in model.model.gates] == [cls] * TINY_MODEL["n_layer"]
    assert model.hparams.gate == "my_gates.AbsEnergyGate"  # what the checkpoint keeps
    assert model.model.gate_parameter_count() == TINY_MODEL["n_layer"] * TINY_MODEL["n_head"] * (32 + 2)


def test_a_model_resolves_each_slots_gate_once(gate_sandbox, monkeypatch):
    """A gate name is resolved once per model and slot, not once per layer: an import path's entry-point
    scan and import are done one time for a 4-layer model."""
    from ega_lightning.gates import registry
    from ega_lightning.model import GPT, GPTConfig

    shutil.copy(EXAMPLE, gate_sandbox)
    resolved, scans = [], []
    gate_class, entry_point_gates = registry.gate_class, registry.entry_point_gates
    monkeypatch.setattr(registry, "gate_class", lambda gate: resolved.append(gate) or gate_class(gate))
    monkeypatch.setattr(registry, "entry_point_gates", lambda: scans.append(1) or entry_point_gates())
    shape = {**TINY_MODEL, "n_layer": 4}
    for gate in ("linear", "my_gates.AbsEnergyGate"):
        resolved.clear()
        scans.clear()
        model = CharLM(TINY_VOCAB, **shape, gate=gate, output_gate="output_headwise")
        assert sorted(resolved) == sorted([gate, "output_headwise"])  # once per slot
        assert len(scans) == (gate != "linear")  # a registered name needs no scan, an import path one
        assert len(model.model.gates) == len(model.model.output_gates) == 4
        assert model.model.gate_parameter_count() > 0 and len(resolved) == 2  # counted from the resolved classes
        resolved.clear()
        GPT(GPTConfig(vocab_size=len(TINY_VOCAB), **shape, gate=gate, output_gate="output_headwise"))
        assert sorted(resolved) == sorted([gate, "output_headwise"])


def test_a_class_object_is_a_gate_too():
    gate = build_gate(LinearGate, 32, 2, tau_init=0.5)
    assert isinstance(gate, LinearGate) and torch.equal(gate.tau, torch.full((2,), 0.5))


@pytest.mark.parametrize(
    "path,source,match",
    [
        ("nomod.Gate1", None, r"no module 'nomod' to import it from .* Run `ega` from the directory that holds nomod"),
        ("my_gates.Nope", "example", r"has no 'Nope'; the Gate subclasses it defines: AbsEnergyGate, LeakyAbs"),
        ("my_gates.torch", "example", r"is a module, not a subclass of ega_lightning.gates.Gate"),
        ("my_gates.Thing", "class Thing:\n    pass\n", r"is the class my_gates.Thing, not a subclass of"),
        ("ega_lightning.gates.base.Gate", None, r"abstract class .* implement energy, params_per_layer"),
        ("my_gates.G", "x = (\n", r"importing my_gates failed: SyntaxError: .*my_gates.py, line 1\)"),
        ("my_gates.G", "import not_there\n", r"No module named 'not_there' .*line 1\). Install the missing module"),
        ("my_gates.G", "raise RuntimeError('boom')\n", r"importing my_gates failed: RuntimeError: boom .*line 1"),
        ("wavelet", None, r"Unknown gate 'wavelet'. Registered gates: none, alibi, author, db2, .* by its import path"),
    ],
)
def test_a_bad_gate_path_is_a_user_error_naming_the_fix(gate_sandbox, path, source, match):
    if source == "example":
        shutil.copy(EXAMPLE, gate_sandbox)
    elif source is not None:
        (gate_sandbox / "my_gates.py").write_text(source)
    with pytest.raises(GateError, match=match) as err:
        gate_class(path)
    assert isinstance(err.value, UserError) and isinstance(err.value, ValueError)


def test_bad_paths_on_the_command_line_are_one_paragraph_and_exit_2(gate_sandbox, capsys):
    assert check_gate_main(["nomod.Gate1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ega check-gate: error: Unknown gate 'nomod.Gate1'") and err.count("\n") == 1
    assert list_gates.main(["nomod.Gate1"]) == 2
    assert capsys.readouterr().err.startswith("ega gates: error: Unknown gate 'nomod.Gate1'")


GATE_SOURCE = """
from ega_lightning.gates import register_gate
from ega_lightning.gates.linear import LinearGate

@register_gate("twice")
class TwiceGate(LinearGate):
    pass
"""


def _import_as(name, path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_one_module_imported_under_two_names_registers_once(gate_sandbox):
    path = gate_sandbox / "twice_gates.py"
    path.write_text(GATE_SOURCE)
    first = _import_as("twice_gates", path).TwiceGate
    second = _import_as("pkg_copy.twice_gates", path).TwiceGate  # e.g. `examples.my_gates` and `my_gates`
    assert first is not second and gate_class("twice") is second
    assert "twice" in gate_names()
    other = gate_sandbox / "other_gates.py"
    other.write_text(GATE_SOURCE)  # the same class name in another file: a different gate
    with pytest.raises(GateError, match=r"Two gates claim the name 'twice': twice_gates.TwiceGate|pkg_copy"):
        _import_as("other_gates", other)


def test_register_refuses_names_that_read_as_paths_and_non_gates():
    with pytest.raises(GateError, match="read as import paths"):
        register_gate("my.gate")
    with pytest.raises(GateError, match="'none' is the baseline"):
        register_gate("none")
    with pytest.raises(GateError, match=r"not a subclass of ega_lightning\.gates\.Gate"):
        register_gate("thing")(dict)


def test_entry_point_gates_are_listed_loaded_and_registered(gate_sandbox, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(write_gate_package(gate_sandbox / "site", {"mine": "my_pkg.gates:AbsEnergyGate"})))
    assert "mine" in gate_names()
    cls = gate_class("mine")
    assert cls.__module__ == "my_pkg.gates" and cls.registry_name == "mine"
    assert list_gates.main(["--n_embd", "64", "--n_head", "2"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert rows["mine"][1:6] == ["gate", "entry", "point", "of", "my-pkg"] and rows["mine"][-2:] == ["132", "1"]
    assert rows["linear"][1:] == ["gate", "built-in", "EGA-1", "132", "1"]
    assert rows["multiscale"][1:] == ["gate", "built-in", "EGA-2", "260", "2"]
    assert rows["fox"][1:] == ["gate", "built-in", "peer", "130", "1"]  # n_head (n_embd + 1)
    assert rows["output_headwise"][1:] == ["output_gate", "built-in", "peer", "128", "-"]
    assert rows["output_elementwise"][1:] == ["output_gate", "built-in", "peer", "4096", "-"]


def test_two_entry_points_with_one_name_are_refused(gate_sandbox, monkeypatch):
    monkeypatch.syspath_prepend(str(write_gate_package(gate_sandbox / "a", {"mine": "my_pkg.gates:AbsEnergyGate"})))
    other = {"mine": "my_pkg.gates:LeakyAbsEnergyGate"}
    monkeypatch.syspath_prepend(str(write_gate_package(gate_sandbox / "b", other, dist="other-pkg")))
    with pytest.raises(GateError, match=r"Two installed packages declare a gate named 'mine'.*my-pkg 0.1.*other-pkg"):
        gate_class("mine")


def test_an_entry_point_may_not_take_a_builtin_name(gate_sandbox, monkeypatch):
    monkeypatch.syspath_prepend(str(write_gate_package(gate_sandbox / "a", {"db2": "my_pkg.gates:AbsEnergyGate"})))
    with pytest.raises(GateError, match=r"my-pkg 0.1 declares a gate named 'db2'.*but 'db2' is a built-in gate"):
        gate_names()
    assert gate_class("db2").__module__ == "ega_lightning.gates.wavelet"  # the built-in still works by name


def test_a_broken_entry_point_names_its_package(gate_sandbox, monkeypatch):
    monkeypatch.syspath_prepend(str(write_gate_package(gate_sandbox / "a", {"mine": "my_pkg.nothere:Gate1"})))
    with pytest.raises(GateError, match=r"entry point of the package my-pkg 0.1 .* importing it failed"):
        gate_class("mine")
