"""A run's reference, defined once (`comparisons.reference`, issue 53 and issue 56 item 5): a gated variant pairs with
the gate-less variant of its setup (corpus, model shape, recipe less the gate's own options and the attention path),
unless a study names another reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ega_lightning.experiments import comparisons
from ega_lightning.experiments.comparisons import GATE_OWN, PATH_KEYS, RECIPE_DEFAULTS, RunData, Variant, reference
from ega_lightning.experiments.spec import Run

# a value of each recipe key other than its default, to vary one key at a time
OTHER_VALUE: dict[str, Any] = {
    "dropout": 0.1,
    "bias": False,
    "gate": "fox",
    "tau_init": 0.5,
    "alpha_init": 2.0,
    "gate_options": {"learn_tau": False},
    "eval_znorm": "window",
    "attention": "reference",
    "attention_options": {"copy_free_write": False},
    "lr": 1e-2,
    "min_lr": 1e-5,
    "warmup_steps": 10,
    "weight_decay": 0.0,
    "betas": [0.9, 0.95],
    "output_gate": "output_headwise",
    "qkv_bias": False,
    "scale_residual_init": False,
    "dropout_before_gate": True,
    "decay_every_parameter": True,
    "position": "rope",
    "batch_size": 32,
    "eval_batch_size": 8,
    "max_eval_windows": 100,
    "random_eval_batches": 4,
    "random_eval_seed": 1,
    "eval_block_size": 64,
}


def variant(label: str, gate: str, group: str = "main", seeds: tuple[int, ...] = (1, 2, 3), **hparams: Any) -> Variant:
    """A finished variant of ``gate`` on TinyShakespeare at one small shape, ``hparams`` over its recorded recipe."""
    runs = []
    for seed in seeds:
        run = Run(Path("s.yaml"), label, seed, (), (), group, label)
        recorded = {"corpus": "tinyshakespeare", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32}
        recorded |= {"gate": gate, "seed": seed, **hparams}
        metrics = {"final_val_loss": 1.5 - 0.01 * (gate != "none"), "best_val_loss": 1.5, "final_gap": 0.1}
        common = {"status": "done", "reason": "", "corpus": "tinyshakespeare", "gate": gate, "max_steps": 100}
        runs.append(
            RunData(
                run=run, **common, output_gate=hparams.get("output_gate", "none"), hparams=recorded, metrics=metrics
            )
        )
    return Variant(group, "tinyshakespeare", label, runs)


def label(v: Variant | None) -> str | None:
    return v.label if v is not None else None


def test_the_recipe_keys_are_the_gates_own_the_attention_path_or_compared():
    """The rule as data: every recipe key is either the gate's own (`GATE_OWN`), the attention path (`PATH_KEYS`),
    or compared; a baseline that differs from a gated variant in one key is its reference exactly when that key is not
    compared."""
    assert set(OTHER_VALUE) == set(RECIPE_DEFAULTS)  # every recipe key this test varies
    assert set(GATE_OWN) == {"gate", "output_gate", "gate_options", "tau_init", "alpha_init", "eval_znorm"} | {
        "dropout_before_gate"
    }
    assert set(PATH_KEYS) == {"attention", "attention_options"}
    paired = set()
    for key, value in OTHER_VALUE.items():
        if key in ("gate", "output_gate"):
            continue  # a baseline has neither: varied on the gated side below
        gated = variant("gated", "linear", **{key: value})
        base = variant("base", "none")
        if reference(gated, [gated, base]) is base:
            paired.add(key)
    assert paired == (set(GATE_OWN) | set(PATH_KEYS)) - {"gate", "output_gate"}
    headwise = variant("headwise", "none", output_gate="output_headwise")
    assert headwise.gated and reference(headwise, [headwise, variant("base", "none")]) is not None


def test_a_rope_gated_variant_is_never_paired_with_a_learned_position_baseline():
    learned_base = variant("none", "none")  # its own group, first in spec order, learned positions
    rope_gate = variant("linear-rope", "linear", position="rope")
    assert reference(rope_gate, [learned_base, rope_gate]) is None
    assert comparisons.make_row(rope_gate, [learned_base, rope_gate]).baseline is None  # the table's row asks it too
    rope_base = variant("none-rope", "none", group="rope", position="rope")
    variants = [learned_base, rope_gate, rope_base]
    assert label(reference(rope_gate, variants)) == "none-rope"
    assert comparisons.make_row(rope_gate, variants).diffs["final_val_loss"].estimate == pytest.approx(0.01)
    # and a learned-position gate never takes the RoPE baseline, whichever comes first
    learned_gate = variant("linear", "linear", group="rope")
    assert label(reference(learned_gate, [rope_base, learned_gate, learned_base])) == "none"


def test_a_dropout_before_gate_variant_pairs_with_the_plain_baseline_of_its_setup():
    """The author's order (dropout, gate, renormalise) trains on the reference path with its own tau_init: none of it
    is a setup, so its baseline is the plain gate-less model of the same recipe, not one of another lr."""
    author = {"dropout": 0.1, "dropout_before_gate": True, "attention": "reference", "tau_init": 0.5}
    gated = variant("author-ega1", "author", group="author", **author, gate_options={"scales": 1})
    other_lr = variant("none-lr", "none", group="author", dropout=0.1, lr=1e-2)
    plain = variant("none", "none", group="main", dropout=0.1)
    assert label(reference(gated, [other_lr, gated, plain])) == "none"
    assert reference(gated, [other_lr, gated]) is None


def test_a_study_that_names_its_reference_gets_it():
    base = variant("none", "none")
    ega1 = variant("linear", "linear")
    ega4 = variant("multiscale4", "multiscale4", gate_options={"scales": 4})
    frozen = variant("frozen", "linear", tau_init=0.5, gate_options={"learn_tau": False})
    learned_other_init = variant("linear-0", "linear", tau_init=0.0)
    learned_same_init = variant("linear-05", "linear", group="tau_init", tau_init=0.5)
    variants = [base, ega1, ega4, frozen, learned_other_init, learned_same_init]

    def is_linear(v: comparisons.Variant) -> bool:  # a study's named reference: the variant of EGA-1's gate
        return v.gate == "linear"

    assert label(reference(ega4, variants)) == "none"  # no name: the baseline
    assert label(reference(ega4, variants, is_linear)) == "linear"  # the ablation names EGA-1
    assert label(reference(base, variants, is_linear)) == "linear"
    assert reference(base, variants) is None  # a baseline has no reference of its own
    # the frozen-tau study names the same gate learned from the same tau_init, in another group if need be
    assert label(reference(frozen, variants, comparisons.learned(frozen))) == "linear-05"
    # a named reference is still of the variant's setup: EGA-1 at another position is not it
    rope_ega4 = variant("multiscale4-rope", "multiscale4", position="rope", gate_options={"scales": 4})
    assert reference(rope_ega4, [*variants, rope_ega4], is_linear) is None
