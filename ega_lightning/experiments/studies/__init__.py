"""The studies of the report, in its order (:data:`STUDIES`), each a `study.Study`; :func:`run_studies` gathers
every finding. A study that is a family of the protocol and nothing else is one line of :data:`STUDIES`
(`family`): `engine` reads its comparisons. A module of its own is left only where a study measures or draws what
no comparison does: `main` (the best val loss where runs overfit), `leaderboard` (every gate ranked, and the
positive control), `tau_mechanism` (the tau landscape, named `landscape` in results.json), `author` (the waterfall
of the author's gain) and `rope` (each design beyond its training block). A new study whose metrics exist is data:
its family in configs/protocol.yaml, read by the study `engine` (docs/adding-a-study.md). The order of
:data:`STUDIES` is the order of the report's findings and sections; a study of the whole report reads the findings
before it (every table's first). A study of tables names the spec groups it reads and is handed only their tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ega_lightning.experiments import engine
from ega_lightning.experiments.comparisons import Table
from ega_lightning.experiments.findings import Finding, correct
from ega_lightning.experiments.studies import (
    author,
    leaderboard,
    main,
    rope,
    tau_mechanism,
)
from ega_lightning.experiments.study import Measured, ReportInputs, Study

TableFindings = Callable[[Table, ReportInputs], list[Finding]]


def family(name: str, read: str, groups: tuple[str, ...] | None = None, also: TableFindings | None = None) -> Study:
    """The study ``name`` that is the protocol's family ``read`` alone, read by `engine`: table by table over the
    sections of ``groups`` (with ``also``'s findings of each, a reading beside the family's), else once over the
    whole report."""
    if groups is None:
        return Study(name, families=(read,), findings=lambda inputs, data, found: engine.family_findings(inputs, read))

    def of_table(table: Table, inputs: ReportInputs) -> list[Finding]:
        return [*engine.family_findings(inputs, read, table), *(also(table, inputs) if also else [])]

    return Study(name, groups=groups, families=(read,), table_findings=of_table)


STUDIES: tuple[Study, ...] = (
    main.STUDY,
    family("ablation", "ablation", ("ablation",)),  # the paper's gates ranked, EGA-1 best (rule `best`)
    family("tau_init", "tau_init", ("tau_init", "frozen_tau")),  # the slope of final tau on tau_init
    family("context", "context", ("context",)),  # EGA-1's gain from the shortest block to the longest
    family("frozen_tau", "frozen", ("frozen_tau",)),  # a tau never trained against tau learned from its tau_init
    family("leak", "leak", ("leak",), also=engine.leak_evaluated),  # z over the whole window; evaluated causally too
    Study("reruns", groups=("landscape",), table_findings=engine.reruns),  # runs repeated for their checkpoints
    family("peers", "peers"),
    leaderboard.STUDY,
    tau_mechanism.STUDY,
    family("cost", "cost"),  # `ega bench`
    author.STUDY,
    rope.STUDY,
    family("paper_size", "paper_size"),
    Study(  # what the protocol draws beside a family's comparisons (its `figures:`): curves, paper figures, the leak
        "drawn",
        measure=engine.drawings,
        section=engine.drawings_section,
        figures=lambda inputs, data: [d.figure for d in data if d.figure is not None],
        json=lambda inputs, data: [
            {"family": d.family, "kind": d.kind, **d.data, "said": d.lines, "file": d.figure and d.figure[1]}
            for d in data
        ],
    ),
)
# the protocol's families the studies above read, by their own modules or through `engine` in their place
PLACED = {f for s in STUDIES for f in s.families}
# every family of the protocol no study above places: a new study is data (docs/adding-a-study.md)
STUDIES += (
    Study(
        "engine",
        measure=lambda inputs: engine.unplaced(PLACED),
        findings=lambda inputs, data, found: [
            f for name in data.families for f in engine.family_findings(inputs, name)
        ],
    ),
)


def measure(inputs: ReportInputs, studies: Sequence[Study] = STUDIES) -> list[Measured]:
    """Each study, in the order listed, with what it measured of ``inputs``; a ValueError for two studies of one name,
    or for one with table findings that declares no spec groups (it would be handed every table, and sort them)."""
    names = [s.name for s in studies]
    if len(set(names)) < len(names):
        raise ValueError(f"two studies share a name: {sorted(n for n in set(names) if names.count(n) > 1)}")
    if unnamed := [s.name for s in studies if s.table_findings is not None and s.groups is None]:
        raise ValueError(f"study {unnamed[0]!r} has table findings but declares no spec groups: name the ones it reads")
    return [Measured(s, s.measure(inputs) if s.measure is not None else None) for s in studies]


def run_studies(inputs: ReportInputs, measured: Sequence[Measured]) -> list[Finding]:
    """Every finding, families corrected (`findings.correct`): first each table's, section by section (the studies
    of one table in their order), then each study's of the whole report, in order, each handed every finding before
    it (uncorrected). A comparison shared by sections (``also_in``) is made once, in x's own (`engine`)."""
    out: list[Finding] = []
    for table in inputs.tables:
        for m in measured:
            s = m.study
            # only the tables of the groups it declares: a study never tells from a table's rows that it applies
            if s.table_findings is not None and table.group in (s.groups or ()):
                out += s.table_findings(table, inputs)
    for m in measured:
        if m.study.findings is not None:
            out += m.study.findings(inputs, m.data, tuple(out))
    return correct(out)
