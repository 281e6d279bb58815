"""`CharLM`, the LightningModule (thin glue around `GPT`: loss, metrics, optimiser), the checks of its arguments
(`check_arguments`), and the one check that a checkpoint holds the model asked for."""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric

from ega_lightning.data.datamodule import Batch
from ega_lightning.data.tokenizer import CharTokenizer
from ega_lightning.errors import RunFailed, UserError
from ega_lightning.gates import ZNORM_MODES, Gate, ResolvedGate, resolve_gate
from ega_lightning.gates.registry import is_builtin
from ega_lightning.model import ATTENTION_IMPLS, GPT, GPTConfig, has_hooks, require_flex_attention
from ega_lightning.model.gpt import check_attention_options
from ega_lightning.model.position import position_class
from ega_lightning.seeding import derive_seed

SHAPE_KEYS = (
    "n_layer",
    "n_head",
    "n_embd",
    "block_size",
    "bias",
    "gate",
    "gate_options",
    "vocab",
    "output_gate",
    "qkv_bias",
    "dropout_before_gate",
    "position",
)
# Arguments that choose how the model is run, not what it is: a flag given with --ckpt_path wins over the
# checkpoint's value (every other hyper-parameter comes from the checkpoint).
RUNTIME_KEYS = ("attention", "attention_options", "eval_znorm", "compile")
# The world a checkpoint was saved in: {"num_nodes": N, "devices": D}, N x D processes. `ega fit --ckpt_path last`
# refuses another (run_policy.world_size_unchanged): the global batch and each rank's data depend on it.
WORLD_KEY = "ega_world"


def check_model_matches(
    saved: Mapping[str, Any],
    asked: Mapping[str, Any],
    keys: Collection[str] = SHAPE_KEYS,
    source: str = "The checkpoint",
    asker: str = "this model",
) -> None:
    """Raises a UserError naming every model-defining argument of ``keys`` that ``asked`` sets unlike the
    checkpoint's hyper-parameters ``saved``: the one check, for `ega fit/validate/test --ckpt_path` (the
    command's arguments, ``asker`` "this command") and for `CharLM.on_load_checkpoint` (the model's)."""
    differ = []
    for key in SHAPE_KEYS:
        if key not in keys or key not in saved or key not in asked:
            continue
        value, theirs = asked[key], saved[key]
        if key == "gate_options":  # None and {} are the same options
            value, theirs = value or {}, theirs or {}
        if value != theirs:
            differ.append(f"{key}: checkpoint {theirs!r}, {asker} {value!r}")
    if differ:
        raise UserError(
            f"{source} holds a different model ({'; '.join(differ)}). Pass the configs it was trained with, let "
            "the checkpoint decide the model (`ega validate/test --ckpt_path` without those arguments, "
            "`CharLM.load_from_checkpoint(path)` in Python), or start a new run (--run_name) from scratch."
        )


# CharLM's tau_init and alpha_init, and their defaults: at these values they leave a gate with defaults of its own
# (``Gate.model_init`` False) at its own
MODEL_INIT = {"tau_init": 0.0, "alpha_init": 1.0}
# The model's defaults, stated once, as `GPTConfig`'s fields: CharLM's flat signature (the CLI's --model.* flags, every
# config, load_from_checkpoint and the code fingerprint read it) takes each from this instance
MODEL = GPTConfig(vocab_size=0)
# The one default that is not the model's: `ega fit` and CharLM train EGA-1 unless told otherwise (a GPT built by hand
# has GPTConfig's plain attention)
DEFAULT_GATE = "linear"


