"""How far the code fingerprint's scalars move between kernel dispatches of this CPU, against its rounding grid.

Computes `ega_lightning.fingerprint.fingerprint_values` for the shipped cpu-size configurations of every gate
family in a fresh process under each dispatch setting this CPU runs (ATen's capabilities, MKL's and oneDNN's ISA
narrowed), and prints, per configuration, the largest movement of any scalar against the machine's default
dispatch, the summed movement over QUANTUM (the expected number of scalars that cross a rounding boundary when
the code moves between two such machines) and whether the fingerprints agree:

    python scripts/fingerprint_noise.py
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ega_lightning.fingerprint import QUANTUM, in_each_dispatch  # noqa: E402

CONFIGS = {
    "none": {"gate": "none"},
    "linear": {"gate": "linear"},
    "linear, dropout 0.1": {"gate": "linear", "dropout": 0.1},
    "linear, window z-norm": {"gate": "linear", "gate_options": {"znorm": "window"}},
    "multiscale4": {"gate": "multiscale", "gate_options": {"scales": 4}},
    "db2": {"gate": "db2"},
    "morlet_param": {"gate": "morlet_param"},
    "wavelet_packet": {"gate": "wavelet_packet"},
    "fox": {"gate": "fox"},
    "alibi, dropout 0.1": {"gate": "alibi", "dropout": 0.1},
    "author EGA-1 (published)": {
        "gate": "author",
        "gate_options": {"znorm": "window"},
        "attention": "reference",
        "dropout": 0.1,
        "dropout_before_gate": True,
    },
}
WORKER = """
import json, sys
import torch
from ega_lightning.data.corpora import CORPORA
from ega_lightning.fingerprint import code_fingerprint, fingerprint_values
cpu = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128, "vocab": CORPORA["tinyshakespeare"].vocab}
out = {}
for name, config in json.load(sys.stdin).items():
    h = {**cpu, **config}
    out[name] = [code_fingerprint(h), [v for _, v in fingerprint_values(h) if isinstance(v, float)]]
print(json.dumps([torch.backends.cpu.get_cpu_capability(), out]))
"""


def main() -> int:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        "unknown",
    )
    runs = in_each_dispatch(WORKER, CONFIGS, timeout=None)
    print(f"{cpu}; dispatches: " + "; ".join(f"{s or 'machine default'} -> {c}" for s, c, _ in runs))
    print(f"| configuration | largest move of a scalar | summed move / QUANTUM ({QUANTUM:g}) | one fingerprint |")
    print("|---|---|---|---|")
    base = runs[0][2]
    for name in CONFIGS:
        moves = [abs(a - b) for _, _, v in runs[1:] for a, b in zip(base[name][1], v[name][1], strict=True)]
        sums = [sum(abs(a - b) for a, b in zip(base[name][1], v[name][1], strict=True)) for _, _, v in runs[1:]]
        same = len({v[name][0] for _, _, v in runs}) == 1
        print(f"| {name} | {max(moves):.1e} | {max(sums) / QUANTUM:.1e} | {'yes' if same else 'NO'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
