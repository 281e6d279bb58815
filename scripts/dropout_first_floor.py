"""Where the author's order on the fused kernel can differ from the reference (issue 67): on a checkpoint in training
mode, how often a row's kept mass falls below the reference's floor, and a kept key's log g below the channel's clamp.

    PYTHONPATH=. python scripts/dropout_first_floor.py RUN/checkpoints/last.ckpt --batches 20

The fused path computes d_ij a_ij g_j / sum_k d_ik a_ik g_k as a softmax over the kept keys
(`fused.FusedAttention.causal`): it equals the reference (`attention.dropout_first_attention_reference`) except in a
row whose kept mass sum_k d_ik a_ik g_k (dropout's 1 / (1 - p) included) is positive but below the reference's floor
(1e-8: the reference divides by the floor, the kernel renormalises) and where a kept key's log g lies below the
channel's clamp (-30: the kernel weighs it by exp(-30)). A row whose every key is dropped gives 0 on both. This runs
the checkpoint's reference path on random training windows with dropout on, as training does, and counts each case.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ega_lightning.model import attention
from ega_lightning.model.attention import RENORMALISE_FLOOR
from ega_lightning.model.fused import LOG_GATE_FLOOR


class Counts:
    """Rows and kept keys seen, and those at the floor or the clamp, summed over every call of the reference."""

    def __init__(self) -> None:
        self.rows = self.dropped_rows = self.floor_rows = self.kept_keys = self.clamped_keys = 0
        self.min_mass = float("inf")

    def __call__(self, q, k, v, g, dropout_p=0.0) -> None:  # the reference's arguments
        T, hs = q.shape[-2], q.shape[-1]
        att = (q @ k.transpose(-2, -1)) / hs**0.5
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        keep = torch.empty_like(att).bernoulli_(1 - dropout_p).bool() & causal  # as F.dropout draws it
        mass = (att * keep / (1 - dropout_p) * g[:, :, None, :]).sum(dim=-1)  # (B, nh, T)
        kept_any = keep.any(dim=-1)
        self.rows += mass.numel()
        self.dropped_rows += int((~kept_any).sum())
        self.floor_rows += int((kept_any & (mass < RENORMALISE_FLOOR)).sum())
        if kept_any.any():
            self.min_mass = min(self.min_mass, float(mass[kept_any].min()))
        log_g = g.log()[:, :, None, :].expand_as(keep)
        self.kept_keys += int(keep.sum())
        self.clamped_keys += int((keep & (log_g < LOG_GATE_FLOOR)).sum())

    def lines(self) -> list[str]:
        return [
            f"rows {self.rows:,}: every key dropped {self.dropped_rows:,} (0 on both paths), kept mass below "
            f"{RENORMALISE_FLOOR:g} {self.floor_rows:,} (the paths differ there); least kept mass {self.min_mass:.3g}",
            f"kept keys {self.kept_keys:,}: log g below {LOG_GATE_FLOOR:g} {self.clamped_keys:,}",
        ]


def count(lm, windows: torch.Tensor, batch_size: int) -> Counts:
    """The counts of ``lm`` on ``windows`` in training mode: every layer's reference attention counted (on a keep mask
    drawn as dropout draws it) and then computed as training computes it, so each layer sees its real inputs."""
    counts = Counts()
    original = attention.dropout_first_attention_reference

    def counted(q, k, v, g, dropout_p=0.0):
        counts(q, k, v, g, dropout_p)
        return original(q, k, v, g, dropout_p)

    attention.dropout_first_attention_reference = counted
    try:
        lm.train()
        with torch.no_grad():
            for i in range(0, len(windows), batch_size):
                lm(windows[i : i + batch_size])
    finally:
        attention.dropout_first_attention_reference = original
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--batches", type=int, default=20, help="batches of training windows (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from ega_lightning.data import CharDataModule
    from ega_lightning.module import CharLM

    lm = CharLM.load_from_checkpoint(args.checkpoint, map_location="cpu", attention="reference")
    if not lm.hparams.dropout_before_gate or not lm.hparams.dropout:
        print(f"{args.checkpoint}: not the author's order with dropout; nothing differs between the paths.")
        return 2
    # The corpus and batch are the data module's, saved beside the model's hyperparameters, not among them.
    data = torch.load(args.checkpoint, map_location="cpu", weights_only=False).get("datamodule_hyper_parameters", {})
    block = lm.hparams.block_size
    corpus = data.get("corpus", "tinyshakespeare")
    dm = CharDataModule(corpus, data_dir=os.environ.get("EGA_DATA_DIR"), block_size=block)
    dm.setup()
    gen = torch.Generator().manual_seed(args.seed)
    train, batch = dm.splits["train"], data.get("batch_size", 64)
    starts = torch.randint(0, len(train) - block, (args.batches * batch,), generator=gen)
    windows = torch.stack([train[s : s + block] for s in starts.tolist()]).long()
    torch.manual_seed(args.seed)
    counts = count(lm, windows, batch)
    print(f"{args.checkpoint} ({args.batches} batches of {batch} training windows, dropout {lm.hparams.dropout}):")
    print("\n".join("  " + line for line in counts.lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
