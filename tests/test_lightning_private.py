"""Lightning's private API that ega_lightning uses, held to the installed Lightning: each row of
`lightning_private.PRIVATE_USES` is there, with the signature and the call order relied on, and no other
private name of Lightning is used in the package."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest
import yaml

from ega_lightning import lightning_private
from ega_lightning.lightning_private import PRIVATE_USES, PlannedCheckpointMerge, purge_from

from .helpers import REPO, logged_steps, scalars

PACKAGE = REPO / "ega_lightning"


def resolve(dotted: str) -> object:
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def use(name: str) -> lightning_private.PrivateUse:
    (row,) = [row for row in PRIVATE_USES if row.name.endswith(name)]
    return row


def test_every_row_names_something_lightning_has():
    for row in PRIVATE_USES:
        if row.name.endswith(("._kwargs", "._data_fetcher", "._signal_connector", ".procs", "._batches_that_stepped")):
            # attributes: held by the tests below
            continue
        assert resolve(row.name) is not None, row.name


def test_parse_ckpt_path_takes_nothing_and_runs_between_parsing_and_the_hooks():
    from lightning.pytorch.cli import LightningCLI

    method = resolve(use("._parse_ckpt_path").name)
    assert list(inspect.signature(method).parameters) == ["self"]
    # EgaCLI's plan is made in parse_arguments and applied from before_instantiate_classes on: Lightning's merge of
    # the checkpoint's hyper-parameters must come after the first and before the second
    source = inspect.getsource(LightningCLI.__init__)
    order = [
        source.index(call) for call in ("self.parse_arguments(", "self._parse_ckpt_path()", "self.before_instantiate")
    ]
    assert order == sorted(order), order


def test_the_planned_merge_is_egas_override_and_skips_lightnings_merge_where_the_plan_says():
    from lightning.pytorch.cli import LightningCLI

    from ega_lightning.commands.lightning_cli import EgaCLI

    mro = EgaCLI.__mro__
    assert mro.index(PlannedCheckpointMerge) < mro.index(LightningCLI)  # its override is the one that runs
    assert "_parse_ckpt_path" not in vars(EgaCLI)  # and EgaCLI names no private method of Lightning's

    class Merging:
        def _parse_ckpt_path(self) -> None:
            self.merged = True

    class Planned(PlannedCheckpointMerge, Merging):
        merged, plan = False, True

        def merges_checkpoint_hparams(self) -> bool:
            return self.plan

    skipped, kept = Planned(), Planned()
    skipped.plan = False
    skipped._parse_ckpt_path()
    kept._parse_ckpt_path()
    assert (skipped.merged, kept.merged) == (False, True)


def test_the_data_fetcher_is_what_should_check_val_takes():
    from lightning.pytorch import Trainer

    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    assert trainer.fit_loop._data_fetcher is None  # an attribute from the start: set once fit runs
    check = resolve(use("._should_check_val_fx").name)
    assert list(inspect.signature(check).parameters) == ["self", "data_fetcher"]
    assert not lightning_private.validation_follows(trainer)  # no fit running: no validation follows


def test_the_logging_step_is_the_epoch_loops_count_of_batches_that_stepped():
    """align_logging_step sets ``_batches_that_stepped``: the attribute the logger connector stamps a fit's metrics
    at, which Lightning's restart moves on (its reset) and its checkpoint restores."""
    from lightning.pytorch import Trainer
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
    from lightning.pytorch.trainer.connectors.logger_connector.logger_connector import _LoggerConnector

    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    assert trainer.fit_loop.epoch_loop._batches_that_stepped == 0
    lightning_private.align_logging_step(trainer)  # global_step 0
    assert trainer.fit_loop.epoch_loop._batches_that_stepped == 0
    for method in (_TrainingEpochLoop.reset, _TrainingEpochLoop.on_load_checkpoint, _LoggerConnector.log_metrics):
        assert "_batches_that_stepped" in inspect.getsource(method), method


