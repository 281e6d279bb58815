"""Test helpers: the suite's constants and `run_ega`, the corpora for the suite, and Lightning callbacks the real CLI
imports as `tests.helpers.<name>`. The fixtures are conftest.py's (which imports from here, never the reverse)."""

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning as L
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ega_lightning.data.corpora import CORPORA, DATA_DIR_ENV, CorpusError, ensure_corpus
from ega_lightning.gates import KeyBias, OutputGate
from ega_lightning.model import CausalSelfAttention, GPTConfig, attention_layer
from ega_lightning.model.flex import has_flex_attention

# FlexAttention exists from torch 2.5 on; the project supports 2.4
needs_flex = pytest.mark.skipif(not has_flex_attention(), reason="this torch has no FlexAttention")

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"

# Small enough for a CPU test, large enough to have several heads and layers.
TINY_MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32}
TINY_VOCAB = CORPORA["tinyshakespeare"].vocab
# the real CLI at the test size, and a fit of two steps
TINY = [*(f"--model.{k}={v}" for k, v in TINY_MODEL.items()), "--data.batch_size=4", "--data.max_eval_windows=4"]
SHORT = ["--trainer.max_steps=2", "--trainer.val_check_interval=2", "--trainer.enable_progress_bar=false"]


def attention(
    n_embd: int,
    n_head: int,
    gate: KeyBias | None = None,
    impl: str = "fused",
    output_gate: OutputGate | None = None,
    **options: Any,
) -> CausalSelfAttention:
    """One attention layer (no dropout, with biases) on the path ``impl`` (model.attention), as a model builds it,
    with that path's ``options`` (model.attention_options)."""
    cfg = GPTConfig(vocab_size=len(TINY_VOCAB), n_embd=n_embd, n_head=n_head, attention=impl, attention_options=options)
    return attention_layer(cfg, gate, output_gate)


def one_fast(cases: list[Any], fast: int = 0) -> list[Any]:
    """A parametrized test's cases with all but ``cases[fast]`` marked slow: the fast suite checks one of them (a
    check of every shipped gate takes ~5 s a gate on an AVX2 EPYC, most of it FlexAttention's eager CPU path, issue
    71), CI's slow suite every other."""
    return [
        case if i == fast else pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow)
        for i, case in enumerate(cases)
    ]


def run_ega(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 300):
    """Runs the real `ega` CLI in a subprocess, as `python -m` (DDP re-executes that command line)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    cmd = [sys.executable, "-m", "ega_lightning.cli", *args]
    return subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def scalars(run_dir: Path, tag: str) -> dict[int, float]:
    """step -> value; for a step logged twice (before a kill and after the resume), the later one."""
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {e.step: e.value for e in sorted(events.Scalars(tag), key=lambda e: e.wall_time)}


def logged_steps(run_dir: Path, tag: str) -> list[int]:
    """Every step ``tag`` was logged at, in the order TensorBoard reads them (a step logged twice shows twice)."""
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return [e.step for e in events.Scalars(tag)]


def has_corpora(directory: Path) -> bool:
    return all((directory / f.relpath).is_file() for corpus in CORPORA.values() for f in corpus.files)


def find_or_fetch_corpora(candidates: list[str | Path | None], target: Path = Path("data")) -> Path:
    """The first candidate directory holding every corpus; else ``target`` after the project's own
    checksummed download into it (what `ega` does on first use); else the test run stops with one paragraph
    that says what to do (`pytest.exit`: no test runs on, no exception chain).
    """
    for candidate in candidates:
        if candidate and has_corpora(Path(candidate)):
            return Path(candidate)
    try:
        for corpus in CORPORA.values():
            ensure_corpus(corpus, target)
        return target
    except CorpusError as err:
        reason = str(err.__cause__ or err)  # the network's own words when that is what failed
    where = ", ".join(str(c) for c in candidates if c)
    files = ", ".join(f.relpath for corpus in CORPORA.values() for f in corpus.files)
    pytest.exit(
        f"The tests need the corpora ({files}) and found them in none of {where}; they could not be downloaded "
        f"into {target} either ({reason}). On an offline machine set {DATA_DIR_ENV} to a directory holding them.",
        returncode=2,  # the machine's set-up, not a failing test
    )


class SleepEachStep(L.Callback):
    """Slows training down so a test can kill the process in the middle of it."""

    def __init__(self, seconds: float = 0.3) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args, **kwargs) -> None:
        time.sleep(self.seconds)


class StopAtStep(L.Callback):
    """Stops training once ``step`` optimizer steps are done, as an early-stopping callback or a time limit does:
    `ega fit` exits 0 short of its max_steps."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args, **kwargs) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


