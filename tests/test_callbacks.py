"""The claim-tracking callbacks: their numbers against direct computations, in fp32 and bf16."""

import json
import logging
import math
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ega_lightning import CharLM
from ega_lightning.callbacks import GateMap, GeneralizationGap, RunLogger, StepPace, TauTracker, board
from ega_lightning.callbacks import pace as pace_module
from ega_lightning.callbacks.gate_map import WIDTH_IN, gate_map_figure
from ega_lightning.callbacks.probe import GateProbe, SlotProbe
from ega_lightning.data.datamodule import SequentialWindows

from .helpers import TINY_MODEL, TINY_VOCAB, validate_tiny


def trained_tiny(gate: str = "linear", steps: int = 20, seed: int = 0) -> CharLM:
    """A tiny model moved away from its initialisation, so gates and losses are not trivial."""
    torch.manual_seed(seed)
    model = CharLM(TINY_VOCAB, **TINY_MODEL, gate=gate, tau_init=0.2)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    for _ in range(steps):
        idx = torch.randint(0, len(TINY_VOCAB), (8, TINY_MODEL["block_size"] + 1))
        model.loss((idx[:, :-1], idx[:, 1:])).backward()
        opt.step()
        opt.zero_grad()
    return model.eval()


def test_probe_counts_keys_above_tau_and_mean_gate():
    model = trained_tiny()
    idx = torch.randint(0, len(TINY_VOCAB), (3, TINY_MODEL["block_size"]))
    with torch.no_grad(), GateProbe(model) as probe:
        model(idx)
    above, mean_gate = probe.fractions(probe.totals())
    # recompute directly from the gates' inputs, captured independently
    inputs = []
    handles = [g.register_forward_hook(lambda m, i, o: inputs.append(i[0])) for g in model.model.gates]
    with torch.no_grad():
        model(idx)
    for h in handles:
        h.remove()
    for layer, (gate, x) in enumerate(zip(model.model.gates, inputs, strict=True)):
        z = gate.z(x)  # (B, nh, T)
        torch.testing.assert_close(above[layer], (z > gate.tau[:, None]).float().mean(dim=(0, 2)))
        torch.testing.assert_close(mean_gate[layer], gate(x).exp().mean(dim=(0, 2)))
    assert 0 < above.mean() < 1


def test_tau_convergence_needs_a_full_quiet_window_and_survives_a_restart():
    tracker = TauTracker(window=3, tolerance=0.01)
    taus = [0.0, 0.2, 0.3, 0.345, 0.35, 0.352, 0.351]
    for i, tau in enumerate(taus[:5]):
        tracker._update_convergence(100 * (i + 1), {"gate/tau_mean": tau}, torch.tensor([[tau]]))
    assert tracker.converged is None  # 0.3, 0.345, 0.35 still spans 0.05
    restored = TauTracker(window=3, tolerance=0.01)
    restored.load_state_dict(json.loads(json.dumps(tracker.state_dict())))  # as a checkpoint would carry it
    for i, tau in enumerate(taus[5:], start=5):
        restored._update_convergence(100 * (i + 1), {"gate/tau_mean": tau}, torch.tensor([[tau]]))
    assert restored.converged == {"step": 600, "tau_mean": 0.352}  # 0.345, 0.35, 0.352
    assert [h["step"] for h in restored.history] == [100, 200, 300, 400, 500, 600, 700]


def test_gap_is_val_minus_train_loss_on_fixed_training_windows(data_dir):
    model = trained_tiny()
    dm, metrics = validate_tiny(model, data_dir, [GeneralizationGap()])
    windows = SequentialWindows(dm.splits["train"], dm.block_size, 16, max_windows=40)
    assert windows.num_windows == 40  # as many training windows as validation windows
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in windows:
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    assert metrics["train_eval/loss"] == pytest.approx(total / count, rel=1e-5)
    assert metrics["gap"] == pytest.approx(metrics["val/loss"] - metrics["train_eval/loss"], abs=1e-6)
    assert metrics["train_eval/bpc"] == pytest.approx(metrics["train_eval/loss"] / math.log(2), rel=1e-6)


