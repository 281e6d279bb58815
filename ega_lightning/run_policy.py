"""What `ega fit`, `validate` and `test` do with a run directory, decided once, from plain data: the run plan.

`read_request` reads what the decision needs: the command's parsed config (before a checkpoint's
hyper-parameters are merged into it), the keys the user set (flags and -c files), and what the
checkpoint that --ckpt_path names holds. `plan_run` decides from that data alone: the run directory,
what the checkpoint decides (the model, the corpus) and what the command keeps (how the model runs),
the resume point, the lock, whether the old run is deleted; or it refuses, with the first of
``REFUSALS`` that applies, as one paragraph saying what is wrong and the way out. `EgaCLI`
(commands/lightning_cli.py) applies the plan in its hooks; nothing is built or written before it.

A refusal is one callable ``(request, plan) -> message or None`` in ``REFUSALS``, asked in order: a function,
or, for one value out of its range, a `Limit` row (its name, the key, the range); its paragraph is the entry of
its name in refusals.yaml. A new rule is one more entry in each, and `refusals` lists every one that applies.
They read only the request and the plan, so every process of a run (each DDP rank) decides the same. The run
directory's state (fresh, resumable, stale: `runs.check_fit_target`) is the one decision taken later, by
`claim_run_dir`, under the directory's lock: read without it, a run that another process is training would
look stale.

Ranks that a launcher starts together (torchrun, srun) must stop together: there a refusal that rests on the
checkpoint alone (which a node-local disk may lack: `plan_run_together`) and rank 0's claim are kept until the
process group forms, and then every rank's `RankVerdict` (with whether it can read the checkpoint the run
restores) decides, the same on every rank, before Lightning's first collective (`agreed_refusal`).
"""

from __future__ import annotations

import os
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
class CheckpointFacts:
    """What the plan reads of a checkpoint (its tensors are Lightning's to restore)."""

    path: Path
    hparams: Mapping[str, Any]  # the model's: CharLM's arguments as the run was configured
    global_step: int | None
    corpus: str | None  # the datamodule's, where the checkpoint records it
    # (num_nodes, devices) it was saved with: recorded in it (module.WORLD_KEY), else, for a checkpoint from before
    # that record, its run's config.yaml; None: neither tells
    world: tuple[int, int] | None = None
    # what the checkpoint says of the run that saved it, by the config's dotted keys (data.batch_size, data.seed,
    # run_name, trainer.precision, ...): the datamodule's arguments and ega's record (callbacks.last.RUN_KEY)
    saved: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRequest:
    """What a plan is decided from, as plain data."""

    command: str | None  # fit, validate, test; None: the Python API without a subcommand (run=False)
    config: Mapping[str, Any]  # the command's parsed config (model, data, trainer, run_name, ckpt_path, ...)
    typed: frozenset[str]  # the keys the user set, by a flag or in a -c file: model.n_embd, trainer.max_steps, ...
    checkpoint: CheckpointFacts | None  # what --ckpt_path holds (fit's `last` found); None: none, or no last.ckpt


@dataclass(frozen=True)
class RunPlan:
    """What the command does with its run directory; `EgaCLI`'s hooks apply it."""

    command: str | None
    run_dir: Path  # where the run's files go (the Trainer's root, the loggers', the checkpoints')
    ckpt_path: str | None  # as given: a checkpoint file, or `last`
    merge_checkpoint_model: bool  # the checkpoint's hyper-parameters replace the model's config (Lightning's merge)
    kept_model: Mapping[str, Any]  # the model values the command keeps over its checkpoint's (how the model runs)
    corpus: str | None  # the checkpoint's corpus, which replaces the config's; None: the config's
    lock: bool  # the run directory's lock, held until the command ends (fit)
    overwrite: bool  # fit --overwrite=true: start the run over
    clear_old_run: bool  # delete what the old run wrote, once every class is built (a typo must not cost the run)
    resume_step: int | None  # fit --ckpt_path last: the step it resumes at (TensorBoard drops what was logged after)
    last_every: int  # checkpoints/last.ckpt every N optimizer steps and at the end (0: never)
    # validate/test: the evaluation's own run directory beside the training run's (``<run>/validate``), which it
    # replaces (None under fast_dev_run, which logs nothing), and the step its metrics are stamped at: where the
    # training run logged the same checkpoint's validation (one below its optimizer step), so that no training
    # curve is ever written by an evaluation
    evaluation: str | None = None
    eval_step: int | None = None


