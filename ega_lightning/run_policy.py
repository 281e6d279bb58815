"""What `ega fit`, `validate` and `test` do with a run directory, decided once from plain data: the run plan.

`read_request` reads what the decision needs (the parsed config before a checkpoint's hyper-parameters are merged
into it, the keys the user set, what --ckpt_path's checkpoint holds); `plan_run` decides from that alone, or refuses
with the first of ``REFUSALS`` that applies (a function or, for one value out of its range, a `Limit` row), in the
words of refusals.yaml. They read only the request and the plan, so every DDP rank decides the same; the run
directory's state is read later, under its lock (`runs.RunClaim.claim`). Ranks that a launcher starts together
(torchrun, srun) must stop together: a refusal that rests on the checkpoint alone (a node-local disk may lack it)
and rank 0's claim wait until the process group forms, and every rank's `RankVerdict` decides there, before
Lightning's first collective (`agreed_refusal`).
"""

from __future__ import annotations

import contextlib
import os
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from ega_lightning import runs
from ega_lightning.callbacks.last import RUN_KEY
from ega_lightning.checkpoint_io import load_checkpoint
from ega_lightning.config_files import SECTIONS, not_a_mapping
from ega_lightning.errors import UserError, paragraph, wording
from ega_lightning.io import read_yaml
from ega_lightning.model.position import POSITIONS
from ega_lightning.module import MODEL, RUNTIME_KEYS, SHAPE_KEYS, WORLD_KEY, check_model_matches


@dataclass(frozen=True)
class CheckpointFacts:  # what the plan reads of a checkpoint (its tensors are Lightning's to restore)
    path: Path
    hparams: Mapping[str, Any]  # the model's: CharLM's arguments as the run was configured
    global_step: int | None
    corpus: str | None  # the datamodule's, where the checkpoint records it
    # (num_nodes, devices) it was saved with (module.WORLD_KEY; before that record, its run's config.yaml's)
    world: tuple[int, int] | None = None
    # what the checkpoint says of the run that saved it, by the config's dotted keys (data.batch_size, data.seed,
    # run_name, trainer.precision, ...): the datamodule's arguments and ega's record (callbacks.last.RUN_KEY)
    saved: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRequest:
    command: str | None  # fit, validate, test; None: the Python API without a subcommand (run=False)
    config: Mapping[str, Any]  # the command's parsed config (model, data, trainer, run_name, ckpt_path, ...)
    typed: frozenset[str]  # the keys the user set, by a flag or in a -c file: model.n_embd, trainer.max_steps, ...
    checkpoint: CheckpointFacts | None  # what --ckpt_path holds (fit's `last` found); None: none, or no last.ckpt


@dataclass(frozen=True)
class RunPlan:
    run_dir: Path  # where the run's files go (the Trainer's root, the loggers', the checkpoints')
    ckpt_path: str | None  # as given: a checkpoint file, or `last`
    merge_checkpoint_model: bool  # the checkpoint's hyper-parameters replace the model's config (Lightning's merge)
    kept_model: Mapping[str, Any]  # the model values the command keeps over its checkpoint's (how the model runs)
    corpus: str | None  # the checkpoint's corpus, which replaces the config's; None: the config's
    lock: bool  # the run directory's lock, held until the command ends (fit)
    # fit --overwrite=true: delete what the old run wrote, once every class is built (a typo must not cost the run)
    clear_old_run: bool
    resume_step: int | None  # fit --ckpt_path last: the step it resumes at (TensorBoard drops what was logged after)
    last_every: int  # checkpoints/last.ckpt every N optimizer steps and at the end (0: never)
    # validate/test: the evaluation's own run directory under the run (``<run>/validate``; None under fast_dev_run,
    # which logs nothing), and the step its metrics are stamped at: where the training run logged the checkpoint's
    # validation (one below its optimizer step), so that an evaluation never writes a training curve
    evaluation: str | None = None
    eval_step: int | None = None
    refusal: str | None = None  # `plan_run`'s, where the ranks say it together