def test_the_sigterm_handler_lightning_installs_is_the_connectors_attribute_read_when_it_installs():
    """set_sigterm_handler sets ``_sigterm_notifier_fn`` on the Trainer's connector once the process group has formed
    (in setup_environment): Lightning must read it when it installs its handlers, later in the same fit."""
    import signal

    from lightning.pytorch import Trainer
    from lightning.pytorch.trainer.connectors.signal_connector import _SignalConnector

    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    connector = trainer._signal_connector
    assert isinstance(connector, _SignalConnector)
    assert callable(resolve(use("._sigterm_notifier_fn").name))
    recorded = []
    lightning_private.set_sigterm_handler(trainer, lambda signum, frame: recorded.append(signum))
    before = signal.getsignal(signal.SIGTERM)
    try:
        connector.register_signal_handlers()
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # what the Trainer installed, called as on a signal
    finally:
        connector.teardown()
        signal.signal(signal.SIGTERM, before)
    assert recorded == [signal.SIGTERM]
    run = inspect.getsource(Trainer._run)
    assert run.index("self.strategy.setup_environment()") < run.index("register_signal_handlers()")


def test_the_launchers_children_are_the_list_its_observer_watches():
    """take_launcher_children empties the launcher's list in place so that its observer, which holds the same list,
    finds nothing to kill."""
    from types import SimpleNamespace

    from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver
    from lightning.pytorch.strategies.launchers.subprocess_script import _SubprocessScriptLauncher

    assert "_launch_process_observer(self.procs)" in inspect.getsource(_SubprocessScriptLauncher.launch)
    procs = ["rank 1", "rank 2"]  # the launcher's list, which its observer shares
    observer = _ChildProcessObserver(main_pid=-1, child_processes=procs)  # pid -1: a kill would fail the test
    launcher = SimpleNamespace(procs=procs)
    trainer = SimpleNamespace(strategy=SimpleNamespace(launcher=launcher))
    assert lightning_private.take_launcher_children(trainer) == ["rank 1", "rank 2"]
    assert launcher.procs is procs and procs == []
    assert observer._run() is True  # an empty list: done, nothing killed
    assert lightning_private.take_launcher_children(trainer) == []  # taken once
    no_launcher = SimpleNamespace(strategy=SimpleNamespace(launcher=None))  # torchrun, srun, one process
    assert lightning_private.take_launcher_children(no_launcher) == []


def test_the_pytree_module_of_the_warnings_filter_exists():
    name = use("._pytree").name
    assert importlib.util.find_spec(name) is not None
    assert re.fullmatch(lightning_private.PYTREE_MODULE, name)  # the filter's pattern matches the module's name


def test_a_purge_step_set_on_a_built_logger_drops_what_was_logged_from_that_step(tmp_path):
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    first = TensorBoardLogger(tmp_path, name="run", version="")
    for step in range(6):
        first.log_metrics({"loss": float(step)}, step=step)
    first.finalize("success")
    resumed = TensorBoardLogger(tmp_path, name="run", version="")
    purge_from(resumed, 3)  # a run stopped after step 5, resumed from its step-3 checkpoint
    for step in range(3, 6):
        resumed.log_metrics({"loss": 10.0 + step}, step=step)
    resumed.finalize("success")
    assert logged_steps(tmp_path / "run", "loss") == [0, 1, 2, 3, 4, 5]  # without the purge: 3, 4 and 5 twice
    assert scalars(tmp_path / "run", "loss") == {0: 0.0, 1: 1.0, 2: 2.0, 3: 13.0, 4: 14.0, 5: 15.0}
    chosen = TensorBoardLogger(tmp_path, name="other", purge_step=1)
    purge_from(chosen, 3)  # a purge step the config sets is kept
    assert chosen._kwargs["purge_step"] == 1
    purge_from(CSVLogger(tmp_path), 3)  # another logger: left alone (no error)


HOME = "ega_lightning/lightning_private.py"  # the one module that names Lightning's private API
TORCH_HOME = "ega_lightning/model/torch_private.py"  # its twin for torch's (tests/test_torch_private.py)
ROOTS = ("lightning", "jsonargparse")  # Lightning's CLI is jsonargparse's parser: its private names count too
# namedtuple's own methods: public API spelt with an underscore so as not to clash with a field's name
NAMEDTUPLE = {"_asdict", "_replace", "_fields", "_make", "_field_defaults"}