@pytest.mark.parametrize("limit", [1, 2])
def test_gap_reads_as_many_training_windows_as_the_trainer_evaluates(limit, data_dir):
    """limit_val_batches (and fast_dev_run, which sets it to 1) cut the training windows too."""
    model = trained_tiny()
    dm, metrics = validate_tiny(model, data_dir, [GeneralizationGap()], limit_val_batches=limit)
    windows = SequentialWindows(dm.splits["train"], dm.block_size, 16, max_windows=16 * limit)
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in windows:
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    assert count == 16 * limit * dm.block_size
    assert metrics["train_eval/loss"] == pytest.approx(total / count, rel=1e-5)


def test_tau_tracker_logs_every_head_and_ignores_other_passes(data_dir):
    model = trained_tiny()
    # GeneralizationGap runs an extra pass over training windows; it must not leak into the statistics
    _, with_gap = validate_tiny(model, data_dir, [GeneralizationGap(), TauTracker()])
    _, alone = validate_tiny(model, data_dir, [TauTracker()])
    for layer in range(TINY_MODEL["n_layer"]):
        for head in range(TINY_MODEL["n_head"]):
            tag = f"gate/tau/layer_{layer}/head_{head}"
            assert alone[tag] == pytest.approx(model.model.gates[layer].tau[head].item())
    for tag in ("gate/frac_above_tau", "gate/mean_gate", "gate/frac_above_tau/layer_1"):
        assert with_gap[tag] == pytest.approx(alone[tag], abs=1e-7)
    assert 0 < alone["gate/frac_above_tau"] < 1 and 0 < alone["gate/mean_gate"] < 1


def test_callbacks_are_no_ops_for_the_baseline(data_dir):
    model = trained_tiny(gate="none")
    _, metrics = validate_tiny(model, data_dir, [TauTracker(), GateMap()])
    assert not any(key.startswith("gate/") for key in metrics)


def test_gate_runs_in_fp32_under_bf16_autocast():
    model = trained_tiny()
    gate = model.model.gates[1]
    x = torch.randn(2, TINY_MODEL["block_size"], TINY_MODEL["n_embd"])
    with torch.no_grad():
        reference = gate(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            under_autocast = gate(x)
    assert under_autocast.dtype == torch.float32
    torch.testing.assert_close(under_autocast, reference, atol=0, rtol=0)


def test_bf16_model_gate_values_stay_close_to_fp32():
    """Stated tolerance: layer 0 equal to fp32 rounding (1e-5: its input is exact, and its energy
    projection runs in fp32); deeper layers, whose inputs carry bf16 matmul error, within 0.1 at
    worst and 0.02 on average, for a model trained away from its initialisation."""
    model = trained_tiny(steps=40)
    idx = torch.randint(0, len(TINY_VOCAB), (4, TINY_MODEL["block_size"]))
    with torch.no_grad(), GateProbe(model, keep_last=True) as fp32:
        model(idx)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), GateProbe(model, keep_last=True) as bf16:
        model(idx)
    torch.testing.assert_close(bf16.last[0], fp32.last[0], atol=1e-5, rtol=0)
    for a, b in zip(fp32.last, bf16.last, strict=True):
        assert (a - b).abs().max() < 0.1 and (a - b).abs().mean() < 0.02


def test_gate_map_figure_has_one_row_per_head_and_its_colour_bar_inside():
    fig = gate_map_figure("to be\nor not", torch.rand(3, 12), layer=1)
    ax = fig.axes[0]
    assert ax.images[0].get_array().shape == (3, 12)
    assert [t.get_text() for t in ax.texts[:12]] == list("to·be⏎or·not")
    assert len(ax.texts) == 3 * 12 and [t.get_text() for t in ax.get_yticklabels()] == ["head 0", "head 1", "head 2"]
    assert len(fig.axes) == 2 and fig.get_size_inches()[0] == WIDTH_IN  # the bar is the figure's, the width bounded


def test_gate_maps_are_drawn_first_on_schedule_and_at_the_last_validation():
    """Validations every 250 steps of a 1,500-step run, maps every 1,000: the first (250), the first past 1,000
    (1,000) and the last (1,500); resumed at 750, the first validation after the resume draws again."""
    gate_map = GateMap(every_n_steps=1000)
    assert [s for s in range(250, 1501, 250) if gate_map.due(s, 1500)] == [250, 1000, 1500]
    resumed = GateMap(every_n_steps=1000)
    assert [s for s in range(750, 1501, 250) if resumed.due(s, 1500)] == [750, 1000, 1500]