def read_request(command: str | None, config: Any, argv: Sequence[str], missing_ok: bool = False) -> RunRequest:
    """The request of ``command`` with its parsed ``config`` (a jsonargparse Namespace) on the line ``argv`` (its -c
    files resolved); raises the checkpoint's UserError (no such file, not a checkpoint). ``missing_ok``: a missing
    checkpoint file is none (a rank on a node that may lack it: the ranks say so together, `agreed_refusal`)."""
    plain = config.as_dict()
    for section in SECTIONS:  # `trainer: null` in a -c file parses, and would build a Trainer of nothing
        if not isinstance(plain.get(section), dict):
            raise UserError(not_a_mapping(section, yaml.safe_dump(plain.get(section)).split("\n")[0]))
    ckpt_path, path = plain.get("ckpt_path"), None
    if ckpt_path == "last" and command == "fit":
        last = decide(RunRequest(command, plain, frozenset(), None)).run_dir / runs.LAST
        path = last if last.is_file() else None  # none to resume: the directory's state says what to do
    elif ckpt_path and ckpt_path != "last":  # `last` of another command is refused (REFUSALS), never read
        path = None if missing_ok and not Path(ckpt_path).exists() else Path(ckpt_path)
    return RunRequest(command, plain, typed_keys(argv), None if path is None else read_checkpoint(path))


def read_checkpoint(path: Path) -> CheckpointFacts:
    ckpt = load_checkpoint(path)
    data, hparams = ckpt.get("datamodule_hyper_parameters", {}), ckpt["hyper_parameters"]
    saved = {f"data.{key}": value for key, value in data.items() if not key.startswith("_")}
    saved.update(ckpt.get(RUN_KEY) or {})
    # the model's values a resume continues (`CONTINUED`), as the run that saved it was built with
    saved.update({r.key: hparams[r.key[6:]] for r in CONTINUED if r.key[:6] == "model." and r.key[6:] in hparams})
    recorded = ckpt.get(WORLD_KEY)
    world = world_of(recorded) if isinstance(recorded, Mapping) else None
    later = [key for key in ("precision", "accumulate_grad_batches") if f"trainer.{key}" not in saved]
    if recorded is None or later:  # saved before ega recorded them: the config.yaml of its run (<run>/checkpoints/)
        config = {}
        with contextlib.suppress(OSError, ValueError, yaml.YAMLError):  # unreadable: as if there were none
            config = read_yaml(path.parent.parent / "config.yaml") if path.parent.name == "checkpoints" else {}
        trainer = config.get("trainer") if isinstance(config, dict) else None
        trainer = trainer if isinstance(trainer, dict) else {}
        world = world_of(trainer) if recorded is None and trainer else world
        saved.update({f"trainer.{key}": trainer[key] for key in later if trainer.get(key) is not None})
    return CheckpointFacts(path, hparams, ckpt.get("global_step"), data.get("corpus"), world, saved)


def world_of(trainer: Mapping[str, Any]) -> tuple[int, int] | None:
    """(num_nodes, devices) of a trainer config (or a checkpoint's record of them); None where the config alone
    cannot tell: ``devices: auto`` or ``-1`` (Lightning counts the machine's devices)."""
    nodes, devices = trainer.get("num_nodes", 1), trainer.get("devices", "auto")
    if isinstance(devices, str):  # Lightning's "0,1" (device ids) or "2"
        devices = [d for d in devices.split(",") if d.strip()] if "," in devices else devices.strip()
    count = len(devices) if isinstance(devices, list | tuple) else devices
    count = int(count) if isinstance(count, str) and count.isdigit() else count
    counts = all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in (nodes, count))
    return (nodes, count) if counts else None


def as_list(value: Any) -> list[Any]:
    """A config entry of one item or a list of them (trainer.callbacks, logger, plugins); none: None, or a bool."""
    if value is None or isinstance(value, bool):  # `logger: false`
        return []
    return value if isinstance(value, list) else [value]