def read_request(command: str | None, config: Any, argv: Sequence[str], missing_ok: bool = False) -> RunRequest:
    """The request of ``command`` with its parsed ``config`` (a jsonargparse Namespace, before the checkpoint's
    hyper-parameters) on the command line ``argv`` (its -c files resolved to paths).

    Raises the checkpoint's UserError (no such file, not a checkpoint), and `runs.check_run_name`'s for a fit
    that resumes ``last`` of a run name that is a path. ``missing_ok``: a checkpoint file that is not there is no
    checkpoint (one rank of several, on a node that may lack it: the ranks say so together, `agreed_refusal`).
    """
    plain = config.as_dict()
    for section in SECTIONS:  # `trainer: null` in a -c file parses, and would build a Trainer of nothing
        if not isinstance(plain.get(section), dict):
            raise UserError(not_a_mapping(section, yaml.safe_dump(plain.get(section)).split("\n")[0]))
    ckpt_path = plain.get("ckpt_path")
    path = None
    if ckpt_path == "last" and command == "fit":
        last = runs.run_dir_of(plain) / runs.LAST
        path = last if last.is_file() else None  # none to resume: the directory's state says what to do
    elif ckpt_path and ckpt_path != "last":  # `last` of another command is refused (REFUSALS), never read
        path = None if missing_ok and not Path(ckpt_path).exists() else Path(ckpt_path)
    return RunRequest(command, plain, typed_keys(argv), None if path is None else read_checkpoint(path))


def read_checkpoint(path: Path) -> CheckpointFacts:
    ckpt = load_checkpoint(path)
    data = ckpt.get("datamodule_hyper_parameters", {})
    saved = {f"data.{key}": value for key, value in data.items() if not key.startswith("_")}
    saved.update(ckpt.get(RUN_KEY) or {})
    hparams = ckpt["hyper_parameters"]
    # the model's values a resume continues (`CONTINUED`), as the run that saved it was built with
    saved.update({row.key: hparams[row.key[6:]] for row in CONTINUED if row.key[6:] in hparams and row.model})
    recorded = ckpt.get(WORLD_KEY)
    world = world_of(recorded) if isinstance(recorded, Mapping) else None
    later = [key for key in ("precision", "accumulate_grad_batches") if f"trainer.{key}" not in saved]
    if recorded is None or later:  # saved before ega recorded them: its run's config.yaml says them
        trainer = _run_config(path).get("trainer")
        trainer = trainer if isinstance(trainer, dict) else {}
        world = world_of(trainer) if recorded is None and trainer else world
        saved.update({f"trainer.{key}": trainer[key] for key in later if trainer.get(key) is not None})
    return CheckpointFacts(path, ckpt["hyper_parameters"], ckpt.get("global_step"), data.get("corpus"), world, saved)


def _run_config(path: Path) -> dict[str, Any]:
    """The config.yaml of the run a checkpoint file lies in (``<run>/checkpoints/<file>``); {} where there is none."""
    config_path = path.parent.parent / "config.yaml"
    if path.parent.name != "checkpoints" or not config_path.is_file():
        return {}
    try:
        config = read_yaml(config_path)
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return config if isinstance(config, dict) else {}


def world_of(trainer: Mapping[str, Any]) -> tuple[int, int] | None:
    """(num_nodes, devices) of a trainer config (or a checkpoint's record of them); None where the config alone
    cannot tell: ``devices: auto`` or ``-1`` (Lightning counts the machine's devices)."""
    nodes, devices = trainer.get("num_nodes", 1), trainer.get("devices", "auto")
    if isinstance(devices, list | tuple):
        count = len(devices)
    elif isinstance(devices, str) and "," in devices:  # Lightning's "0,1": device ids
        count = len([d for d in devices.split(",") if d.strip()])
    elif isinstance(devices, str) and devices.strip().isdigit():
        count = int(devices)
    elif isinstance(devices, int) and not isinstance(devices, bool) and devices > 0:
        count = devices
    else:
        return None
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        return None
    return nodes, count


