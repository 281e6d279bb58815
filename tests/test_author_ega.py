"""The author's EGA (issue 50): our `author` gate, attention order and model options against the author's published
forward pass (paper1_ega/phase1_ega4.py, phase2_ablation.py), written out here as their file computes it: per head,
the full T x T weights, a mixture of K gates of the same x. Their weights are mapped into our model and the two held
equal in float64: logits in eval mode, loss and every gradient in train mode without dropout, and the dropout-first
order under one fixed dropout mask."""

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from ega_lightning import CharDataModule, CharLM
from ega_lightning.commands.lightning_cli import EgaCLI
from ega_lightning.conformance import check_gate
from ega_lightning.data.datamodule import RandomEvalBatches
from ega_lightning.errors import UserError
from ega_lightning.experiments.records import parameter_counts
from ega_lightning.gates import build_gate, gate_params_per_layer
from ega_lightning.generation import check_causal
from ega_lightning.model.attention import dropout_first_attention_reference, gated_attention_reference

from .helpers import CONFIGS, TINY_MODEL, TINY_VOCAB

V, L, NH, C, T = len(TINY_VOCAB), TINY_MODEL["n_layer"], TINY_MODEL["n_head"], TINY_MODEL["n_embd"], 24
HS = C // NH
Weights = dict[str, torch.Tensor]

# ----------------------------------------------------------------------------- the author's forward, written out


def author_weights(K: int | None, seed: int = 0) -> Weights:
    """The author's parameters (K None: their StandardAttention baseline), drawn away from their init so every part
    acts: gates not at 1/2, mixture weights not uniform, LayerNorms not the identity, the energy's bias not 0."""
    g = torch.Generator().manual_seed(seed)

    def draw(*shape: int, std: float = 0.3, mean: float = 0.0) -> torch.Tensor:
        return (mean + std * torch.randn(*shape, generator=g, dtype=torch.float64)).requires_grad_()

    w = {"tok_emb": draw(V, C), "pos_emb": draw(TINY_MODEL["block_size"], C)}
    for layer in range(L):
        p = f"{layer}."
        w |= {p + "ln1.w": draw(C, std=0.1, mean=1.0), p + "ln1.b": draw(C, std=0.1)}
        w |= {p + "ln2.w": draw(C, std=0.1, mean=1.0), p + "ln2.b": draw(C, std=0.1)}
        for h in range(NH):  # their per-head nn.Linear(N_EMBED, head_size, bias=False)
            w |= {f"{p}{h}.{name}": draw(HS, C) for name in ("query", "key", "value")}
            if K is not None:  # scale_proj[s]: nn.Linear(N_EMBED, 1, bias=True); tau, alpha, scale_w: (K,)
                w |= {f"{p}{h}.e{s}.w": draw(C) for s in range(K)} | {f"{p}{h}.e{s}.b": draw(()) for s in range(K)}
                w |= {f"{p}{h}.tau": draw(K, std=0.5), f"{p}{h}.alpha": draw(K, std=0.5, mean=2.0)}
                w |= {f"{p}{h}.scale_w": draw(K, std=1.0)}
        w |= {p + "proj.w": draw(C, C), p + "proj.b": draw(C, std=0.1)}
        w |= {p + "fc.w": draw(4 * C, C), p + "fc.b": draw(4 * C, std=0.1)}
        w |= {p + "out.w": draw(C, 4 * C), p + "out.b": draw(C, std=0.1)}
    return w | {"ln_f.w": draw(C, std=0.1, mean=1.0), "ln_f.b": draw(C, std=0.1)}


def author_znorm(e: torch.Tensor, window: bool) -> torch.Tensor:
    """Their z of e (B, 1, T): (e - mean) / std.clamp(min=1e-8), population std, over the whole window (theirs, with
    z = 0 when T = 1), or, the causal variant, the same formula over each prefix e_1..e_j in turn."""
    if window:
        if e.shape[-1] == 1:
            return torch.zeros_like(e)
        return (e - e.mean(-1, keepdim=True)) / e.std(-1, keepdim=True, correction=0).clamp(min=1e-8)
    z = [author_znorm(e[..., : j + 1], True)[..., -1] for j in range(e.shape[-1])]  # z_1 = 0: T = 1
    return torch.stack(z, dim=-1)


