"""Every shipped YAML parses and builds its model, in every composition the README and docs/configs.md offer."""

import itertools
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from ega_lightning import CharDataModule, CharLM
from ega_lightning.commands.lightning_cli import EgaCLI
from ega_lightning.data.corpora import DATA_DIR_ENV
from ega_lightning.experiments.spec import Run, collect_runs, fit_args
from ega_lightning.experiments.sweep import load_spec
from ega_lightning.runs import default_run_name

from .helpers import CONFIGS

SIZES = sorted(CONFIGS.glob("size/*.yaml"))
CORPORA_CFG = sorted(CONFIGS.glob("corpus/*.yaml"))
GATES = sorted(CONFIGS.glob("gate/*.yaml"))
OUTPUT_GATES = sorted(CONFIGS.glob("output_gate/*.yaml"))
POSITION_CFG = sorted(CONFIGS.glob("position/*.yaml"))
RECIPES = sorted(CONFIGS.glob("recipe/*.yaml"))  # composed in tests/test_author_ega.py
COMBOS = list(itertools.product(SIZES, CORPORA_CFG, GATES))


SWEEPS = sorted(CONFIGS.glob("sweeps/*.yaml"))


def test_every_yaml_is_covered_by_a_composition():
    shipped = set(CONFIGS.rglob("*.yaml")) - set(SWEEPS) - {CONFIGS / "protocol.yaml"}  # tests/test_protocol.py
    covered = {CONFIGS / "base.yaml", *SIZES, *CORPORA_CFG, *GATES, *OUTPUT_GATES, *POSITION_CFG, *RECIPES}
    assert shipped == covered, f"configs not exercised by this test: {sorted(shipped - covered)}"
    for path in shipped:
        assert isinstance(yaml.safe_load(path.read_text()), dict), path


@pytest.mark.parametrize("output_gate", OUTPUT_GATES, ids=lambda p: p.stem)
def test_an_output_gate_config_fills_its_slot_beside_any_gate_config(output_gate, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["ega"])
    parts = ("base.yaml", "size/cpu.yaml", "corpus/tinyshakespeare.yaml", "gate/linear.yaml")
    args = [a for p in [*(CONFIGS / part for part in parts), output_gate] for a in ("--config", str(p))]
    cli = EgaCLI(CharLM, CharDataModule, run=False, auto_configure_optimizers=False, args=args)
    name = yaml.safe_load(output_gate.read_text())["model"]["output_gate"]
    assert (cli.model.hparams.gate, cli.model.hparams.output_gate) == ("linear", name)
    assert len(cli.model.model.output_gates) == cli.model.hparams.n_layer
    assert f"-linear+{name}-" in default_run_name(cli.config)