class NonFiniteLossError(RunFailed):
    """The loss or its gradient became NaN or infinite; training cannot go on from this state."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def check_arguments(args: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, ResolvedGate]]:
    """Every check of CharLM's arguments ``args`` (each by its name in the signature) before the model is built:
    a ValueError naming the argument, in the order a user meets them. Returns the key gate's options (an energy
    gate's tau_init and alpha_init merged in) and each slot's gate, resolved once for every layer."""
    a = SimpleNamespace(**args)
    for name in ("n_layer", "n_head", "n_embd", "block_size"):
        _require(args[name] >= 1, f"model.{name} must be a positive integer, got {args[name]}.")
    _require(a.n_embd % a.n_head == 0, f"model.n_embd ({a.n_embd}) must be divisible by model.n_head ({a.n_head}).")
    _require(0.0 <= a.dropout < 1.0, f"model.dropout must be in [0, 1), got {a.dropout}.")
    _require(math.isfinite(a.lr), f"model.lr must be a finite number, got {a.lr}.")
    _require(a.lr > 0, f"model.lr must be positive, got {a.lr}.")
    _require(0 <= a.min_lr <= a.lr, f"model.min_lr must be in [0, lr={a.lr}], got {a.min_lr}.")
    _require(a.warmup_steps >= 0, f"model.warmup_steps must be >= 0, got {a.warmup_steps}.")
    for name in ("tau_init", "alpha_init"):
        _require(math.isfinite(args[name]), f"model.{name} must be a finite number, got {args[name]}.")
    _require(
        math.isfinite(a.weight_decay) and a.weight_decay >= 0,
        f"model.weight_decay must be a finite number >= 0, got {a.weight_decay}.",
    )
    _require(all(0 <= b < 1 for b in a.betas), f"model.betas must both be in [0, 1), got {list(a.betas)}.")
    znorms = (None, *ZNORM_MODES)
    _require(a.eval_znorm in znorms, f"model.eval_znorm must be one of {znorms}, got {a.eval_znorm!r}.")
    refusal = position_class(a.position).refusal(a.n_embd, a.n_head)  # an unknown name: the registered ones
    _require(refusal is None, str(refusal))
    _require(a.attention in ATTENTION_IMPLS, f"model.attention must be one of {ATTENTION_IMPLS}, got {a.attention!r}.")
    check_attention_options(a.attention, a.attention_options or {})
    if a.attention == "flex":
        require_flex_attention()
        _require(
            torch.cuda.is_available(),
            "model.attention=flex needs a CUDA device: torch's FlexAttention cannot train on CPU. "
            "Use model.attention=fused (the default), the same attention on the SDPA kernel.",
        )
        _require(a.dropout == 0, "model.attention=flex has no attention dropout; use model.attention=fused.")
    options = dict(a.gate_options or {})
    # each slot's gate resolved once, for every layer; an unknown name is refused listing the registered ones
    gates = {slot: resolve_gate(args[slot], slot) for slot in ("gate", "output_gate")}
    energy_gate = gates["gate"].cls is not None and issubclass(gates["gate"].cls, Gate)
    if energy_gate and gates["gate"].cls.model_init:
        clash = {"tau_init", "alpha_init"} & options.keys()
        _require(not clash, f"Set {', '.join(sorted(clash))} as model.* arguments, not in model.gate_options.")
        options.update(tau_init=a.tau_init, alpha_init=a.alpha_init)
    elif energy_gate:  # a gate with defaults of its own (the author's alpha_init 2.0): only a value moved from
        # CharLM's defaults reaches it, so that base.yaml's 0.0 and 1.0 leave its own in place
        moved = {k: args[k] for k, default in MODEL_INIT.items() if args[k] != default}
        clash = sorted(moved.keys() & options.keys())
        _require(
            not clash,
            f"{', '.join(f'model.{k}={moved[k]}' for k in clash)} and model.gate_options set the same initial value "
            f"of the gate {a.gate}: set it in one place (its gate config sets it in model.gate_options).",
        )
        options.update(moved)
    _require(
        not a.dropout_before_gate or energy_gate,
        f"model.dropout_before_gate orders attention dropout and an energy gate; the gate {a.gate} is none. "
        "Drop the option, or choose an energy gate.",
    )
    gates["gate"].check_options(options)
    return options, gates


class CharLM(L.LightningModule):
    """Character-level GPT with Energy-Gated Attention.

    Args:
        vocab: the character vocabulary (linked from ``data.vocab``; never typed by hand).
            It is saved in the checkpoint, so a checkpoint decodes text on its own.
        n_layer, n_head, n_embd, block_size, dropout, bias: the transformer's shape.
        gate: the key gate: a registered gate name (``none`` is the baseline, ``linear`` is EGA-1, ``alibi``,
            ``fox``), an entry point's name, or the import path of a Gate or KeyBias subclass
            (``my_gates.AbsEnergyGate``); see gates.registry.
        output_gate: the output gate (``none``, ``output_headwise``, ``output_elementwise``, or an OutputGate
            subclass's name or import path), beside any key gate.
        tau_init, alpha_init: initial threshold and scale of every energy gate head (ignored by other gates; the
            author's gate has its own, tau_init 0 and alpha_init 2.0: these reach it only when set to other values
            than 0.0 and 1.0, and not beside the same option in gate_options).
        gate_options: further options of the chosen gate (see its docstring); every gate also takes
            ``znorm`` (``prefix``, the causal default, or ``window``, a leaky diagnostic) and
            ``learn_tau`` (false: tau stays at tau_init).
        eval_znorm: if set, every gate z-normalises this way during validation and test instead of
            as trained (e.g. ``prefix`` evaluates a ``znorm: window`` model causally); training is unchanged.
        attention: ``fused`` (SDPA kernel, the default), ``reference`` (the spec's formula, slow) or
            ``flex`` (FlexAttention, compiled; trains on CUDA only, and without dropout).
        attention_options: options of that path's class, chosen when the model is built: a variant of the same
            values, for benches and tests (`model.fused.FusedAttention`: ``copy_free_write``, ``fused_channel``,
            ``fp32_kernel``); None: the path's defaults.
        compile: run the model through ``torch.compile`` (values as eager up to float rounding;
            checkpoints are the same either way). Forward passes that a gate probe hooks into (the
            gate callbacks) run eager, so the probes see every gate.
        lr, min_lr, warmup_steps: AdamW learning rate, linear warm-up then cosine decay to
            ``min_lr`` at ``trainer.max_steps``.
        weight_decay: AdamW decay of the 2-D weights; biases, LayerNorms and gates (both slots) get none (unless
            ``decay_every_parameter``).
        betas: AdamW betas.
        qkv_bias: the Q/K/V projection's bias; None (the default): as ``bias``. False with ``bias`` True is the
            author's model (q/k/v without bias, c_proj, the MLP and the LayerNorms with).
        scale_residual_init: the residual projections' (c_proj's) init std 0.02 / sqrt(2 n_layer), nanoGPT's
            (the default); False: 0.02, the author's. Either way drawn from the paired seeding's generators.
        dropout_before_gate: the author's attention order, dropout on the weights first, then the energy gate,
            then renormalise (which also undoes dropout's scaling); the default gates and renormalises first.
            Needs an energy gate; with dropout > 0 it trains on ``attention: reference`` (the weights materialised)
            or ``fused`` (their keep mask as the kernel's boolean mask), and evaluates on any path (no dropout: both
            orders are one formula).
        decay_every_parameter: AdamW's weight decay on every parameter, biases, LayerNorms and gates included
            (the author's); the default decays the 2-D weights only.
        position: the position encoding: ``learned`` (nanoGPT's absolute embedding, the default), ``rope`` (rotary,
            RoFormer's base 10,000 in the rotate-half form, see `model.position`) or ``none`` (no position signal
            but the causal mask and a key gate's bias). A rope or none model can be evaluated on windows longer
            than block_size (``ega validate --data.eval_block_size``).
    """

    def __init__(
        self,
        vocab: str,
        n_layer: int = MODEL.n_layer,
        n_head: int = MODEL.n_head,
        n_embd: int = MODEL.n_embd,
        block_size: int = MODEL.block_size,
        dropout: float = MODEL.dropout,
        bias: bool = MODEL.bias,
        gate: str = DEFAULT_GATE,
        tau_init: float = MODEL_INIT["tau_init"],
        alpha_init: float = MODEL_INIT["alpha_init"],
        gate_options: dict[str, Any] | None = None,
        eval_znorm: str | None = None,
        attention: str = MODEL.attention,
        compile: bool = False,
        lr: float = 1e-3,
        min_lr: float = 1e-4,
        warmup_steps: int = 100,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.99),
        output_gate: str = MODEL.output_gate,  # type: ignore[assignment]
        qkv_bias: bool | None = MODEL.qkv_bias,
        scale_residual_init: bool = MODEL.scale_residual_init,
        dropout_before_gate: bool = MODEL.dropout_before_gate,
        decay_every_parameter: bool = False,
        position: str = MODEL.position,
        attention_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        arguments = {k: v for k, v in locals().items() if k not in ("self", "__class__")}  # by their names
        options, gates = check_arguments(arguments)
        self.save_hyperparameters()
        self.tokenizer = CharTokenizer(vocab)
        # the GPT's config: the arguments of the same names, with the key gate's options merged
        shared = {f.name: arguments[f.name] for f in fields(GPTConfig) if f.name in arguments}
        built = {"vocab_size": len(vocab), "gate_options": options, "attention_options": attention_options or {}}
        self.model = GPT(GPTConfig(**{**shared, **built}), gates)
        _require(
            block_size >= 2 or not any(isinstance(g, Gate) for g in self.model.gates),
            f"model.block_size 1 with the gate {gate}: an energy gate z-normalises its energy over the positions "
            "seen so far, and with one position z is 0 everywhere, so the gate would be a constant. "
            "Use model.block_size >= 2, or model.gate=none.",
        )
        # a compiled function, not a module: the state dict keeps its keys (no `_orig_mod.`)
        self._compiled_forward = torch.compile(self.model.forward) if compile else None
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()
        self._last_step_start: float | None = None
        self._dropout_seed = 0
        # an evaluation's summed loss by position (T,) and the windows counted (`_eval_loss`); None: not kept
        self._position_loss: torch.Tensor | None = None
        self._position_count = 0

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx (B, T) -> logits (B, T, V)."""
        # hooks on gates added after compiling would not be called: a probed pass runs eager
        if self._compiled_forward is None or any(map(has_hooks, [*self.model.gates, *self.model.output_gates])):
            return self.model(idx)
        return self._compiled_forward(idx)

    def loss(self, batch: Batch) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        now = time.perf_counter()
        if self._last_step_start is not None:
            tokens = batch[0].numel() * self.trainer.world_size
            self.log("train/tokens_per_sec", tokens / (now - self._last_step_start))
        self._last_step_start = now
        loss = self.loss(batch)
        self.log("train/loss", self._batch_loss(loss), prog_bar=True)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"])
        gates = [*self.model.gates, *self.model.output_gates]
        penalties = [p for gate in gates if (p := gate.penalty()) is not None]
        if penalties:  # e.g. keeping learned wavelet filters near orthonormal
            penalty = torch.stack(penalties).sum()
            self.log("train/gate_penalty", penalty)
            loss = loss + penalty
        return loss

    def _batch_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss over the whole batch, at the steps it is logged: under DDP each rank holds its share, so the
        mean over ranks (one all-reduce per logged step; whether a step logs depends on the step alone, the
        same on every rank); elsewhere, and between logged steps, this rank's loss."""
        trainer = self.trainer
        if trainer.world_size == 1 or (trainer.global_step + 1) % max(trainer.log_every_n_steps, 1) != 0:
            return loss.detach()
        return trainer.strategy.reduce(loss.detach(), reduce_op="mean")

    def on_train_epoch_start(self) -> None:
        self._last_step_start = None

    def on_fit_start(self) -> None:
        self._dropout_seed = torch.initial_seed()  # the run's seed: the CLI seeds every process before fit

    def on_train_start(self) -> None:
        # A resume restores the rate its checkpoint's last step set, from the schedule as configured then; the
        # schedule is the one configured now (a raised trainer.max_steps decays to the new end), so the step about
        # to run takes its rate from it. Unchanged, the same formula gives the same rate, bit for bit.
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
                factors = [factor(scheduler.last_epoch) for factor in scheduler.lr_lambdas]
                for group, base, factor in zip(
                    scheduler.optimizer.param_groups, scheduler.base_lrs, factors, strict=True
                ):
                    group["lr"] = base * factor

    def on_train_batch_start(self, batch: Batch, batch_idx: int) -> None:
        # Dropout masks drawn from (seed, rank, step) alone: a resumed run repeats them exactly.
        if self.hparams.dropout > 0:
            torch.manual_seed(derive_seed(self._dropout_seed, self.global_rank, self.trainer.global_step))

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # the gradients are already reduced over ranks, so every rank takes the same decision
        norms = [p.grad.detach().float().norm() for p in self.parameters() if p.grad is not None]
        grad_norm = torch.linalg.vector_norm(torch.stack(norms))
        self.log("train/grad_norm", grad_norm)
        if not torch.isfinite(grad_norm):
            raise NonFiniteLossError(self._non_finite_message(grad_norm.item()))

    def _non_finite_message(self, grad_norm: float) -> str:
        """Why training stopped, the likely causes (the user's own gate first) and which checkpoints exist."""
        hp = self.hparams
        ckpt_dirs = {Path(cb.dirpath) for cb in self.trainer.checkpoint_callbacks if getattr(cb, "dirpath", None)}
        kept = sorted(str(p) for d in ckpt_dirs for p in d.glob("*.ckpt"))
        kept_sentence = (
            f"The checkpoints written before this step are kept ({', '.join(kept)}; none is overwritten)."
            if kept
            else "No checkpoint was written before this step."
        )
        gate = self.model.resolved_gates["gate"].cls
        own_gate = gate is not None and not is_builtin(gate)
        check = f"`ega check-gate {hp.gate}` checks the gate for non-finite values"
        causes = [
            f"a learning rate too high for this model (model.lr={hp.lr}, warmup_steps={hp.warmup_steps})",
            "under bf16/fp16, an overflow",
        ]
        if gate is not None:  # the gate's energy is the first suspect when it is the user's own code
            causes.insert(0 if own_gate else 2, f"the gate's energy ({check})")
        return (
            f"Training stopped at step {self.trainer.global_step}: the gradient norm is {grad_norm} (the loss "
            f"became NaN or infinite). Likely causes: {'; '.join(causes)}. {kept_sentence} Start a new run "
            "(--run_name) once the cause is fixed, e.g. with a lower --model.lr or more --model.warmup_steps."
        )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        try:
            trainer = self.trainer
        except RuntimeError:  # saved by a Trainer the model was never attached to (strategy.connect alone): the
            return  # checkpoint then reads as the world of its run's config, as one from before this record
        checkpoint[WORLD_KEY] = {"num_nodes": trainer.num_nodes, "devices": trainer.num_devices}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        check_model_matches(checkpoint.get("hyper_parameters", {}), self.hparams)

    def on_validation_start(self) -> None:
        self._last_step_start = None  # evaluation time is not training throughput
        self._use_eval_znorm(True)

    def on_validation_end(self) -> None:
        self._use_eval_znorm(False)

    def on_test_start(self) -> None:
        self._use_eval_znorm(True)

    def on_test_end(self) -> None:
        self._use_eval_znorm(False)

    def _use_eval_znorm(self, evaluating: bool) -> None:
        """Switches every gate to ``eval_znorm`` (evaluating) or back to the z-norm it was trained with."""
        if self.hparams.eval_znorm is None:
            return
        trained = self.model.cfg.gate_options.get("znorm", "prefix")
        for gate in (g for g in self.model.gates if isinstance(g, Gate)):  # only energy gates z-normalise
            gate.znorm = self.hparams.eval_znorm if evaluating else trained

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self.val_loss.update(self._eval_loss(batch), weight=batch[1].numel())

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val", self.val_loss)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self.test_loss.update(self._eval_loss(batch), weight=batch[1].numel())

    def on_test_epoch_end(self) -> None:
        self._log_eval("test", self.test_loss)

    def _by_position(self) -> bool:
        """Whether this evaluation keeps the loss by position: when its windows' length was asked for
        (``data.eval_block_size``, length extrapolation), not in every validation of a fit."""
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        return getattr(datamodule, "eval_block_size", None) is not None

    def _eval_loss(self, batch: Batch) -> torch.Tensor:
        """The batch's mean loss, as `loss` computes it; with `_by_position`, each position's summed loss and
        count added to the evaluation's tally as well."""
        if not self._by_position():
            return self.loss(batch)
        x, y = batch
        logits = self(x)  # (B, T, V)
        flat, targets = logits.view(-1, logits.size(-1)), y.reshape(-1)
        per_token = F.cross_entropy(flat, targets, reduction="none").view_as(y)  # (B, T)
        summed = per_token.detach().double().sum(0)  # (T,)
        if self._position_loss is None or self._position_loss.shape != summed.shape:
            self._position_loss, self._position_count = torch.zeros_like(summed), 0
        self._position_loss += summed
        self._position_count += y.shape[0]
        return F.cross_entropy(flat, targets)  # the same mean as `loss`, so val/loss reads alike either way

    def _log_loss_by_position(self, split: str) -> None:
        """``<split>/loss_by_position``: the mean loss at each position 1..T of the windows, one TensorBoard point per
        position (the step axis is the position), and the means within and past the training block."""
        if self._position_loss is None:
            return
        strategy = self.trainer.strategy
        loss = strategy.reduce(self._position_loss, reduce_op="sum")  # (T,), every rank's windows
        count = strategy.reduce(torch.tensor(float(self._position_count), device=loss.device), reduce_op="sum")
        self._position_loss, self._position_count = None, 0
        mean = (loss / count).float()  # (T,)
        block = self.hparams.block_size
        self.log(f"{split}/loss_within_block", mean[:block].mean(), sync_dist=True)
        if mean.shape[0] > block:
            self.log(f"{split}/loss_past_block", mean[block:].mean(), sync_dist=True)
        experiment = getattr(self.logger, "experiment", None) if self.trainer.is_global_zero else None
        if experiment is not None and hasattr(experiment, "add_scalar"):
            for position, value in enumerate(mean.tolist(), start=1):
                experiment.add_scalar(f"{split}/loss_by_position", value, global_step=position)
            experiment.flush()

    def _log_eval(self, split: str, metric: MeanMetric) -> None:
        loss = metric.compute()  # a collective under DDP: every rank gets here
        metric.reset()
        self._log_loss_by_position(split)
        # already reduced over ranks: sync_dist averages equal values, a no-op that silences a DDP warning
        self.log(f"{split}/loss", loss, prog_bar=True, sync_dist=True)
        self.log(f"{split}/bpc", loss / math.log(2), sync_dist=True)

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        max_steps = self.trainer.max_steps
        if max_steps is None or max_steps <= 0:
            raise ValueError("Set trainer.max_steps (> 0): the learning-rate schedule and the data are step-based.")
        gate_params = {id(p) for g in [*self.model.gates, *self.model.output_gates] for p in g.parameters()}
        decay, no_decay = [], []
        for p in self.model.parameters():
            decayed = hp.decay_every_parameter or (p.dim() >= 2 and id(p) not in gate_params)
            (decay if decayed else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(
            [group for group in groups if group["params"]],  # decay_every_parameter leaves no_decay empty
            lr=hp.lr,
            betas=tuple(hp.betas),
        )

        def lr_factor(step: int) -> float:
            if step < hp.warmup_steps:
                return (step + 1) / hp.warmup_steps
            progress = min(1.0, (step - hp.warmup_steps) / max(1, max_steps - hp.warmup_steps))
            return (hp.min_lr + 0.5 * (hp.lr - hp.min_lr) * (1 + math.cos(math.pi * progress))) / hp.lr

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