def _package_modules() -> dict[str, ast.Module]:
    """Every module of the package, parsed."""
    return {str(path.relative_to(REPO)): ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}


def _lightning_imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted Lightning (or jsonargparse) name it stands for (``L`` -> ``lightning``)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.asname or a.name: a.name for a in node.names if a.name.split(".")[0] in ROOTS}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ROOTS:
            out |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
    return out


def _private(name: object) -> bool:
    return isinstance(name, str) and name.startswith("_") and not name.startswith("__")


def private_names_used(tree: ast.Module) -> set[str]:
    """The ``_name``s a module reads on other objects than its own (``super()`` counts, and a name given to
    getattr/hasattr/setattr), and in a class on a Lightning base, the base's private names it overrides
    (``def _name``) or reads (``self._name``)."""
    imported, used = _lightning_imports(tree), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                used.add(node.attr)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr"):
            used |= {a.value for a in node.args[1:2] if isinstance(a, ast.Constant) and _private(a.value)}
        elif isinstance(node, ast.ClassDef):
            bases = [base for base in (_lightning_class(b, imported) for b in node.bases) if base is not None]
            defined = {fn.name for fn in node.body if isinstance(fn, ast.FunctionDef) and _private(fn.name)}
            read = {
                n.attr
                for n in ast.walk(node)
                if isinstance(n, ast.Attribute) and _private(n.attr) and getattr(n.value, "id", None) == "self"
            }
            used |= {name for name in defined | read if any(hasattr(base, name) for base in bases)}
    return used


def _lightning_class(node: ast.expr, imported: dict[str, str]) -> object | None:
    """The Lightning class a base-class expression names (``LightningCLI``, ``L.Callback``); None for another."""
    dotted = []
    while isinstance(node, ast.Attribute):
        dotted.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in imported:
        return None
    return resolve(".".join([imported[node.id], *dotted]))


def test_no_module_but_lightning_private_names_a_private_attribute_of_lightning():
    modules = _package_modules()
    for where, tree in modules.items():
        if where in (HOME, TORCH_HOME):
            continue
        used = private_names_used(tree) - NAMEDTUPLE
        assert not used, f"{where} uses {sorted(used)}: make the use in {HOME}, with its row in PRIVATE_USES"
        source = (REPO / where).read_text()
        named = [row.name for row in PRIVATE_USES if row.name in source or _reads(tree, row.name.rsplit(".", 1)[1])]
        assert not named, f"{where} names {named}: only {HOME} may"
    # and every row is a use there: read by its code, or (a module) named in its pattern
    home, source = modules[HOME], (REPO / HOME).read_text()
    used = private_names_used(home) | {n.attr for n in ast.walk(home) if isinstance(n, ast.Attribute)}
    for row in PRIVATE_USES:
        attr = row.name.rsplit(".", 1)[1]
        pattern = re.escape(row.name)  # a module: named in a pattern, as a raw string spells it
        if row.relied_on:  # relied on by a function of HOME's, which its row names
            assert row.used_by.split()[0] in vars(lightning_private), f"{row.name}: delete its row"
            continue
        assert attr in used or _reads(home, attr) or pattern in source, f"{row.name}: delete its row"
    # the check sees each kind of use: a private attribute read, and an override of a private method
    planted = ast.parse(
        "import lightning as L\nfrom lightning.pytorch.cli import LightningCLI\n"
        "from jsonargparse import ArgumentParser\n"
        "x = trainer.fit_loop._results\ny = getattr(trainer, '_accelerator_connector', None)\n"
        "class C(LightningCLI):\n    def _run_subcommand(self, s): ...\n    def _mine(self): self._mine2 = 1\n"
        "    def f(self): return self._get(self.config, 'k')\n"
        "class M(L.LightningModule):\n    def _apply(self, fn): ...\n"
        "class P(ArgumentParser):\n    def _parse_common(self, *a): ...\n"
    )
    expected = {"_results", "_accelerator_connector", "_run_subcommand", "_get", "_apply", "_parse_common"}
    assert private_names_used(planted) == expected
    assert _reads(ast.parse("n = len(launcher.procs)"), "procs")  # a public attribute of a private class too


