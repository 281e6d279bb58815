"""Options every gate takes (issue 17): znorm (the causal prefix, or the leaky whole-window diagnostic),
learn_tau (a frozen threshold), the evaluation-time z-norm override, and the gate logging they need."""

import json
import re

import lightning as L
import pytest
import torch

from ega_lightning import CharDataModule, CharLM
from ega_lightning.callbacks import TauTracker
from ega_lightning.commands import generate
from ega_lightning.errors import UserError
from ega_lightning.gates import Gate, build_gate, gate_class, gate_names, window_znorm
from ega_lightning.module import RUNTIME_KEYS

from .helpers import TINY_MODEL, TINY_VOCAB, run_ega, tiny_checkpoint

GATED = [name for name in gate_names(Gate) if name != "none"]
C, NH = TINY_MODEL["n_embd"], TINY_MODEL["n_head"]


def tiny(gate: str = "linear", **kwargs) -> CharLM:
    torch.manual_seed(0)
    return CharLM(TINY_VOCAB, **{**TINY_MODEL, "gate": gate, **kwargs}).eval()


def first_changed_position(model: CharLM, t: int) -> int:
    """Changes token t of a batch; the first position whose logits move (T if none)."""
    torch.manual_seed(1)
    idx = torch.randint(0, len(TINY_VOCAB), (2, TINY_MODEL["block_size"]))
    changed = idx.clone()
    changed[:, t] = (changed[:, t] + 1) % len(TINY_VOCAB)
    with torch.no_grad():
        moved = (model(idx) - model(changed)).abs().amax(dim=(0, 2)) > 0  # (T,)
    return int(moved.nonzero()[0]) if moved.any() else idx.shape[1]


