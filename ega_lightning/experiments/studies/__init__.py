"""The studies of the report, one module each, each declaring its `study.Study`: its typed findings, its decision
rule applied (the protocol's, `rules.registered`), its sentences and table cells (`engine`'s templates), and
where it has them its section, figures and key of results.json. :data:`STUDIES` lists them; :func:`run_studies`
gathers every finding.

- `main`: EGA-1 against its baseline in a head-to-head section (improvement, gap, where tau ends, and the best val
  loss beside the final one where runs overfit)
- `ablation`, `tau_init`, `frozen_tau`, `context`: the paper's gates ranked, EGA-1 best, each paper row's own claim;
  where tau ends by initialisation; a tau never trained; EGA-1's gain by block size (the protocol's comparisons,
  read by `engine`)
- `leak`: z over the whole window, as trained and evaluated causally
- `reruns`: runs repeated for their checkpoints (no verdict)
- `peers`: other papers' gates, each for its own claim: the protocol's comparisons, read by `engine`
- `leaderboard`: every gate side by side and the positive control (its section, figure and JSON)
- `tau_mechanism` (the study named `landscape` in results.json): the tail identity and why tau does not move,
  from the evaluated checkpoints (reads `frozen_tau`)
- `cost`: the gate's step time, from `ega bench` (the engine's reading `step_time_ratio`)
- `author`: the author's EGA at their phase-1 size, its gain over their baseline taken apart in paired steps (its
  section, waterfall figure and JSON)
- `rope`: every design against the RoPE baseline, and each beyond its training length (issue 56)

A study is added as its module and its line in :data:`STUDIES`; a claim in `paper` (or the study's own
``claims``) with its rule in configs/protocol.yaml. The order of :data:`STUDIES` is the order of the report's
findings; what a study reads runs before it whatever its place (`ordered`). A study of tables names the spec groups
it reads (its ``GROUPS``, the ``group:`` / ``also_in:`` names of configs/sweeps/*.yaml) and is handed only their
tables: none tells from a table's rows whether it applies.
"""

from __future__ import annotations

from collections.abc import Sequence

from ega_lightning.experiments import engine
from ega_lightning.experiments.comparisons import Table, Variant
from ega_lightning.experiments.findings import Finding, correct
from ega_lightning.experiments.landscape_results import Evaluation
from ega_lightning.experiments.studies import (
    author,
    leaderboard,
    main,
    rope,
    tau_mechanism,
)
from ega_lightning.experiments.study import Measured, ReportInputs, Study

STUDIES: tuple[Study, ...] = (
    main.STUDY,
    Study(  # the paper's gates ranked, EGA-1 best of them, each paper row's own claim (rule `best`: `engine.JOINT`)
        "ablation",
        groups=("ablation",),
        table_findings=lambda table, inputs: engine.family_findings(inputs, "ablation", table),
    ),
    Study(  # where tau ends by tau_init, the slope of final tau on it (`engine`'s `tau_init_slope`); frozen_tau: shown
        "tau_init",
        groups=("tau_init", "frozen_tau"),
        table_findings=lambda table, inputs: engine.family_findings(inputs, "tau_init", table),
    ),
    Study(  # EGA-1's gain over the baseline from the shortest block to the longest (engine's `growth`)
        "context",
        groups=("context",),
        table_findings=lambda table, inputs: engine.family_findings(inputs, "context", table),
    ),
    Study(  # a tau never trained, against tau learned from the same tau_init
        "frozen_tau",
        groups=("frozen_tau",),
        table_findings=lambda table, inputs: engine.family_findings(inputs, "frozen", table),
    ),
    Study(  # z over the whole window as trained, its increment over causal EGA-1, and evaluated causally (a diagnostic)
        "leak",
        groups=("leak",),
        table_findings=lambda table, inputs: [
            *engine.family_findings(inputs, "leak", table),
            *engine.leak_evaluated(table, inputs),
        ],
    ),
    Study("reruns", groups=("landscape",), table_findings=engine.reruns),  # runs repeated for their checkpoints
    Study("peers", findings=lambda inputs, data, read: engine.family_findings(inputs, "peers")),
    leaderboard.STUDY,
    tau_mechanism.STUDY,
    Study("cost", findings=lambda inputs, data, read: engine.family_findings(inputs, "cost")),  # `ega bench`
    author.STUDY,
    rope.STUDY,
    Study("paper_size", findings=lambda inputs, data, read: engine.family_findings(inputs, "paper_size")),
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
    Study(  # every family of the protocol no study above places: a new study is data (docs/adding-a-study.md)
        "engine",
        measure=lambda inputs: engine.unplaced(PLACED),
        findings=lambda inputs, data, read: [
            f for family in data.families for f in engine.family_findings(inputs, family)
        ],
    ),
)
# the protocol's families the studies above read, by their own modules or through `engine` in their place
PLACED = {"improvement", "gap", "levels", "ablation", "tail", "tau_init", "frozen", "leak", "context", "peers"}
PLACED |= {"control", "cost", "author", "rope", "beyond", "paper_size"}


