"""The peers study: gates from other papers (paper.PEERS) beside EGA, each read for its own paper's claim, a
lower loss than the baseline (rules.lower_rule), on each corpus it ran. A peer is added in `paper.PEERS`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ega_lightning.experiments import paper, prose
from ega_lightning.experiments.comparisons import Table
from ega_lightning.experiments.findings import Finding, Where, code_of, judged, label, measured_with, pair
from ega_lightning.experiments.study import Study
from ega_lightning.experiments.text import interval_text


@dataclass(frozen=True, kw_only=True)
class Peer(Finding):
    """Baseline − peer on the final val loss: its own claim of a lower loss."""

    kind: ClassVar[str] = "peer"
    measures: ClassVar[tuple[str, ...]] = tuple(f"peer:{gate}" for gate in paper.PEERS)
    source: str  # the peer's paper


@prose.measured.register
def say_peer(f: Peer) -> str:
    d = f.interval
    measured = f"baseline − gate {interval_text(d)}" if d is not None else "no finished run yet"
    claim = f"its own claim, a {paper.PEER_CLAIM}"
    return f"{f.subject} ({f.source}) vs {f.against}: {measured}; {claim}{prose.verdict_text(f)}."


prose.claim_subject.register(Peer, label)  # one claim per peer: the row says which peer, against which baseline


def findings(table: Table) -> list[Finding]:
    """Each peer's own claim, a lower loss than the baseline (rules.PROSE['lower']); a peer with no finished run
    still counts in its family, which is declared with the study."""
    out: list[Finding] = []
    for row in table.rows:
        v, base = row.variant, row.baseline
        if v.gate not in paper.PEERS:
            continue
        peer = paper.PEERS[v.gate]
        against = f"baseline `{base.label}`" if base else "baseline"
        where = Where(table.group, table.corpus, measured_with(v, base), f"{peer.name} `{v.label}`", against)
        reads = [(pair(v, base or "baseline"), row.diffs["final_val_loss"])]
        claim = {"claim": f"peer:{v.gate}", "family": "peers", "code": code_of(v, base)}
        out.append(judged(Peer, where, reads, source=peer.source, **claim))
    return out


GROUPS = ("peers", "peers-ptb")  # the spec groups whose tables it is handed: other papers' gates, on each corpus
STUDY = Study("peers", groups=GROUPS, table_findings=lambda table, inputs: findings(table))
