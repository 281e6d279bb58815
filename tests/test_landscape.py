"""`ega landscape` (issue 17) on a tiny checkpoint kept by KeepCheckpointAt: its numbers against direct evaluations."""

import json
from statistics import NormalDist

import lightning as L
import pytest
import torch

from ega_lightning import CharDataModule, CharLM, tau_landscape
from ega_lightning.commands.landscape import main as landscape_main

from .helpers import TINY_MODEL, tiny_checkpoint

WINDOWS = 8


def windows(data_dir) -> list:
    dm = CharDataModule("tinyshakespeare", data_dir=str(data_dir), block_size=TINY_MODEL["block_size"],
                        max_eval_windows=WINDOWS)  # fmt: skip
    dm.setup()
    return list(dm.eval_windows("val"))


def run_landscape(tmp_path, *ckpts, extra=()) -> dict:
    out = tmp_path / "out" / "landscape.json"
    args = [*(a for c in ckpts for a in ("--ckpt_path", str(c))), "--out", str(out), "--max_eval_windows", str(WINDOWS)]
    assert landscape_main([*args, *extra]) == 0
    text = out.read_text()
    assert str(tmp_path) not in text  # no absolute path in what gets committed
    return json.loads(text)


def test_keep_checkpoint_at_writes_the_chosen_step_once(tmp_path, data_dir):
    final, ckpt = tiny_checkpoint(tmp_path / "run" / "checkpoints", data_dir, steps=3, keep=2)
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["step2.ckpt"]  # nothing else, no .tmp left
    kept = CharLM.load_from_checkpoint(ckpt)
    assert torch.load(ckpt, weights_only=True)["global_step"] == 2
    assert not torch.equal(kept.model.gates[0].tau, final.model.gates[0].tau)  # one step before the end
    unkept, _ = tiny_checkpoint(tmp_path / "unkept", data_dir, steps=3, keep=None)
    for (name, a), b in zip(final.state_dict().items(), unkept.state_dict().values(), strict=True):
        assert torch.equal(a, b), name  # keeping a checkpoint changes nothing in training


def test_landscape_reproduces_plain_evaluation_and_the_baseline_at_alpha_zero(tmp_path, data_dir):
    _, ckpt = tiny_checkpoint(tmp_path / "ts-linear-seed1" / "checkpoints", data_dir)
    result = run_landscape(tmp_path, ckpt)
    (c,) = result["checkpoints"]
    assert (c["name"], c["step"], c["gate"], c["windows"]) == ("ts-linear-seed1/step2.ckpt", 2, "linear", WINDOWS)
    shifts, scales = result["tau_shifts"], result["alpha_scales"]
    # every point is a real evaluation: the unshifted ones equal the plain loss exactly (restores are exact)
    assert c["tau_shift_loss"][shifts.index(0.0)] == c["loss"] == c["alpha_scale_loss"][scales.index(1.0)]
    assert c["tau_shift_loss"][shifts.index(1.0)] != c["loss"]

    kept = CharLM.load_from_checkpoint(ckpt).eval()
    dm = CharDataModule("tinyshakespeare", data_dir=str(data_dir), block_size=TINY_MODEL["block_size"],
                        max_eval_windows=WINDOWS)  # fmt: skip
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    assert c["loss"] == pytest.approx(trainer.validate(kept, dm, verbose=False)[0]["val/loss"], abs=1e-5)

    torch.manual_seed(0)
    baseline = CharLM(kept.hparams.vocab, **TINY_MODEL, gate="none").eval()
    baseline.load_state_dict(kept.state_dict(), strict=False)  # the same weights without the gates
    assert c["alpha_scale_loss"][scales.index(0.0)] == pytest.approx(
        tau_landscape.mean_loss(baseline, windows(data_dir)), abs=1e-5
    )
    with torch.no_grad():  # shifting every tau by d is the same model as one built with tau + d
        for g in kept.model.gates:
            g.tau.add_(-0.5)
    assert c["tau_shift_loss"][shifts.index(-0.5)] == pytest.approx(
        tau_landscape.mean_loss(kept, windows(data_dir)), abs=1e-6
    )

    tau = torch.tensor(c["tau"])
    tail = [1 - NormalDist().cdf(t) for t in tau.flatten().tolist()]  # an independent 1 - Phi
    assert [x for row in c["normal_tail"] for x in row] == pytest.approx(tail, rel=1e-9)
    assert tau.tolist() == [g.tau.tolist() for g in CharLM.load_from_checkpoint(ckpt).model.gates]
    counts = torch.tensor(c["z_counts"])  # (n_layer, bins + 2): every key of every head, once
    assert counts.shape == (TINY_MODEL["n_layer"], len(result["z_edges"]) + 1)
    assert counts.sum(1).tolist() == [WINDOWS * TINY_MODEL["block_size"] * TINY_MODEL["n_head"]] * TINY_MODEL["n_layer"]
    zero = result["z_edges"].index(0.0)  # count `zero` is the bin (-0.1, 0], where every window's z_1 = 0 sits
    assert (counts[:, zero] >= WINDOWS * TINY_MODEL["n_head"]).all()


def test_landscape_eval_znorm_measures_a_leaky_checkpoint_causally(tmp_path, data_dir):
    _, ckpt = tiny_checkpoint(tmp_path, data_dir, gate_options={"znorm": "window"}, alpha_init=3.0)
    leaky, causal = (run_landscape(tmp_path, ckpt, extra=e)["checkpoints"][0] for e in ((), ("--eval_znorm", "prefix")))
    assert (leaky["trained_znorm"], leaky["eval_znorm"], causal["eval_znorm"]) == ("window", "window", "prefix")
    same_weights = CharLM.load_from_checkpoint(ckpt).eval()
    for g in same_weights.model.gates:
        g.znorm = "prefix"
    assert causal["loss"] == pytest.approx(tau_landscape.mean_loss(same_weights, windows(data_dir)), abs=1e-6)
    assert abs(causal["loss"] - leaky["loss"]) > 1e-4


@pytest.mark.parametrize(("gate", "said"), [("none", "baseline"), ("fox", "'fox', which is no energy gate")])
def test_landscape_refuses_a_model_without_tau_and_writes_nothing(tmp_path, data_dir, capsys, gate, said):
    _, ckpt = tiny_checkpoint(tmp_path, data_dir, gate=gate)
    out = tmp_path / "out.json"
    assert landscape_main(["--ckpt_path", str(ckpt), "--out", str(out)]) == 2
    assert said in capsys.readouterr().err and not out.exists()