def _reads(tree: ast.Module, attr: str) -> bool:
    """Whether a module reads ``attr`` on some object (an attribute, or a name given to getattr/hasattr/setattr)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == attr:
            return True
        named = isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr")
        if named and any(isinstance(a, ast.Constant) and a.value == attr for a in node.args[1:2]):
            return True
    return False


@pytest.mark.parametrize("command", ["fit", "validate", "test"])
def test_validate_and_test_print_the_headline_unless_asked_for_every_metric(command, capsys, monkeypatch, tmp_path):
    # Lightning adds each subcommand's arguments through the parser's add_method_arguments, which sets the default
    from ega_lightning import CharDataModule, CharLM
    from ega_lightning.commands.lightning_cli import EgaCLI
    from ega_lightning.fit_args import EgaArgumentParser

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["ega"])
    args = [command, "--print_config"]
    with pytest.raises(SystemExit) as done:
        EgaCLI(CharLM, CharDataModule, parser_class=EgaArgumentParser, auto_configure_optimizers=False, args=args)
    assert done.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed.get("verbose", "absent") == ("absent" if command == "fit" else False)
    assert list(Path(tmp_path).iterdir()) == []


def test_the_ranks_lightnings_launcher_starts_reexecute_the_typed_line_with_a_copy_of_rank_0s_environment():
    """What `line_for_every_rank` relies on: the other ranks run sys.argv again (no command of ega's) in a copy of rank
    0's environment, where rank 0 left the line it resolved."""
    from lightning.fabric.strategies.launchers.subprocess_script import _basic_subprocess_cmd

    children = inspect.getsource(resolve(use("._call_children_scripts").name))
    assert lightning_private.HANDED_TO_THE_RANKS in children
    assert "_basic_subprocess_cmd()" in children
    assert "sys.argv[1:]" in inspect.getsource(_basic_subprocess_cmd)


def test_a_rank_started_for_the_same_line_parses_the_line_rank_0_resolved(monkeypatch, tmp_path):
    from ega_lightning.config_files import resolve_config_args
    from ega_lightning.fit_args import FLOAT_FLAGS

    def resolve(line: list[str]) -> list[str]:
        return resolve_config_args(line, FLOAT_FLAGS)

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(lightning_private.RESOLVED_ENV, raising=False)
    typed = ["fit", "-c", "gate/linear.yaml", "--model.lr", "inf"]
    resolved = lightning_private.line_for_every_rank(typed, resolve)  # rank 0
    assert resolved != typed and resolved[2].endswith("linear.yaml") and Path(resolved[2]).is_file()
    # a rank of the same line takes rank 0's, even where its own reading of the -c files would differ now
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate/linear.yaml").write_text("model: {gate: none}\n")  # now a local file of that name
    assert resolve(typed)[2] == "gate/linear.yaml"
    assert lightning_private.line_for_every_rank(list(typed), resolve) == resolved
    # another command line (a process rank 0 starts for another command) resolves its own
    other = ["fit", "--model.lr", "nan"]
    assert lightning_private.line_for_every_rank(other, resolve) == ["fit", "--model.lr", ".nan"]


def test_ddp_by_name_or_class_is_lightnings_ddp_that_agrees_first_and_any_other_strategy_is_lightnings_own():
    from datetime import timedelta

    from lightning.pytorch import Trainer
    from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

    from ega_lightning.commands.lightning_cli import AgreeingDDPStrategy

    agreed = []
    strategy = AgreeingDDPStrategy.of("ddp_find_unused_parameters_true", agreed.append)
    assert isinstance(strategy, DDPStrategy) and strategy._ddp_kwargs == {"find_unused_parameters": True}
    assert AgreeingDDPStrategy.of("auto", agreed.append) is None
    assert AgreeingDDPStrategy.of("single_device", agreed.append) is None
    # by class path the parser builds Lightning's DDPStrategy: the agreeing one keeps every option it was given
    options = {"process_group_backend": "gloo", "timeout": timedelta(seconds=7), "start_method": "spawn"}
    by_class = AgreeingDDPStrategy.of(DDPStrategy(**options, find_unused_parameters=True), agreed.append)
    as_built = AgreeingDDPStrategy(agreed.append, **options, find_unused_parameters=True)
    assert vars(by_class).keys() == vars(as_built).keys()
    for attr in ("_ddp_kwargs", "_timeout", "_start_method", "_process_group_backend", "_num_nodes"):
        assert getattr(by_class, attr) == getattr(as_built, attr), attr
    assert AgreeingDDPStrategy.of(type("OwnDDP", (DDPStrategy,), {})(), agreed.append) is None  # the user's own
    flags = {"accelerator": "cpu", "devices": 2, "logger": False, "enable_checkpointing": False}
    lightnings = Trainer(**flags, strategy="ddp")
    for ours in (AgreeingDDPStrategy.of("ddp", agreed.append), AgreeingDDPStrategy.of(DDPStrategy(), agreed.append)):
        trainer = Trainer(**flags, strategy=ours)
        for attr in ("num_processes", "num_nodes", "root_device", "process_group_backend"):
            assert getattr(trainer.strategy, attr) == getattr(lightnings.strategy, attr), attr
        assert type(trainer.strategy.launcher) is type(lightnings.strategy.launcher)
    # `auto` on several devices is DDP: EgaCLI builds it again as the agreeing one; on one, not DDP
    assert isinstance(Trainer(**flags).strategy, DDPStrategy)
    assert isinstance(Trainer(**{**flags, "devices": 1}).strategy, SingleDeviceStrategy)
    assert agreed == []  # nothing agrees before the process group forms


def test_auto_on_two_cpu_devices_is_built_as_the_agreeing_ddp_with_each_callback_once(tmp_path, monkeypatch):
    from ega_lightning import CharDataModule, CharLM
    from ega_lightning.callbacks.stop import AgreedStop
    from ega_lightning.commands.lightning_cli import AgreeingDDPStrategy, EgaCLI

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["ega"])
    for devices, agreeing in ((2, True), (1, False)):
        args = ["--trainer.accelerator=cpu", f"--trainer.devices={devices}", "--seed_everything=1"]
        args += ["--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint"]  # a configured one
        cli = EgaCLI(CharLM, CharDataModule, run=False, auto_configure_optimizers=False, args=args)
        assert isinstance(cli.trainer.strategy, AgreeingDDPStrategy) is agreeing, devices
        kinds = [type(c).__name__ for c in cli.trainer.callbacks]
        assert len(kinds) == len(set(kinds)) and AgreedStop.__name__ in kinds, kinds