def typed_keys(argv: Sequence[str]) -> frozenset[str]:
    """The keys a command line sets, two levels deep (``model.n_embd``, ``trainer.max_steps``, ``run_name``):
    its ``--key`` flags, the keys of its -c files (already resolved to paths, see
    `config_files.resolve_config_args`) and those of a section given whole (``--model='{n_embd: 64}'``,
    ``--model=m.yaml``). The merged config cannot tell a key set to its default from one not set."""
    typed: set[str] = set()
    for i, arg in enumerate(argv):
        flag, has_value, value = arg.partition("=")
        following = argv[i + 1] if i + 1 < len(argv) else None
        if flag in ("-c", "--config"):
            content = _yaml_of(value if has_value else following)
            for section, values in (content if isinstance(content, dict) else {}).items():
                typed |= {f"{section}.{key}" for key in values} if isinstance(values, dict) else {section}
        elif flag.startswith("--") and flag.removeprefix("--") in SECTIONS:
            # --model='{n_embd: 64}' or --model=m.yaml sets the keys of its mapping, as -c does (a section that
            # is not a mapping, or a flag given without its value, counts as the section itself)
            content = _yaml_of(value if has_value else following)
            section = flag.removeprefix("--")
            typed |= {f"{section}.{key}" for key in content} if isinstance(content, dict) and content else {section}
        elif arg.startswith("--"):
            typed.add(".".join(flag.removeprefix("--").split(".")[:2]))
    return frozenset(typed)


def _yaml_of(value: str | None) -> Any:
    """A config value as jsonargparse reads it: a file's content, or (from Python, or a flag) the YAML text itself."""
    if value is None:
        return None
    try:
        return yaml.safe_load(Path(value).read_text() if _is_file(value) else value)
    except yaml.YAMLError:  # not YAML: the parser has said so already, or takes it as a plain value
        return None


def _is_file(value: str) -> bool:
    try:
        return Path(value).is_file()
    except OSError:  # YAML text too long to be a file name
        return False


def plan_run(request: RunRequest) -> RunPlan:
    """The plan of ``request``; a UserError with the first of ``REFUSALS`` that refuses it."""
    plan = decide(request)
    problems = refusals(request, plan)
    if problems:
        raise UserError(problems[0])
    return plan


def plan_run_together(request: RunRequest) -> tuple[RunPlan, UserError | None]:
    """`plan_run` on one of several ranks started at once (torchrun, srun): a refusal that rests on the checkpoint
    alone, which another node may lack (and then plans without), is returned, to be said by every rank once the
    process group forms, so that no rank leaves while another waits for it; one the config decides is raised,
    as every rank raises it."""
    plan = decide(request)
    problems = refusals(request, plan)
    if not problems:
        return plan, None
    if request.checkpoint is not None:
        bare = replace(request, checkpoint=None)
        if not refusals(bare, decide(bare)):
            return plan, UserError(problems[0])
    raise UserError(problems[0])


def refusals(request: RunRequest, plan: RunPlan) -> list[str]:
    """Every refusal of ``REFUSALS`` that applies, in order (empty: the plan stands)."""
    return [message for refusal in REFUSALS if (message := refusal(request, plan)) is not None]


def decide(request: RunRequest) -> RunPlan:
    """What the command does, before any check: the checkpoint decides the model and its corpus, the command how
    the model runs (``RUNTIME_KEYS``); the run directory is named after the model and corpus the command runs."""
    config, ckpt, command = request.config, request.checkpoint, request.command
    ckpt_path = config.get("ckpt_path")
    # a run resumed from its own last.ckpt already has the right config
    merge = ckpt is not None and ckpt_path != "last"
    model = {**config["model"], **({k: v for k, v in ckpt.hparams.items() if not k.startswith("_")} if merge else {})}
    kept = {k: config["model"][k] for k in RUNTIME_KEYS if k in config["model"]} if ckpt is not None else {}
    corpus = None if ckpt is None else ckpt.corpus
    data = {**config["data"], **({} if corpus is None else {"corpus": corpus})}
    run_name = config.get("run_name")
    run_dir = Path(config["runs_dir"]) / (run_name or runs.default_run_name({"model": model, "data": data}))
    if command in ("validate", "test") and run_name is None and ckpt_path:
        ckpt_dir = Path(ckpt_path).parent
        if ckpt_dir.name == "checkpoints":  # evaluate into the run the checkpoint belongs to
            run_dir = ckpt_dir.parent
    fit, overwrite = command == "fit", bool(config.get("overwrite"))
    fast_dev_run = bool(config["trainer"].get("fast_dev_run"))
    return RunPlan(
        command=command,
        run_dir=run_dir,
        ckpt_path=ckpt_path,
        merge_checkpoint_model=merge,
        kept_model=kept,
        corpus=corpus,
        lock=fit,
        overwrite=overwrite,
        clear_old_run=fit and overwrite,
        resume_step=ckpt.global_step if ckpt is not None and ckpt_path == "last" else None,
        # fast_dev_run is Lightning's check that the pipeline runs: it writes no checkpoint, so neither does ega
        last_every=config["checkpoint_every_n_steps"] if command in ("fit", None) and not fast_dev_run else 0,
        # nor a run of its own, which would replace the last evaluation with nothing
        evaluation=evaluation_name(command, config["data"].get("eval_block_size")) if not fast_dev_run else None,
        eval_step=max((ckpt.global_step or 0) - 1, 0) if command in ("validate", "test") and ckpt is not None else None,
    )