def typed_keys(argv: Sequence[str]) -> frozenset[str]:
    """The keys a command line sets, two levels deep (``model.n_embd``, ``run_name``): its ``--key`` flags, the keys
    of its -c files (resolved to paths, `config_files.resolve_config_args`) and those of a section given whole
    (``--model='{n_embd: 64}'``, ``--model=m.yaml``). The merged config cannot tell a key set to its default from
    one not set."""
    typed: set[str] = set()
    for i, arg in enumerate(argv):
        flag, has_value, value = arg.partition("=")
        section = flag[2:] if flag.startswith("--") and flag[2:] in SECTIONS else None
        if flag not in ("-c", "--config") and section is None:
            typed |= {".".join(flag[2:].split(".")[:2])} if arg.startswith("--") else set()
            continue
        # as jsonargparse reads it: a file's content, or (from Python, or a flag) the YAML text itself
        text = value if has_value else argv[i + 1] if i + 1 < len(argv) else ""
        with contextlib.suppress(OSError, ValueError):  # no such file (or YAML text too long to be a file name)
            text = Path(text).read_text()
        content = None
        with contextlib.suppress(yaml.YAMLError):  # not YAML: the parser has said so already, or takes it as a value
            content = yaml.safe_load(text)
        if section is None:  # -c: the keys of its sections
            sections = content if isinstance(content, dict) else {}
        else:  # as -c does; a section that is not a mapping (or a flag without its value) counts as the section itself
            sections = {section: content if isinstance(content, dict) and content else None}
        for name, values in sections.items():
            typed |= {f"{name}.{key}" for key in values} if isinstance(values, dict) else {name}
    return frozenset(typed)


def plan_run(request: RunRequest, together: bool = False) -> RunPlan:
    """The plan of ``request``; a UserError with the first of ``REFUSALS`` that refuses it. ``together``: on one of
    several ranks started at once (torchrun, srun), a refusal that rests on the checkpoint alone, which another node
    may lack (and then plans without), is the plan's ``refusal``, to be said by every rank once the process group
    forms, so that no rank leaves while another waits for it."""
    plan = decide(request)
    problems = refusals(request, plan)
    if not problems:
        return plan
    bare = replace(request, checkpoint=None)
    if together and request.checkpoint is not None and not refusals(bare, decide(bare)):
        return replace(plan, refusal=problems[0])
    raise UserError(problems[0])


def refusals(request: RunRequest, plan: RunPlan) -> list[str]:
    """Every refusal of ``REFUSALS`` that applies, in order (empty: the plan stands)."""
    return [message for refusal in REFUSALS if (message := refusal(request, plan)) is not None]


def decide(request: RunRequest) -> RunPlan:
    """What the command does, before any check: the checkpoint decides the model and its corpus, the command how
    the model runs (``RUNTIME_KEYS``); the run directory is named after the model and corpus the command runs."""
    config, ckpt, command = request.config, request.checkpoint, request.command
    ckpt_path, evaluates = config.get("ckpt_path"), command in runs.EVALUATIONS
    merge = ckpt is not None and ckpt_path != "last"  # a run resumed from its own last.ckpt has the right config
    model = {**config["model"], **({k: v for k, v in ckpt.hparams.items() if not k.startswith("_")} if merge else {})}
    kept = {k: config["model"][k] for k in RUNTIME_KEYS if k in config["model"]} if ckpt is not None else {}
    corpus = None if ckpt is None else ckpt.corpus
    data = {**config["data"], **({} if corpus is None else {"corpus": corpus})}
    run_name = config.get("run_name")
    run_dir = Path(config["runs_dir"]) / (run_name or runs.default_run_name({"model": model, "data": data}))
    if evaluates and run_name is None and ckpt_path and Path(ckpt_path).parent.name == "checkpoints":
        run_dir = Path(ckpt_path).parent.parent  # evaluate into the run the checkpoint belongs to
    fit, fast_dev_run = command == "fit", bool(config["trainer"].get("fast_dev_run"))
    return RunPlan(
        run_dir=run_dir,
        ckpt_path=ckpt_path,
        merge_checkpoint_model=merge,
        kept_model=kept,
        corpus=corpus,
        lock=fit,
        clear_old_run=fit and bool(config.get("overwrite")),
        resume_step=ckpt.global_step if ckpt is not None and ckpt_path == "last" else None,
        # fast_dev_run is Lightning's check that the pipeline runs: it writes no checkpoint, so neither does ega
        last_every=config["checkpoint_every_n_steps"] if command in ("fit", None) and not fast_dev_run else 0,
        # nor a run of its own, which would replace the last evaluation with nothing
        evaluation=evaluation_name(command, config["data"].get("eval_block_size")) if not fast_dev_run else None,
        eval_step=max((ckpt.global_step or 0) - 1, 0) if evaluates and ckpt is not None else None,
    )


