"""What a run shows in TensorBoard beside its curves: the HPARAMS table that compares gates, the Custom Scalars
layout of its claims, and a text summary of how it ended.

HPARAMS: one curated, flat column set, the same in every run's summary (TensorBoard takes its columns from one
run's): the comparison's axes (the corpus, the gate, the output gate, the position encoding) lead the table, then
the gate's own options as ``gate.<option>`` and the size, batch, learning rate, steps and seed, by name (TensorBoard
sorts them);
a run states only the columns that apply to it (no tau for a gate without one). Its session status is RUNNING
while it trains, SUCCESS once it reached ``max_steps``, FAILURE when it stopped before (a signal, an error). A
run's HPARAMS summaries live in one small event file of their own, replaced at every change of status: TensorBoard
keeps the first summary of a tag it reads in a run, so a status written after another in the same file would never
show (a TensorBoard started before the change shows the old status until it is restarted).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
from torch.utils.tensorboard.writer import FileWriter

from ega_lightning.callbacks.probe import GateProbe, SlotProbe
from ega_lightning.gates.registry import NO_GATE, gate_options, registered_gates

# (column, where the value lives in the run's hyper-parameters, its type): the gate's own options go
# after corpus, as "gate.<option>" (`_gate_columns`)
LEADING = (
    ("gate", "model.gate", str),
    ("output_gate", "model.output_gate", str),
    ("corpus", "data.corpus", str),
    ("position", "model.position", str),
)
# a leading column's value where the run's hyper-parameters leave it out (a run from before the option)
LEADING_DEFAULTS = {"position": "learned"}
TRAILING = (
    ("n_layer", "model.n_layer", int),
    ("n_head", "model.n_head", int),
    ("n_embd", "model.n_embd", int),
    ("block_size", "model.block_size", int),
    ("batch_size", "data.batch_size", int),
    ("lr", "model.lr", float),
    ("max_steps", "trainer.max_steps", int),
    ("seed", "seed", int),
)
# the metrics columns: (tag, the run directory it is read from, relative to the run: "" for the run itself)
METRICS = (
    ("val/loss", ""),
    ("val/bpc", ""),
    ("gap", ""),
    ("train_eval/loss", ""),
    ("gate/tau_mean", ""),
    ("gate/frac_above_tau", ""),
    ("gate/normal_tail", ""),
    ("test/loss", "test"),
)
PLUGIN = "hparams"
TYPES = {str: api_pb2.DATA_TYPE_STRING, bool: api_pb2.DATA_TYPE_BOOL, int: api_pb2.DATA_TYPE_FLOAT64}
TYPES[float] = api_pb2.DATA_TYPE_FLOAT64


def _gate_columns() -> list[tuple[str, type]]:
    """Every option of every registered gate (both slots), as ``gate.<option>``, sorted, with its type."""
    columns: dict[str, type] = {}
    for name in sorted(registered_gates()):
        for option, default in gate_options(name).items():
            kind = type(default) if isinstance(default, bool | int | float | str) else str
            columns.setdefault(f"gate.{option}", kind)
    return sorted(columns.items())


def columns() -> list[tuple[str, type]]:
    """The HPARAMS columns in their fixed order, with their types."""
    return [(c, t) for c, _, t in LEADING] + _gate_columns() + [(c, t) for c, _, t in TRAILING]


def _value(params: dict[str, Any], dotted: str) -> Any:
    value: Any = params
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def run_columns(params: dict[str, Any]) -> dict[str, bool | int | float | str]:
    """This run's value of each column that applies to it: ``params`` holds "model", "data", "trainer" and
    "seed". A gate's options come from the model's gate_options and, for an energy gate, tau_init and
    alpha_init; a gate without an option (FoX has no tau) leaves its column empty."""
    out: dict[str, bool | int | float | str] = {}
    kinds = dict(columns())
    for column, dotted, _ in LEADING:
        out[column] = str(_value(params, dotted) or LEADING_DEFAULTS.get(column, NO_GATE))
    model = params.get("model") or {}
    accepted = {**gate_options(model.get("gate") or NO_GATE), **gate_options(model.get("output_gate") or NO_GATE)}
    given = {**(model.get("gate_options") or {})}
    for option, default in accepted.items():
        value = given.get(option, model.get(option, default))
        if value is not None and isinstance(value, bool | int | float | str):
            kind = kinds.get(f"gate.{option}", type(value))
            out[f"gate.{option}"] = value if kind is not str else str(value)
    for column, dotted, kind in TRAILING:
        value = _value(params, dotted)
        if value is not None:
            out[column] = kind(value)
    return out


def _summary(tag: str, data: plugin_data_pb2.HParamsPluginData) -> Summary:
    data.version = 0
    content = data.SerializeToString()
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=PLUGIN, content=content))
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata)])


def experiment_summary() -> Summary:
    """The columns (hyper-parameters and metrics), the same for every run."""
    # TensorBoard sorts the columns, those marked as differing first, then by name: the comparison's axes are
    # marked, so they lead the table and are the columns shown by default
    axes = {c for c, _, _ in LEADING}
    infos = [api_pb2.HParamInfo(name=name, type=TYPES[kind], differs=name in axes) for name, kind in columns()]
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(group=group, tag=tag)) for tag, group in METRICS]
    experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics)
    return _summary("_hparams_/experiment", plugin_data_pb2.HParamsPluginData(experiment=experiment))


def session_start_summary(values: dict[str, bool | int | float | str]) -> Summary:
    start = plugin_data_pb2.SessionStartInfo()
    for name, value in values.items():
        if isinstance(value, bool):
            start.hparams[name].bool_value = value
        elif isinstance(value, int | float):
            start.hparams[name].number_value = float(value)
        else:
            start.hparams[name].string_value = value
    return _summary("_hparams_/session_start_info", plugin_data_pb2.HParamsPluginData(session_start_info=start))


def session_end_summary(status: int) -> Summary:
    end = plugin_data_pb2.SessionEndInfo(status=status)
    return _summary("_hparams_/session_end_info", plugin_data_pb2.HParamsPluginData(session_end_info=end))


HPARAMS_SUFFIX = ".hparams"  # the run's HPARAMS event file: events.out.tfevents.<time>.<host>.<pid>.<n>.hparams


def write_hparams_file(log_dir: Path, values: dict[str, bool | int | float | str], status: int, step: int) -> Path:
    """The experiment, this run's values and its status, in a new event file of ``log_dir`` that replaces the
    previous one (TensorBoard keeps the first summary of a tag it reads in a run: one file, one of each)."""
    old = sorted(log_dir.glob(f"events.out.tfevents.*{HPARAMS_SUFFIX}"))
    writer = FileWriter(str(log_dir), filename_suffix=HPARAMS_SUFFIX)
    for summary in (experiment_summary(), session_start_summary(values), session_end_summary(status)):
        writer.add_summary(summary, global_step=step)
    writer.close()
    new = set(log_dir.glob(f"events.out.tfevents.*{HPARAMS_SUFFIX}")) - set(old)
    for path in old:
        path.unlink(missing_ok=True)
    return next(iter(new))


def run_params(trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
    """What the columns are read from: the model's and the data's hyper-parameters, the step budget, the seed."""
    dm = trainer.datamodule
    return {
        "model": dict(pl_module.hparams),
        "data": dict(dm.hparams) if dm is not None else {},
        "trainer": {"max_steps": trainer.max_steps},
        "seed": _seed(),
    }


def _seed() -> int | None:
    import os

    seed = os.environ.get("PL_GLOBAL_SEED")  # what seed_everything set
    return int(seed) if seed is not None and seed.lstrip("-").isdigit() else None


def tensorboards(trainer: L.Trainer) -> list[TensorBoardLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]


def normal_tail(tau: float) -> float:
    """1 - Phi(tau): the share of a standard normal z above tau."""
    return 0.5 * math.erfc(tau / math.sqrt(2.0))


# ----------------------------------------------------------------------------- the Custom Scalars layout


def scalars_layout(n_layer: int, energy: bool, diagnostics: dict[str, str]) -> dict[str, dict[str, list[Any]]]:
    """TensorBoard's custom-scalars layout (category -> chart -> ["Multiline", tag regexes]): the losses, then
    per layer the energy gate's tau, keys above tau against 1 - Phi(tau), alpha and the mean gate (an energy
    gate), and each other gate's own diagnostics (``diagnostics``: tag name -> chart title)."""
    layout: dict[str, dict[str, list[Any]]] = {
        "loss": {
            "train, val and train_eval loss": ["Multiline", ["^train/loss$", "^val/loss$", "^train_eval/loss$"]],
            "generalization gap (val − train_eval)": ["Multiline", ["^gap$"]],
        }
    }
    for layer in range(n_layer):
        charts: dict[str, list[Any]] = {}
        heads = rf"layer_{layer}/head_\d+(/scale_\d+)?$"  # a mixture of gates per head: one tag per gate
        if energy:
            charts["tau"] = ["Multiline", [rf"^gate/tau/{heads}"]]
            tail = [rf"^gate/frac_above_tau/{heads}", rf"^gate/normal_tail/{heads}"]
            charts["keys above tau vs 1 − Φ(tau)"] = ["Multiline", tail]
            charts["alpha"] = ["Multiline", [rf"^gate/alpha/{heads}"]]
            charts["mean gate"] = ["Multiline", [rf"^gate/mean_gate/layer_{layer}(/head_\d+)?$"]]
        for name, title in diagnostics.items():
            charts[title] = ["Multiline", [rf"^gate/{name}/{heads}"]]
        if charts:
            layout[f"layer {layer}"] = charts
    return layout


