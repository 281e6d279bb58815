"""The ways of running the same model, each against its plain counterpart on CPU: the CUDA padding
layout (8 channels) against the reference, FlexAttention against the reference, compiled against eager."""

import functools
import warnings

import lightning as L
import pytest
import torch

from ega_lightning import CharLM
from ega_lightning.bench.harness import saved_activation_bytes
from ega_lightning.callbacks import TauTracker
from ega_lightning.callbacks.probe import GateProbe
from ega_lightning.gates import Gate, build_gate, gate_names
from ega_lightning.generation import next_token_logits
from ega_lightning.model import GPT, GPTConfig, fused
from ega_lightning.model.config import POSITIONS

from .helpers import TINY_MODEL, TINY_VOCAB, attention, needs_flex, validate_tiny

GATED = [name for name in gate_names(Gate) if name != "none"]
# every shipped gate whose bias rides the padded channel (`fused.rides_channel`): the energy gates and FoX
CHANNEL_GATES = [*GATED, "fox"]


def tiny(gate: str = "linear", **kwargs) -> CharLM:
    torch.manual_seed(0)
    return CharLM(TINY_VOCAB, **{**TINY_MODEL, "gate": gate, "tau_init": 0.3, "alpha_init": 2.0, **kwargs})


def batch(n: int = 3, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.randint(
        0, len(TINY_VOCAB), (n, TINY_MODEL["block_size"] + 1), generator=torch.Generator().manual_seed(seed)
    )
    return idx[:, :-1], idx[:, 1:]


def loss_and_grads(
    model: CharLM, data: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model.loss(data)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def assert_same_training_step(a: CharLM, b: CharLM, atol: float, rtol: float) -> None:
    data = batch()
    (loss_a, grads_a), (loss_b, grads_b) = loss_and_grads(a, data), loss_and_grads(b, data)
    torch.testing.assert_close(loss_a, loss_b, atol=atol, rtol=rtol)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=atol, rtol=rtol, msg=name)


def set_pad_width(model: CharLM, width: int) -> None:
    for block in model.model.blocks:
        block.attn.pad_width = width


# --- the CUDA layout: 8 extra channels per head, run on CPU


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("gate", CHANNEL_GATES)
def test_cuda_padding_layout_equals_reference_in_values_and_gradients(gate, position):
    """Stated tolerance (fp32): 1e-5 absolute and relative, as the fused path against the reference. With RoPE
    only the true channels turn: q' = [rope(q), 1], k' = [rope(k), log g sqrt(hs)] keeps the identity."""
    padded = tiny(gate, position=position)
    set_pad_width(padded, 8)
    reference = tiny(gate, attention="reference", position=position)
    reference.load_state_dict(padded.state_dict())
    assert_same_training_step(padded, reference, atol=1e-5, rtol=1e-5)
    x = torch.randn(2, 5, TINY_MODEL["n_embd"])
    layer = padded.model.blocks[0].attn
    assert layer._gated_qkv(x)[0].shape[-1] == TINY_MODEL["n_embd"] // TINY_MODEL["n_head"] + 8  # it did pad


@pytest.mark.parametrize("position", POSITIONS)
def test_cuda_padding_layout_caches_as_it_recomputes(position):
    model = tiny("linear", position=position).eval().model
    for block in model.blocks:
        block.attn.pad_width = 8
    idx = torch.randint(0, len(TINY_VOCAB), (2, 4))
    steps = next_token_logits(model, idx, use_cache=True)
    step = next(steps)
    with torch.no_grad():
        for _ in range(TINY_MODEL["block_size"] + 4):  # past one cache refill
            torch.testing.assert_close(step.logits, model(step.window)[:, -1], atol=1e-5, rtol=1e-5)
            idx = torch.cat([idx, step.logits.argmax(-1, keepdim=True)], dim=1)
            step = steps.send(idx)


# --- training's copy-free write of log g against autograd's in-place write


@pytest.mark.parametrize("width", [1, 8])
@pytest.mark.parametrize(
    ("gate", "mode"),
    [*((g, m) for g in GATED for m in ("fp32", "bf16-mixed", "frozen tau")), ("fox", "fp32"), ("fox", "bf16-mixed")],
)
def test_copy_free_write_equals_autograd_in_place_write_bit_for_bit(gate, width, mode):
    """FoX in fp32 (one channel) and under bf16 (two: `fused.key_channels`); frozen, its bias takes the relative
    mask, not the channel."""
    data, learn_tau = batch(), mode != "frozen tau"
    options = {} if gate == "fox" else {"gate_options": {"learn_tau": learn_tau}}
    runs = {}
    for copy_free in (True, False):
        model = tiny(gate, **options, attention_options={"copy_free_write": copy_free})
        set_pad_width(model, width)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16-mixed"):
            loss = model.loss(data)
        loss.backward()
        _, saved = saved_activation_bytes(functools.partial(model.loss, data), model.parameters())
        runs[copy_free] = (loss.detach(), {n: p.grad for n, p in model.named_parameters()}, saved)
    (loss, grads, saved), (plain_loss, plain_grads, plain_saved) = runs[True], runs[False]
    assert torch.equal(loss, plain_loss)
    assert grads.keys() == plain_grads.keys()
    for name in grads:
        assert (grads[name] is None and plain_grads[name] is None) or torch.equal(grads[name], plain_grads[name]), name
    assert all((grads[n] is not None) == learn_tau for n in grads if n.endswith("gate.tau"))
    assert saved <= plain_saved  # it keeps nothing the plain graph does not


@pytest.mark.parametrize("fused_channel", [True, False])
@pytest.mark.parametrize(("B", "T", "C", "nh"), [(32, 128, 128, 4), (64, 256, 256, 8)])  # the bench's sizes
def test_gated_qkv_function_equals_the_plain_graph_bit_for_bit_at_the_bench_sizes(B, T, C, nh, fused_channel):
    """Layer-level, at the shapes whose step times the bench compares (GEMM blocking depends on the shape);
    EGA-1's channel as one function (`FusedGateChannel`) or as the gate's graph rebuilt in backward."""
    torch.manual_seed(0)
    x, grad = torch.randn(B, T, C), torch.randn(B, T, C)
    runs, weights = [], None
    for copy_free in (True, False):  # the same weights, each path built as its variant
        gate = build_gate("linear", C, nh, tau_init=0.3, alpha_init=2.0)
        layer = attention(C, nh, gate, copy_free_write=copy_free, fused_channel=fused_channel)
        weights = weights or layer.state_dict()
        layer.load_state_dict(weights)
        xg = x.clone().requires_grad_()
        y = layer(xg)
        y.backward(grad)
        runs.append([y.detach(), xg.grad, *(p.grad for p in layer.parameters())])
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


@pytest.mark.parametrize(
    ("gate", "gate_options"),
    [("linear", {}), ("linear", {"znorm": "window"}), ("multiscale", {"scales": 2}), ("fox", {})],
)
# the bench's shapes, and the default path fingerprint's first (rows of 204 -> 208, where a GEMM's K of 208 would sum
# x's gradient in another order than 204's: the backward keeps K = 3 nh d)
@pytest.mark.parametrize(("B", "T", "C", "nh"), [(8, 128, 128, 4), (4, 256, 256, 8), (4, 64, 64, 4)])
def test_aligned_buffer_rows_train_bit_for_bit_as_unaligned_ones(gate, gate_options, B, T, C, nh, monkeypatch):
    """The padded Q/K/V buffer's rows rounded up to ROW_ALIGN elements (zero weights after the heads) against
    rows of exactly 3 nh d, and EGA-1's fused channel against the gate's graph: loss and every gradient bit
    for bit, through the whole model's training step, on the GEMM shapes the bench times."""
    assert fused.buffer_width((T, nh, C // nh, C // nh + 1)) % 8 == 0  # 396 -> 400 at the cpu size, 792 stays
    options = {"n_layer": 2, "n_head": nh, "n_embd": C, "block_size": T, "gate_options": gate_options}
    idx = torch.randint(0, len(TINY_VOCAB), (B, T + 1), generator=torch.Generator().manual_seed(3))
    runs = []
    for align, fused_channel in ((8, True), (1, False), (8, False), (1, True)):
        monkeypatch.setattr(fused, "ROW_ALIGN", align)
        torch.manual_seed(0)
        variant = {"fused_channel": fused_channel}
        model = CharLM(TINY_VOCAB, gate=gate, tau_init=0.3, alpha_init=2.0, **options, attention_options=variant)
        loss = model.loss((idx[:, :-1], idx[:, 1:]))
        loss.backward()
        runs.append((loss.detach(), [p.grad for p in model.parameters()]))
    for loss, grads in runs[1:]:
        assert torch.equal(loss, runs[0][0])
        assert all(torch.equal(a, b) for a, b in zip(grads, runs[0][1], strict=True))


@pytest.mark.parametrize("hook", ["forward", "full backward"])
def test_a_hooked_gate_sees_every_training_pass(hook):
    model = tiny("linear")
    calls = []
    register = {"forward": "register_forward_hook", "full backward": "register_full_backward_hook"}[hook]
    handles = [getattr(g, register)(lambda *_: calls.append(1)) for g in model.model.gates]
    loss_and_grads(model, batch())
    for h in handles:
        h.remove()
    assert len(calls) == TINY_MODEL["n_layer"]


# --- FlexAttention: on CPU forward only (torch has no CPU backward for it)


@needs_flex
@pytest.mark.parametrize("gate", GATED)
def test_flex_attention_equals_reference_without_gradients(gate):
    torch.manual_seed(2)
    C, nh, T = 24, 3, 19
    reference = attention(C, nh, build_gate(gate, C, nh, tau_init=0.2, alpha_init=3.0), "reference")
    flex = attention(C, nh, build_gate(gate, C, nh), "flex")
    flex.load_state_dict(reference.state_dict())
    x = torch.randn(2, T, C)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager FlexAttention warns that it is not compiled
        torch.testing.assert_close(flex(x), reference(x), atol=1e-5, rtol=1e-5)


@needs_flex
@pytest.mark.parametrize("gate", ["linear", "alibi", "fox"])
@pytest.mark.parametrize("position", POSITIONS)
def test_flex_model_equals_reference_model_without_gradients(position, gate):
    torch.manual_seed(0)
    cfg = {**TINY_MODEL, "vocab_size": len(TINY_VOCAB), "gate": gate, "position": position}
    cfg["gate_options"] = {"tau_init": 0.3, "alpha_init": 2.0} if gate == "linear" else {}
    reference = GPT(GPTConfig(**cfg, attention="reference")).eval()
    flex = GPT(GPTConfig(**cfg, attention="flex")).eval()
    flex.load_state_dict(reference.state_dict())
    idx = batch()[0]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(flex(idx), reference(idx), atol=1e-5, rtol=1e-5)


@needs_flex
@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_flex_training_on_cpu_is_refused_naming_fused():
    with pytest.raises(ValueError, match=r"model.attention=flex needs a CUDA device.*model.attention=fused"):
        CharLM(TINY_VOCAB, **TINY_MODEL, attention="flex")
    layer = attention(16, 2, build_gate("linear", 16, 2), "flex")
    with pytest.raises(ValueError, match=r"trains only on CUDA.*model.attention=fused"):
        layer(torch.randn(1, 4, 16))  # with gradients: refused before torch's own error


def test_flex_on_a_torch_without_it_is_refused_naming_fused(torch_without_flex):
    with pytest.raises(ValueError, match=r"needs FlexAttention, which came with torch 2\.5.*model.attention=fused"):
        CharLM(TINY_VOCAB, **TINY_MODEL, attention="flex")


# --- torch.compile: one compilation for the whole module (it takes tens of seconds on CPU)


@pytest.fixture(scope="module")
def compiled_and_eager():
    # one layer: every part of the model (embedding, gated block, head, loss) at half the graph to compile
    eager = tiny("linear", n_layer=1)
    compiled = tiny("linear", n_layer=1, compile=True)
    compiled.load_state_dict(eager.state_dict())
    return compiled, eager


@pytest.mark.slow
def test_compiled_training_step_equals_eager(compiled_and_eager):
    """Stated tolerance (fp32): 1e-5 absolute and relative (the compiler reorders float sums)."""
    compiled, eager = compiled_and_eager
    assert compiled._compiled_forward is not None
    assert_same_training_step(compiled, eager, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("width", [1, 8])
def test_compiled_gated_layer_equals_eager_at_both_widths(width):
    """Compiled, a gated layer concatenates q', k', v' (`_gated_compiled`); eager, it writes log g into
    its padded matmul's buffer (`GatedQKV`). Stated tolerance (fp32): 1e-5 absolute and relative."""
    torch.manual_seed(0)
    C, nh = TINY_MODEL["n_embd"], TINY_MODEL["n_head"]
    layer = attention(C, nh, build_gate("linear", C, nh, tau_init=0.3, alpha_init=2.0))
    layer.pad_width = width
    x = torch.randn(3, TINY_MODEL["block_size"], C)
    runs = []
    for forward in (torch.compile(layer), layer):  # one module: the compiled one shares its parameters
        layer.zero_grad(set_to_none=True)
        inputs = x.clone().requires_grad_()
        out = forward(inputs)
        out.square().sum().backward()
        runs.append({"out": out.detach(), "x": inputs.grad, **{n: p.grad for n, p in layer.named_parameters()}})
    compiled, eager = runs
    assert compiled.keys() == eager.keys() and all(g is not None for g in eager.values())
    for name in eager:
        torch.testing.assert_close(compiled[name], eager[name], atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.slow
def test_checkpoints_with_and_without_compile_load_into_each_other(compiled_and_eager, tmp_path):
    compiled, eager = compiled_and_eager
    assert list(compiled.state_dict()) == list(eager.state_dict())  # no `_orig_mod.` keys
    for source, flag in ((compiled, False), (eager, True)):
        trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_steps=0)
        trainer.strategy.connect(source)
        path = tmp_path / f"compile-{not flag}.ckpt"
        trainer.save_checkpoint(path)
        loaded = CharLM.load_from_checkpoint(path, compile=flag)  # compile is a runtime argument
        assert loaded.hparams.compile is flag and (loaded._compiled_forward is not None) is flag
        for key, value in source.state_dict().items():
            assert torch.equal(loaded.state_dict()[key], value), key


@pytest.mark.slow
def test_gate_probes_see_the_same_under_compile(compiled_and_eager, data_dir):
    """What TauTracker and GateMap compute: probe totals and the last gate values, equal to eager."""
    compiled, eager = compiled_and_eager
    idx = batch(seed=3)[0]
    seen = []
    for model in (compiled, eager):
        model.eval()
        with torch.no_grad(), GateProbe(model, keep_last=True) as probe:
            model(idx)
        seen.append(probe)
    torch.testing.assert_close(seen[0].totals(), seen[1].totals(), atol=0, rtol=0)
    assert seen[0].totals()[-1] == idx.numel()  # every key of every layer was counted
    for a, b in zip(seen[0].last, seen[1].last, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    logged = [validate_tiny(model, data_dir, [TauTracker()])[1] for model in (compiled, eager)]
    gate_tags = [tag for tag in logged[1] if tag.startswith("gate/")]
    assert "gate/frac_above_tau" in gate_tags and logged[0].keys() == logged[1].keys()
    for tag in [*gate_tags, "val/loss"]:
        assert logged[0][tag] == pytest.approx(logged[1][tag], abs=1e-6), tag


@pytest.mark.slow
def test_bench_compile_times_compiled_gates_beside_eager_and_compilation_apart(tmp_path, monkeypatch):
    import json

    import yaml

    from ega_lightning.commands.bench import main

    # What is tested is the bench's bookkeeping (rows, ratios, compilation apart), not the compiler: the
    # compiled step's values are inductor's in test_compiled_training_step_equals_eager. Here torch.compile
    # traces (dynamo, AOTAutograd) without generating and building C++ kernels, seconds instead of minutes.
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))

    configs, out = tmp_path / "configs", tmp_path / "out"
    (configs / "size").mkdir(parents=True)
    (configs / "gate").mkdir()
    shape = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16}
    (configs / "size/tiny.yaml").write_text(yaml.safe_dump({"model": shape, "data": {"batch_size": 2}}))
    for name in ("none", "linear"):
        (configs / f"gate/{name}.yaml").write_text(yaml.safe_dump({"model": {"gate": name}}))
    args = ["--configs", str(configs), "--sizes", "tiny", "--repeats", "3", "--warmup", "1", "--compile"]
    main([*args, "--no_generation", "--device", "cpu", "--out", str(out)])
    rows = json.loads((out / "bench-cpu-32-true-compile.json").read_text())["sizes"][0]["rows"]
    assert list(rows) == ["none", "linear", "none+compile", "linear+compile", "nanogpt_reference"]
    for name in ("none", "linear"):
        compiled = rows[f"{name}+compile"]
        assert compiled["eager_ratio"] > 0 and "eager_ratio" not in rows[name]
        assert compiled["compile_s"] > 0  # reported apart from the step times (how long: a figure, not a test)
    assert "## torch.compile at the `tiny` size" in (out / "bench-cpu-32-true-compile.md").read_text()


def test_generate_runs_a_flex_checkpoint_on_the_fused_kernel(tmp_path, capsys):
    from ega_lightning.commands.generate import main as generate_main

    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_steps=0)
    trainer.strategy.connect(tiny("linear"))
    path = tmp_path / "flex.ckpt"
    trainer.save_checkpoint(path)
    ckpt = torch.load(path, weights_only=False)
    ckpt["hyper_parameters"]["attention"] = "flex"  # as trained on a GPU with --model.attention=flex
    torch.save(ckpt, path)
    generate_main([f"--ckpt_path={path}", "--prompt=ROMEO:", "--max_new_tokens=5", "--temperature=0"])
    assert capsys.readouterr().out.startswith("ROMEO:")


def test_a_variant_of_a_path_is_chosen_when_the_model_is_built_and_only_of_its_own_options():
    """Issue 70: the fused path's variants are its constructor's options (model.attention_options), not switches of
    the module read at each call; the reference path takes none, and is told so by name."""
    built = CharLM(TINY_VOCAB, **TINY_MODEL, attention_options={"copy_free_write": False, "fp32_kernel": False})
    assert all(
        not b.attn.copy_free_write and not b.attn.fp32_kernel and b.attn.fused_channel for b in built.model.blocks
    )
    assert CharLM(TINY_VOCAB, **TINY_MODEL).model.blocks[0].attn.copy_free_write  # the default
    assert not any(name.isupper() and name.endswith(("WRITE", "CHANNEL", "KERNEL")) for name in vars(fused))
    with pytest.raises(ValueError, match="copy_free_write: not an option of the reference path"):
        CharLM(TINY_VOCAB, **TINY_MODEL, attention="reference", attention_options={"copy_free_write": False})
    with pytest.raises(ValueError, match="fused_arithmetic must be true or false"):
        build_gate("linear", 32, 2, fused_arithmetic="no")