def evaluation_name(command: str | None, eval_block_size: int | None) -> str | None:
    """The evaluation's own run directory under the run (None: the command is no evaluation): ``validate``, or
    ``validate-T512`` on windows of ``data.eval_block_size`` 512, so that each window length keeps its own curves."""
    if command not in runs.EVALUATIONS:
        return None
    return command if eval_block_size is None else f"{command}-T{eval_block_size}"


@dataclass(frozen=True)
class RankVerdict:
    """What one process of a run found before its first collective: its refusal (rank 0's claim of the run
    directory) and the checkpoint it would restore where it cannot read it (a node-local disk without the run)."""

    rank: int
    host: str
    refusal: str | None = None
    busy: bool = False  # the refusal is `runs.RunBusy`'s (exit status RUN_BUSY, not 2)
    missing: str | None = None

    def __str__(self) -> str:
        return f"rank {self.rank} (on {self.host})"


def rank_verdict(plan: RunPlan, rank: int, host: str, refusal: BaseException | None) -> RankVerdict:
    """This process's verdict: ``refusal`` (a claim that failed, kept until every rank can hear it) and whether it
    can read the checkpoint the plan restores (``last``, which only a fit's plan holds: the run's last.ckpt)."""
    path = Path(plan.ckpt_path) if plan.ckpt_path else None
    if plan.ckpt_path == "last":
        path = plan.run_dir / runs.LAST
    missing = str(path) if path is not None and not path.is_file() else None
    message = None if refusal is None else (str(refusal).strip() or type(refusal).__name__)
    return RankVerdict(rank, host, message, isinstance(refusal, runs.RunBusy), missing)


def agreed_refusal(verdicts: Sequence[RankVerdict], plan: RunPlan) -> tuple[str, bool] | None:
    """What every rank says and does, given every rank's verdict: the refusal of the lowest rank that has one (True:
    `runs.RunBusy`'s), else, where some rank cannot read the checkpoint the others restore, that; None: go ahead."""
    ordered = sorted(verdicts, key=lambda v: v.rank)
    first = next((v for v in ordered if v.refusal), None)
    if first is not None:
        return str(first.refusal if first.rank == 0 else f"{first} refused: {first.refusal}"), first.busy
    lacking, have = [v for v in ordered if v.missing], [v for v in ordered if not v.missing]
    if not lacking:
        return None
    path, ckpt_path = lacking[0].missing, plan.ckpt_path
    if not have:
        return paragraph("no_rank_reads_the_checkpoint", ckpt_path=ckpt_path, path=path), False
    names, others = ", ".join(map(str, lacking)), f"; {', '.join(map(str, have[:2]))} can"
    way_out = paragraph(
        "every_rank_reads_the_checkpoint.last" if ckpt_path == "last" else "every_rank_reads_the_checkpoint.file",
        run_dir=plan.run_dir,
    )
    said = paragraph(
        "every_rank_reads_the_checkpoint", ckpt_path=ckpt_path, names=names, path=path, others=others, way_out=way_out
    )
    return said, False


def _said(check: Callable[..., object], *args: Any, **kwargs: Any) -> str | None:
    """The paragraph of the UserError that ``check(*args, **kwargs)`` raises; None: it raises none."""
    try:
        check(*args, **kwargs)
    except UserError as err:
        return str(err)
    return None