def evaluation_name(command: str | None, eval_block_size: int | None) -> str | None:
    """The evaluation's own run directory under the run (None: the command is no evaluation): ``validate``, or
    ``validate-T512`` on windows of ``data.eval_block_size`` 512, so that each window length keeps its own curves."""
    if command not in ("validate", "test"):
        return None
    return command if eval_block_size is None else f"{command}-T{eval_block_size}"


def claim_run_dir(plan: RunPlan, claim: runs.RunClaim) -> None:
    """Takes the run directory for the command (fit: its lock, `runs.RunBusy` when another process holds it),
    then, under the lock, refuses a fit that the directory's state forbids (`runs.check_fit_target`)."""
    claim.claim(plan.run_dir, fit=plan.lock)
    if plan.command == "fit":
        runs.check_fit_target(plan.run_dir, plan.ckpt_path, plan.overwrite)


@dataclass(frozen=True)
class RankVerdict:
    """What one process of a run found before its first collective (`agreed_refusal` reads every rank's): its
    refusal (rank 0's claim of the run directory: its state, its lock) and the checkpoint it would restore when
    it cannot read it (a node-local disk without the run)."""

    rank: int
    host: str
    refusal: str | None = None
    busy: bool = False  # the refusal is `runs.RunBusy`'s (exit status RUN_BUSY, not 2)
    missing: str | None = None


def checkpoint_to_restore(plan: RunPlan) -> Path | None:
    """The checkpoint file the command restores (fit's ``last``: the run's last.ckpt); None: none."""
    if plan.ckpt_path == "last":
        return plan.run_dir / runs.LAST if plan.command == "fit" else None
    return Path(plan.ckpt_path) if plan.ckpt_path else None


def rank_verdict(plan: RunPlan, rank: int, host: str, refusal: BaseException | None) -> RankVerdict:
    """This process's verdict: ``refusal`` (a claim that failed, kept until every rank can hear it) and whether it
    can read the checkpoint the plan restores."""
    path = checkpoint_to_restore(plan)
    missing = str(path) if path is not None and not path.is_file() else None
    message = None if refusal is None else (str(refusal).strip() or type(refusal).__name__)
    return RankVerdict(rank, host, message, isinstance(refusal, runs.RunBusy), missing)


def agreed_refusal(verdicts: Sequence[RankVerdict], plan: RunPlan) -> tuple[str, bool] | None:
    """What every rank of a run says and does, given every rank's verdict: the refusal of the lowest rank that has
    one (True: it is `runs.RunBusy`'s), else, where some rank cannot read the checkpoint the others restore, that;
    None: the run goes ahead, the same on every rank."""
    ordered = sorted(verdicts, key=lambda v: v.rank)
    first = next((v for v in ordered if v.refusal), None)
    if first is not None:
        said = first.refusal if first.rank == 0 else f"rank {first.rank} (on {first.host}) refused: {first.refusal}"
        return str(said), first.busy
    lacking = [v for v in ordered if v.missing]
    if not lacking:
        return None
    path, have = lacking[0].missing, [v for v in ordered if not v.missing]
    if not have:
        return paragraph("no_rank_reads_the_checkpoint", ckpt_path=plan.ckpt_path, path=path), False
    names = ", ".join(f"rank {v.rank} (on {v.host})" for v in lacking)
    others = f"; {', '.join(f'rank {v.rank} (on {v.host})' for v in have[:2])} can"
    last = plan.ckpt_path == "last"
    way_out = paragraph(
        "every_rank_reads_the_checkpoint.last" if last else "every_rank_reads_the_checkpoint.file", run_dir=plan.run_dir
    )
    return paragraph(
        "every_rank_reads_the_checkpoint",
        ckpt_path=plan.ckpt_path,
        names=names,
        path=path,
        others=others,
        way_out=way_out,
    ), False