# ----------------------------------------------------------------------------- the text summary


def _num(x: float | None, digits: int = 4) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def summary_text(
    metrics: dict[str, float],
    values: dict[str, bool | int | float | str],
    step: int,
    heads: tuple[int, int] | None,
    converged_step: int | None,
    learns_tau: bool,
    what: str = "fit",
) -> str:
    """The run's ending as Markdown: what ran, the final losses and gap, per head tau beside the keys above it
    and 1 - Phi(tau), and the optimizer step where tau converged (none for a frozen tau)."""
    config = ", ".join(f"{k} {v}" for k, v in values.items())
    lines = [f"**{what}** at step {step}: {config}", ""]
    shown = [("val/loss", "val loss"), ("train_eval/loss", "train_eval loss"), ("gap", "gap")]
    shown.append(("test/loss", "test loss"))
    lines.append(" · ".join(f"{name} {_num(metrics.get(tag))}" for tag, name in shown if tag in metrics))
    if heads is not None:
        n_layer, n_head = heads
        lines += ["", "| layer | head | tau | keys above tau | 1 − Φ(tau) |", "|---:|---:|---:|---:|---:|"]
        for layer in range(n_layer):
            for head in range(n_head):
                tau = metrics.get(f"gate/tau/layer_{layer}/head_{head}")
                above = metrics.get(f"gate/frac_above_tau/layer_{layer}/head_{head}")
                tail = normal_tail(tau) if tau is not None else None
                lines.append(f"| {layer} | {head} | {_num(tau)} | {_num(above)} | {_num(tail)} |")
        if what == "fit":
            lines.append("")
            if not learns_tau:
                lines.append("tau is frozen: no convergence to report.")
            elif converged_step is None:
                lines.append("tau did not converge (after warm-up) by the end of the run.")
            else:
                lines.append(f"tau converged at optimizer step {converged_step}.")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the callback