def checkpoint_holds_the_model(request: RunRequest, plan: RunPlan) -> str | None:
    """The model-defining arguments (``SHAPE_KEYS``) the command sets unlike its checkpoint: for fit every one (a
    resumed or continued run trains the model its config describes), for validate/test those the user typed."""
    ckpt, model = request.checkpoint, request.config["model"]
    keys = SHAPE_KEYS if request.command == "fit" else [k for k in SHAPE_KEYS if f"model.{k}" in request.typed]
    return (
        None if ckpt is None else _said(check_model_matches, ckpt.hparams, model, keys, str(ckpt.path), "this command")
    )


def checkpoint_decides_the_corpus(request: RunRequest, plan: RunPlan) -> str | None:
    # the model reads the checkpoint's corpus, whose vocabulary it was trained on, in place of the one named
    ckpt, asked = request.checkpoint, request.config["data"].get("corpus")
    if ckpt is None or ckpt.corpus is None or "data.corpus" not in request.typed or asked == ckpt.corpus:
        return None
    return paragraph("checkpoint_decides_the_corpus", path=ckpt.path, corpus=ckpt.corpus, asked=asked)


# What AdamW and its schedule are built from: a checkpoint's optimizer and scheduler state (the base learning
# rates, each group's weight decay, the betas, the step) is restored over the values a command gives.
OPTIMIZER_KEYS = ("lr", "min_lr", "warmup_steps", "weight_decay", "betas")
INIT_KEYS = ("tau_init", "alpha_init")  # the gates' values at initialisation, which a checkpoint's weights replace


def _differ(name: str, saved: Any, asked: Any) -> str | None:
    """``name``'s line in a refusal that lists what differs from the checkpoint; None: the two are the same."""
    saved, asked = (list(v) if isinstance(v, list | tuple) else v for v in (saved, asked))
    return None if saved == asked else f"{name}: checkpoint {saved!r}, this command {asked!r}"


def checkpoint_holds_the_optimizer(request: RunRequest, plan: RunPlan) -> str | None:
    """fit from a checkpoint takes the optimizer, its schedule and the gates' initial values from it (from a file,
    every model value but how the model runs): refused, each one the user typed unlike the checkpoint's, and on a
    resume (whose config the run records) each optimizer value the config holds unlike it; the packaged tau_init and
    alpha_init, which no user chose, never. (A resume's ``dropout`` takes effect: `CONTINUED` refuses another.)"""
    ckpt = request.checkpoint
    if ckpt is None or request.command not in ("fit", None):
        return None
    model, resume = request.config["model"], plan.ckpt_path == "last"
    if resume:
        checked = [k for k in INIT_KEYS if f"model.{k}" in request.typed] + list(OPTIMIZER_KEYS)
    else:  # the shape is checkpoint_holds_the_model's
        checked = [k for k in model if k not in RUNTIME_KEYS and k not in SHAPE_KEYS and f"model.{k}" in request.typed]
    found = (_differ(k, ckpt.hparams[k], model[k]) for k in checked if k in ckpt.hparams and k in model)
    differ = "; ".join(d for d in found if d)
    if not differ:
        return None
    keep = paragraph("checkpoint_holds_the_optimizer.resume" if resume else "checkpoint_holds_the_optimizer.file")
    return paragraph("checkpoint_holds_the_optimizer", path=ckpt.path, differ=differ, keep=keep)


# what `ega fit --ckpt_path last` refuses to change, by the config's dotted key and the checkpoint's
# (`CheckpointFacts.saved`): refusals.yaml's ``continued`` says why each row is one, and what its fields mean
Continued = namedtuple("Continued", "key decides named used_with", defaults=(None, None))
CONTINUED = tuple(Continued(**row) for row in wording("continued"))
# Lightning's older spellings of a precision, by the name it runs them under (Trainer.precision)
PRECISION_NAMES = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed", "None": "32-true"}


def precision_name(value: Any) -> str:
    """A precision as Lightning names the one it runs (``32``, ``"32"``: ``32-true``; None, its default, too)."""
    return PRECISION_NAMES.get(str(value), str(value))


def precision_as_asked(asked: Any, runs: str) -> str | None:
    """Why a Trainer that ``runs`` another precision than the ``asked`` one must not start (None: it runs what was
    asked): Lightning replaces fp16 AMP on CPU by bf16 with a warning, and config.yaml would record the one asked."""
    if asked is None or precision_name(asked) == precision_name(runs):  # None: Lightning's default, as it runs
        return None
    return paragraph("precision_as_asked", asked=asked, runs=runs)


