"""Issue 70: a position encoding added as a user adds one, one class and one registration, trains, validates and
generates on the reference and fused paths, each path's cached generation equal to its own recomputation."""

from collections.abc import Iterator
from typing import ClassVar

import lightning as L
import pytest
import torch

from ega_lightning import CharDataModule, CharLM
from ega_lightning.generation import next_token_logits
from ega_lightning.model.position import POSITIONS, Position, register_position

from .helpers import TINY_MODEL, validate_tiny

# fp32 rounding of the same attention over cached keys against recomputed ones
TOLERANCE = 1e-5


class Sinusoid(Position):
    """A toy encoding that uses both hooks: Vaswani et al.'s fixed sinusoidal embedding added to the token embedding,
    and q and k turned pairwise by 0.1 radian a position. No parameters; ``calls`` counts the hooks' calls."""

    rotates = True
    calls: ClassVar[dict[str, int]] = {}

    def embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        Sinusoid.calls["embed"] = Sinusoid.calls.get("embed", 0) + 1
        C = self.cfg.n_embd
        m = torch.arange(start, start + idx.shape[1], device=idx.device, dtype=torch.float32)[:, None]
        angles = m / 10_000 ** (torch.arange(0, C, 2, device=idx.device) / C)  # (T, C / 2)
        return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # (T, C)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        Sinusoid.calls["rotate"] = Sinusoid.calls.get("rotate", 0) + 1
        m = 0.1 * torch.arange(start, start + q.shape[-2], device=q.device, dtype=q.dtype)[:, None]  # (T, 1)

        def turn(x: torch.Tensor) -> torch.Tensor:
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat([x1 * m.cos() - x2 * m.sin(), x1 * m.sin() + x2 * m.cos()], dim=-1)

        return turn(q), turn(k)


@pytest.fixture
def toy() -> Iterator[str]:
    register_position("toy_sinusoid")(Sinusoid)  # the one registration
    Sinusoid.calls.clear()
    yield "toy_sinusoid"
    del POSITIONS["toy_sinusoid"]  # other tests iterate over the registered encodings


@pytest.mark.parametrize("gate", ["none", "linear"])
@pytest.mark.parametrize("attention", ["reference", "fused"])
def test_a_users_position_encoding_trains_validates_and_generates_cached_as_recomputed(
    toy, attention, gate, data_dir, tmp_path
):
    dm = CharDataModule(
        corpus="tinyshakespeare",
        data_dir=str(data_dir),
        block_size=TINY_MODEL["block_size"],
        batch_size=4,
        max_eval_windows=8,
    )
    torch.manual_seed(0)
    lm = CharLM(dm.vocab, **TINY_MODEL, gate=gate, position=toy, attention=attention, warmup_steps=1)
    position = lm.model.position
    assert type(position) is Sinusoid and all(block.attn.position is position for block in lm.model.blocks)
    assert lm.model.wpe is None  # no parameters of its own: none registered
    before = {n: p.detach().clone() for n, p in lm.named_parameters()}
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=3,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(lm, dm)
    assert all(not torch.equal(p, before[n]) for n, p in lm.named_parameters() if n.endswith("c_attn.weight"))
    _, metrics = validate_tiny(lm, data_dir, max_eval_windows=8)
    assert metrics and all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert Sinusoid.calls["embed"] > 0 and Sinusoid.calls["rotate"] > 0  # the model and every layer called it

    model = lm.model.eval()
    idx = torch.randint(0, len(dm.vocab), (2, 5), generator=torch.Generator().manual_seed(1))
    steps = next_token_logits(model, idx, use_cache=True)
    step = next(steps)
    windows = []
    with torch.no_grad():
        for _ in range(2 * TINY_MODEL["block_size"]):  # past the block: the cache is rebuilt from a half-window
            torch.testing.assert_close(step.logits, model(step.window)[:, -1], atol=TOLERANCE, rtol=TOLERANCE)
            windows.append(step.window.shape[1])
            idx = torch.cat([idx, step.logits.argmax(-1, keepdim=True)], dim=1)
            step = steps.send(idx)
    assert max(windows) == TINY_MODEL["block_size"] and TINY_MODEL["block_size"] // 2 in windows[6:]


def test_no_code_that_builds_or_runs_a_model_tests_a_position_encoding_by_its_name():
    """The behaviour is the object's (`embed`, `rotate`, `refusal`, `extrapolates`): a comparison with a shipped
    encoding's name in the model, CharLM's checks or the run policy would leave a new encoding out of it."""
    import ast
    import inspect

    from ega_lightning import module, run_policy
    from ega_lightning.model import attention, cache, config, flex, fused, gpt

    for source in (attention, cache, config, flex, fused, gpt, module, run_policy):
        tree = ast.parse(inspect.getsource(source))
        compared = {
            node.value
            for cmp in ast.walk(tree)
            if isinstance(cmp, ast.Compare)
            for node in ast.walk(cmp)
            if isinstance(node, ast.Constant)
        }
        assert not compared & {"learned", "rope"}, source.__name__