class PoisonLossAt(L.Callback):
    """Makes the gradients NaN at one step, as a diverging run would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step == self.step:
            for p in pl_module.parameters():
                if p.grad is not None:
                    p.grad.fill_(torch.nan)


class SignalAtStep(L.Callback):
    """Sends ``signum`` (a name: SIGTERM, SIGINT, SIGUSR1) to its own process once ``step`` optimizer steps are done,
    as a scheduler or a user would, at a step the test knows."""

    def __init__(self, step: int, signum: str = "SIGTERM") -> None:
        self.step, self.signum = step, signal.Signals[signum]

    def on_train_batch_end(self, trainer: L.Trainer, *args, **kwargs) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


class KillAfterSave(L.Callback):
    """SIGKILLs its own process right after a checkpoint file named ``name`` is written at ``step`` or later.

    The most unlucky moment for a resume: the checkpoint is on disk, what would come next is not.
    """

    def __init__(self, step: int, name: str = "last.ckpt", flush_logs: bool = False) -> None:
        self.step, self.name, self.flush_logs = step, name, flush_logs

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        io = trainer.strategy.checkpoint_io
        save = io.save_checkpoint

        def save_then_kill(checkpoint, path, storage_options=None) -> None:
            save(checkpoint, path, storage_options)
            if Path(path).name == self.name and checkpoint["global_step"] >= self.step:
                for logger in trainer.loggers if self.flush_logs else []:  # what was logged is on disk
                    logger.save()
                os.kill(os.getpid(), signal.SIGKILL)

        io.save_checkpoint = save_then_kill


class WaitForFile(L.Callback):
    """Holds training at its first step until ``path`` exists (at most ``timeout`` seconds): a run a test can pause."""

    def __init__(self, path: str, timeout: float = 300.0) -> None:
        self.path, self.timeout = Path(path), timeout

    def on_train_batch_end(self, *args, **kwargs) -> None:
        deadline = time.time() + self.timeout
        while not self.path.exists() and time.time() < deadline:
            time.sleep(0.1)


def tiny_checkpoint(ckpt_dir, data_dir, steps: int = 3, keep: int | None = 2, **model_options):
    """Trains a test-size CharLM for `steps` steps and keeps its step-`keep` checkpoint; returns (module, path)."""
    from ega_lightning import CharDataModule, CharLM
    from ega_lightning.callbacks import KeepCheckpointAt
    from ega_lightning.checkpoint_io import AtomicCheckpointIO

    torch.manual_seed(0)
    dm = CharDataModule("tinyshakespeare", data_dir=str(data_dir), block_size=TINY_MODEL["block_size"], batch_size=4)
    lm = CharLM(dm.vocab, **{**TINY_MODEL, **model_options}, warmup_steps=1)
    trainer = L.Trainer(
        max_steps=steps,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[AtomicCheckpointIO()],
        callbacks=[KeepCheckpointAt(steps=[keep], dirpath=str(ckpt_dir))] if keep else [],
    )
    trainer.fit(lm, dm)
    return lm, ckpt_dir / f"step{keep}.ckpt" if keep else None


def write_gate_package(root: Path, entry_points: dict[str, str], dist: str = "my-pkg", version: str = "0.1") -> Path:
    """An installed-looking package `my_pkg` (holding examples/my_gates.py as my_pkg.gates) under `root`:
    put `root` on PYTHONPATH and its entry points in the group ega_lightning.gates are found."""
    root = Path(root)
    (root / "my_pkg").mkdir(parents=True, exist_ok=True)
    (root / "my_pkg" / "__init__.py").write_text("")
    example = REPO / "examples" / "my_gates.py"
    (root / "my_pkg" / "gates.py").write_text(example.read_text())
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = [f"{name} = {value}" for name, value in entry_points.items()]
    (info / "entry_points.txt").write_text("[ega_lightning.gates]\n" + "\n".join(lines) + "\n")
    return root


def validate_tiny(
    model: L.LightningModule,
    data_dir,
    callbacks: list[L.Callback] = (),
    precision: str = "32-true",
    max_eval_windows: int = 40,
    **trainer_args: Any,
) -> tuple[L.LightningDataModule, dict[str, float]]:
    """One `trainer.validate` of a TINY_MODEL-shaped model on TinyShakespeare windows: (datamodule, metrics)."""
    from ega_lightning import CharDataModule

    dm = CharDataModule(
        corpus="tinyshakespeare",
        data_dir=str(data_dir),
        block_size=TINY_MODEL["block_size"],
        batch_size=4,
        eval_batch_size=16,
        max_eval_windows=max_eval_windows,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
        **trainer_args,
    )
    return dm, trainer.validate(model, datamodule=dm, verbose=False)[0]


def landscape_json(path: Path, checkpoints: list[dict]) -> Path:
    """A JSON as `ega landscape` writes it (the whole validation split), one entry per dict of
    ``checkpoints``: ``name`` (``<run>/<file>``), ``loss``, and optionally ``tau_shift_loss``,
    ``alpha_scale_loss``, ``tau``, ``frac_above_tau``, ``gate``, ``gate_options``, ``trained_znorm``,
    ``eval_znorm``, ``step``; the rest is filled in consistently (one layer of two heads)."""
    import json
    import math

    from ega_lightning import tau_landscape
    from ega_lightning.experiments.landscape_results import FORMAT

    entries = []
    for c in checkpoints:
        tau = c.get("tau", [[0.0, 0.5]])
        tail = [[0.5 * math.erfc(t / math.sqrt(2.0)) for t in row] for row in tau]
        entry = {
            "name": c["name"],
            "step": c.get("step", 10),
            "corpus": "tinyshakespeare",
            "gate": c.get("gate", "linear"),
            "gate_options": c.get("gate_options", {}),
            "tau_init": 0.0,
            "trained_znorm": c.get("trained_znorm", "prefix"),
            "eval_znorm": c.get("eval_znorm", c.get("trained_znorm", "prefix")),
            "windows": 16,
            "loss": c["loss"],
            "tau_shift_loss": c.get("tau_shift_loss", [c["loss"]] * len(tau_landscape.TAU_SHIFTS)),
            "alpha_scale_loss": c.get("alpha_scale_loss", [c["loss"]] * len(tau_landscape.ALPHA_SCALES)),
            "tau": tau,
            "alpha": [[1.0] * len(row) for row in tau],
            "frac_above_tau": c.get("frac_above_tau", tail),
            "normal_tail": tail,
            "mean_gate": [[0.5] * len(row) for row in tau],
            "z_counts": [[1] * (len(tau_landscape.Z_EDGES) + 1) for _ in tau],
        }
        entries.append(entry)
    result = {
        "format": FORMAT,
        "tau_shifts": list(tau_landscape.TAU_SHIFTS),
        "alpha_scales": list(tau_landscape.ALPHA_SCALES),
        "z_edges": list(tau_landscape.Z_EDGES),
        "max_eval_windows": None,
        "checkpoints": entries,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return path


def finished_runs(
    entry: str,
    gate: str,
    per_seed: dict[int, dict[str, float]],
    group: str = "ablation",
    also_in: tuple[str, ...] = (),
    output_gate: str = "none",
    n_params: int = 1000,
    corpus: str = "tinyshakespeare",
    variant: str | None = None,
):
    """Finished runs of one spec entry for the report's findings, as records give them: seed -> metrics
    (final_val_loss, tokens_per_sec, ...); ``variant``: the entry's variant name (default: the entry's)."""
    from ega_lightning.experiments.comparisons import RunData
    from ega_lightning.experiments.spec import Run

    out = []
    for seed, metrics in per_seed.items():
        run = Run(Path("s.yaml"), entry, seed, (), (), group, variant or entry, also_in)
        hparams = {"corpus": corpus, "block_size": 32, "gate": gate, "output_gate": output_gate, "seed": seed}
        data = {"final_val_loss": 1.5, "best_val_loss": 1.5, "final_gap": 0.1, **metrics}
        common = {"status": "done", "reason": "", "corpus": corpus, "gate": gate, "output_gate": output_gate}
        out.append(RunData(run=run, **common, hparams=hparams, metrics=data, n_params=n_params))
    return out


# ----------------------------------------------------------------------------- processes a test starts and ends

# What srun sets for a one-task job step: Lightning then takes the process for one SLURM manages.
SLURM_TASK = {
    "SLURM_NTASKS": "1",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_JOB_NAME": "ega-test",
    "SLURM_JOB_ID": "4242",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "localhost",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_under(folder: Path) -> list[int]:
    """The processes whose working directory is in ``folder``: this test's launchers and their workers (torchrun
    starts each worker in a session of its own, so killing a launcher's group leaves them)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")).is_relative_to(folder):
                found.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def children_of(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:  # gone meanwhile
        return []


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def busy_loops(n: int, seconds: int = 600) -> Iterator[None]:
    """``n`` Python busy loops beside the block (a loaded machine), each ended by `timeout` after ``seconds`` at the
    latest and killed when the block ends."""
    loops = [
        subprocess.Popen(["timeout", str(seconds), sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(n)
    ]
    try:
        yield
    finally:
        for loop in loops:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()


# ----------------------------------------------------------------------------- a checkout of its own


def git_commit_all(repo: Path, message: str, date: str) -> None:
    """Commits every file of ``repo`` (``git init`` first where it is none) with author and committer ``date``."""
    env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    for args in (["init", "-q"] if not (repo / ".git").exists() else [], ["add", "-A"], ["commit", "-qm", message]):
        if args:
            git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
            subprocess.run(git, cwd=repo, check=True, capture_output=True, env=env)


def package_checkout(root: Path, date: str) -> Path:
    """A git checkout of this package's working tree (its configs/protocol.yaml included) at ``root``, committed on
    ``date``: `run_ega` with ``cwd=root`` runs its code, so a test may edit and commit its protocol."""
    import shutil

    shutil.copytree(REPO / "ega_lightning", root / "ega_lightning", ignore=shutil.ignore_patterns("__pycache__"))
    git_commit_all(root, "the package", date)
    return root


# the six variants of configs/sweeps/author.yaml (issue 50) by their letter: (gate, gate options)
AUTHOR_GATES = {
    "A": ("none", None),
    "B": ("author", {"scales": 1, "znorm": "window"}),
    "C": ("author", {"scales": 1, "znorm": "prefix"}),
    "D": ("author", {"scales": 1, "znorm": "prefix"}),
    "E": ("linear", None),
    "F": ("author", {"scales": 4, "znorm": "window"}),
}


def author_runs(losses: dict[str, dict[int, float]], seeds: tuple[int, ...] = (1, 2, 3, 4, 5)):
    """The runs of the author's-EGA study (letter -> seed -> its recorded val/loss) at the author's phase-1 size;
    a seed of ``seeds`` a letter lacks is a planned run not yet finished."""
    from ega_lightning.experiments.comparisons import RunData
    from ega_lightning.experiments.spec import Run
    from ega_lightning.experiments.studies.author import GROUP, VARIANTS

    out = []
    for letter, (gate, options) in AUTHOR_GATES.items():
        label = VARIANTS[letter][0]
        for seed in seeds:
            run = Run(Path("configs/sweeps/author.yaml"), label, seed, (), (), GROUP, label)
            common = {"run": run, "corpus": "tinyshakespeare", "gate": gate, "gate_options": options}
            if seed not in losses.get(letter, {}):
                out.append(RunData(status="missing", reason="not run", **common))
                continue
            model = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128, "dropout": 0.1}
            hparams = {"corpus": "tinyshakespeare", "gate": gate, "gate_options": options, "seed": seed, **model}
            loss = losses[letter][seed]
            metrics = {"final_val_loss": loss, "best_val_loss": loss, "final_gap": 0.1}
            done = {
                "hparams": hparams,
                "metrics": metrics,
                "max_steps": 3000,
                "n_params": 800_000 + 1_000 * (gate != "none"),
            }
            out.append(RunData(status="done", reason="", **done, **common))
    return out


def seed_runner() -> ModuleType:
    """scripts/seed_runner.py as a module (scripts/ is no package)."""
    return script("seed_runner")


def script(name: str) -> ModuleType:
    """scripts/<name>.py as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / f"scripts/{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def study_findings(tables: list[Any], variants: list[Any], evaluations: tuple[Any, ...] = ()) -> list[Any]:
    """Every finding of the report's studies over these tables and variants (no runs table, no bench)."""
    from ega_lightning.experiments import studies
    from ega_lightning.experiments.study import ReportInputs

    inputs = ReportInputs(tuple(tables), tuple(variants), evaluations=tuple(evaluations))
    return studies.run_studies(inputs, studies.measure(inputs))