def author_forward(
    w: Weights, idx: torch.Tensor, K: int | None, window: bool = True, drop: Callable | None = None
) -> torch.Tensor:
    """Their GPT.forward, logits (B, T, V); ``drop(site, tensor)``: the dropout at each of their four places, None
    in eval mode. The gated head is their SpectralEnergyGatedAttention / LinearEnergyGatedAttention."""
    drop = drop or (lambda site, t: t)
    T = idx.shape[1]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = drop("emb", w["tok_emb"][idx] + w["pos_emb"][:T])
    for layer in range(L):
        p = f"{layer}."
        xn = F.layer_norm(x, (C,), w[p + "ln1.w"], w[p + "ln1.b"])
        heads = []
        for h in range(NH):
            q, k, v = (xn @ w[f"{p}{h}.{name}"].T for name in ("query", "key", "value"))  # (B, T, hs)
            scores = (q @ k.transpose(-2, -1) / math.sqrt(HS)).masked_fill(~mask, float("-inf"))
            att = drop(f"att{layer}.{h}", F.softmax(scores, dim=-1))  # (B, T, T)
            if K is not None:
                gate = 0.0
                sw = F.softmax(w[f"{p}{h}.scale_w"], dim=0)
                for s in range(K):
                    e = (xn @ w[f"{p}{h}.e{s}.w"] + w[f"{p}{h}.e{s}.b"])[:, None, :]  # (B, 1, T)
                    z = author_znorm(e, window)
                    gate = gate + sw[s] * torch.sigmoid(w[f"{p}{h}.alpha"][s] * (z - w[f"{p}{h}.tau"][s]))
                att = att * gate  # (B, T, T) * (B, 1, T)
                att = att / att.sum(dim=-1, keepdim=True).clamp(min=1e-8)
            heads.append(att @ v)
        x = x + drop(f"resid{layer}", torch.cat(heads, dim=-1) @ w[p + "proj.w"].T + w[p + "proj.b"])
        xn = F.layer_norm(x, (C,), w[p + "ln2.w"], w[p + "ln2.b"])
        hidden = F.gelu(xn @ w[p + "fc.w"].T + w[p + "fc.b"])
        x = x + drop(f"mlp{layer}", hidden @ w[p + "out.w"].T + w[p + "out.b"])
    return F.layer_norm(x, (C,), w["ln_f.w"], w["ln_f.b"]) @ w["tok_emb"].T  # tied head


# ----------------------------------------------------------------------------- their weights in our model


def as_ours(w: Weights, K: int | None) -> Weights:
    """Their parameters (or their gradients: the map is a rearrangement) in our model's state-dict layout."""
    ours = {
        "wte.weight": w["tok_emb"],
        "wpe.weight": w["pos_emb"],
        "ln_f.weight": w["ln_f.w"],
        "ln_f.bias": w["ln_f.b"],
    }
    for layer in range(L):
        p, b = f"{layer}.", f"blocks.{layer}."
        ours |= {b + "ln_1.weight": w[p + "ln1.w"], b + "ln_1.bias": w[p + "ln1.b"]}
        ours |= {b + "ln_2.weight": w[p + "ln2.w"], b + "ln_2.bias": w[p + "ln2.b"]}
        # c_attn's rows: q of heads 0..nh-1, then k, then v
        qkv = [w[f"{p}{h}.{name}"] for name in ("query", "key", "value") for h in range(NH)]
        ours[b + "attn.c_attn.weight"] = torch.cat(qkv)
        ours |= {b + "attn.c_proj.weight": w[p + "proj.w"], b + "attn.c_proj.bias": w[p + "proj.b"]}
        ours |= {b + "mlp.c_fc.weight": w[p + "fc.w"], b + "mlp.c_fc.bias": w[p + "fc.b"]}
        ours |= {b + "mlp.c_proj.weight": w[p + "out.w"], b + "mlp.c_proj.bias": w[p + "out.b"]}
        if K is not None:  # the gate's row k nh + h: head h's k-th gate
            g = b + "attn.gate."
            ours[g + "proj.weight"] = torch.stack([w[f"{p}{h}.e{s}.w"] for s in range(K) for h in range(NH)])
            ours[g + "proj.bias"] = torch.stack([w[f"{p}{h}.e{s}.b"] for s in range(K) for h in range(NH)])
            for name in ("tau", "alpha", "scale_w"):
                ours[g + name] = torch.stack([w[f"{p}{h}.{name}"][s] for s in range(K) for h in range(NH)])
    return ours