def test_slot_diagnostics_are_foxs_forget_gate_written_out():
    """FoX's mean forget gate per layer and head from the probe against sigmoid(w_h . x + b_h) over the layer's
    LayerNorm-ed input, captured independently; its memory is 1 / (1 - that mean)."""
    model = trained_tiny(gate="fox")
    idx = torch.randint(0, len(TINY_VOCAB), (3, TINY_MODEL["block_size"]))
    inputs = []
    handles = [b.ln_1.register_forward_hook(lambda m, i, o: inputs.append(o)) for b in model.model.blocks]
    with torch.no_grad(), SlotProbe(model) as probe:
        model(idx)
    for h in handles:
        h.remove()
    means = probe.means(probe.totals(torch.device("cpu")))
    for layer, (block, x) in enumerate(zip(model.model.blocks, inputs, strict=True)):
        f = torch.sigmoid(x @ block.attn.gate.proj.weight.T + block.attn.gate.proj.bias)  # (B, T, nh)
        torch.testing.assert_close(means["forget"][layer], f.mean(dim=(0, 1)))
        torch.testing.assert_close(means["memory"][layer], 1 / (1 - f.mean(dim=(0, 1))))
    assert probe.titles().keys() == {"forget", "memory"} and not SlotProbe(trained_tiny()).active  # EGA-1: none


def test_tau_never_converges_frozen_or_during_the_warm_up():
    taus = [0.0, 0.0, 0.0, 0.0, 0.0]
    frozen = TauTracker(window=3, tolerance=0.01)
    for i, tau in enumerate(taus):
        frozen._update_convergence(100 * (i + 1), {"gate/tau_mean": tau}, torch.tensor([[tau]]), after=None)
    assert frozen.converged is None  # a frozen tau is quiet, and says nothing
    warming = TauTracker(window=3, tolerance=0.01)
    for i, tau in enumerate(taus):
        warming._update_convergence(100 * (i + 1), {"gate/tau_mean": tau}, torch.tensor([[tau]]), after=250)
    assert warming.converged == {"step": 500, "tau_mean": 0.0}  # 300, 400, 500: the first window after step 250


def test_hparams_columns_are_one_set_and_a_run_states_only_its_gates_options():
    columns = [name for name, _ in board.columns()]
    assert columns[:3] == ["gate", "output_gate", "corpus"] and columns[-1] == "seed"
    assert "gate.tau_init" in columns and "gate.learn_tau" in columns
    base = {"data": {"corpus": "tinyshakespeare", "batch_size": 32}, "trainer": {"max_steps": 1500}, "seed": 1}
    model = {"gate": "linear", "tau_init": 0.35, "alpha_init": 1.0, "n_layer": 4, "lr": 1e-3}
    ega = board.run_columns({**base, "model": {**model, "gate_options": {"learn_tau": False}}})
    assert ega["gate"] == "linear" and ega["gate.tau_init"] == 0.35 and ega["gate.learn_tau"] is False
    assert ega["n_layer"] == 4 and ega["seed"] == 1 and ega["output_gate"] == "none"
    fox = board.run_columns({**base, "model": {**model, "gate": "fox"}})
    assert not any(c.startswith("gate.") for c in fox)  # no tau for a gate without one
    assert columns[3] == "position" and ega["position"] == "learned"  # a run from before the option: learned
    assert board.run_columns({**base, "model": {**model, "position": "rope"}})["position"] == "rope"


def test_the_run_logger_drops_epoch_and_stamps_an_evaluation_at_its_checkpoints_step(tmp_path):
    logger = RunLogger(save_dir=str(tmp_path), name="run", version="", sub_dir="validate", eval_step=1499)
    logger.log_metrics({"val/loss": 1.7, "epoch": 0.0}, step=0)
    logger.finalize("success")
    events = EventAccumulator(str(tmp_path / "run" / "validate"))
    events.Reload()
    assert events.Tags()["scalars"] == ["val/loss"] and [e.step for e in events.Scalars("val/loss")] == [1499]