def _command_value(request: RunRequest, plan: RunPlan, key: str) -> Any:
    """The value of a dotted key that this command runs with (the run name: its directory's, also when derived)."""
    if key == "run_name":
        return plan.run_dir.name
    value: Any = request.config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return precision_name(value) if key == "trainer.precision" else value


def _resumed(request: RunRequest, plan: RunPlan) -> CheckpointFacts | None:
    """The checkpoint a fit resumes (``--ckpt_path last``, its run's last.ckpt found); None: the command is none."""
    return request.checkpoint if request.command == "fit" and plan.ckpt_path == "last" else None


def resume_continues_one_run(request: RunRequest, plan: RunPlan) -> str | None:
    """A resume (``last``) whose command differs from its checkpoint's run in a row of ``CONTINUED``."""
    ckpt, differ = _resumed(request, plan), []
    for row in CONTINUED if ckpt is not None else ():
        used = row.used_with is None or ckpt.saved.get(row.used_with) is not None
        if row.key not in ckpt.saved or not (used or _command_value(request, plan, row.used_with) is not None):
            continue  # not recorded, or neither evaluation reads it
        saved = precision_name(ckpt.saved[row.key]) if row.key == "trainer.precision" else ckpt.saved[row.key]
        said = _differ(row.named or row.key, saved, _command_value(request, plan, row.key))
        differ += [f"{said} ({row.decides})"] if said else []
    if not differ:
        return None
    at = f" at step {ckpt.global_step}" if ckpt.global_step is not None else ""
    return paragraph("resume_continues_one_run", run_dir=plan.run_dir, path=ckpt.path, at=at, differ="; ".join(differ))


def steps_left_to_train(request: RunRequest, plan: RunPlan) -> str | None:
    # a fit from a checkpoint at or past max_steps would train nothing; a resume past it would also record a run
    # shorter than the one trained. A resume at it (`last` of a finished run) is left alone: ega sweep resumes a run
    # stopped between its last checkpoint and its DONE, and Lightning ends that fit at once
    ckpt, steps, resume = request.checkpoint, request.config["trainer"]["max_steps"], plan.ckpt_path == "last"
    if request.command != "fit" or ckpt is None or ckpt.global_step is None or steps is None or steps < 1:
        return None  # max_steps below 1: max_steps_positive says it
    step = ckpt.global_step
    if step < steps or (resume and step == steps):
        return None
    if not resume:
        return paragraph("continuing_trains_something", path=ckpt.path, step=step, steps=steps)
    best = plan.run_dir / "checkpoints" / "best.ckpt"
    return paragraph("resume_not_past_max_steps", run_dir=plan.run_dir, step=step, steps=steps, best=best)


def dropout_before_gate_trains_on_reference(request: RunRequest, plan: RunPlan) -> str | None:
    """The author's order (dropout, gate, renormalise) acts on the attention weights, which the reference path
    materialises and the fused path takes as a keep mask (`fused.FusedAttention.causal`); FlexAttention has no
    attention dropout. Evaluation has no dropout, where every path computes it."""
    model = request.config.get("model") or {}
    dropout, attention = model.get("dropout"), model.get("attention", "fused")
    author = request.command == "fit" and model.get("dropout_before_gate")
    if not (author and dropout) or attention in ("reference", "fused"):
        return None
    return paragraph("dropout_before_gate_trains_on_reference", dropout=dropout, attention=attention)


@dataclass(frozen=True)
class Limit:
    """A refusal of one value of the config (its dotted key) that ``ok`` refuses, asked of ``commands`` (None: the
    Python API's), in refusals.yaml's paragraph ``name`` (which may name the value and the command)."""

    name: str
    key: str
    ok: Callable[[Any], bool]
    commands: tuple[str | None, ...] = ("fit", *runs.EVALUATIONS, None)

    def __call__(self, request: RunRequest, plan: RunPlan) -> str | None:
        if request.command not in self.commands:
            return None
        value = _command_value(request, plan, self.key)
        return None if self.ok(value) else paragraph(self.name, value=value, command=request.command)


