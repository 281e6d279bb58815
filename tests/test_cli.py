"""The real `ega` command in a subprocess: fit, artefacts, evaluation from a checkpoint alone."""

import math
import re
import shlex
import shutil

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ega_lightning import CharLM

from .helpers import CONFIGS, TINY_MODEL, run_ega, scalars

pytestmark = pytest.mark.slow

TINY_ARGS = [f"--model.{k}={v}" for k, v in TINY_MODEL.items()] + [
    "--data.batch_size=8",
    "--data.max_eval_windows=16",
    "--trainer.max_steps=6",
    "--trainer.val_check_interval=3",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
]
COMPOSE = ["-c", str(CONFIGS / "base.yaml"), "-c", str(CONFIGS / "size/cpu.yaml")]


def fit_args(corpus: str, gate: str, run_name: str) -> list[str]:
    return [
        "fit",
        *COMPOSE,
        "-c",
        str(CONFIGS / f"corpus/{corpus}.yaml"),
        "-c",
        str(CONFIGS / f"gate/{gate}.yaml"),
        *TINY_ARGS,
        f"--run_name={run_name}",
    ]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, data_dir):
    """One tiny EGA-1 fit, shared by the tests below."""
    work = tmp_path_factory.mktemp("cli")
    result = run_ega(fit_args("tinyshakespeare", "linear", "tiny"), cwd=work, env={"EGA_DATA_DIR": str(data_dir)})
    assert result.returncode == 0, result.stderr[-4000:]
    return work, work / "lightning_logs" / "tiny", result


