"""Issue 70: the model's defaults are stated once, as GPTConfig's fields; CharLM's flat signature reads them."""

import ast
import inspect
from dataclasses import MISSING, fields

from ega_lightning import module
from ega_lightning.model import GPTConfig
from ega_lightning.module import CharLM

# the one field whose default CharLM states apart, said in one place (module.DEFAULT_GATE), and the ones whose
# default is built per instance (dicts)
STATED_APART = {"gate": "DEFAULT_GATE", "gate_options": None, "attention_options": None}


def signature_defaults() -> dict[str, ast.expr]:
    """CharLM.__init__'s parameters and the expressions of their defaults, as module.py writes them."""
    (cls,) = [
        n for n in ast.parse(inspect.getsource(module)).body if isinstance(n, ast.ClassDef) and n.name == "CharLM"
    ]
    (init,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    args = init.args.args
    return {a.arg: d for a, d in zip(args[len(args) - len(init.args.defaults) :], init.args.defaults, strict=True)}


def test_every_model_default_is_read_from_gpt_config_never_written_again():
    written = signature_defaults()
    shared = [f for f in fields(GPTConfig) if f.name in written]
    assert len(shared) >= 14  # every GPTConfig field CharLM takes flat, but vocab_size (its vocab)
    for f in shared:
        default = written[f.name]
        if f.name in STATED_APART:
            name = STATED_APART[f.name]
            assert (isinstance(default, ast.Name) and default.id == name) or (
                name is None and isinstance(default, ast.Constant) and default.value is None
            ), f.name
            continue
        # `MODEL.<field>`: read from GPTConfig's instance, so a literal here (a second statement of it) fails
        assert isinstance(default, ast.Attribute) and (default.value.id, default.attr) == ("MODEL", f.name), f.name
        assert inspect.signature(CharLM.__init__).parameters[f.name].default == f.default != MISSING


def test_the_gates_initialisation_defaults_are_the_ones_a_gate_with_its_own_compares_with():
    written = signature_defaults()
    for name in ("tau_init", "alpha_init"):  # Gate.model_init compares with module.MODEL_INIT
        default = written[name]
        assert isinstance(default, ast.Subscript) and default.value.id == "MODEL_INIT", name
        assert inspect.signature(CharLM.__init__).parameters[name].default == module.MODEL_INIT[name]
    assert CharLM("ab").hparams.gate == module.DEFAULT_GATE == "linear"  # the CLI's documented default: EGA-1