def ordered(studies: Sequence[Study]) -> list[Study]:
    """``studies`` with each after every study it reads (a topological order; otherwise as listed); a ValueError
    for a study that reads one not listed, for studies that read each other, or for one with table findings that
    declares no spec groups."""
    names = [s.name for s in studies]
    if len(set(names)) < len(names):
        raise ValueError(f"two studies share a name: {sorted(n for n in set(names) if names.count(n) > 1)}")
    for s in studies:
        if s.table_findings is not None and s.groups is None:  # it would be handed every table, and sort them itself
            raise ValueError(f"study {s.name!r} has table findings but declares no spec groups: name the ones it reads")
        if missing := [r for r in s.reads if r not in names]:
            raise ValueError(f"study {s.name!r} reads {', '.join(map(repr, missing))}, which no study listed is")
    out: list[Study] = []
    pending = list(studies)
    while pending:
        ready = next((s for s in pending if set(s.reads) <= {o.name for o in out}), None)
        if ready is None:
            raise ValueError(f"studies {', '.join(s.name for s in pending)} read each other: no order runs them")
        out.append(ready)
        pending.remove(ready)
    return out


def measure(inputs: ReportInputs, studies: Sequence[Study] = STUDIES) -> list[Measured]:
    """Each study, in an order that runs it after what it reads, with what it measured of ``inputs``."""
    return [Measured(s, s.measure(inputs) if s.measure is not None else None) for s in ordered(studies)]


def run_studies(inputs: ReportInputs, measured: Sequence[Measured]) -> list[Finding]:
    """Every finding, families corrected (`findings.correct`): first each table's, section by section (the studies
    of one table in their order), then each study's of the whole report, each after the studies it reads, which
    it is handed corrected. A comparison shared by sections (``also_in``) is made once, in x's own (`engine`)."""
    out: list[tuple[str, Finding]] = []
    for table in inputs.tables:
        for m in measured:
            s = m.study
            # only the tables of the groups it declares: a study never tells from a table's rows that it applies
            if s.table_findings is not None and table.group in (s.groups or ()):
                out += [(s.name, f) for f in s.table_findings(table, inputs)]
    for m in measured:
        s = m.study
        if s.findings is None:
            continue
        corrected = correct([f for _, f in out]) if s.reads else []
        read = {name: [f for (n, _), f in zip(out, corrected, strict=True) if n == name] for name in s.reads}
        out += [(s.name, f) for f in s.findings(inputs, m.data, read)]
    return correct([f for _, f in out])


def findings(
    tables: list[Table],
    variants: list[Variant],
    evaluations: Sequence[Evaluation] = (),
    studies: Sequence[Study] = STUDIES,
) -> list[Finding]:
    """Every finding of ``studies`` over these tables and variants (no runs table, no bench): `run_studies` of them."""
    inputs = ReportInputs(tuple(tables), tuple(variants), evaluations=tuple(evaluations))
    return run_studies(inputs, measure(inputs, studies))
