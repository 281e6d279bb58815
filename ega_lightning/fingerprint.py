"""The fingerprint of the code path a run configuration trains: which records may be compared.

Two runs of one configuration compare when the code that trained them does the same arithmetic. A
commit does not say that (most commits change no arithmetic, and two commits may), and a record made
before records kept commits says nothing at all. So a record keeps this fingerprint instead
(``code_fingerprint``): one value for the same code and torch on any CPU, changed by any real change of
the model's or a gate's arithmetic (tests/test_fingerprint.py names the changes it must see).

How: the run's own model (its hyper-parameters) is built and trained for a few plain SGD steps in
float64, on one thread, with a fixed seed and random tokens, and a few well-conditioned scalars of that
trajectory are hashed after rounding: each step's training loss (dropout as configured), the share of
the squared gradient norm each parameter takes, and the evaluation loss at the end. The raw fp32 bits a
fingerprint hashed before (records' ``fingerprint``) follow the CPU's kernels: AVX2, AVX-512 and AMX
paths, MKL's and oneDNN's dispatch, and even fp32 ``normal_`` (vectorised Box-Muller on AVX2, scalar
libm otherwise) give other bits for the same code. Here:

- float64 everywhere: the model is built with float64 as the default dtype (float64 ``normal_`` and
  ``bernoulli_`` draw the same values whatever the kernels) and every explicit cast to fp32 inside the
  model (the gates compute in fp32 under autocast) is widened to float64 while it runs (`WidenedCasts`, a torch
  function mode of this thread, not a replacement of ``Tensor.float``), so the kernels' differences stay near
  1e-16 of each value;
- each scalar is rounded to a grid (QUANTUM) some 10^5 times coarser than that noise and far finer than
  any change of arithmetic the tests make, so one value sits on a rounding boundary about once in 10^5;
- no optimizer that passes a gradient through a sign (AdamW's first steps are about lr * sign(g), and a
  gradient near zero flips sign with the kernels): plain SGD;
- gradients enter as each parameter's share of the squared norm, so a gradient that is zero in exact
  arithmetic (a bias the z-norm cancels) reads 0, not its rounding noise.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ega_lightning import host

STEPS = 3
BATCH = 2
# a short window keeps the check to about a second at the cpu size; every gate takes T >= 16
WINDOW = 32
SGD_LR = 0.1
# the rounding grid of every hashed scalar: losses (~4 nats) and gradient shares (in [0, 1]) both carry
# float64 noise near 1e-15 between CPUs; the changes the tests must see move them by 1e-7 or more
QUANTUM = 1e-10
# the version of what is hashed: a record's code_fingerprint compares only with one of the same scheme
SCHEME = 2


def _model_kwargs(hparams: dict[str, Any]) -> dict[str, Any]:
    from ega_lightning.module import CharLM

    accepted = set(inspect.signature(CharLM.__init__).parameters) - {"self", "compile"}
    return {k: v for k, v in hparams.items() if k in accepted}  # hparams.yaml holds data keys too


def code_fingerprint(hparams: dict[str, Any]) -> str:
    """16 hex digits for the model ``CharLM(**hparams)`` trains (see the module docstring); hparams as
    a run's ``hparams.yaml`` holds them (data keys are ignored)."""
    digest = hashlib.sha256(f"scheme {SCHEME}\n".encode())
    for name, value in fingerprint_values(hparams):
        digest.update(f"{name} {_rounded(value)}\n".encode())
    return digest.hexdigest()[:16]


def fingerprint_values(hparams: dict[str, Any]) -> list[tuple[str, float | str]]:
    """What `code_fingerprint` hashes, before rounding: (name, value) pairs, the parameters' names and
    shapes among them."""
    kwargs = _model_kwargs(hparams)
    window = min(WINDOW, int(kwargs.get("block_size", WINDOW)))
    threads = torch.get_num_threads()
    # a sum split over threads rounds by the split: one thread gives one order of operations
    torch.set_num_threads(1)
    try:
        with _float64():
            return _trajectory(kwargs, window)
    finally:
        torch.set_num_threads(threads)


def _rounded(value: float | str) -> str:
    if isinstance(value, str):
        return value
    if value != value or value in (float("inf"), float("-inf")):
        return repr(value)
    return str(round(value / QUANTUM))