def test_window_znorm_uses_the_whole_windows_mean_and_population_variance():
    e = torch.randn(3, 2, 40, dtype=torch.float64) * 4 + 50
    mean, var = e.mean(-1, keepdim=True), ((e - e.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True)
    torch.testing.assert_close(window_znorm(e), (e - mean) / torch.sqrt(var + 1e-5), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("gate", GATED)
@pytest.mark.parametrize("attention", ["fused", "reference"])
def test_causality_check_flags_window_znorm_and_passes_the_prefix_default(gate, attention):
    t = 20
    assert first_changed_position(tiny(gate, attention=attention), t) == t  # causal: nothing before t moves
    # float64: position 1's move is some 1e-8 for a morlet gate, which fp32's rounding can leave at exactly 0
    leaky = tiny(gate, attention=attention, gate_options={"znorm": "window"}).double()
    assert first_changed_position(leaky, t) < t  # the leak: an earlier position sees token t
    # through the window's statistics every key's gate moves; position 0 has one key, which its softmax renormalises
    assert first_changed_position(leaky, t) == 1


@pytest.mark.parametrize("gate", GATED)
def test_common_options_reach_every_gate_and_add_no_parameter(gate):
    plain = build_gate(gate, C, NH)
    leaky_frozen = build_gate(gate, C, NH, znorm="window", learn_tau=False)
    assert (plain.znorm, plain.tau.requires_grad) == ("prefix", True)
    assert (leaky_frozen.znorm, leaky_frozen.tau.requires_grad) == ("window", False)
    assert leaky_frozen.state_dict().keys() == plain.state_dict().keys()
    count = sum(p.numel() for p in leaky_frozen.parameters())
    assert count == gate_class(gate).params_per_layer(C, NH) == sum(p.numel() for p in plain.parameters())
    assert (
        tiny(gate, gate_options={"znorm": "window"}).model.gate_parameter_count()
        == tiny(gate).model.gate_parameter_count()
    )


@pytest.mark.parametrize(
    "gate,options",
    [("linear", {"znorm": "future"}), ("db2", {"learn_tau": "no"}), ("none", {"znorm": "window"})],
)
def test_bad_common_options_are_refused(gate, options):
    with pytest.raises(ValueError, match=r"znorm|learn_tau"):
        tiny(gate, gate_options=options)


def test_bad_eval_znorm_is_refused():
    with pytest.raises(ValueError, match="eval_znorm"):
        tiny(eval_znorm="future")


def test_frozen_tau_stays_at_tau_init_while_the_other_weights_train(tmp_path, data_dir):
    start = tiny(tau_init=1.0)
    frozen, _ = tiny_checkpoint(tmp_path / "frozen", data_dir, tau_init=1.0, gate_options={"learn_tau": False})
    learned, _ = tiny_checkpoint(tmp_path / "learned", data_dir, tau_init=1.0)
    for gate, first in zip(frozen.model.gates, start.model.gates, strict=True):
        assert torch.equal(gate.tau, torch.full_like(gate.tau, 1.0))  # not one bit moved
        assert not torch.equal(gate.alpha, first.alpha) and not torch.equal(gate.proj.weight, first.proj.weight)
    assert all(not torch.equal(g.tau, torch.full_like(g.tau, 1.0)) for g in learned.model.gates)  # the control


def _validate(model: CharLM, data_dir) -> float:
    dm = CharDataModule("tinyshakespeare", data_dir=str(data_dir), block_size=TINY_MODEL["block_size"], batch_size=4)
    dm.max_eval_windows = 8
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    return trainer.validate(model, dm, verbose=False)[0]["val/loss"]


def test_eval_znorm_evaluates_the_same_weights_with_another_znorm_and_restores_the_trained_one(data_dir):
    assert "eval_znorm" in RUNTIME_KEYS
    leaky = tiny(gate_options={"znorm": "window"}, alpha_init=3.0)
    leaky_as_prefix = tiny(gate_options={"znorm": "window"}, alpha_init=3.0, eval_znorm="prefix")
    causal = tiny(alpha_init=3.0)
    for model in (leaky_as_prefix, causal):
        model.load_state_dict(leaky.state_dict())  # the same weights: the znorm is the only difference
    as_trained, overridden, reference = (_validate(m, data_dir) for m in (leaky, leaky_as_prefix, causal))
    assert overridden == pytest.approx(reference, abs=1e-6)
    assert abs(as_trained - reference) > 1e-4  # the override did change something
    assert all(g.znorm == "window" for g in leaky_as_prefix.model.gates)  # the trained model is unchanged


def test_generate_refuses_a_window_znorm_checkpoint(tmp_path, data_dir):
    lm, ckpt = tiny_checkpoint(tmp_path, data_dir, gate_options={"znorm": "window"})
    with pytest.raises(UserError, match="znorm=window"):
        generate.main(["--ckpt_path", str(ckpt), "--max_new_tokens", "3"])
    with pytest.raises(ValueError, match="causal z-norm"):  # below the command too: the cache would be wrong
        lm.model.gates[0].step(torch.randn(1, 2, C), None)


class GateGradients(L.Callback):
    """Keeps the gate parameters' gradients of the last optimizer step (as TauTracker sees them)."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.grads = {
            n: p.grad.clone() for n, p in pl_module.named_parameters() if ".gate." in n and p.grad is not None
        }


@pytest.mark.parametrize("learn_tau", [True, False])
def test_tau_tracker_logs_gate_gradient_norms_and_the_fraction_above_tau_per_head(tmp_path, data_dir, learn_tau):
    torch.manual_seed(0)
    dm = CharDataModule("tinyshakespeare", data_dir=str(data_dir), block_size=TINY_MODEL["block_size"], batch_size=4)
    dm.max_eval_windows = 4
    lm = CharLM(dm.vocab, **TINY_MODEL, gate="db2", gate_options={"learn_tau": learn_tau})
    tracker, grads = TauTracker(window=2), GateGradients()
    trainer = L.Trainer(
        max_steps=4, val_check_interval=2, check_val_every_n_epoch=None, num_sanity_val_steps=0,
        default_root_dir=tmp_path, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[tracker, grads],
    )  # fmt: skip
    trainer.fit(lm, dm)
    metrics = trainer.callback_metrics

    def norm(kind: str) -> float:
        return torch.linalg.vector_norm(torch.stack([g.norm() for n, g in grads.grads.items() if kind(n)])).item()

    assert metrics["gate/grad_norm/alpha"].item() == pytest.approx(norm(lambda n: n.endswith(".alpha")), rel=1e-6)
    assert metrics["gate/grad_norm/energy"].item() == pytest.approx(norm(lambda n: ".u." in n), rel=1e-6)
    if learn_tau:
        assert metrics["gate/grad_norm/tau"].item() == pytest.approx(norm(lambda n: n.endswith(".tau")), rel=1e-6)
    else:
        assert "gate/grad_norm/tau" not in metrics
    per_head = torch.tensor(tracker.history[-1]["frac_above_tau_per_head"])  # (n_layer, nh)
    assert per_head.shape == (TINY_MODEL["n_layer"], NH)
    for layer in range(per_head.shape[0]):
        logged = [metrics[f"gate/frac_above_tau/layer_{layer}/head_{h}"].item() for h in range(NH)]
        assert logged == pytest.approx(per_head[layer].tolist())
        assert metrics[f"gate/frac_above_tau/layer_{layer}"].item() == pytest.approx(per_head[layer].mean().item())
    summary = json.loads((tmp_path / "gate_summary.json").read_text())
    assert summary["final"]["frac_above_tau_per_head"] == tracker.history[-1]["frac_above_tau_per_head"]


@pytest.mark.slow
def test_validate_flag_eval_znorm_wins_over_the_checkpoint(tmp_path, data_dir):
    _, ckpt = tiny_checkpoint(tmp_path, data_dir, gate_options={"znorm": "window"}, alpha_init=3.0)
    common = ["validate", "--ckpt_path", str(ckpt), "--data.max_eval_windows=8", "--trainer.logger=false"]
    env = {"EGA_DATA_DIR": str(data_dir)}
    losses = []
    for extra in ([], ["--model.eval_znorm=prefix"]):
        out = run_ega([*common, *extra], cwd=tmp_path, env=env)
        assert out.returncode == 0, out.stderr
        losses.append(float(re.search(r"val/loss\s+([0-9.]+)", out.stdout).group(1)))
    assert abs(losses[0] - losses[1]) > 1e-4
