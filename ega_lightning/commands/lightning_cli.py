"""`ega fit`, `ega validate` and `ega test`: Lightning's CLI wired for CharLM and CharDataModule.

What a command does with its run directory is its run plan (`ega_lightning.run_policy`, decided once
from the parsed config, the command line and the checkpoint); the run directory's states and lock are
`ega_lightning.runs` (one :class:`~ega_lightning.runs.RunClaim` per command), the -c files' resolution
`ega_lightning.config_files`. This module applies the plan in Lightning's hooks and says each outcome
in one paragraph. Lightning's private API it uses is listed in `ega_lightning.lightning_private`.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import warnings
from collections.abc import Callable
from typing import Any

from jsonargparse import Namespace
from lightning.fabric.plugins.environments import ClusterEnvironment, SLURMEnvironment, TorchElasticEnvironment
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.strategies import DDPStrategy, Strategy, StrategyRegistry
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from ega_lightning import run_policy, runs, summary
from ega_lightning.callbacks import LastCheckpoint, RunSegments, StepPace
from ega_lightning.callbacks.stop import AgreedStop, StopSignals
from ega_lightning.config_files import resolve_config_args
from ega_lightning.data import CharDataModule
from ega_lightning.errors import DEBUG_ENV, Interrupted, Stopped, UserError, end_command, in_ega_terms
from ega_lightning.fit_args import FLOAT_FLAGS, LIGHTNING_SUBCOMMANDS, EgaCommands, cli_options
from ega_lightning.lightning_private import PlannedCheckpointMerge, line_for_every_rank, purge_from
from ega_lightning.module import CharLM


class SaveRunConfig(SaveConfigCallback):
    """Saves the resolved config into the run directory: ``config.yaml`` for fit, ``config_<stage>.yaml`` else.

    Overwriting is on because a resumed fit re-saves the same run's config.
    """

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        stage = getattr(stage, "value", stage)  # TrainerFn or str
        self.config_filename = "config.yaml" if stage == "fit" else f"config_{stage}.yaml"
        super().setup(trainer, pl_module, stage)


class EgaCLI(PlannedCheckpointMerge, EgaCommands, LightningCLI):
    """Lightning's CLI for CharLM and CharDataModule, with `ega`'s run directories, checks and summaries.

    ``claim`` is this command's claim on its run directory (the lock, what to undo): the caller keeps it,
    to undo on a failure; without one (the Python API) the CLI makes its own and releases it when the
    subcommand ends. ``command_line`` is the command as the user typed it (fit's summary repeats it).
    ``run_plan`` is what the command does with its run directory, decided once the arguments are parsed.
    ``signals`` are the stop signals this command takes (`main`'s, which ends the command on them; without them,
    the CLI's own).
    """

    run_plan: run_policy.RunPlan
    # where the other ranks started with this one (torchrun, srun), this rank's refusal that another rank may not
    # share (rank 0's claim of the run directory: its state, its lock; one that rests on the checkpoint): kept
    # until the process group forms, then said by every rank (`_agree_before_the_first_collective`)
    _refusal: UserError | None = None

    def __init__(
        self,
        *args: Any,
        claim: runs.RunClaim | None = None,
        command_line: list[str] | None = None,
        signals: StopSignals | None = None,
        **kwargs: Any,
    ) -> None:
        self._command_line = list(command_line or [])
        self._signals = StopSignals() if signals is None else signals
        self._claim = runs.RunClaim() if claim is None else claim
        try:
            super().__init__(*args, **kwargs)  # parses, instantiates and runs the subcommand
        finally:
            if claim is None:  # a notebook fits, then resumes the same run in one process: no lock kept
                self._claim.release()

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        with warnings.catch_warnings():
            # `main` passes the resolved line beside sys.argv, the line as typed, on purpose (`line_for_every_rank`)
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended to run from within")
            super().parse_arguments(parser, args)
        command = self.config.get("subcommand")
        config = self.config[command] if command else self.config
        typed = list(sys.argv[1:] if args is None else args)
        if not started_together():
            self.run_plan = run_policy.plan_run(run_policy.read_request(command, config, typed))
            return
        # torchrun, srun: the other ranks are running already, and a checkpoint may be on some nodes only; a
        # refusal that rests on it is said by every rank once the process group forms
        request = run_policy.read_request(command, config, typed, missing_ok=True)
        self.run_plan, self._refusal = run_policy.plan_run_together(request)

    def merges_checkpoint_hparams(self) -> bool:
        # Lightning's merge of the checkpoint's hyper-parameters into the model's config, between parse_arguments
        # and before_instantiate_classes: only where the plan has the checkpoint decide the model
        return self.run_plan.merge_checkpoint_model

    def before_instantiate_classes(self) -> None:
        point_config_at_run(self.config[self.subcommand] if self.subcommand else self.config, self.run_plan)
        # the other ranks of a DDP run write into rank 0's run, under its lock; a refused run is not claimed
        if rank_zero_only.rank == 0 and self._refusal is None:
            try:
                run_policy.claim_run_dir(self.run_plan, self._claim)  # fit: the lock, held until the command ends
            except UserError as err:
                # under torchrun or srun the other ranks are running already and would wait for rank 0 at the
                # process group: they hear the refusal there (under Lightning's own DDP, rank 0 starts them
                # later, so it refuses now, alone)
                if not started_together():
                    raise
                self._refusal = err

    def after_fit(self) -> None:
        if self.trainer.is_global_zero:
            print(summary.fit_summary(self.trainer, self.run_plan.run_dir, self._command_line), flush=True)
            if self.trainer.fast_dev_run:  # it wrote nothing: a directory holding only the lock would be left
                self._claim.undo()

    def after_validate(self) -> None:
        self._print_evaluation("validate")

    def after_test(self) -> None:
        self._print_evaluation("test")

    def _print_evaluation(self, stage: str) -> None:
        if self.trainer.is_global_zero:
            metrics, ckpt_path = self.trainer.callback_metrics, self.run_plan.ckpt_path
            plan, fast_dev_run = self.run_plan, int(self.trainer.fast_dev_run)
            logged = self.trainer.logger is not None and plan.evaluation is not None
            run_dir = plan.run_dir / plan.evaluation if logged else None
            corpus = self.datamodule.corpus.name
            # the z-norm the evaluation computed: eval_znorm where set, else each gate's as trained
            trained = {m.znorm for m in self.model.modules() if isinstance(getattr(m, "znorm", None), str)}
            evaluated = {self.model.hparams.get("eval_znorm")} - {None} if trained else set()
            non_causal = "window" in (evaluated or trained)
            print(summary.evaluation_summary(stage, metrics, ckpt_path, run_dir, corpus, fast_dev_run, non_causal))

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except UserError:
            raise
        except (ValueError, MisconfigurationException) as err:  # the constructors' argument checks (the
            # Trainer's: an accelerator this machine lacks): a user's mistake, said in one line
            raise UserError(str(err)) from err
        config = self.config[self.subcommand] if self.subcommand else self.config
        refusal = run_policy.precision_as_asked(config.trainer.precision, str(self.trainer.precision))
        if refusal is not None:
            raise UserError(refusal)
        plan = self.run_plan
        owner = rank_zero_only.rank == 0 and self._refusal is None  # a refused run's directory is left as it is
        if plan.clear_old_run and owner:  # every argument is known good now
            runs.clear_outputs(plan.run_dir)
        if plan.resume_step is not None and owner:  # trained on, the run is no longer the one its DONE names
            runs.clear_done(plan.run_dir)
        if plan.evaluation and owner:  # an evaluation replaces the previous one of its kind
            runs.clear_evaluation(plan.run_dir, plan.evaluation)
        for logger in self.trainer.loggers if plan.resume_step is not None else []:
            # what the stopped process logged from this step on is logged again: TensorBoard drops the old
            # events (SummaryWriter's purge_step), so no step shows twice
            purge_from(logger, plan.resume_step)

    def _agree_before_the_first_collective(self, strategy: Strategy) -> None:
        """Every rank says what it found (rank 0's refusal, whether it can read the checkpoint the run restores)
        as soon as the process group forms (`AgreeingDDPStrategy`), before Lightning's first collective; where any
        rank cannot go on, every rank stops with the same paragraph (`run_policy`'s `agreed_refusal`), so no rank
        waits for another that has left or restores what another starts afresh."""
        import torch.distributed as dist

        mine = run_policy.rank_verdict(self.run_plan, strategy.global_rank, socket.gethostname(), self._refusal)
        verdicts = [mine]
        if torch_distributed_world() > 1:
            verdicts = [None] * dist.get_world_size()
            dist.all_gather_object(verdicts, mine)  # every rank, no rank-zero block
        agreed = run_policy.agreed_refusal(verdicts, self.run_plan)
        if agreed is not None:
            message, busy = agreed
            if torch_distributed_world() > 1:
                # every rank leaves here: a gloo group still alive at the interpreter's exit can abort it
                # ("terminate called without an active exception", status -6 for the refusal's own)
                dist.destroy_process_group()
            raise (runs.RunBusy if busy else UserError)(message)
        if torch_distributed_world() > 1:  # SIGTERM and SIGINT stop every rank at one step from now on
            self._signals.take_under_ddp(self.trainer)

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        init = self.config_init[self.subcommand] if self.subcommand else self.config_init
        plugins = _as_list(init.trainer.get("plugins"))
        if SLURMEnvironment.detect() and not any(isinstance(p, ClusterEnvironment) for p in plugins):
            # Lightning's SLURM requeue writes hpc_ckpt_N.ckpt into the run directory on SIGUSR1 and restores it
            # by itself, outside `--ckpt_path last`: off, so a run resumes from last.ckpt only (`main` takes
            # SIGUSR1 as SIGTERM)
            kwargs["plugins"] = [*plugins, SLURMEnvironment(auto_requeue=False)]
        # AgreedStop: where the ranks of a DDP fit agree to stop on a signal; StepPace: the measured step time
        # and the projected time to max_steps, after the first steps (issue 55)
        added: list[Any] = [AgreedStop(self._signals), StepPace()]
        if self.subcommand == "fit":  # which CPU kind trains which steps: a record names each segment (issue 67)
            added.append(RunSegments(self.run_plan.run_dir))
        every = self.run_plan.last_every
        if every:  # last.ckpt on a step schedule (and at the end), apart from best.ckpt, which follows val/loss
            added.append(LastCheckpoint(self.run_plan.run_dir / "checkpoints", every_n_steps=every))
        self.trainer_defaults = {**self.trainer_defaults, "callbacks": added}  # appended to the configured ones
        # the ranks' agreement, in the DDP that Lightning builds for the configured strategy: by its name or its
        # class, or, for `auto`, once Lightning has chosen DDP (several devices or nodes), in a Trainer built again
        # with the agreeing DDP (and the configured callbacks as they were: Lightning extends their list in place)
        named, agree = init.trainer.get("strategy", "auto"), self._agree_before_the_first_collective
        configured = init.trainer.get("callbacks")
        configured = list(configured) if isinstance(configured, list) else configured
        strategy = AgreeingDDPStrategy.of(named, agree)
        trainer = super().instantiate_trainer(**kwargs, **({"strategy": strategy} if strategy else {}))
        if named == "auto" and isinstance(trainer.strategy, DDPStrategy):
            chosen = "ddp_fork" if trainer.strategy.launcher.is_interactive_compatible else "ddp"
            strategy = AgreeingDDPStrategy.of(chosen, agree)
            trainer = super().instantiate_trainer(**kwargs, callbacks=configured, strategy=strategy)
        return trainer


class AgreeingDDPStrategy(DDPStrategy):
    """Lightning's DDP whose ranks, as soon as the process group forms, run ``agree`` (EgaCLI's agreement of
    every rank's verdict) before any collective of Lightning's. Lightning's own hook for it: `setup_environment`
    ("any processes or distributed connections"), which forms the group, called by the Trainer just before the
    first collective (the log_dir broadcast of its profiler's setup)."""

    def __init__(self, agree: Callable[[Strategy], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.agree = agree

    @classmethod
    def of(cls, configured: Any, agree: Callable[[Strategy], None]) -> AgreeingDDPStrategy | None:
        """The agreeing DDP for the configured strategy: a name of Lightning's registry that names DDP (``ddp``,
        ``ddp_spawn``, ...), with the name's options, or Lightning's DDPStrategy given by class path (the parser has
        built it, and no Trainer has used it: its options are its state), with its options; None for any other
        strategy (one process needs no agreement; a DDPStrategy subclass of the user's own is theirs)."""
        if type(configured) is DDPStrategy:
            strategy = cls.__new__(cls)
            vars(strategy).update(vars(configured), agree=agree)
            return strategy
        entry = StrategyRegistry[configured] if isinstance(configured, str) and configured in StrategyRegistry else None
        if entry is None or not issubclass(entry["strategy"], DDPStrategy):
            return None
        return cls(agree, **entry["init_params"])

    def setup_environment(self) -> None:
        super().setup_environment()  # the device, then the process group
        self.agree(self)


def started_together() -> bool:
    """Whether a launcher started every rank of this run at once (torchrun, srun with several tasks), so that the
    other ranks are waiting for this one at the process group; under Lightning's own DDP, rank 0 starts them."""
    if TorchElasticEnvironment.detect():
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    return SLURMEnvironment.detect() and os.environ.get("SLURM_NTASKS", "1").strip() not in ("", "1")


def torch_distributed_world() -> int:
    """The size of the process group that has formed; 1 where none has."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _as_list(value: Any) -> list[Any]:
    if value is None or isinstance(value, bool):
        return []
    return value if isinstance(value, list) else [value]


def point_config_at_run(config: Namespace, plan: run_policy.RunPlan) -> None:
    """The plan written into the command's parsed config before its classes are built: the values the command
    keeps over its checkpoint's, the checkpoint's corpus, and the run directory as the place of every writer
    (the Trainer's root, the loggers' directory, the checkpoints' unless a config names one)."""
    for key, value in plan.kept_model.items():
        config.model[key] = value
    if plan.corpus is not None:
        config.data.corpus = plan.corpus
    run_dir = plan.run_dir
    config.trainer.default_root_dir = str(run_dir)
    for logger in _as_list(config.trainer.logger):
        if isinstance(logger, Namespace) and "init_args" in logger:
            args = logger.init_args
            # one fixed directory per run: no version_N, so `--ckpt_path last` finds the run's checkpoints;
            # an evaluation logs into a run of its own beside it, at its checkpoint's step
            at = (("sub_dir", plan.evaluation), ("eval_step", plan.eval_step)) if plan.evaluation else ()
            for key, value in (("save_dir", str(run_dir.parent)), ("name", run_dir.name), ("version", ""), *at):
                if key in args:
                    args[key] = value
    for callback in _as_list(config.trainer.callbacks):
        checkpoints = isinstance(callback, Namespace) and str(callback.get("class_path")).endswith("ModelCheckpoint")
        if checkpoints and callback.init_args.get("dirpath") is None:
            callback.init_args.dirpath = str(run_dir / "checkpoints")


def main(args: list[str] | None = None, descriptions: dict[str, str] | None = None) -> None:
    """Runs ``fit``/``validate``/``test`` (``args``: the whole line, the subcommand first; None: ``sys.argv``,
    which DDP re-executes); ``descriptions``: each subcommand's line for its ``--help``."""
    argv = list(sys.argv[1:] if args is None else args)
    if "--debug" in argv:  # anywhere on the line: show tracebacks (also for DDP's re-executed ranks)
        argv.remove("--debug")
        os.environ[DEBUG_ENV] = "1"
    command = argv[0] if argv and argv[0] in LIGHTNING_SUBCOMMANDS else "fit"
    signals = StopSignals()
    signals.take_in_main()
    with runs.RunClaim() as claim:  # the run directory's lock, held until the command ends
        try:
            _run_cli(argv, args is None, descriptions or {}, claim, signals)
        except BaseException as err:  # errors.EXITS says which ones end the command, and how
            ours = _in_ega_terms(err, signals)
            if ours is None:
                raise
            end_command(command, ours, claim)
            raise


def _in_ega_terms(err: BaseException, signals: StopSignals) -> BaseException | None:
    """What Lightning raised, as a row of `errors.EXITS` knows it (``signals``: the ones this command took); None:
    not `ega`'s to end (a bug, the parser's own exit)."""
    if isinstance(err, SIGTERMException):
        signum = getattr(err, "signum", signal.SIGTERM)
        signals.wait_for_the_other_ranks(128 + signum)  # DDP under Lightning's launcher: after the ranks it started
        if signum == signal.SIGINT:  # Ctrl-C under DDP, where every rank stopped at once
            return Interrupted()
        return Stopped("SIGUSR1 (taken as SIGTERM)" if signals.usr1 else "SIGTERM")
    if isinstance(err, KeyboardInterrupt | SystemExit):
        # Lightning ends a Ctrl-C it caught with SystemExit(1); any other SystemExit (--help, the parser's 2) is its own
        caught = isinstance(err, KeyboardInterrupt) or err.code == 1
        return Interrupted() if signals.ctrl_c and caught else None
    return in_ega_terms(err)


def _run_cli(
    argv: list[str], from_shell: bool, descriptions: dict[str, str], claim: runs.RunClaim, signals: StopSignals
) -> None:
    """Lightning's CLI on the command line ``argv`` (the -c files resolved first), with `ega`'s defaults."""
    summary.quiet_lightning()

    def resolve(line: list[str]) -> list[str]:
        return resolve_config_args(line, FLOAT_FLAGS)

    EgaCLI(
        CharLM,
        CharDataModule,
        save_config_callback=SaveRunConfig,
        save_config_kwargs={"overwrite": True},
        **cli_options(descriptions),
        args=line_for_every_rank(argv, resolve) if from_shell else resolve(argv),
        claim=claim,
        command_line=argv,
        signals=signals,
    )
