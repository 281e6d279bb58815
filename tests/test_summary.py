"""What `ega fit`/`validate`/`test` leave out of Lightning's output (only what no user can act on); the resume line."""

import logging
import shlex
import warnings

import pytest

from ega_lightning import summary

LEAFSPEC = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)` instead."


def warn_from(module: str, message: str, category: type[Warning] = DeprecationWarning) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:  # restores the filters quiet_lightning adds
        warnings.simplefilter("always")
        summary.quiet_lightning()
        warnings.warn_explicit(message, category, filename=f"{module}.py", lineno=1, module=module)
    return [str(w.message) for w in caught]


def test_only_lightnings_own_leafspec_deprecation_is_left_out():
    assert warn_from("lightning.pytorch.utilities._pytree", LEAFSPEC) == []
    assert warn_from("my_project.trees", LEAFSPEC) == [LEAFSPEC]  # the user's own code: they can fix it
    other = "`foo` is deprecated"
    assert warn_from("lightning.pytorch.utilities._pytree", other) == [other]


def test_only_the_litlogger_tip_is_left_out_of_lightnings_log(monkeypatch, caplog):
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    monkeypatch.setattr(log, "filters", list(log.filters))
    summary.quiet_lightning()
    with caplog.at_level(logging.INFO, logger=log.name):
        log.info(
            "💡 Tip: For seamless cloud logging ... try installing [litlogger](https://pypi.org/project/litlogger/)"
        )
        log.info("GPU available: False, used: False")
    assert [r.getMessage() for r in caplog.records] == ["GPU available: False, used: False"]


@pytest.mark.parametrize(
    "typed",
    [
        ["fit", "-c", "gate/db4.yaml", "--run_name", "my run"],
        ["fit", "-c", "gate/db4.yaml", "--run_name", "my run", "--ckpt_path", "last"],
        ["fit", "-c", "gate/db4.yaml", "--ckpt_path=old/last.ckpt", "--run_name", "my run", "--overwrite=true"],
        ["fit", "--overwrite", "true", "-c", "gate/db4.yaml", "--run_name", "my run"],
    ],
)
def test_the_resume_line_is_the_typed_command_resuming_from_last(typed):
    line = summary.resume_command(typed)
    assert shlex.split(line) == ["ega", "fit", "-c", "gate/db4.yaml", "--run_name", "my run", "--ckpt_path", "last"]
