"""The signals that stop `ega fit`, `validate` and `test`, one :class:`StopSignals` per command (a notebook's second
fit starts with no signal recorded by its first). In one process Ctrl-C and SIGTERM are Lightning's; SIGUSR1, SLURM's
requeue signal, is taken as SIGTERM. Under DDP, Lightning's SIGTERM handler broadcasts from inside the handler,
wherever the signal finds the rank, and each rank stops at its own step: collectives that no longer match, ranks that
wait for each other until killed (issue 41). Here the ranks of a fit agree on a signal at the end of a training batch
(`AgreedStop`), and stop at that step (last.ckpt: the last scheduled save before it; a save in progress finishes).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ega_lightning.lightning_private import set_sigterm_handler, take_launcher_children


class StopSignal(SIGTERMException):  # the ranks agreed to stop on ``signum`` (SIGTERM, SIGINT), at one step
    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class StopSignals:
    """The stop signals one command took (and the ranks that rank 0 of Lightning's launcher started, once they agreed
    to stop: `wait_for_the_other_ranks`)."""

    def __init__(self) -> None:
        self.ctrl_c = False  # SIGINT came: Lightning's exit status 1 is then an interruption, not a crash
        self.usr1 = False  # SIGUSR1 came, and was taken as SIGTERM
        self.recorded = 0  # under DDP: the signal this rank recorded, for the ranks to agree on (0: none)
        self.children: list[subprocess.Popen[bytes]] = []

    def take_in_main(self) -> None:
        """The command's own handlers, before Lightning's: Ctrl-C is remembered, SIGUSR1 becomes SIGTERM. A signal
        the caller ignores (or handles) is left to the caller."""
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._on_sigint)
        if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
            signal.signal(signal.SIGUSR1, self._on_sigusr1)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.ctrl_c = True
        raise KeyboardInterrupt

    def _on_sigusr1(self, signum: int, frame: Any) -> None:
        # SLURM's requeue signal (sbatch --signal=USR1@T, as Lightning's docs suggest) stops the run as SIGTERM
        # does, at the next step with its last.ckpt kept, instead of killing the process (SIGUSR1's default)
        self.usr1 = True
        os.kill(os.getpid(), signal.SIGTERM)

    def take_under_ddp(self, trainer: L.Trainer) -> None:
        """On every rank once its process group has formed, before Lightning's first collective: a fit records SIGTERM
        and SIGINT and stops where the ranks agree (`AgreedStop`), an evaluation ends at once on SIGTERM; either way
        the handler the Trainer installs later no longer broadcasts from inside the handler."""
        fitting = trainer.state.fn == TrainerFn.FITTING
        handler = self._record if fitting else _die
        set_sigterm_handler(trainer, handler)
        signal.signal(signal.SIGTERM, handler)
        if fitting and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # not where the caller ignores Ctrl-C
            signal.signal(signal.SIGINT, self._record)

    def _record(self, signum: int, frame: Any) -> None:
        # no collective, no kill, no raise: whatever this rank is doing (an all-reduce, a checkpoint save) goes on
        # until the step's end, where the ranks agree; SIGTERM outranks SIGINT, so they agree on one
        self.recorded = max(self.recorded, signum)

    def wait_for_the_other_ranks(self, status: int, timeout: float = 20.0) -> None:
        """After an agreed stop, on rank 0 of Lightning's own launcher: waits for the ranks it started (each exiting
        ``status``), so that this process's exit is the run's; kills one still there after ``timeout`` seconds, and
        names on stderr one that ended otherwise."""
        deadline = time.monotonic() + timeout
        for rank, proc in enumerate(self.children, start=1):
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode != status:
                print(f"ega: local rank {rank} (pid {proc.pid}) ended with status {proc.returncode}", file=sys.stderr)


def _die(signum: int, frame: Any) -> None:
    # an evaluation has no step where the ranks could agree, and nothing to save: end as the signal's default does
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


class AgreedStop(L.Callback):
    """At the end of every training batch the ranks agree on whether any was signalled (one all_reduce(MAX)); if so,
    every rank raises :class:`StopSignal` there. Nothing happens in a single process."""

    def __init__(self, signals: StopSignals) -> None:
        self.signals = signals

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.world_size == 1 or not (dist.is_available() and dist.is_initialized()):
            return
        # on the strategy's device: gloo reduces a CPU tensor, NCCL a CUDA one
        agreed = torch.tensor([self.signals.recorded], dtype=torch.int64, device=trainer.strategy.root_device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        signum = int(agreed.item())
        if signum:
            # rank 0 of Lightning's launcher: a child exiting 143 before rank 0 would make the launcher's observer
            # SIGKILL rank 0 and every child; rank 0 waits for them itself (`wait_for_the_other_ranks`)
            self.signals.children = take_launcher_children(trainer) or self.signals.children
            raise StopSignal(signum)
