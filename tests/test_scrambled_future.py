"""The leak, measured directly (issue 67): a causal model's loss before a cut does not move when the text after it is
scrambled; the author's z-norm over the whole window does."""

import pytest
import torch

from ega_lightning import CharLM
from ega_lightning.scrambled_future import draw_windows, read_cuts, scramble

from .helpers import TINY_MODEL, TINY_VOCAB

T = TINY_MODEL["block_size"]


def split(n: int = 4000) -> torch.Tensor:
    return torch.randint(0, len(TINY_VOCAB), (n,), generator=torch.Generator().manual_seed(3)).to(torch.uint8)


def test_the_scrambled_inputs_keep_the_prefix_and_replace_the_cut_and_after():
    windows, donors = draw_windows(split(), T, 8)
    assert windows.shape == (8, T + 1) and donors.shape == (8, T)
    inputs = scramble(windows, donors, 5)
    assert torch.equal(inputs[:, :5], windows[:, :5])
    # position 4's target (the input at 5) is no longer among the inputs: the donor's text is
    assert torch.equal(inputs[:, 5:], donors[:, 5:])
    assert (inputs[:, 5:] != windows[:, 5:T]).any()


@pytest.mark.parametrize("attention", ["reference", "fused"])
@pytest.mark.parametrize("gate", ["none", "linear", "author-prefix"])
def test_a_causal_model_does_not_move(gate, attention):
    options = {"gate": "author", "gate_options": {"znorm": "prefix"}} if gate == "author-prefix" else {"gate": gate}
    torch.manual_seed(0)
    lm = CharLM(TINY_VOCAB, **TINY_MODEL, **options, attention=attention, alpha_init=3.0)
    windows, donors = draw_windows(split(), T, 16)
    readings, total = read_cuts(lm, windows, donors, [T // 4, T // 2], batch_size=8)
    for r in readings:
        assert r.loss_scrambled == pytest.approx(r.loss_true, abs=1e-6)
        assert max(abs(d) for d in r.delta_by_position) < 1e-6
    assert abs(total.delta) < 1e-6


def test_the_window_znorm_moves_by_what_it_reads_of_the_future():
    torch.manual_seed(0)
    lm = CharLM(TINY_VOCAB, **TINY_MODEL, gate="author", gate_options={"znorm": "window", "alpha_init": 4.0})
    windows, donors = draw_windows(split(), T, 16)
    readings, total = read_cuts(lm, windows, donors, [T // 4, T // 2], batch_size=8)
    assert all(abs(r.loss_scrambled - r.loss_true) > 1e-5 for r in readings)
    assert total.low <= total.delta <= total.high and total.windows == 16


def test_the_floor_count_finds_rows_below_the_floor_and_keys_below_the_clamp():
    """scripts/dropout_first_floor.py counts where the fused dropout-first path may differ from the reference: a model
    whose gates are pushed to exp(-40) has every kept key below the clamp and its rows' kept mass below the floor."""
    from .helpers import script

    floor = script("dropout_first_floor")
    torch.manual_seed(0)
    lm = CharLM(
        TINY_VOCAB,
        **TINY_MODEL,
        gate="author",
        gate_options={"znorm": "prefix"},
        dropout=0.2,
        dropout_before_gate=True,
        attention="reference",
    )
    windows, _ = draw_windows(split(), T, 8)
    counts = floor.count(lm, windows[:, :-1], 4)
    assert counts.rows == 8 * TINY_MODEL["n_layer"] * TINY_MODEL["n_head"] * T
    assert counts.floor_rows == 0 and counts.clamped_keys == 0 and 0 < counts.dropped_rows < counts.rows
    for gate in lm.model.gates:  # every gate pushed to exp(-40): far below the clamp
        torch.nn.init.constant_(gate.tau, 50.0)
    counts = floor.count(lm, windows[:, :-1], 4)
    assert counts.clamped_keys == counts.kept_keys > 0
    assert counts.floor_rows == counts.rows - counts.dropped_rows


def test_the_floor_script_reads_the_corpus_and_batch_from_a_trained_checkpoint(tmp_path, data_dir, monkeypatch, capsys):
    """The script's command on a checkpoint the trainer wrote: the corpus and batch are the data module's (saved beside
    the model's hyperparameters, not among them), so it counts rows of the checkpoint's batch of 4 windows."""
    from .helpers import script, tiny_checkpoint

    _, path = tiny_checkpoint(tmp_path, data_dir, gate="author", dropout=0.2, dropout_before_gate=True)
    monkeypatch.setenv("EGA_DATA_DIR", str(data_dir))
    assert script("dropout_first_floor").main([str(path), "--batches", "2"]) == 0
    rows = 2 * 4 * TINY_MODEL["n_layer"] * TINY_MODEL["n_head"] * T
    out = capsys.readouterr().out
    assert "2 batches of 4 training windows, dropout 0.2" in out and f"rows {rows:,}:" in out