def test_ddp_given_by_class_path_is_built_as_the_agreeing_ddp_with_its_options(tmp_path, monkeypatch):
    """`--trainer.strategy=lightning.pytorch.strategies.DDPStrategy` (with init_args) was built by the parser as a
    plain DDPStrategy, whose ranks never agreed; the config, which config.yaml records, keeps the class as given."""
    from ega_lightning import CharDataModule, CharLM
    from ega_lightning.commands.lightning_cli import AgreeingDDPStrategy, EgaCLI

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["ega"])
    args = ["--trainer.accelerator=cpu", "--trainer.devices=2", "--seed_everything=1"]
    args += ["--trainer.strategy=lightning.pytorch.strategies.DDPStrategy", "--trainer.strategy.start_method=spawn"]
    args += ["--trainer.strategy.init_args.process_group_backend=gloo", "--trainer.strategy.static_graph=true"]
    cli = EgaCLI(CharLM, CharDataModule, run=False, auto_configure_optimizers=False, args=args)
    strategy = cli.trainer.strategy
    assert isinstance(strategy, AgreeingDDPStrategy) and strategy.agree == cli._agree_before_the_first_collective
    assert (strategy.num_processes, strategy.process_group_backend, strategy._start_method) == (2, "gloo", "spawn")
    assert strategy._ddp_kwargs["static_graph"] is True
    assert cli.config.trainer.strategy.class_path == "lightning.pytorch.strategies.DDPStrategy"
