"""Test-only Lightning callbacks, importable by the real CLI as `tests.helpers.<name>` (PYTHONPATH=repo)."""

import time
from pathlib import Path

import lightning as L
import torch


class SleepEachStep(L.Callback):
    """Slows training down so a test can kill the process in the middle of it."""

    def __init__(self, seconds: float = 0.3) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args, **kwargs) -> None:
        time.sleep(self.seconds)


class PoisonLossAt(L.Callback):
    """Makes the gradients NaN at one step, as a diverging run would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step == self.step:
            for p in pl_module.parameters():
                if p.grad is not None:
                    p.grad.fill_(torch.nan)


def write_gate_package(root: Path, entry_points: dict[str, str], dist: str = "my-pkg", version: str = "0.1") -> Path:
    """An installed-looking package `my_pkg` (holding examples/my_gates.py as my_pkg.gates) under `root`:
    put `root` on PYTHONPATH and its entry points in the group ega_lightning.gates are found."""
    root = Path(root)
    (root / "my_pkg").mkdir(parents=True, exist_ok=True)
    (root / "my_pkg" / "__init__.py").write_text("")
    example = Path(__file__).resolve().parents[1] / "examples" / "my_gates.py"
    (root / "my_pkg" / "gates.py").write_text(example.read_text())
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = [f"{name} = {value}" for name, value in entry_points.items()]
    (info / "entry_points.txt").write_text("[ega_lightning.gates]\n" + "\n".join(lines) + "\n")
    return root