@pytest.mark.parametrize("gate", ["linear", "alibi_nopos"])
@pytest.mark.parametrize("position", POSITION_CFG, ids=lambda p: p.stem)
def test_a_position_config_sets_the_encoding_beside_any_gate_config(position, gate, tmp_path, monkeypatch):
    """-c position/<p>.yaml after a gate config wins over the gate config's own position (alibi_nopos: none), and
    the run's name says the encoding."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["ega"])
    parts = ("base.yaml", "size/cpu.yaml", "corpus/tinyshakespeare.yaml", f"gate/{gate}.yaml")
    args = [a for p in [*(CONFIGS / part for part in parts), position] for a in ("--config", str(p))]
    cli = EgaCLI(CharLM, CharDataModule, run=False, auto_configure_optimizers=False, args=args)
    name = yaml.safe_load(position.read_text())["model"]["position"]
    assert cli.model.hparams.position == cli.model.model.cfg.position == name
    assert cli.model.model.wpe is None  # rope and none: no learned embedding
    assert f"-pos{name}-4x4x128-" in default_run_name(cli.config)


def test_each_peer_in_its_papers_design_has_no_position_but_its_bias():
    """ALiBi's and FoX's papers run them without a position embedding: their _nopos configs say so, and the
    run's name tells them from the runs on learned positions."""
    for peer in ("alibi", "fox"):
        model = yaml.safe_load((CONFIGS / "gate" / f"{peer}_nopos.yaml").read_text())["model"]
        assert model == {"gate": peer, "position": "none"}
        name = default_run_name(
            {
                "model": {**model, "n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128},
                "data": {"corpus": "tinyshakespeare", "seed": 1},
            }
        )
        assert name == f"tinyshakespeare-{peer}-posnone-4x4x128-T128-seed1"


@pytest.mark.parametrize("size,corpus,gate", COMBOS, ids=lambda p: p.stem)
def test_composed_config_builds_model(size, corpus, gate, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # instantiating the trainer must not write into the repository
    monkeypatch.setattr("sys.argv", ["ega"])
    args = ["--config", str(CONFIGS / "base.yaml")] + [a for p in (size, corpus, gate) for a in ("--config", str(p))]
    cli = EgaCLI(CharLM, CharDataModule, run=False, auto_configure_optimizers=False, args=args)
    expected = {**yaml.safe_load(size.read_text())["model"], **yaml.safe_load(gate.read_text())["model"]}
    for key, value in expected.items():
        assert cli.model.hparams[key] == value
    assert cli.datamodule.corpus.name == yaml.safe_load(corpus.read_text())["data"]["corpus"]
    assert cli.model.hparams.vocab == cli.datamodule.vocab  # linked, never typed
    assert cli.datamodule.block_size == cli.model.hparams.block_size
    idx = cli.datamodule.tokenizer.encode("the " * 4)[None]
    assert cli.model(idx).shape == (1, 16, len(cli.datamodule.vocab))
    run_name = default_run_name(cli.config)
    assert Path(cli.trainer.logger.log_dir).resolve() == tmp_path / "lightning_logs" / run_name


@pytest.mark.parametrize("spec", SWEEPS, ids=lambda p: p.stem)
def test_sweep_specs_load_and_name_only_shipped_configs(spec, monkeypatch):
    monkeypatch.chdir(CONFIGS.parent)  # spec paths are relative to the repository root
    sweep = load_spec(spec)  # raises on unknown keys, missing config files, duplicate run names
    assert sweep.runs
    for run in sweep.runs:
        assert set(run.configs) <= {str(p.relative_to(CONFIGS.parent)) for p in CONFIGS.rglob("*.yaml")}


def test_an_entry_named_in_two_specs_is_one_run_in_both(monkeypatch):
    """More seeds of an entry (in a spec of their own) join the entry of the same name elsewhere: same
    variant, group, report sections, configs and arguments, or the report splits one variant in two."""
    monkeypatch.chdir(CONFIGS.parent)
    entries: dict[str, tuple[str, object]] = {}
    for spec in SWEEPS:
        for run in load_spec(spec).runs:
            shape = (run.variant, run.group, run.also_in, run.configs, run.args)
            first = entries.setdefault(run.entry, (spec.name, shape))
            assert first[1] == shape, f"{run.entry}: {first[0]} and {spec.name} declare it differently"


def test_the_gates_sweep_runs_every_registered_gate_of_both_slots_on_both_corpora():
    """configs/sweeps/gates.yaml says it runs every gate of the registry: each built-in gate name, either slot,
    is trained by one of its runs on TinyShakespeare and on PTB (read from the gate configs each run names)."""
    from ega_lightning.experiments.spec import load_spec
    from ega_lightning.gates.registry import registered_gates

    runs = load_spec(CONFIGS / "sweeps" / "gates.yaml", check_files=False).runs
    for corpus in ("tinyshakespeare", "ptb"):
        trained = set()
        for r in (r for r in runs if f"configs/corpus/{corpus}.yaml" in r.configs):
            for config in r.configs:
                model = (yaml.safe_load((CONFIGS.parent / config).read_text()) or {}).get("model") or {}
                trained |= {model.get("gate"), model.get("output_gate")} - {None}
        assert {"none", *registered_gates()} <= trained, corpus


def distinct_configurations() -> list[Run]:
    """One run of each configuration the shipped sweep specs train: runs that differ only in their seed (or name
    or label) build the same model with the same recipe, data and evaluation."""
    runs = collect_runs(load_spec(path, check_files=False) for path in SWEEPS)
    return list({(r.configs, r.args): r for r in runs}.values())


# the CLI's own arguments, which say where a run is written, not what it trains
WHERE = ("--run_name=", "--runs_dir=", "--trainer.enable_progress_bar=")


@pytest.mark.slow
@pytest.mark.parametrize("run", distinct_configurations(), ids=lambda r: f"{r.spec.stem}-{r.entry}")
def test_every_configuration_of_the_shipped_sweeps_builds_and_takes_a_step(run, data_dir, monkeypatch):
    """Each configuration parsed as `ega fit` parses it, its model, data and optimizer built from it, and one
    optimizer step taken on two of its real training windows under its precision: a config that no longer parses,
    builds or trains fails here, in ~2 s, not hours into a sweep. The trainer's loop is left out (a fast_dev_run
    costs a minute a config: its generalization gap evaluates a whole split's worth of training windows)."""
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    args = [a for a in fit_args(run)[1:] if not a.startswith(WHERE)]
    cli = EgaCLI(
        CharLM, CharDataModule, run=False, auto_configure_optimizers=False, args=[*args, "--data.batch_size=2"]
    )
    lm, dm = cli.model, cli.datamodule
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))  # (2, T) each
    assert x.shape == (2, lm.hparams["block_size"])
    lm.trainer = SimpleNamespace(max_steps=cli.trainer.max_steps)  # what configure_optimizers reads
    optimizer = lm.configure_optimizers()["optimizer"]
    before = lm.model.wte.weight.detach().clone()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=str(cli.trainer.precision).startswith("bf16")):
        loss = lm.loss((x, y))
    loss.backward()
    optimizer.step()
    # one step from initialisation: the loss near log(vocab), every gradient finite, the weights moved
    assert abs(loss.item() - math.log(len(lm.hparams["vocab"]))) < 1.0, loss.item()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in lm.parameters())
    assert not torch.equal(before, lm.model.wte.weight)