def _number(value: Any) -> bool:
    return isinstance(value, int | float)


def batch_fits_in_memory(request: RunRequest, plan: RunPlan) -> str | None:
    # the allocator failed with a traceback and left a run directory (issue 72)
    model, memory = request.config["model"], None
    with contextlib.suppress(ValueError, OSError, AttributeError):  # a machine that does not say
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    batch, block, width = request.config["data"].get("batch_size"), model.get("block_size"), model.get("n_embd")
    if request.command != "fit" or memory is None or not all(isinstance(x, int) for x in (batch, block, width)):
        return None
    need = batch * block * (16 + 4 * width)  # per position: two int64 token ids (input, target), n_embd fp32 values
    if need <= memory:
        return None
    said = {"need_gib": need / 2**30, "memory_gib": memory / 2**30}
    return paragraph("batch_fits_in_memory", batch=batch, block=block, width=width, **said)


def cpu_devices_within_cores(request: RunRequest, plan: RunPlan) -> str | None:
    # 99 CPU devices (a process each) on a 2-core machine exhausted its memory (issue 72)
    import torch

    trainer, cores = request.config["trainer"], os.cpu_count()
    accelerator, world = str(trainer.get("accelerator")), world_of(trainer)
    on_cpu = accelerator == "cpu" or (
        accelerator == "auto" and not torch.cuda.is_available() and not torch.backends.mps.is_available()
    )
    if not on_cpu or cores is None or world is None or world[1] <= cores:
        return None
    return paragraph("cpu_devices_within_cores", devices=trainer["devices"], cores=cores, count=world[1])


def run_name_is_a_name(request: RunRequest, plan: RunPlan) -> str | None:
    # a run name names one directory under the runs directory: never a path out of it, nor the runs directory
    name = request.config.get("run_name")
    if not name or (name not in (".", "..") and not any(c in name for c in "/\\\0")):
        return None
    return paragraph("run_name_is_a_name", name=name)


def world_size_unchanged(request: RunRequest, plan: RunPlan) -> str | None:
    # asked from the config and the checkpoint, before the Trainer is built and any process group forms
    ckpt, asked = _resumed(request, plan), world_of(request.config["trainer"])
    if ckpt is None or ckpt.world is None or asked is None or request.config.get("allow_world_size_change"):
        return None
    (nodes, devices), size = ckpt.world, asked[0] * asked[1]
    if size == nodes * devices:
        return None
    was = f"--trainer.num_nodes={nodes} --trainer.devices={devices}"
    return paragraph(
        "world_size_unchanged", run_dir=plan.run_dir, size=nodes * devices, was=was, asked=asked, processes=size
    )


def run_dir_can_be_made(request: RunRequest, plan: RunPlan) -> str | None:
    run_dir = plan.run_dir
    not_a_dir = next((d for d in (run_dir, *run_dir.parents) if d.exists() and not d.is_dir()), None)
    return None if not_a_dir is None else paragraph("run_dir_can_be_made", not_a_dir=not_a_dir, run_dir=run_dir)


def eval_block_size_has_positions(request: RunRequest, plan: RunPlan) -> str | None:
    """``data.eval_block_size`` evaluates a checkpoint on windows of that length (length extrapolation): a fit
    validates at its training block, and a learned-position model has no embedding past its block."""
    asked = request.config["data"].get("eval_block_size")
    if asked is None:
        return None
    if request.command not in runs.EVALUATIONS:
        return paragraph("eval_block_size_has_positions.fit", asked=asked)
    model = {**request.config["model"], **(request.checkpoint.hparams if request.checkpoint is not None else {})}
    # a checkpoint from before the option: the default encoding, the one it ran
    position, block = model.get("position") or MODEL.position, model["block_size"]
    encoding = POSITIONS.get(position)  # an unknown name: CharLM's own check refuses it
    if asked <= block or encoding is None or encoding.extrapolates:
        return None
    others = " or ".join(name for name, cls in POSITIONS.items() if cls.extrapolates)
    return paragraph(
        "eval_block_size_has_positions", asked=asked, block=block, position=position, last=block - 1, others=others
    )


