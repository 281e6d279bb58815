"""What `ega fit`, `validate` and `test` say when they end, and the Lightning notices they leave out."""

from __future__ import annotations

import logging
import shlex
import warnings
from pathlib import Path
from typing import Any

# The console's headline of an evaluation, in this order, where the run has them (the gate's only
# where there is a gate); every metric, per layer and head, is in TensorBoard and in --verbose=true.
HEADLINE = ("{split}/loss", "{split}/bpc", "gate/tau_mean", "gate/frac_above_tau")


class _WithoutLitLoggerTip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


def quiet_lightning() -> None:
    """Leaves out the two notices Lightning prints on every `ega` run that a user cannot act on.

    - Lightning's advert for its cloud logger ("Tip: ... install litlogger"), logged whenever a Trainer
      has no LitLogger (`ega` logs to TensorBoard by design).
    - torch's deprecation of ``LeafSpec``, raised inside Lightning's own ``_pytree`` module (this project
      never calls it; a newer Lightning will).

    Both are matched by their own text and origin: every other message and warning still shows.
    """
    from ega_lightning.lightning_private import PYTREE_MODULE  # Lightning: not for `ega sweep`'s checkpoint_step

    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_WithoutLitLoggerTip())
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        module=PYTREE_MODULE,
    )


def checkpoint_step(path: str | Path) -> int | None:
    """The optimizer step a checkpoint was written at, read without loading its tensors."""
    import torch

    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])
    except Exception:  # a summary line is not worth failing a finished command for
        return None


def resume_command(typed: list[str]) -> str:
    """The command a user types to resume this fit: theirs, without --ckpt_path/--overwrite, plus --ckpt_path last."""
    kept: list[str] = []
    skip = False
    for arg in typed:
        if skip:
            skip = False
        elif arg in ("--ckpt_path", "--overwrite"):
            skip = True
        elif not arg.startswith(("--ckpt_path=", "--overwrite=")):
            kept.append(arg)
    return shlex.join(["ega", *kept, "--ckpt_path", "last"])


def _shown(path: str) -> str:
    """A path as the user would type it: relative to the working directory when it lies below it."""
    if path and Path(path).is_absolute() and Path(path).is_relative_to(Path.cwd()):
        return str(Path(path).relative_to(Path.cwd()))
    return path


def fit_summary(trainer: Any, run_dir: Path, typed: list[str]) -> str:
    """Where a finished fit went: the run directory, the best checkpoint, TensorBoard, and how to resume."""
    if trainer.fast_dev_run:  # Lightning caps max_steps and turns off every checkpoint and logger
        return (
            f"ega fit: fast_dev_run ran {trainer.global_step} training step(s), a check that the pipeline runs, and "
            "(as Lightning's fast_dev_run does) wrote no checkpoint and no TensorBoard run: there is nothing to "
            "resume. Drop --trainer.fast_dev_run to train for trainer.max_steps."
        )
    done = "finished" if trainer.global_step >= trainer.max_steps else "stopped"
    lines = [f"ega fit: {done} at step {trainer.global_step} of {trainer.max_steps}.", f"  run directory    {run_dir}"]
    callback = trainer.checkpoint_callback
    best = _shown(getattr(callback, "best_model_path", ""))
    score = getattr(callback, "best_model_score", None)
    # resumed from a checkpoint written in another directory (a moved run): Lightning keeps the old best path and
    # drops its score, and no validation has scored one since; the run's own best.ckpt is beside its last.ckpt
    own = Path(callback.dirpath) / Path(best).name if best and getattr(callback, "dirpath", None) else None
    if best and score is not None:
        step = checkpoint_step(best)
        lines.append(f"  best checkpoint  {best} ({callback.monitor} {float(score):.4f} at step {step})")
    elif own is not None and own.is_file():
        step = checkpoint_step(own)
        lines.append(f"  best checkpoint  {_shown(str(own))} (at step {step}, not scored since the move)")
    else:
        lines.append("  best checkpoint  none: no validation ran (trainer.val_check_interval > max_steps?)")
    lines.append(f"  TensorBoard      tensorboard --logdir {run_dir.parent}")
    lines.append(f"  resume           {resume_command(typed)}")
    return "\n".join(lines)


def evaluation_summary(
    stage: str,
    metrics: dict[str, Any],
    ckpt_path: str | None,
    run_dir: Path | None,
    corpus: str | None,
    fast_dev_run: int = 0,
    non_causal: bool = False,
) -> str:
    """The headline of ``ega validate``/``test``: what was evaluated, then loss, bpc, tau mean, fraction above tau
    (``fast_dev_run``: the batches Lightning's fast_dev_run evaluated, 0: the whole split; ``non_causal``: a gate's z
    was taken over the whole window, which the headline says: its loss is no causal loss)."""
    split = "val" if stage == "validate" else "test"
    what = f"{ckpt_path} (step {checkpoint_step(ckpt_path)})" if ckpt_path else "the untrained model (no --ckpt_path)"
    scope = f"{split} split"
    if fast_dev_run:  # Lightning evaluates that many batches and logs nothing
        scope = f"first {fast_dev_run} batch(es) of the {scope} (fast_dev_run: a check of the pipeline, not logged)"
    keys = [k.format(split=split) for k in HEADLINE]
    headline = [f"{key} {float(metrics[key]):.4f}" for key in keys if key in metrics]
    if non_causal:  # issue 72: a leaky evaluation was printed as a plain val/loss
        scope += (
            ", z over the whole window (non-causal: a key's gate reads later characters, so this is no causal loss; "
            "--model.eval_znorm=prefix evaluates causally)"
        )
    # None: no logger; a step that never trained (no checkpoint) logs at 0
    where = f"in TensorBoard as the run {run_dir} (tensorboard --logdir {run_dir.parent}), or " if run_dir else ""
    return "\n".join(
        [
            f"ega {stage}: {what} on {corpus or 'the corpus'}'s {scope}",
            "  " + "   ".join(headline),
            f"  every metric (per layer and head): {where}add --verbose=true",
        ]
    )