class _Steps(L.LightningModule):
    """The fastest training a Trainer runs: one linear layer on random numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).square().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=2)


def _paced_fit(
    tmp_path, pace: StepPace, max_steps: int = 12, precision: str = "32-true"
) -> tuple[list[str], list[str]]:
    """Fits `_Steps` with `pace`; the log lines it said and the texts of its TensorBoard entry."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    said = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    said.addHandler(handler)
    try:
        trainer = L.Trainer(
            max_steps=max_steps,
            precision=precision,
            logger=TensorBoardLogger(tmp_path, name="run", version=0),
            callbacks=[pace],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            log_every_n_steps=1,
        )
        trainer.fit(_Steps())
    finally:
        said.removeHandler(handler)
    events = EventAccumulator(str(tmp_path / "run" / "version_0"), size_guidance={"tensors": 0})
    events.Reload()
    texts = [e.tensor_proto.string_val[0].decode() for e in events.Tensors(f"{pace_module.TAG}/text_summary")]
    return [line for line in lines if line.startswith("pace: ")], texts


def test_a_fit_says_its_step_time_and_the_time_to_max_steps_after_its_first_steps(tmp_path):
    """On a clock that moves 0.25 s between two batch ends: 250 ms a step over steps 3-5 (after 2 warm-up
    steps), 7 steps left to max_steps 12, 1.75 s; in the log and in TensorBoard, once."""
    ticks = iter(0.25 * k for k in range(1000))
    pace = StepPace(warmup=2, measured=3, clock=lambda: next(ticks))
    lines, texts = _paced_fit(tmp_path, pace)
    assert pace.report == {"step_s": 0.25, "step": 5, "remaining_steps": 7, "projected_s": 1.75}
    expected = "pace: 250.0 ms a training step (steps 3-5); 7 steps to max_steps 12: about 1.8 s more"
    assert len(lines) == 1 and lines[0].startswith(expected)
    assert texts == lines


def test_the_pace_is_measured_on_the_fits_own_steps(tmp_path):
    """The real clock: a positive step time, and the projection is it times the steps left."""
    pace = StepPace(warmup=1, measured=2)
    lines, texts = _paced_fit(tmp_path, pace, max_steps=6)
    report = pace.report
    assert report is not None and report["step_s"] > 0 and report["step"] == 3 and report["remaining_steps"] == 3
    assert report["projected_s"] == report["step_s"] * 3
    assert len(lines) == 1 and texts == lines


@pytest.mark.parametrize("units", [False, True])
def test_a_bf16_fit_on_a_cpu_that_emulates_bf16_is_told_so_when_it_starts(tmp_path, monkeypatch, units):
    """bf16-mixed on a CPU without bf16 units: one line at step 0, before the pace line (log and TensorBoard);
    with the units, only the pace line."""
    monkeypatch.setattr(pace_module, "cpu_has_bf16_units", lambda: units)
    lines, texts = _paced_fit(tmp_path, StepPace(warmup=1, measured=1), max_steps=4, precision="bf16-mixed")
    assert texts == lines
    assert [line.startswith("pace: precision bf16-mixed on a CPU with no bf16 units") for line in lines] == (
        [False] if units else [True, False]
    )


def test_the_slow_precision_line_is_said_only_for_bf16_on_a_cpu_without_bf16_units():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    said = {
        (precision, device.type, units): pace_module.slow_precision_line(precision, device, units) is not None
        for precision in ("32-true", "bf16-mixed", "bf16-true")
        for device in (cpu, cuda)
        for units in (False, True)
    }
    assert {key for key, value in said.items() if value} == {("bf16-mixed", "cpu", False), ("bf16-true", "cpu", False)}


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo: not Linux")
def test_bf16_units_are_read_as_the_kernel_lists_the_cpus_flags():
    flags = set(Path("/proc/cpuinfo").read_text().split())
    assert pace_module.cpu_has_bf16_units() == bool(flags & {"avx512_bf16", "amx_tile"})


def test_a_run_length_reads_in_the_unit_that_fits_it():
    assert [pace_module.duration(s) for s in (41.24, 750, 11520)] == ["41.2 s", "12.5 min", "3.2 h"]