class WidenedCasts(TorchFunctionMode):
    """``Tensor.float()`` leaves a float64 tensor as it is, while the mode is on: the model's explicit casts to fp32
    (the gates' precision under autocast) stay float64, with no gate's code changed. A torch function mode (torch's
    public override API) is on for its ``with`` block in this thread only; every other call passes through as it is.
    Python-level casts inside a custom autograd function's backward do not pass through it (torch runs backward
    without the modes), which none of the model's make on a float64 tensor: the hand-written backward passes compute in
    their inputs' dtype, and the recomputed ones (`gates.base.Recomputed`) widen with ``_wide``."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if func is torch.Tensor.float and args[0].dtype == torch.float64:
            return args[0]
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _float64() -> Iterator[None]:
    """float64 as the default dtype, and ``Tensor.float()`` leaving a float64 tensor as it is, for the block."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with WidenedCasts():
            yield
    finally:
        torch.set_default_dtype(default)


def _trajectory(kwargs: dict[str, Any], window: int) -> list[tuple[str, float | str]]:
    """STEPS SGD steps of ``CharLM(**kwargs)`` in float64 on random tokens, and what they show."""
    from ega_lightning.module import CharLM

    values: list[tuple[str, float | str]] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        lm = CharLM(**kwargs).double()  # buffers made with an explicit fp32 dtype too
        params = sorted(lm.named_parameters())
        values += [(f"param {name}", str(tuple(p.shape))) for name, p in params]
        vocab = len(kwargs["vocab"])
        tokens = torch.Generator().manual_seed(2)
        batches = [torch.randint(0, vocab, (BATCH, window + 1), generator=tokens) for _ in range(STEPS + 1)]

        def loss_of(idx: torch.Tensor) -> torch.Tensor:
            logits = lm(idx[:, :-1])  # (B, T, vocab)
            return F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())

        lm.train()
        for step in range(STEPS):
            torch.manual_seed(100 + step)  # the step's dropout masks
            loss = loss_of(batches[step])
            loss.backward()
            squares = {name: p.grad.square().sum().item() for name, p in params if p.grad is not None}
            total = sum(squares.values())
            values.append((f"loss {step}", loss.item()))
            values += [(f"grad share {step} {name}", sq / total if total else 0.0) for name, sq in squares.items()]
            with torch.no_grad():
                for _, p in params:
                    if p.grad is not None:  # a frozen tau has none
                        p -= SGD_LR * p.grad
                        p.grad = None
        lm.eval()
        with torch.no_grad():
            values.append(("eval loss", loss_of(batches[STEPS]).item()))
    return values


def dispatch_settings() -> list[dict[str, str]]:
    """The environments that move this CPU's kernels: the machine's best (unset), ATen's capabilities the CPU runs
    (asking for one it lacks stops the process on an illegal instruction), and MKL's and oneDNN's ISA narrowed."""
    settings: list[dict[str, str]] = [{}, {"ATEN_CPU_CAPABILITY": "default"}]
    flags = host.cpu_flags()
    if "avx2" in flags:
        settings.append({"ATEN_CPU_CAPABILITY": "avx2"})
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        settings.append({"ATEN_CPU_CAPABILITY": "avx512"})
    settings.append({"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"})
    return settings


def in_each_dispatch(worker: str, payload: Any, timeout: float | None = 300) -> list[tuple[dict[str, str], str, Any]]:
    """``worker`` (Python source reading ``payload`` as JSON on stdin, printing ``[capability, result]`` as JSON
    on its last line) run in a fresh process under each of `dispatch_settings`: (setting, ATen's capability,
    result) per setting. Raises RuntimeError with the worker's stderr when one fails."""
    repo = Path(__file__).resolve().parents[1]
    out = []
    for setting in dispatch_settings():
        env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")}
        done = subprocess.run(
            [sys.executable, "-c", worker],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env={**env, **setting, "PYTHONPATH": str(repo)},
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the worker failed under {setting or 'the default dispatch'}:\n{done.stderr[-2000:]}")
        capability, result = json.loads(done.stdout.strip().splitlines()[-1])
        out.append((setting, capability, result))
    return out
