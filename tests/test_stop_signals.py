"""callbacks/stop.py: each command's stop signals are its own object (`StopSignals`), none kept at module level."""

from __future__ import annotations

import ast
import os
import signal
from pathlib import Path

import pytest

from ega_lightning.callbacks import stop
from ega_lightning.callbacks.stop import StopSignals


def test_a_commands_recorded_signal_is_its_own_and_sigterm_outranks_sigint():
    first, second = StopSignals(), StopSignals()  # a notebook's first fit, then its second
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
        first._record(signum, None)
    assert (first.recorded, second.recorded) == (signal.SIGTERM, 0)


def test_the_module_keeps_no_state_of_its_own():
    tree = ast.parse(Path(stop.__file__).read_text())
    kept = [node for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)]
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        kept += [node for node in cls.body if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)]
    assert kept == [], [ast.unparse(node) for node in kept]


def test_sigusr1_is_taken_as_sigterm_and_a_callers_own_handlers_are_left_alone():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGUSR1, signal.SIGTERM)}
    heard: list[int] = []
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, lambda signum, frame: heard.append(signum))  # Lightning's, in one process
        signals = StopSignals()
        signals.take_in_main()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert signals.usr1 and heard == [signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt):  # as Python's own Ctrl-C does, for Lightning to catch
            os.kill(os.getpid(), signal.SIGINT)
        assert signals.ctrl_c

        def callers(signum: int, frame: object) -> None:
            heard.append(-signum)

        signal.signal(signal.SIGUSR1, callers)
        signal.signal(signal.SIGINT, callers)
        StopSignals().take_in_main()
        assert signal.getsignal(signal.SIGUSR1) is callers and signal.getsignal(signal.SIGINT) is callers
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