# The refusals, in the order they are asked: each says what is wrong and the way out (its paragraph of
# refusals.yaml, under its own name), or None.
Refusal = Callable[[RunRequest, RunPlan], str | None]


def last_resumes_only_fit(request: RunRequest, plan: RunPlan) -> str | None:
    if plan.ckpt_path != "last" or request.command == "fit":
        return None
    return paragraph("last_resumes_only_fit", command=request.command)


def checkpoint_holds_the_model(request: RunRequest, plan: RunPlan) -> str | None:
    """The model-defining arguments (``SHAPE_KEYS``) the command sets unlike its checkpoint: for fit every one (a
    resumed or continued run trains the model its config describes), for validate/test those the user typed,
    whatever their value."""
    ckpt = request.checkpoint
    if ckpt is None:
        return None
    keys = SHAPE_KEYS if request.command == "fit" else [k for k in SHAPE_KEYS if f"model.{k}" in request.typed]
    try:
        check_model_matches(ckpt.hparams, request.config["model"], keys, source=str(ckpt.path), asker="this command")
    except UserError as err:
        return str(err)
    return None


def checkpoint_decides_the_corpus(request: RunRequest, plan: RunPlan) -> str | None:
    """A corpus the user names (``--data.corpus``, a -c file) unlike the checkpoint's: its model reads the
    checkpoint's corpus, whose vocabulary it was trained on, and that corpus would replace the one named."""
    ckpt = request.checkpoint
    asked = request.config["data"].get("corpus")
    if ckpt is None or ckpt.corpus is None or "data.corpus" not in request.typed or asked == ckpt.corpus:
        return None
    return paragraph("checkpoint_decides_the_corpus", path=ckpt.path, corpus=ckpt.corpus, asked=asked)


# What AdamW and its schedule are built from: a checkpoint's optimizer and scheduler state (the base learning
# rates, each group's weight decay, the betas, the step) is restored over the values a command gives.
OPTIMIZER_KEYS = ("lr", "min_lr", "warmup_steps", "weight_decay", "betas")
# the gates' values at initialisation, which a checkpoint's weights replace
INIT_KEYS = ("tau_init", "alpha_init")


def checkpoint_holds_the_optimizer(request: RunRequest, plan: RunPlan) -> str | None:
    """fit from a checkpoint: the optimizer, its schedule and the gates' initial values come from it, and from a
    checkpoint file (whose hyper-parameters replace the config's) every model value but how the model runs.
    Refused: each one the user typed unlike the checkpoint's, and on a resume (``last``, whose config the run
    records) each optimizer value the config holds unlike the checkpoint's; the packaged config's tau_init and
    alpha_init, which no user chose, are never refused. (``dropout`` on a resume is built from the config and takes
    effect: a resume refuses another one as a change of the run, `CONTINUED`.)"""
    ckpt = request.checkpoint
    if ckpt is None or request.command not in ("fit", None):
        return None
    model, resume = request.config["model"], plan.ckpt_path == "last"
    if resume:
        checked = [k for k in INIT_KEYS if f"model.{k}" in request.typed] + list(OPTIMIZER_KEYS)
    else:  # the shape is checkpoint_holds_the_model's
        replaced = [k for k in model if k not in RUNTIME_KEYS and k not in SHAPE_KEYS]
        checked = [k for k in replaced if f"model.{k}" in request.typed]
    differ = [
        f"{key}: checkpoint {_plain(ckpt.hparams[key])!r}, this command {_plain(model[key])!r}"
        for key in checked
        if key in ckpt.hparams and key in model and _plain(ckpt.hparams[key]) != _plain(model[key])
    ]
    if not differ:
        return None
    keep = paragraph("checkpoint_holds_the_optimizer.resume" if resume else "checkpoint_holds_the_optimizer.file")
    return paragraph("checkpoint_holds_the_optimizer", path=ckpt.path, differ="; ".join(differ), keep=keep)