def test_fit_writes_tensorboard_scalars_config_and_checkpoints(trained_run):
    _, run_dir, _ = trained_run
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert (run_dir / "config.yaml").is_file() and (run_dir / "hparams.yaml").is_file()
    events = EventAccumulator(str(run_dir))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "val/loss", "val/bpc", "train/lr", "train/tokens_per_sec"} <= tags
    val_loss = [e.value for e in events.Scalars("val/loss")]
    val_bpc = [e.value for e in events.Scalars("val/bpc")]
    # Lightning's x-axis is the index of the batch that triggered the evaluation: after steps 3 and 6
    assert [e.step for e in events.Scalars("val/loss")] == [2, 5]
    assert val_bpc[-1] == pytest.approx(val_loss[-1] / math.log(2), rel=1e-6)
    assert val_loss[-1] < math.log(65)  # six steps of AdamW already beat the uniform guess
    ckpt = torch.load(run_dir / "checkpoints/last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 6


def test_checkpoint_evaluates_without_the_corpus(trained_run, tmp_path):
    _, run_dir, _ = trained_run
    ckpt = tmp_path / "model.ckpt"
    shutil.copy(run_dir / "checkpoints/last.ckpt", ckpt)
    # a fresh process whose only data directory does not exist
    script = (
        "import sys, torch\n"
        "from ega_lightning import CharLM\n"
        "m = CharLM.load_from_checkpoint(sys.argv[1]).eval()\n"
        "ids = m.tokenizer.encode('ROMEO:\\nBut soft, what light')[None]\n"
        "with torch.no_grad(): loss = m.loss((ids[:, :-1], ids[:, 1:]))\n"
        "print(f'{loss.item():.6f}', m.tokenizer.vocab == m.hparams.vocab, len(m.tokenizer))\n"
    )
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", script, str(ckpt)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"EGA_DATA_DIR": str(tmp_path / "absent"), "PATH": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loss, same_vocab, vocab_size = result.stdout.split()
    assert same_vocab == "True" and vocab_size == "65"
    # the same weights in this process give the same loss: nothing was re-initialised on load
    model = CharLM.load_from_checkpoint(run_dir / "checkpoints/last.ckpt").eval()
    ids = model.tokenizer.encode("ROMEO:\nBut soft, what light")[None]
    with torch.no_grad():
        assert float(loss) == pytest.approx(model.loss((ids[:, :-1], ids[:, 1:])).item(), abs=1e-5)


def latest(run_dir, tag: str) -> float:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return max(events.Scalars(tag), key=lambda e: e.wall_time).value


@pytest.mark.parametrize(
    "stage, headline",
    [
        ("validate", ["val/loss", "val/bpc", "gate/tau_mean", "gate/frac_above_tau"]),
        ("test", ["test/loss", "test/bpc"]),  # the gate's statistics are taken on validation only
    ],
)
def test_evaluation_reads_corpus_and_size_from_checkpoint_and_prints_its_headline(
    trained_run, data_dir, stage, headline
):
    work, run_dir, _ = trained_run
    # no size/gate/corpus config: the checkpoint supplies the model and its corpus
    result = run_ega(
        [
            stage,
            "-c",
            str(CONFIGS / "base.yaml"),
            "--data.max_eval_windows=16",
            "--trainer.enable_progress_bar=false",
            f"--ckpt_path={run_dir / 'checkpoints/last.ckpt'}",
        ],
        cwd=work,
        env={"EGA_DATA_DIR": str(data_dir)},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # the headline, not a table of every head: those stay in TensorBoard (and --verbose=true)
    first, shown, pointer = result.stdout.strip().splitlines()
    assert first.startswith(f"ega {stage}: {run_dir / 'checkpoints/last.ckpt'} (step 6) on tinyshakespeare")
    values = dict(zip(shown.split()[::2], map(float, shown.split()[1::2]), strict=True))
    assert list(values) == headline
    # logged into a run of its own beside the training run (<run>/validate, <run>/test), never into its curves
    assert all(values[tag] == pytest.approx(latest(run_dir / stage, tag), abs=1e-4) for tag in headline)
    assert "/head_" not in result.stdout and f"tensorboard --logdir {run_dir}" in pointer
    assert f"the run {run_dir / stage} " in pointer
    assert (run_dir / stage / f"config_{stage}.yaml").is_file() and not (run_dir / f"config_{stage}.yaml").exists()


def test_refuses_to_overwrite_a_run_and_to_resume_nothing(trained_run, data_dir):
    work, _, _ = trained_run
    env = {"EGA_DATA_DIR": str(data_dir)}
    again = run_ega(fit_args("tinyshakespeare", "linear", "tiny"), cwd=work, env=env)
    assert again.returncode != 0
    assert "already holds a run" in again.stderr and "--ckpt_path last" in again.stderr
    nothing = run_ega([*fit_args("tinyshakespeare", "linear", "fresh"), "--ckpt_path=last"], cwd=work, env=env)
    assert nothing.returncode == 2 and "there is no run to resume" in nothing.stderr
    assert "Traceback" not in nothing.stderr
    assert not (work / "lightning_logs" / "fresh").exists()


def test_print_config_shows_composed_values(tmp_path):
    result = run_ega([*fit_args("ptb", "none", "x"), "--print_config"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "corpus: ptb" in result.stdout and "gate: none" in result.stdout
    assert f"n_embd: {TINY_MODEL['n_embd']}" in result.stdout


def test_unknown_gate_on_the_command_line_lists_registered(tmp_path):
    result = run_ega([*fit_args("ptb", "none", "x"), "--model.gate=wavelet"], cwd=tmp_path)
    assert result.returncode != 0
    assert "Unknown gate 'wavelet'. Registered gates: none, alibi, author, db2, db4, fox, linear" in result.stderr


def test_generate_from_checkpoint_continues_the_prompt(trained_run):
    work, run_dir, _ = trained_run
    ckpt = str(run_dir / "checkpoints/last.ckpt")
    args = ["generate", f"--ckpt_path={ckpt}", "--prompt=ROMEO:", "--max_new_tokens=40", "--seed=3"]
    result = run_ega(args, cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout[:-1]  # print adds one newline
    assert text.startswith("ROMEO:") and len(text) == len("ROMEO:") + 40
    assert "tokens/s" in result.stderr
    assert run_ega(args, cwd=work).stdout == result.stdout  # same seed, same text
    bad = run_ega([*args[:2], "--prompt=ROMEO: ~{}"], cwd=work)
    assert bad.returncode == 2 and "outside the vocabulary: '{}~'" in bad.stderr


def test_fit_ends_by_saying_where_the_run_went_and_how_to_resume_it(trained_run, data_dir):
    work, run_dir, result = trained_run
    lines = result.stdout.strip().splitlines()[-5:]
    assert lines[0] == "ega fit: finished at step 6 of 6."
    said = dict(re.fullmatch(r"  (\S.*?)\s{2,}(\S.*)", line).groups() for line in lines[1:])
    assert work / said["run directory"] == run_dir
    best, rest = said["best checkpoint"].split(" ", 1)
    val_loss = scalars(run_dir, "val/loss")
    assert work / best == run_dir / "checkpoints/best.ckpt"
    assert rest == f"(val/loss {min(val_loss.values()):.4f} at step {torch.load(work / best)['global_step']})"
    assert said["TensorBoard"] == "tensorboard --logdir lightning_logs"
    # Lightning's notices that nobody running `ega` can act on are left out; its other messages are not
    assert "litlogger" not in result.stderr and "LeafSpec" not in result.stderr and "weights_only" not in result.stderr
    assert "GPU available" in result.stderr
    # the resume line is a command that runs: it resumes this run from last.ckpt (finished: nothing left to do)
    ega, *args = shlex.split(said["resume"])
    assert ega == "ega" and args[-2:] == ["--ckpt_path", "last"]
    resumed = run_ega(args, cwd=work)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "ega fit: finished at step 6 of 6." in resumed.stdout
    assert "Restoring states from the checkpoint path at" in resumed.stderr
