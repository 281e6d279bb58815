"""The timing harness of `ega bench`: contenders (a model, its optimizer, one fixed batch) timed one
training step at a time, interleaved across contenders after warm-up steps, and their memory.

The models are CharLMs built from a size's shape and a gate's settings (`ega_lightning.bench.settings`),
all from one seed, so every gated model shares the baseline's weights.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn

from ega_lightning.data.corpora import CORPORA

if TYPE_CHECKING:  # Lightning is imported where a model is built: `ega bench --help` starts without it
    from ega_lightning.module import CharLM

T = TypeVar("T")

VOCAB = CORPORA["tinyshakespeare"].vocab
# the precisions a contender steps in: fp32, or bf16 under autocast (`Contender`)
PRECISIONS = ("32-true", "bf16-mixed")


def sync(device: torch.device) -> None:
    """Waits for the device's queued work: a step's time is the time of its kernels, not of their launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def saved_activation_bytes(forward: Callable[[], T], params: Iterable[torch.Tensor]) -> tuple[T, int]:
    """forward()'s result and the bytes of the tensors autograd saved for its backward, counted once per
    storage, the storages of `params` left out."""
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        # a compiler's stand-in has no data: torch < 2.5 hands the hook such tensors while it traces
        with contextlib.suppress(RuntimeError):
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = forward()
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}
    return result, sum(n for ptr, n in saved.items() if ptr not in param_ptrs)


class Contender:
    """A model with its optimizer and a fixed batch; `step()` times one training step."""

    def __init__(self, name: str, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], precision: str) -> None:
        self.name, self.model, self.batch = name, model, batch
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.autocast_dtype = torch.bfloat16 if precision == "bf16-mixed" else None
        self.device = batch[0].device
        self.times: list[float] = []
        self.first_s: float | None = None  # the first step, warm-up or not: it includes any compilation

    def _loss(self) -> torch.Tensor:
        if self.autocast_dtype is None:
            return self.model.loss(self.batch)
        with torch.autocast(self.device.type, dtype=self.autocast_dtype):
            return self.model.loss(self.batch)

    def step(self, record: bool = True) -> None:
        sync(self.device)
        t0 = time.perf_counter()
        self._loss().backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        sync(self.device)
        elapsed = time.perf_counter() - t0
        if self.first_s is None:
            self.first_s = elapsed
        if record:
            self.times.append(elapsed)

    def memory(self) -> dict[str, float]:
        """Bytes of tensors autograd saves for backward (activations, deduplicated by storage), of the
        training state (parameters, gradients, two AdamW moments) and, on CUDA, the allocator's peak."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        loss, activations = saved_activation_bytes(self._loss, self.model.parameters())
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        params = sum(p.numel() * p.element_size() for p in self.model.parameters())
        out = {"activation_mb": activations / 2**20, "train_state_mb": 4 * params / 2**20}
        out["total_mb"] = out["activation_mb"] + out["train_state_mb"]
        if self.device.type == "cuda":
            out["cuda_peak_mb"] = torch.cuda.max_memory_allocated(self.device) / 2**20
        return out

    def summary(self) -> dict[str, float]:
        tokens = self.batch[0].numel()
        median = statistics.median(self.times)
        return {
            "median_ms": 1e3 * median,
            "min_ms": 1e3 * min(self.times),
            "max_ms": 1e3 * max(self.times),
            "tokens_per_s": tokens / median,
            "repeats": len(self.times),
            "first_step_s": self.first_s,
        }


def run_interleaved(contenders: list[Any], repeats: int, warmup: int) -> None:
    """Each repetition times every contender once, in an order rotated per repetition, so drifts
    of the machine (turbo, other load) fall on all of them alike."""
    for contender in contenders:
        for _ in range(warmup):
            contender.step(record=False)
    for rep in range(repeats):
        for contender in contenders[rep % len(contenders) :] + contenders[: rep % len(contenders)]:
            contender.step()


@contextlib.contextmanager
def cold_compiler_caches() -> Iterator[None]:
    """torch.compile's on-disk caches (compiled graphs and kernels) in an empty folder, removed after: the
    compile time the bench reports is a first compilation's, not a lookup of an earlier run's."""
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="ega-bench-compile-") as folder:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
        try:
            yield
        finally:
            if before is None:
                del os.environ["TORCHINDUCTOR_CACHE_DIR"]
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


# the model options a gate's settings may hold (`settings.gate_settings`); its config's other keys are not the gate's
MODEL_OPTIONS = ("gate", "gate_options", "tau_init", "alpha_init", "output_gate", "position")


def build(
    shape: dict[str, Any], gate: dict[str, Any], device: torch.device, seed: int, compile: bool = False
) -> CharLM:
    from ega_lightning.module import CharLM  # Lightning: imported where a model is built, not for --help

    torch.manual_seed(seed)  # same seed: every gated model shares the baseline's weights
    options = {k: v for k, v in gate.items() if k in MODEL_OPTIONS}
    return CharLM(VOCAB, **shape, **options, compile=compile).to(device)


def fixed_batch(shape: dict[str, Any], batch_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The one batch every contender trains on: random tokens (seed 0), inputs and next-token targets."""
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, len(VOCAB), (batch_size, shape["block_size"] + 1), generator=gen).to(device)
    return idx[:, :-1], idx[:, 1:]


def paired_ratios(times: list[float], base: list[float]) -> list[float]:
    """Per-repetition ratios, sorted: each repetition times every contender back to back, so the ratio
    within one cancels the machine's drift."""
    return sorted(t / b for t, b in zip(times, base, strict=True))


def paired_summary(times: list[float], base: list[float]) -> tuple[float, tuple[float, float]]:
    """The median of the per-repetition ratios (`paired_ratios`) and their quartiles: the cost estimate."""
    paired = paired_ratios(times, base)
    return statistics.median(paired), (paired[len(paired) // 4], paired[(3 * len(paired)) // 4])