@dataclass(frozen=True)
class Continued:
    """A value that a run resumed from its last.ckpt shares with the run that saved it (a row of refusals.yaml's
    ``continued``, which says why each is one)."""

    key: str  # the config's dotted key, and the checkpoint's (`CheckpointFacts.saved`)
    decides: str  # what it decides in the run
    named: str | None = None  # how a command line sets it (--seed_everything), where not by its key
    used_with: str | None = None  # the key that must be set (in the checkpoint's run or this command) to use it

    @property
    def model(self) -> bool:
        """A model value: the checkpoint's hyper-parameters hold it (`read_checkpoint`)."""
        return self.key.startswith("model.")


# What `ega fit --ckpt_path last` refuses to change: a new evaluation option of the data is one more row
CONTINUED = tuple(Continued(**row) for row in wording("continued"))
# Lightning's older spellings of a precision, by the name it runs them under (Trainer.precision)
PRECISION_NAMES = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed", "None": "32-true"}


def precision_name(value: Any) -> str:
    """A precision as Lightning names the one it runs (``32`` and ``"32"``: ``32-true``; ``bf16``: ``bf16-mixed``;
    None, the Trainer's default: ``32-true``)."""
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
    ckpt = _resumed(request, plan)
    if ckpt is None:
        return None
    differ = []
    for row in CONTINUED:
        if row.key not in ckpt.saved:
            continue
        unused = row.used_with is not None and ckpt.saved.get(row.used_with) is None
        if unused and _command_value(request, plan, str(row.used_with)) is None:
            continue  # neither evaluation reads it
        saved = precision_name(ckpt.saved[row.key]) if row.key == "trainer.precision" else ckpt.saved[row.key]
        asked = _command_value(request, plan, row.key)
        if _plain(saved) != _plain(asked):
            name = row.named or row.key
            differ.append(f"{name}: checkpoint {_plain(saved)!r}, this command {_plain(asked)!r} ({row.decides})")
    if not differ:
        return None
    at = f" at step {ckpt.global_step}" if ckpt.global_step is not None else ""
    return paragraph("resume_continues_one_run", run_dir=plan.run_dir, path=ckpt.path, at=at, differ="; ".join(differ))


def resume_not_past_max_steps(request: RunRequest, plan: RunPlan) -> str | None:
    # a resume with max_steps below its step would train nothing and record a run shorter than the one trained
    # (max_steps below 1: max_steps_positive says it)
    ckpt, steps = _resumed(request, plan), request.config["trainer"]["max_steps"]
    if ckpt is None or ckpt.global_step is None or steps is None or steps < 1 or ckpt.global_step <= steps:
        return None
    best = plan.run_dir / "checkpoints" / "best.ckpt"
    return paragraph("resume_not_past_max_steps", run_dir=plan.run_dir, step=ckpt.global_step, steps=steps, best=best)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, list | tuple) else value


def dropout_before_gate_trains_on_reference(request: RunRequest, plan: RunPlan) -> str | None:
    """The author's order (dropout, gate, renormalise) acts on the attention weights, which the reference path
    materialises and the fused path takes as a keep mask (`fused.FusedAttention.causal`); FlexAttention has no
    attention dropout. Evaluation has no dropout, where every path computes it."""
    model = request.config.get("model") or {}
    if request.command != "fit" or not model.get("dropout_before_gate") or not model.get("dropout"):
        return None
    if model.get("attention", "fused") in ("reference", "fused"):
        return None
    return paragraph(
        "dropout_before_gate_trains_on_reference", dropout=model["dropout"], attention=model.get("attention")
    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float)


@dataclass(frozen=True)
class Limit:
    """A refusal of one value of the config (its dotted key) outside what the run can take: ``ok`` says whether it
    is within; its paragraph (refusals.yaml's ``name``) names the value given. ``fit``: asked of ega fit alone."""

    name: str
    key: str
    ok: Callable[[Any], bool]
    fit: bool = False

    def __call__(self, request: RunRequest, plan: RunPlan) -> str | None:
        if self.fit and request.command != "fit":
            return None
        value = _command_value(request, plan, self.key)
        return None if self.ok(value) else paragraph(self.name, value=value)


SEEDS = 2**32  # numpy's random generator, which Lightning's seed_everything seeds, takes [0, 2**32)