class RunBoard(L.Callback):
    """Writes a run's TensorBoard views (rank 0, no collective): at the start of fit the HPARAMS columns, this
    run's values and the status RUNNING, and the Custom Scalars layout; at its end the status (SUCCESS once
    ``max_steps`` is reached, else FAILURE; an exception: FAILURE) and the text ``summary``; after `ega validate`
    or `ega test`, the same summary of that evaluation, into its own run directory."""

    def __init__(self) -> None:
        self._values: dict[str, bool | int | float | str] = {}

    @rank_zero_only
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._values = run_columns(run_params(trainer, pl_module))
        energy = GateProbe(pl_module).gates
        slots = SlotProbe(pl_module)
        layout = scalars_layout(len(slots.layers), bool(energy), slots.titles())
        for logger in tensorboards(trainer):
            logger.experiment.add_custom_scalars(layout)
            logger.experiment.flush()
        self._status(trainer, api_pb2.STATUS_RUNNING)

    def _status(self, trainer: L.Trainer, status: int) -> None:
        """The run's HPARAMS event file, written anew with ``status`` (the previous one deleted)."""
        for logger in tensorboards(trainer):
            write_hparams_file(Path(logger.log_dir), self._values, status, trainer.global_step)

    def _end(self, trainer: L.Trainer, status: int) -> None:
        if self._values:  # a fit that never started (its setup failed) has no HPARAMS row to end
            self._status(trainer, status)

    @rank_zero_only
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        finished = trainer.max_steps is not None and trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps
        self._end(trainer, api_pb2.STATUS_SUCCESS if finished else api_pb2.STATUS_FAILURE)
        self._text(trainer, pl_module, "fit", max(trainer.global_step - 1, 0))

    @rank_zero_only
    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if trainer.state.fn == "fit":
            self._end(trainer, api_pb2.STATUS_FAILURE)

    @rank_zero_only
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "validate":
            self._text(trainer, pl_module, "validate", None)

    @rank_zero_only
    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._text(trainer, pl_module, "test", None)

    def _text(self, trainer: L.Trainer, pl_module: L.LightningModule, what: str, step: int | None) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        probe = GateProbe(pl_module)
        heads = (len(probe.gates), probe.gates[0].n_head) if probe.gates else None
        tracker = next((c for c in trainer.callbacks if hasattr(c, "converged") and hasattr(c, "history")), None)
        converged = tracker.converged["step"] if tracker is not None and tracker.converged else None
        learns = any(g.tau.requires_grad for g in probe.gates)
        values = run_columns(run_params(trainer, pl_module))
        for logger in tensorboards(trainer):
            at = step if step is not None else getattr(logger, "eval_step", None) or 0
            text = summary_text(metrics, values, at, heads, converged, learns, what)
            logger.experiment.add_text("summary", text, global_step=at)
            logger.experiment.flush()


HParamsSummary = RunBoard  # the name configs of earlier runs give this callback
