"""The study contract of the report: what a study reads and what it gives, as plain data (rliable's one module per
statistical job, plain data in and out; compute first, then prose).

A study is one :class:`Study` of `studies.STUDIES`: the spec groups it reads (a spec entry's ``group`` and
``also_in``; None: every section), the protocol's families it reads, its measurement of the :class:`ReportInputs`
(computed once, then read by everything else it gives), its findings, and optionally its section of REPORT.md, its
figures and its key of results.json. The report, its figures and results.json iterate `studies.STUDIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ega_lightning.experiments.beyond_the_block import BeyondTheBlock
    from ega_lightning.experiments.comparisons import RunData, Table, Variant
    from ega_lightning.experiments.findings import Finding
    from ega_lightning.experiments.landscape_results import Evaluation
    from ega_lightning.experiments.paper import Claim
    from ega_lightning.experiments.whole_split import WholeSplit

Bench = tuple[dict[str, Any], str]  # an `ega bench` result and its table's path relative to the report
Figure = tuple[str, str, Any]  # (caption, file name, the matplotlib figure) of one figure a study draws
Drawn = list[tuple[str, str]]  # (caption, file name) of each figure saved, as REPORT.md links it


@dataclass(frozen=True)
class ReportInputs:
    """Everything a study may read, built once before the first study runs: the report's tables (one per section
    and corpus) and variants, every run's row, the checkpoints `ega landscape` evaluated, the `ega bench` results
    beside the records, the bench the cost claim reads (with its table's path, or why there is none), and the
    whole-split losses of final checkpoints, beside a study's other recorded estimate (`whole_split`), and final
    checkpoints' losses on windows longer than their training block (`beyond_the_block`)."""

    tables: tuple[Table, ...]
    variants: tuple[Variant, ...]
    runs: tuple[RunData, ...] = ()
    evaluations: tuple[Evaluation, ...] = ()
    benches: tuple[Bench, ...] = ()
    bench: tuple[dict[str, Any] | None, str] = (None, "")
    whole_split: tuple[WholeSplit, ...] = ()  # final checkpoints' loss over the whole validation split
    beyond_the_block: tuple[BeyondTheBlock, ...] = ()  # final checkpoints' loss on windows longer than their block

    def tables_of(self, groups: Sequence[str] | None) -> tuple[Table, ...]:
        """The tables of the sections ``groups`` names (None: every table), in the report's order."""
        return self.tables if groups is None else tuple(t for t in self.tables if t.group in groups)


Found = Sequence["Finding"]  # every finding before a study's own (every table's first), its families uncorrected


@dataclass(frozen=True)
class Study:
    """One study of the report, as data. ``table_findings`` is called on each table of its ``groups``, section by
    section in the report's order (the studies of one table in `STUDIES` order); ``findings`` once, after every
    table's and those of the studies listed before it, which it is handed. ``measure``'s result (None without one)
    is handed to each of the others as ``data``."""

    name: str
    # the spec groups whose tables it reads (`group:` / `also_in:`): ``table_findings`` is handed only theirs (a
    # study with table findings must name them), the others read them with `ReportInputs.tables_of`; None: it
    # reads no table by its group
    groups: tuple[str, ...] | None = None
    families: tuple[str, ...] = ()  # the protocol's families it reads (the study `engine` reads every other one)
    claims: tuple[Claim, ...] = ()  # claims of its own, after the paper's in the claims table
    measure: Callable[[ReportInputs], Any] | None = None
    table_findings: Callable[[Table, ReportInputs], list[Finding]] | None = None
    findings: Callable[[ReportInputs, Any, Found], list[Finding]] | None = None
    section: Callable[[ReportInputs, Any, Sequence[Finding], Drawn], list[str]] | None = None
    section_first: bool = False  # its section before the report's sections by group, else after them
    figures: Callable[[ReportInputs, Any], list[Figure]] | None = None
    json: Callable[[ReportInputs, Any], Any] | None = None  # results.json[name]


@dataclass(frozen=True)
class Measured:
    """A study with what it measured of the inputs (`Study.measure`), once per report."""

    study: Study
    data: Any = None

    @property
    def claims(self) -> tuple[Claim, ...]:
        """Its study's claims, and those its measurement found (the engine's: each new family's, `engine.Unplaced`)."""
        return (*self.study.claims, *getattr(self.data, "claims", ()))