def our_model(K: int | None, znorm: str = "window", attention: str = "reference", dropout: float = 0.0) -> CharLM:
    """Our author configuration (recipe/author_phase1.yaml's model options, gate/author*.yaml's gate), float64."""
    gate = {"gate": "none"} if K is None else {"gate": "author", "gate_options": {"scales": K, "znorm": znorm}}
    lm = CharLM(
        TINY_VOCAB,
        **TINY_MODEL,
        **gate,
        dropout=dropout,
        attention=attention,
        qkv_bias=False,
        scale_residual_init=False,
        dropout_before_gate=K is not None,
    )
    return lm.double()


def load_author(lm: CharLM, w: Weights, K: int | None) -> None:
    mapped = {k: v.detach() for k, v in as_ours(w, K).items()}
    missing, unexpected = lm.model.load_state_dict(mapped, strict=False)
    assert missing == ["lm_head.weight"] and not unexpected  # lm_head is wte, tied


def tokens(batch: int = 3) -> torch.Tensor:
    return torch.randint(0, V, (batch, T + 1), generator=torch.Generator().manual_seed(7))


def assert_close(ours: torch.Tensor, theirs: torch.Tensor, what: str) -> None:
    scale = theirs.abs().max().clamp_min(1.0)
    assert ((ours - theirs).abs().max() / scale).item() < 1e-10, what


# ----------------------------------------------------------------------------- the equivalence


