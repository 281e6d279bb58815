"""Evaluation beyond the training length (issue 56): `ega validate --data.eval_block_size` of a rope or none model on
longer windows, its loss by position in TensorBoard, the refusal for learned positions."""

import json
from types import SimpleNamespace

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ega_lightning import CharDataModule, CharLM
from ega_lightning.run_policy import eval_block_size_has_positions, evaluation_name

from .helpers import REPO, SHORT, TINY, TINY_MODEL, TINY_VOCAB, run_ega, scalars, seed_runner

BLOCK = TINY_MODEL["block_size"]


def tiny(position: str, gate: str = "linear") -> CharLM:
    torch.manual_seed(0)
    return CharLM(TINY_VOCAB, **TINY_MODEL, gate=gate, position=position, tau_init=0.3, alpha_init=2.0)


def long_windows(data_dir, factor: int = 2) -> CharDataModule:
    return CharDataModule(
        corpus="tinyshakespeare",
        data_dir=str(data_dir),
        block_size=BLOCK,
        batch_size=4,
        eval_batch_size=4,
        max_eval_windows=8,
        eval_block_size=factor * BLOCK,
    )


@pytest.mark.parametrize("position", ["rope", "none"])
def test_validate_at_twice_the_block_logs_the_loss_by_position(position, data_dir, tmp_path):
    """The curve against the model run by hand on the same windows: position p's loss is the mean over the windows of
    the loss at p, and the positions within the block read as the model on the block alone (causal)."""
    model, dm = tiny(position), long_windows(data_dir)
    logger = L.pytorch.loggers.TensorBoardLogger(str(tmp_path), name="", version="")
    trainer = L.Trainer(accelerator="cpu", logger=logger, enable_checkpointing=False, enable_progress_bar=False)
    metrics = trainer.validate(model, datamodule=dm, verbose=False)[0]
    windows = list(dm.eval_windows("val"))
    x = torch.cat([b[0] for b in windows])  # (8, 2 BLOCK)
    y = torch.cat([b[1] for b in windows])
    assert x.shape == (8, 2 * BLOCK)
    with torch.no_grad():
        model.eval()
        per_position = F.cross_entropy(model(x).transpose(1, 2), y, reduction="none").mean(0)  # (2 BLOCK,)
        within = F.cross_entropy(model(x[:, :BLOCK]).transpose(1, 2), y[:, :BLOCK], reduction="none").mean(0)
    curve = scalars(tmp_path, "val/loss_by_position")
    assert sorted(curve) == list(range(1, 2 * BLOCK + 1))
    logged = torch.tensor([curve[p] for p in range(1, 2 * BLOCK + 1)])
    torch.testing.assert_close(logged, per_position, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logged[:BLOCK], within, atol=1e-5, rtol=1e-5)
    assert metrics["val/loss"] == pytest.approx(per_position.mean().item(), abs=1e-5)
    assert metrics["val/loss_past_block"] == pytest.approx(per_position[BLOCK:].mean().item(), abs=1e-5)
    assert metrics["val/loss_within_block"] == pytest.approx(within.mean().item(), abs=1e-5)


def test_a_fits_validation_keeps_no_curve_and_reads_the_training_block(data_dir, tmp_path):
    model = tiny("rope")
    dm = CharDataModule(corpus="tinyshakespeare", data_dir=str(data_dir), block_size=BLOCK, max_eval_windows=4)
    logger = L.pytorch.loggers.TensorBoardLogger(str(tmp_path), name="", version="")
    trainer = L.Trainer(accelerator="cpu", logger=logger, enable_checkpointing=False, enable_progress_bar=False)
    metrics = trainer.validate(model, datamodule=dm, verbose=False)[0]
    assert "val/loss_past_block" not in metrics and next(iter(dm.eval_windows("val")))[0].shape[1] == BLOCK
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert "val/loss_by_position" not in events.Tags()["scalars"]


def _request(command: str, position: str | None, eval_block_size: int | None) -> SimpleNamespace:
    hparams = {**TINY_MODEL, **({} if position is None else {"position": position})}
    checkpoint = SimpleNamespace(hparams=hparams)
    config = {"model": {**TINY_MODEL, "position": "learned"}, "data": {"eval_block_size": eval_block_size}}
    return SimpleNamespace(command=command, config=config, checkpoint=checkpoint)


@pytest.mark.parametrize(
    ("command", "position", "eval_block_size", "refused"),
    [
        ("validate", "rope", 4 * BLOCK, None),
        ("test", "none", 2 * BLOCK, None),
        ("validate", "learned", BLOCK, None),  # the training block: any model
        ("validate", "learned", 2 * BLOCK, "positions are learned"),
        ("validate", None, 2 * BLOCK, "positions are learned"),  # a checkpoint from before the option
        ("fit", "rope", 2 * BLOCK, "ega fit validates at the training block"),
    ],
)
def test_eval_block_size_is_refused_where_there_are_no_positions_past_the_block(
    command, position, eval_block_size, refused
):
    message = eval_block_size_has_positions(_request(command, position, eval_block_size), None)  # reads no plan
    assert (message is None) == (refused is None)
    if refused:
        assert refused in message and "\n" not in message
    assert evaluation_name(command, eval_block_size) == (None if command == "fit" else f"{command}-T{eval_block_size}")
    assert evaluation_name("validate", None) == "validate"


@pytest.mark.slow
def test_ega_validate_at_twice_the_block_writes_its_own_evaluation(tmp_path, data_dir, monkeypatch):
    env = {"EGA_DATA_DIR": str(data_dir)}
    fit = run_ega(["fit", *TINY, *SHORT, "--model.position=rope", "--run_name=r"], tmp_path, env=env)
    assert fit.returncode == 0, fit.stderr[-3000:]
    best = tmp_path / "lightning_logs/r/checkpoints/best.ckpt"
    for factor in (1, 2, 4):
        args = [
            "validate",
            f"--ckpt_path={best}",
            f"--data.eval_block_size={factor * BLOCK}",
            "--data.max_eval_windows=4",
        ]
        result = run_ega(args, tmp_path, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        curve = scalars(tmp_path / f"lightning_logs/r/validate-T{factor * BLOCK}", "val/loss_by_position")
        assert sorted(curve) == list(range(1, factor * BLOCK + 1))
    assert (tmp_path / "lightning_logs/r/checkpoints/last.ckpt").is_file()  # the training run is left as it was

    # the study's record of it (scripts/seed_runner.py --beyond_the_block 2): the whole split in windows of 2 x the
    # block, its loss the mean of the loss by position (every window predicts at each of its 2 x 32 positions)
    runner = seed_runner()
    out = tmp_path / "records/beyond_the_block/r-T64.json"
    monkeypatch.setenv("EGA_DATA_DIR", str(data_dir))
    assert runner.beyond_the_block("r", tmp_path / "lightning_logs", out, REPO, 2 * BLOCK) == 0
    record = json.loads(out.read_text())
    assert (record["run_name"], record["eval_block_size"], record["step"]) == ("r", 2 * BLOCK, 1)
    assert len(record["loss_by_position"]) == 2 * BLOCK
    assert record["val_loss"] == pytest.approx(sum(record["loss_by_position"]) / (2 * BLOCK), rel=1e-5)
    assert "<runs_dir>/r/checkpoints/last.ckpt --data.eval_block_size=64" in record["command"]