def _memory_bytes() -> int | None:
    """This machine's physical memory; None where it does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def batch_fits_in_memory(request: RunRequest, plan: RunPlan) -> str | None:
    """A training batch whose token windows and first activation alone (batch_size x block_size x (2 int64 token ids
    + n_embd fp32 values)) exceed the machine's memory: the allocator failed with a traceback, a run directory
    left (issue 72)."""
    model, memory = request.config["model"], _memory_bytes()
    batch, block, width = request.config["data"].get("batch_size"), model.get("block_size"), model.get("n_embd")
    if request.command != "fit" or memory is None or not all(isinstance(x, int) for x in (batch, block, width)):
        return None
    need = batch * block * (16 + 4 * width)
    if need <= memory:
        return None
    return paragraph(
        "batch_fits_in_memory", batch=batch, block=block, width=width, need_gib=need / 2**30, memory_gib=memory / 2**30
    )


def cpu_devices_within_cores(request: RunRequest, plan: RunPlan) -> str | None:
    """More CPU devices than the machine has cores: Lightning starts one process per device (DDP), each a model and
    its batches: 99 of them on a 2-core machine exhausted its memory (issue 72)."""
    import torch

    trainer = request.config["trainer"]
    devices, cores, accelerator = trainer.get("devices"), os.cpu_count(), str(trainer.get("accelerator"))
    on_cpu = accelerator == "cpu" or (
        accelerator == "auto" and not torch.cuda.is_available() and not torch.backends.mps.is_available()
    )
    if not on_cpu or cores is None:
        return None
    count = int(devices) if isinstance(devices, str) and devices.isdigit() else devices
    if not isinstance(count, int) or isinstance(count, bool) or count <= cores:
        return None
    return paragraph("cpu_devices_within_cores", devices=devices, cores=cores, count=count)


def run_name_is_a_name(request: RunRequest, plan: RunPlan) -> str | None:
    try:
        if request.config.get("run_name"):
            runs.check_run_name(request.config["run_name"])
    except UserError as err:
        return str(err)
    return None


def world_size_unchanged(request: RunRequest, plan: RunPlan) -> str | None:
    """A run resumes in the world it was trained in: with other processes its global batch (batch_size x devices
    x num_nodes) and every rank's windows change, so it would end elsewhere than the run it continues. Asked
    from the config and the checkpoint, before the Trainer is built and any process group forms."""
    ckpt = _resumed(request, plan)
    if ckpt is None or ckpt.world is None:
        return None
    asked = world_of(request.config["trainer"])
    if asked is None or asked[0] * asked[1] == ckpt.world[0] * ckpt.world[1]:
        return None
    if request.config.get("allow_world_size_change"):
        return None
    (nodes, devices), size = ckpt.world, ckpt.world[0] * ckpt.world[1]
    return paragraph(
        "world_size_unchanged",
        run_dir=plan.run_dir,
        size=size,
        was=f"--trainer.num_nodes={nodes} --trainer.devices={devices}",
        asked=asked[0] * asked[1],
        asked_nodes=asked[0],
        asked_devices=asked[1],
    )


def run_dir_can_be_made(request: RunRequest, plan: RunPlan) -> str | None:
    run_dir = plan.run_dir
    not_a_dir = next((d for d in (run_dir, *run_dir.parents) if d.exists() and not d.is_dir()), None)
    return None if not_a_dir is None else paragraph("run_dir_can_be_made", not_a_dir=not_a_dir, run_dir=run_dir)


def evaluation_has_a_checkpoint(request: RunRequest, plan: RunPlan) -> str | None:
    # without one Lightning evaluates the freshly initialised model, and logs it as the evaluation of the run
    # its config names: a number no one asked for, filed under a run it does not belong to
    if request.command not in ("validate", "test") or plan.ckpt_path:
        return None
    return paragraph("evaluation_has_a_checkpoint", command=request.command)


def eval_block_size_has_positions(request: RunRequest, plan: RunPlan) -> str | None:
    """``data.eval_block_size`` evaluates a checkpoint on windows of that length (length extrapolation): a fit
    validates at its training block, and a learned-position model has no embedding past its block."""
    asked = request.config["data"].get("eval_block_size")
    if asked is None:
        return None
    if request.command not in ("validate", "test"):
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


def continuing_trains_something(request: RunRequest, plan: RunPlan) -> str | None:
    # `last` of a finished run is left alone: ega sweep resumes a run stopped between its last
    # checkpoint and its DONE, and Lightning ends that fit at once
    ckpt, steps = request.checkpoint, request.config["trainer"]["max_steps"]
    if request.command != "fit" or ckpt is None or plan.ckpt_path == "last" or ckpt.global_step is None:
        return None
    if steps is None or steps < 1 or ckpt.global_step < steps:  # max_steps below 1: max_steps_positive says it
        return None
    return paragraph("continuing_trains_something", path=ckpt.path, step=ckpt.global_step, steps=steps)


def fit_writes_a_best_checkpoint(request: RunRequest, plan: RunPlan) -> str | None:
    # a callbacks list replaces base.yaml's: `trainer: {callbacks: []}` trained without best.ckpt or the gate's
    # diagnostics, and the summary said "no validation ran" of a run that validated (asked of a list the user gave:
    # the Python API without ega's configs keeps its own)
    if request.command != "fit" or request.config["trainer"].get("fast_dev_run"):
        return None
    if "trainer.callbacks" not in request.typed:
        return None
    callbacks = request.config["trainer"].get("callbacks")
    listed = callbacks if isinstance(callbacks, list) else [] if callbacks is None else [callbacks]
    names = [str(c.get("class_path", "")) if isinstance(c, Mapping) else type(c).__name__ for c in listed]
    if any(name.rsplit(".", 1)[-1] == "ModelCheckpoint" for name in names):
        return None
    return paragraph("fit_writes_a_best_checkpoint", names=", ".join(n.rsplit(".", 1)[-1] for n in names) or "none")


NAME_MAX = 255  # bytes in one directory name on Linux's and macOS's filesystems


def run_name_fits_a_directory_name(request: RunRequest, plan: RunPlan) -> str | None:
    name = plan.run_dir.name
    size = len(name.encode())
    if size <= NAME_MAX:
        return None
    return paragraph(
        "run_name_fits_a_directory_name"
        if request.config.get("run_name")
        else "run_name_fits_a_directory_name.derived",
        name=name,
        size=size,
        most=NAME_MAX,
    )


REFUSALS: tuple[Refusal, ...] = (
    last_resumes_only_fit,
    checkpoint_holds_the_model,
    checkpoint_decides_the_corpus,
    checkpoint_holds_the_optimizer,
    resume_continues_one_run,
    Limit("max_steps_positive", "trainer.max_steps", lambda n: n is not None and n >= 1, fit=True),
    # the training windows are an endless stream: an epoch never ends, so max_epochs 0 stopped a run before its
    # first step, exit 0, and `ega sweep` marked it DONE
    Limit("max_epochs_unset", "trainer.max_epochs", lambda n: n is None or n == -1, fit=True),
    resume_not_past_max_steps,
    Limit(
        "gradient_clip_val_not_negative", "trainer.gradient_clip_val", lambda v: v is None or (_number(v) and v >= 0)
    ),
    dropout_before_gate_trains_on_reference,
    continuing_trains_something,
    Limit("val_check_interval_positive", "trainer.val_check_interval", lambda n: not _number(n) or n > 0),
    Limit(
        "accumulate_grad_batches_positive",
        "trainer.accumulate_grad_batches",
        lambda n: not isinstance(n, int) or n >= 1,
    ),
    fit_writes_a_best_checkpoint,
    Limit("checkpoint_every_not_negative", "checkpoint_every_n_steps", lambda n: n >= 0),
    # Lightning takes a negative log_every_n_steps for its absolute value (issue 72: -5 logged every 5 steps)
    Limit("log_every_n_steps_not_negative", "trainer.log_every_n_steps", lambda n: not _number(n) or n >= 0),
    # a bool is refused where the data's seed is linked to it (fit_args._seed_for_data)
    Limit(
        "seed_in_range", "seed_everything", lambda n: not isinstance(n, int) or isinstance(n, bool) or 0 <= n < SEEDS
    ),
    batch_fits_in_memory,
    cpu_devices_within_cores,
    run_name_is_a_name,
    run_name_fits_a_directory_name,
    run_dir_can_be_made,
    world_size_unchanged,
    evaluation_has_a_checkpoint,
    eval_block_size_has_positions,
)
