"""`ega fit`, `ega validate` and `ega test`: Lightning's CLI wired for CharLM and CharDataModule. It applies the run
plan (`ega_lightning.run_policy`) in Lightning's hooks, with the run directory's claim (`runs.RunClaim`), and says
each outcome in one paragraph. The Lightning private API it uses is listed in `ega_lightning.lightning_private`.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import sys
import warnings
from collections.abc import Callable
from typing import Any

from jsonargparse import Namespace
from lightning.fabric.plugins.environments import ClusterEnvironment, SLURMEnvironment, TorchElasticEnvironment
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
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


class EgaCLI(PlannedCheckpointMerge, EgaCommands, LightningCLI):
    """Lightning's CLI for CharLM and CharDataModule, with `ega`'s run directories, checks and summaries.

    ``claim``: this command's claim on its run directory, which the caller keeps to undo on a failure (without one,
    the Python API's, the CLI makes its own and releases it at the end); ``command_line``: the line as typed (fit's
    summary repeats it); ``signals``: the stop signals the command takes (`main`'s; without them, the CLI's own).
    """

    run_plan: run_policy.RunPlan  # what the command does with its run directory, decided once the line is parsed
    # where a launcher started the ranks together (torchrun, srun), this rank's refusal that another rank may not
    # share (rank 0's claim; one that rests on the checkpoint): said by every rank once the process group forms
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
        config, typed = self.config[command] if command else self.config, list(sys.argv[1:] if args is None else args)
        together = started_together()  # the other ranks run already: a checkpoint may be on some nodes only
        self.run_plan = run_policy.plan_run(run_policy.read_request(command, config, typed, together), together)
        self._refusal = None if self.run_plan.refusal is None else UserError(self.run_plan.refusal)

    def merges_checkpoint_hparams(self) -> bool:
        return self.run_plan.merge_checkpoint_model

    def before_instantiate_classes(self) -> None:
        """The plan written into the command's parsed config before its classes are built (the values the command
        keeps over its checkpoint's, the checkpoint's corpus, the run directory as the place of every writer: the
        Trainer's root, the loggers' directory, the checkpoints' unless a config names one), and the run claimed."""
        config, plan = self.config[self.subcommand] if self.subcommand else self.config, self.run_plan
        for key, value in plan.kept_model.items():
            config.model[key] = value
        if plan.corpus is not None:
            config.data.corpus = plan.corpus
        run_dir = plan.run_dir
        config.trainer.default_root_dir = str(run_dir)
        # one fixed directory per run: no version_N, so `--ckpt_path last` finds the run's checkpoints; an evaluation
        # logs into a run of its own beside it, at its checkpoint's step
        at = (("sub_dir", plan.evaluation), ("eval_step", plan.eval_step)) if plan.evaluation else ()
        for logger in run_policy.as_list(config.trainer.logger):
            for key, value in (("save_dir", str(run_dir.parent)), ("name", run_dir.name), ("version", ""), *at):
                if isinstance(logger, Namespace) and key in logger.get("init_args", ()):
                    logger.init_args[key] = value
        for cb in run_policy.as_list(config.trainer.callbacks):
            checkpoints = isinstance(cb, Namespace) and str(cb.get("class_path")).endswith("ModelCheckpoint")
            if checkpoints and cb.init_args.get("dirpath") is None:
                cb.init_args.dirpath = str(run_dir / "checkpoints")
        # the other ranks of a DDP run write into rank 0's run, under its lock; a refused run is not claimed
        if rank_zero_only.rank == 0 and self._refusal is None:
            try:  # fit: the lock, held until the command ends
                self._claim.claim(plan.run_dir, plan.lock, plan.ckpt_path, plan.clear_old_run)
            except UserError as err:
                # under torchrun or srun the other ranks would wait for rank 0 at the process group: they hear the
                # refusal there (Lightning's own DDP starts them later, so rank 0 refuses now, alone)
                if not started_together():
                    raise
                self._refusal = err

    def after_fit(self) -> None:
        if self.trainer.is_global_zero:
            print(summary.fit_summary(self.trainer, self.run_plan.run_dir, self._command_line), flush=True)
            if self.trainer.fast_dev_run:  # it wrote nothing: a directory holding only the lock would be left
                self._claim.undo()

    def after_validate(self) -> None:
        plan, trainer = self.run_plan, self.trainer
        if not trainer.is_global_zero:
            return
        run_dir = plan.run_dir / plan.evaluation if trainer.logger is not None and plan.evaluation is not None else None
        # the z-norm the evaluation computed: eval_znorm where set, else each gate's as trained
        trained = {m.znorm for m in self.model.modules() if isinstance(getattr(m, "znorm", None), str)}
        non_causal = "window" in (({self.model.hparams.get("eval_znorm")} - {None} if trained else set()) or trained)
        said = (
            trainer.callback_metrics,
            plan.ckpt_path,
            run_dir,
            self.datamodule.corpus.name,
            int(trainer.fast_dev_run),
        )
        print(summary.evaluation_summary(self.subcommand, *said, non_causal))

    after_test = after_validate

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
            (plan.run_dir / runs.DONE).unlink(missing_ok=True)
        if plan.evaluation and owner:  # an evaluation replaces the previous one of its kind
            runs.clear_evaluation(plan.run_dir, plan.evaluation)
        for logger in self.trainer.loggers if plan.resume_step is not None else []:
            # what the stopped process logged from this step on is logged again: TensorBoard drops the old
            # events (SummaryWriter's purge_step), so no step shows twice
            purge_from(logger, plan.resume_step)

    def _agree_before_the_first_collective(self, strategy: Strategy) -> None:
        """Every rank's verdict, gathered once the process group forms: where any rank cannot go on, every rank stops
        with the same paragraph (`run_policy.agreed_refusal`), so no rank waits for another that has left or restores
        what another starts afresh."""
        import torch.distributed as dist

        mine = run_policy.rank_verdict(self.run_plan, strategy.global_rank, socket.gethostname(), self._refusal)
        together = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        verdicts = [None] * dist.get_world_size() if together else [mine]
        if together:
            dist.all_gather_object(verdicts, mine)  # every rank, no rank-zero block
        agreed = run_policy.agreed_refusal(verdicts, self.run_plan)
        if agreed is not None:
            if together:
                # every rank leaves here: a gloo group still alive at the interpreter's exit can abort it
                # ("terminate called without an active exception", status -6 for the refusal's own)
                dist.destroy_process_group()
            raise (runs.RunBusy if agreed[1] else UserError)(agreed[0])
        if together:  # SIGTERM and SIGINT stop every rank at one step from now on
            self._signals.take_under_ddp(self.trainer)

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        init = self.config_init[self.subcommand] if self.subcommand else self.config_init
        plugins = run_policy.as_list(init.trainer.get("plugins"))
        if SLURMEnvironment.detect() and not any(isinstance(p, ClusterEnvironment) for p in plugins):
            # Lightning's SLURM requeue writes hpc_ckpt_N.ckpt into the run directory on SIGUSR1 and restores it
            # by itself, outside `--ckpt_path last`: off (`main` takes SIGUSR1 as SIGTERM)
            kwargs["plugins"] = [*plugins, SLURMEnvironment(auto_requeue=False)]
        added: list[Any] = [AgreedStop(self._signals), StepPace()]
        if self.subcommand == "fit":
            added.append(RunSegments(self.run_plan.run_dir))
        if self.run_plan.last_every:
            added.append(LastCheckpoint(self.run_plan.run_dir / "checkpoints", every_n_steps=self.run_plan.last_every))
        self.trainer_defaults = {**self.trainer_defaults, "callbacks": added}  # appended to the configured ones
        # the resolved config, into the run directory: an evaluation's beside its run's (which a resume re-saves)
        saved_as = "config.yaml" if self.subcommand in ("fit", None) else f"config_{self.subcommand}.yaml"
        self.save_config_kwargs = {**self.save_config_kwargs, "config_filename": saved_as}
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
    """Lightning's DDP whose ranks run ``agree`` (EgaCLI's agreement of every rank's verdict) as soon as the process
    group forms, in Lightning's own hook for it: `setup_environment` ("any processes or distributed connections"),
    which the Trainer calls just before its first collective (the log_dir broadcast of its profiler's setup)."""

    def __init__(self, agree: Callable[[Strategy], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.agree = agree

    @classmethod
    def of(cls, configured: Any, agree: Callable[[Strategy], None]) -> AgreeingDDPStrategy | None:
        """The agreeing DDP for the configured strategy: a name of Lightning's registry that names DDP (``ddp``,
        ``ddp_spawn``, ...), with the name's options, or Lightning's DDPStrategy given by class path (built by the
        parser, unused: its options are its state); None for any other (one process needs no agreement; a
        DDPStrategy subclass of the user's own is theirs)."""
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
    resolve = functools.partial(resolve_config_args, float_flags=FLOAT_FLAGS)
    with runs.RunClaim() as claim:  # the run directory's lock, held until the command ends
        try:
            summary.quiet_lightning()
            EgaCLI(
                CharLM,
                CharDataModule,
                save_config_kwargs={"overwrite": True},
                **cli_options(descriptions or {}),
                args=line_for_every_rank(argv, resolve) if args is None else resolve(argv),
                claim=claim,
                command_line=argv,
                signals=signals,
            )
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
