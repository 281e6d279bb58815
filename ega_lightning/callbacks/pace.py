"""A run's pace: after its first steps, `ega fit` says how long a step takes here and when the run will end.

Issue 55 item 4: a long run is something a user can plan. The first steps are slower (allocation, the
kernels' first dispatch, a compilation), so the step time is measured over the ``measured`` optimizer steps
that follow ``warmup`` of them: the wall time between the ends of two training batches, Lightning's loop and
the data loader included, validation not (it falls outside those steps). The projection is that step time
times the steps left to ``max_steps``; it leaves out the evaluations and checkpoints still to come.

A fit in bf16 on a CPU with no bf16 arithmetic (neither AVX-512 BF16 nor AMX) is told so when training
starts: there every bf16 matmul is emulated, and a step takes an order of magnitude longer than in fp32
(docs/cost.md measures it), which the pace line would only show minutes later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only

# the tag of the TensorBoard text entry
TAG = "pace"


def cpu_has_bf16_units() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX-512 BF16 or AMX tiles), as torch's kernels dispatch;
    True where torch cannot tell, so that nothing is claimed of a CPU it does not know."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if any(probe is None for probe in probes):
        return True
    return any(probe() for probe in probes)


def slow_precision_line(precision: str, device: torch.device, has_bf16_units: bool) -> str | None:
    """The line a fit says at its start when it trains in bf16 on a CPU that emulates it; None otherwise."""
    if device.type != "cpu" or not precision.startswith("bf16") or has_bf16_units:
        return None
    return (
        f"pace: precision {precision} on a CPU with no bf16 units (neither AVX-512 BF16 nor AMX): every bf16 matmul "
        "is emulated, and a step takes an order of magnitude longer than with --trainer.precision=32-true "
        "(docs/cost.md)"
    )


def duration(seconds: float) -> str:
    """seconds as a person reads a run's length: 41.2 s, 12.5 min, 3.2 h."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class StepPace(L.Callback):
    """Measures the optimizer step's wall time over ``measured`` steps after ``warmup`` of them, once per fit,
    and reports it with the projected time to ``max_steps``: one log line and a TensorBoard text entry."""

    def __init__(self, warmup: int = 3, measured: int = 5, clock: Callable[[], float] = time.perf_counter) -> None:
        if warmup < 0 or measured < 1:
            raise ValueError(f"StepPace needs warmup >= 0 and measured >= 1, got {warmup} and {measured}.")
        self.warmup, self.measured, self.clock = warmup, measured, clock
        self.first_step: int | None = None  # the global step this fit started at (a resume starts later)
        self.started: float | None = None  # the clock at the end of the last warm-up step
        self.report: dict[str, Any] | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.first_step = trainer.global_step
        slow = slow_precision_line(str(trainer.precision), pl_module.device, cpu_has_bf16_units())
        if slow is not None:
            _announce(trainer, slow, trainer.global_step)
        if self.warmup == 0:  # measured from the start of training
            self.started = self.clock()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self.report is not None or self.first_step is None:
            return
        now = self.clock()
        step = trainer.global_step  # optimizer steps done (a batch that accumulates gradients adds none)
        done = step - self.first_step
        if done == self.warmup and self.started is None:  # the first batch end at which the warm-up is done
            self.started = now
        elif self.started is not None and done == self.warmup + self.measured:
            self._report(trainer, (now - self.started) / self.measured, step)

    def _report(self, trainer: L.Trainer, step_s: float, step: int) -> None:
        max_steps = trainer.max_steps
        remaining = max(max_steps - step, 0) if max_steps is not None and max_steps >= 0 else None
        projected = None if remaining is None else step_s * remaining
        self.report = {"step_s": step_s, "step": step, "remaining_steps": remaining, "projected_s": projected}
        line = f"pace: {1e3 * step_s:.1f} ms a training step (steps {step - self.measured + 1}-{step})"
        if projected is not None:
            line += (
                f"; {remaining} steps to max_steps {max_steps}: about {duration(projected)} more "
                "(evaluations and checkpoints besides)"
            )
        _announce(trainer, line, step)


@rank_zero_only
def _announce(trainer: L.Trainer, line: str, step: int) -> None:
    rank_zero_info(line)
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_text(TAG, line, global_step=step)
            logger.experiment.flush()


__all__ = ["StepPace", "cpu_has_bf16_units", "duration", "slow_precision_line"]