def fit_writes_a_best_checkpoint(request: RunRequest, plan: RunPlan) -> str | None:
    # a callbacks list replaces base.yaml's: `trainer: {callbacks: []}` trained without best.ckpt or the gate's
    # diagnostics, and the summary said "no validation ran" of a run that validated (asked of a list the user gave:
    # the Python API without ega's configs keeps its own)
    trainer = request.config["trainer"]
    if request.command != "fit" or trainer.get("fast_dev_run") or "trainer.callbacks" not in request.typed:
        return None
    listed = as_list(trainer.get("callbacks"))
    names = [str(c.get("class_path", "")) if isinstance(c, Mapping) else type(c).__name__ for c in listed]
    names = [name.rsplit(".", 1)[-1] for name in names]
    if "ModelCheckpoint" in names:
        return None
    return paragraph("fit_writes_a_best_checkpoint", names=", ".join(names) or "none")


NAME_MAX = 255  # bytes in one directory name on Linux's and macOS's filesystems


def run_name_fits_a_directory_name(request: RunRequest, plan: RunPlan) -> str | None:
    name, size = plan.run_dir.name, len(plan.run_dir.name.encode())
    given, said = request.config.get("run_name"), {"name": name, "size": size, "most": NAME_MAX}
    if size <= NAME_MAX:
        return None
    return paragraph("run_name_fits_a_directory_name" if given else "run_name_fits_a_directory_name.derived", **said)


FIT, NOT_FIT = ("fit",), (*runs.EVALUATIONS, None)
REFUSALS: tuple[Callable[[RunRequest, RunPlan], str | None], ...] = (
    Limit("last_resumes_only_fit", "ckpt_path", lambda path: path != "last", NOT_FIT),
    checkpoint_holds_the_model,
    checkpoint_decides_the_corpus,
    checkpoint_holds_the_optimizer,
    resume_continues_one_run,
    Limit("max_steps_positive", "trainer.max_steps", lambda n: n is not None and n >= 1, FIT),
    # the training windows are an endless stream: an epoch never ends, so max_epochs 0 stopped a run before its
    # first step, exit 0, and `ega sweep` marked it DONE
    Limit("max_epochs_unset", "trainer.max_epochs", lambda n: n is None or n == -1, FIT),
    steps_left_to_train,
    Limit(
        "gradient_clip_val_not_negative", "trainer.gradient_clip_val", lambda v: v is None or (_number(v) and v >= 0)
    ),
    dropout_before_gate_trains_on_reference,
    Limit("val_check_interval_positive", "trainer.val_check_interval", lambda n: not _number(n) or n > 0),
    Limit("accumulate_grad_batches_positive", "trainer.accumulate_grad_batches", lambda n: not _number(n) or n >= 1),
    fit_writes_a_best_checkpoint,
    Limit("checkpoint_every_not_negative", "checkpoint_every_n_steps", lambda n: n >= 0),
    # Lightning takes a negative log_every_n_steps for its absolute value (issue 72: -5 logged every 5 steps)
    Limit("log_every_n_steps_not_negative", "trainer.log_every_n_steps", lambda n: not _number(n) or n >= 0),
    # numpy's random generator, which Lightning's seed_everything seeds, takes [0, 2**32); a bool is refused where
    # the data's seed is linked to it (fit_args._seed_for_data)
    Limit("seed_in_range", "seed_everything", lambda n: not _number(n) or isinstance(n, bool) or 0 <= n < 2**32),
    batch_fits_in_memory,
    cpu_devices_within_cores,
    run_name_is_a_name,
    run_name_fits_a_directory_name,
    run_dir_can_be_made,
    world_size_unchanged,
    # without one Lightning evaluates the freshly initialised model, and logs it as the evaluation of the run
    # its config names: a number no one asked for, filed under a run it does not belong to
    Limit("evaluation_has_a_checkpoint", "ckpt_path", bool, runs.EVALUATIONS),
    eval_block_size_has_positions,
)