@pytest.mark.parametrize("K", [1, 2, 4])
@pytest.mark.parametrize("znorm", ["window", "prefix"])
@pytest.mark.parametrize("attention", ["reference", "fused"])
def test_our_author_configuration_computes_the_authors_forward_and_gradients(K, znorm, attention):
    w, idx = author_weights(K), tokens()
    lm = our_model(K, znorm, attention)
    load_author(lm, w, K)
    window = znorm == "window"
    # eval mode: logits
    with torch.no_grad():
        assert_close(lm.eval()(idx[:, :-1]), author_forward(w, idx[:, :-1], K, window), "eval logits")
    # train mode without dropout: the loss and every parameter's gradient
    lm.train()
    ours = F.cross_entropy(lm(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
    ours.backward()
    theirs = F.cross_entropy(author_forward(w, idx[:, :-1], K, window).flatten(0, 1), idx[:, 1:].flatten())
    theirs.backward()
    assert_close(ours.detach(), theirs.detach(), "loss")
    expected = as_ours({k: v.grad for k, v in w.items()}, K)
    for name, p in lm.model.named_parameters():
        assert_close(p.grad, expected[name], f"gradient of {name}")


def test_the_baseline_in_the_authors_model_is_theirs():
    w, idx = author_weights(None), tokens()
    lm = CharLM(TINY_VOCAB, **TINY_MODEL, gate="none", qkv_bias=False).double().eval()
    load_author(lm, w, None)
    with torch.no_grad():
        assert_close(lm(idx[:, :-1]), author_forward(w, idx[:, :-1], None), "baseline logits")


class FixedDropout:
    """F.dropout replaced: each call's keep-mask drawn from one generator and recorded in call order, so that the
    author's forward can apply the very same masks."""

    def __init__(self) -> None:
        self.generator = torch.Generator().manual_seed(3)
        self.masks: list[torch.Tensor] = []

    def __call__(self, x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
        if not training or p == 0.0:
            return x
        keep = (torch.rand(x.shape, generator=self.generator, dtype=x.dtype) >= p).to(x.dtype) / (1 - p)
        self.masks.append(keep)
        return x * keep


@pytest.mark.parametrize("K", [1, 4])
def test_dropout_first_order_equals_the_authors_under_one_dropout_mask(K, monkeypatch):
    w, idx = author_weights(K), tokens()
    lm = our_model(K, "window", "reference", dropout=0.3).train()
    load_author(lm, w, K)
    dropout = FixedDropout()
    monkeypatch.setattr(F, "dropout", dropout)
    ours = F.cross_entropy(lm(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
    # our calls, in order: the embeddings, then per layer the attention weights (B, nh, T, T), c_proj, the MLP
    masks = iter(dropout.masks)
    sites = {"emb": next(masks)}
    for layer in range(L):
        attention = next(masks)
        sites |= {f"att{layer}.{h}": attention[:, h] for h in range(NH)}
        sites |= {f"resid{layer}": next(masks), f"mlp{layer}": next(masks)}
    assert next(masks, None) is None
    assert min(float((m == 0).float().mean()) for m in dropout.masks) > 0.2  # dropout acted at every site
    theirs = author_forward(w, idx[:, :-1], K, drop=lambda site, t: t * sites[site])
    theirs = F.cross_entropy(theirs.flatten(0, 1), idx[:, 1:].flatten())
    ours.backward()
    theirs.backward()
    assert_close(ours.detach(), theirs.detach(), "loss")
    expected = as_ours({k: v.grad for k, v in w.items()}, K)
    for name, p in lm.model.named_parameters():
        assert_close(p.grad, expected[name], f"gradient of {name}")


def test_a_row_whose_every_kept_key_is_dropped_gives_zero_not_nan(monkeypatch):
    q, k, v = (
        torch.randn(1, 1, 6, 4, generator=torch.Generator().manual_seed(i), requires_grad=True) for i in range(3)
    )
    g = torch.rand(1, 1, 6, generator=torch.Generator().manual_seed(4)) + 0.1
    keep = torch.ones(1, 1, 6, 6)
    keep[..., 3, :] = 0.0  # query 3 keeps none of its keys
    monkeypatch.setattr(F, "dropout", lambda x, p=0.5, training=True, inplace=False: x * keep)
    y = dropout_first_attention_reference(q, k, v, g, dropout_p=0.5)
    y.sum().backward()
    assert (y[..., 3, :] == 0).all()
    assert all(torch.isfinite(t).all() for t in (y, q.grad, k.grad, v.grad))
    # the other rows: renormalised gate-weighted attention, as without dropout
    expected = gated_attention_reference(q, k, v, g)
    rows = [0, 1, 2, 4, 5]
    assert torch.allclose(y[..., rows, :], expected[..., rows, :], atol=1e-6)


# ----------------------------------------------------------------------------- the gate's defaults, counts, honesty


def test_the_author_gate_keeps_its_own_defaults_and_every_other_gate_the_models():
    author = CharLM(TINY_VOCAB, **TINY_MODEL, gate="author").model.gates[0]
    assert author.alpha.tolist() == [2.0] * NH and author.tau.tolist() == [0.0] * NH
    assert author.scale_w.tolist() == [1.0] * NH and author.proj.bias is not None
    # base.yaml's model.tau_init 0.0 and alpha_init 1.0, CharLM's defaults: the author gate keeps its own
    author = CharLM(TINY_VOCAB, **TINY_MODEL, gate="author", tau_init=0.0, alpha_init=1.0).model.gates[0]
    assert author.alpha.tolist() == [2.0] * NH
    linear = CharLM(TINY_VOCAB, **TINY_MODEL, gate="linear").model.gates[0]
    assert linear.alpha.tolist() == [1.0] * NH  # every other gate's defaults are the model's, as before
    assert CharLM(TINY_VOCAB, **TINY_MODEL, gate="linear", alpha_init=1.5).model.gates[0].alpha.tolist() == [1.5] * NH
    # a value moved from the model's defaults reaches it; one set twice is refused
    moved = CharLM(TINY_VOCAB, **TINY_MODEL, gate="author", alpha_init=3.0).model.gates[0]
    assert moved.alpha.tolist() == [3.0] * NH and moved.tau.tolist() == [0.0] * NH
    own = CharLM(TINY_VOCAB, **TINY_MODEL, gate="author", gate_options={"alpha_init": 3.0, "scales": 2})
    assert own.model.gates[0].alpha.tolist() == [3.0] * 2 * NH
    with pytest.raises(ValueError, match="set it in one place"):
        CharLM(TINY_VOCAB, **TINY_MODEL, gate="author", alpha_init=3.0, gate_options={"alpha_init": 2.0})


@pytest.mark.parametrize("K", [1, 2, 4])
def test_params_per_layer_is_the_authors_count(K):
    # theirs: K projections d -> 1 with bias, and tau, alpha, scale_w of K each, per head
    assert gate_params_per_layer("author", 256, 8, scales=K) == 8 * K * (256 + 1 + 3)
    counted = sum(p.numel() for p in build_gate("author", 256, 8, scales=K).parameters())
    assert counted == 8 * K * 260
    assert gate_params_per_layer("author", 256, 8) * 6 == 12_480  # the paper's "12,480 extra parameters"


@pytest.mark.parametrize("K", [1, 4])
def test_a_record_counts_the_author_gates_parameters_in_its_attention_order(K):
    """A record's gate_params is the model's less the same model with no gate; the author's order (dropout first)
    needs a gate, so the gate-less one has plain attention (the sweep once failed to record these runs)."""
    hparams = {"vocab": TINY_VOCAB, **TINY_MODEL, "gate": "author", "gate_options": {"scales": K}}
    counts = parameter_counts({**hparams, "dropout_before_gate": True})
    assert counts == parameter_counts(hparams)
    assert counts["gate_params"] == TINY_MODEL["n_layer"] * NH * K * (C + 1 + 3)


def test_the_author_gate_refuses_a_mixture_it_does_not_have():
    with pytest.raises(ValueError, match="scales must be one of 1, 2, 4"):
        build_gate("author", C, NH, scales=3)


def test_the_window_znorm_is_named_as_the_leak_and_cannot_generate():
    report = check_gate("author", {"znorm": "window"}, properties=["causal"])
    assert report.failed == ["causal"]
    assert "reads the future" in report["causal"].detail and "znorm: window" in report["causal"].detail
    assert check_gate("author", {"znorm": "prefix", "scales": 4}, properties=["causal"]).passed
    lm = CharLM(TINY_VOCAB, **TINY_MODEL, gate="author", gate_options={"znorm": "window"})
    with pytest.raises(UserError, match="znorm=window"):
        check_causal(lm.model, "run.ckpt")


# ----------------------------------------------------------------------------- the attention order's refusals


def dropout_first_pair(hs: int = 4, T: int = 6, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """q, k, v (1, 2, T, hs) and a gate g (1, 2, T) in (0, 1], float64, drawn from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, T, hs, generator=gen, dtype=torch.float64) for _ in range(3))
    g = torch.rand(1, 2, T, generator=gen, dtype=torch.float64) * 0.9 + 0.1
    return q, k, v, g


def fused_dropout_first(q, k, v, g, keep, p, monkeypatch) -> torch.Tensor:
    """The fused path's dropout-first attention of q, k, v with gate g under the keep mask ``keep``: the padded
    q' = [q, 1], k' = [k, log g sqrt(hs)], v' = [v, 0] into `FusedAttention.causal`, y back to hs channels."""
    from ega_lightning.model import fused

    hs = q.shape[-1]
    layer = (
        CharLM(
            TINY_VOCAB,
            n_layer=1,
            n_head=q.shape[1],
            n_embd=q.shape[1] * hs,
            block_size=q.shape[2],
            gate="author",
            dropout=p,
            dropout_before_gate=True,
            attention="fused",
        )
        .model.blocks[0]
        .attn
    )
    monkeypatch.setattr(fused, "dropout_keep", lambda shape, p, dtype, device: keep.clone())
    channel = fused.key_channel(g.log(), hs, q.dtype).transpose(1, 2)[..., None]  # (B, nh, T, 1)
    q1 = torch.cat([q, torch.ones_like(channel)], dim=-1)
    k1 = torch.cat([k, channel], dim=-1)
    v1 = torch.cat([v, torch.zeros_like(channel)], dim=-1)
    return layer.causal(q1, k1, v1, p, dropout_first=True)[..., :hs]


def reference_dropout_first(q, k, v, g, keep, p, monkeypatch) -> torch.Tensor:
    monkeypatch.setattr(F, "dropout", lambda x, p=0.5, training=True, inplace=False: x * keep.to(x.dtype) / (1 - p))
    return dropout_first_attention_reference(q, k, v, g, dropout_p=p)


def test_dropout_first_on_the_fused_kernel_equals_the_reference_under_one_mask(monkeypatch):
    """Issue 67: the author's order on the fused kernel (the keep mask as SDPA's boolean mask, log g in the padded
    channel) is the reference's d a g / sum d a g: the forward, every gradient (q, k, v, g), a row whose every key is
    dropped (0, finite gradients on this torch's CPU kernel), and rows whose kept mass is near the floor (1e-8)."""
    p, T = 0.3, 6
    q, k, v, g = dropout_first_pair(T=T)
    keep = torch.rand(1, 2, T, T, generator=torch.Generator().manual_seed(9)) >= p
    keep[0, 0, 3, :] = False  # query 3 of head 0 keeps none of its keys
    keep[0, 1, 4, :4] = False  # query 4 of head 1 keeps only keys 4 and 5, 5 beyond the causal mask: key 4 alone
    keep[0, 1, 4, 4] = True
    # near the floor: head 1's query 5 keeps keys 0 and 1 alone, whose gates are tiny, so its kept mass
    # d a g ~ 1e-6, above the reference's floor (1e-8), both paths still renormalise it
    keep[0, 1, 5, :] = False
    keep[0, 1, 5, :2] = True
    g[0, 1, :2] = 1e-6
    grads = []
    for path in (fused_dropout_first, reference_dropout_first):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, g)]
        y = path(*leaves, keep, p, monkeypatch)
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
        grads.append((y.detach(), *(t.grad for t in leaves)))
        monkeypatch.undo()
    (y_fused, *fused_grads), (y_ref, *ref_grads) = grads
    assert (y_fused[0, 0, 3] == 0).all() and (y_ref[0, 0, 3] == 0).all()
    assert torch.allclose(y_fused[0, 1, 4], v[0, 1, 4])  # one kept key: its value
    assert_close(y_fused, y_ref, "output")
    for name, a, b in zip("qkvg", fused_grads, ref_grads, strict=True):
        assert torch.isfinite(a).all(), name
        assert_close(a, b, f"gradient of {name}")


def test_below_the_floor_the_fused_kernel_renormalises_where_the_reference_does_not(monkeypatch):
    """The one place the two differ, by the reference's floor: a row whose kept mass is below 1e-8 is d a g / 1e-8 on
    the reference (its weights sum below 1) and a softmax over the kept keys on the fused kernel (they sum to 1)."""
    p, T = 0.1, 4
    q, k, v, g = dropout_first_pair(T=T)
    keep = torch.ones(1, 2, T, T, dtype=torch.bool)
    keep[0, 0, 3, 2:] = False  # query 3 keeps keys 0 and 1, gated to 1e-12
    g[0, 0, :2] = 1e-12
    v = torch.ones_like(v)  # the output is then the sum of the row's weights
    fused = fused_dropout_first(q, k, v, g, keep, p, monkeypatch)[0, 0, 3]
    monkeypatch.undo()
    reference = reference_dropout_first(q, k, v, g, keep, p, monkeypatch)[0, 0, 3]
    assert torch.allclose(fused, torch.ones_like(fused)) and (reference < 1e-3).all()


def test_the_fused_dropout_first_model_trains_as_the_reference_one():
    """A training step of the author's EGA-1 as published (dropout first, 0.3 everywhere) on the fused path equals the
    reference path's in float64, from one seed: the keep masks are drawn with the generator calls the reference's
    dropout makes, so the loss and every gradient agree."""
    w, idx = author_weights(1), tokens()
    runs = []
    for attention in ("fused", "reference"):
        lm = our_model(1, "window", attention, dropout=0.3).train()
        load_author(lm, w, 1)
        torch.manual_seed(11)
        loss = F.cross_entropy(lm(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
        loss.backward()
        runs.append((loss.detach(), {n: p.grad for n, p in lm.model.named_parameters()}))
    (fused_loss, fused_grads), (ref_loss, ref_grads) = runs
    no_dropout = F.cross_entropy(our_model(1, "window").eval()(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
    assert abs(fused_loss - no_dropout) > 1e-3  # dropout acted
    assert_close(fused_loss, ref_loss, "loss")
    for name, grad in ref_grads.items():
        assert_close(fused_grads[name], grad, f"gradient of {name}")


def test_dropout_first_evaluates_on_every_path():
    lm = our_model(1, "prefix", "fused", dropout=0.1).float()
    idx = tokens()[:, :-1]
    reference = our_model(1, "prefix", "reference", dropout=0.1).float()
    reference.load_state_dict(lm.state_dict())
    with torch.no_grad():  # no dropout in eval: both orders are one formula, on every path
        assert torch.allclose(lm.eval()(idx), reference.eval()(idx), atol=1e-5)


def test_dropout_first_needs_an_energy_gate():
    for gate in ("none", "alibi"):
        with pytest.raises(ValueError, match="dropout_before_gate"):
            CharLM(TINY_VOCAB, **TINY_MODEL, gate=gate, dropout_before_gate=True)


# ----------------------------------------------------------------------------- the recipe and the author's evaluation

RECIPE = CONFIGS / "recipe" / "author_phase1.yaml"
STUDY_GATES = ["none", "author", "author_prefix", "author_prefix_gate_first", "linear", "author4"]  # A, B, C, D, E, F


def compose(*configs: Path, args: tuple[str, ...] = ()) -> EgaCLI:
    files = [CONFIGS / "base.yaml", *configs]
    return EgaCLI(
        CharLM,
        CharDataModule,
        run=False,
        auto_configure_optimizers=False,
        args=[*(a for f in files for a in ("--config", str(f))), *args],
    )


@pytest.mark.parametrize("gate", STUDY_GATES)
def test_the_recipe_carries_the_model_so_that_variants_differ_in_gate_and_attention_order_only(
    gate, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["ega"])
    recipe = yaml.safe_load(RECIPE.read_text())
    cli = compose(RECIPE, CONFIGS / "gate" / f"{gate}.yaml")
    hp, gate_config = cli.model.hparams, yaml.safe_load((CONFIGS / "gate" / f"{gate}.yaml").read_text())["model"]
    for key, value in recipe["model"].items():
        assert hp[key] == value, key
    assert {k: hp[k] for k in gate_config} == gate_config
    assert cli.model.model.blocks[0].attn.c_attn.bias is None and cli.model.model.blocks[0].attn.c_proj.bias is not None
    assert cli.datamodule.random_eval_batches == 50 and cli.datamodule.eval_batch_size == cli.datamodule.batch_size
    assert (cli.trainer.max_steps, cli.trainer.gradient_clip_val) == (3000, 1.0)
    if gate in ("author", "author4"):  # the published designs: z over the whole window, dropout first
        assert hp.gate_options["znorm"] == "window" and hp.dropout_before_gate
    if gate != "none":
        alphas = {a for g in cli.model.model.gates for a in g.alpha.tolist()}
        assert alphas == ({1.0} if gate == "linear" else {2.0})  # each gate's own alpha_init


def test_the_recipes_optimizer_is_the_authors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["ega"])
    cli = compose(RECIPE, CONFIGS / "gate" / "author.yaml", args=("--trainer.max_steps=40",))
    cli.trainer.strategy.connect(cli.model)
    cli.model.trainer = cli.trainer
    config = cli.model.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    (group,) = optimizer.param_groups  # weight decay 0.1 on every parameter, biases, LayerNorms and the gates too
    assert group["weight_decay"] == 0.1 and tuple(group["betas"]) == (0.9, 0.95)
    assert {id(p) for p in group["params"]} == {id(p) for p in cli.model.parameters()}
    rates = []
    for _ in range(40):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert set(rates) == {3e-4}  # constant: no warm-up, no decay


def test_the_residual_init_is_unscaled_and_the_paired_seeding_kept():
    torch.manual_seed(5)
    baseline = CharLM(TINY_VOCAB, **TINY_MODEL, gate="none", qkv_bias=False, scale_residual_init=False)
    torch.manual_seed(5)
    gated = CharLM(TINY_VOCAB, **TINY_MODEL, gate="author", qkv_bias=False, scale_residual_init=False)
    shared = baseline.model.state_dict()
    for name, value in gated.model.state_dict().items():
        if ".gate." not in name:
            assert torch.equal(value, shared[name]), name  # variants of one seed start alike
    torch.manual_seed(5)
    scaled = CharLM(TINY_VOCAB, **TINY_MODEL, gate="none", qkv_bias=False)
    for layer in range(L):
        for proj in ("attn.c_proj", "mlp.c_proj"):
            ours = dict(scaled.model.named_parameters())[f"blocks.{layer}.{proj}.weight"]
            author = dict(baseline.model.named_parameters())[f"blocks.{layer}.{proj}.weight"]
            # the same draws, without the 1 / sqrt(2 n_layer)
            assert torch.allclose(author / math.sqrt(2 * L), ours)


def test_the_authors_evaluation_draws_the_same_random_batches_at_every_evaluation():
    data = torch.arange(5000)  # a window's first input is its start
    batches = [list(RandomEvalBatches(data, 16, 4, 50, seed=0, split="val")) for _ in range(2)]
    assert len(batches[0]) == 50 and all(x.shape == (4, 16) for x, _ in batches[0])
    assert all(torch.equal(a[0], b[0]) for a, b in zip(*batches, strict=True))  # a fixed seed
    starts = torch.cat([x[:, 0] for x, _ in batches[0]])
    assert len(set(starts.tolist())) > 190 and starts.max() <= 5000 - 16 - 1  # 200 random starts in [0, N - T)
    other = [x for x, _ in RandomEvalBatches(data, 16, 4, 50, seed=0, split="test")]
    assert not all(torch.equal(a[0], b) for a, b in zip(batches[0], other, strict=True))  # each split its own
    for x, y in batches[0]:  # targets are the next characters
        assert torch.equal(y[:, :-1], x[:, 1:])
    # two ranks share the 50 batches, each counted once
    ranks = [list(RandomEvalBatches(data, 16, 4, 50, 0, "val", rank, 2)) for rank in (0, 1)]
    dealt = batches[0][0::2] + batches[0][1::2]
    assert all(torch.equal(a[0], b[0]) for a, b in zip([*ranks[0], *ranks[1]], dealt, strict=True))


def test_ega_fit_refuses_dropout_first_where_the_path_has_no_attention_dropout_and_evaluation_takes_any():
    from ega_lightning.run_policy import RunRequest
    from ega_lightning.run_policy import dropout_before_gate_trains_on_reference as refusal

    def request(command: str, **model: object) -> RunRequest:
        base = {"gate": "author", "dropout_before_gate": True, "dropout": 0.1, "attention": "flex"}
        return RunRequest(command, {"model": {**base, **model}}, frozenset(), None)

    assert "--model.attention=fused" in refusal(request("fit"), None)
    assert refusal(request("fit", attention="reference"), None) is None
    assert refusal(request("fit", attention="fused"), None) is None  # issue 67: the keep mask on the fused kernel
    assert refusal(request("fit", dropout=0.0), None) is None  # no dropout: both orders are one formula
    assert refusal(request("fit", dropout_before_gate=False), None) is None
    assert refusal(request("validate"), None) is None
