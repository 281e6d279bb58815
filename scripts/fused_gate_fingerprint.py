"""Whether the fused gate arithmetic (`ega_lightning.gates.fused`) leaves each shipped gate config's code
fingerprint as the autograd graph's: the test issue 55 set for making it a gate's default.

    PYTHONPATH=. python scripts/fused_gate_fingerprint.py     # one line per configs/gate/*.yaml and size

Each config's model options at the cpu and paper sizes' shapes (their own dropout), fingerprinted with
`FUSED_GATE_ARITHMETIC` off and on; exits 1 if any differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from ega_lightning.data.corpora import CORPORA
from ega_lightning.fingerprint import code_fingerprint
from ega_lightning.gates import fused

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def main() -> int:
    vocab = CORPORA["tinyshakespeare"].vocab
    differ = []
    for size in ("cpu", "paper"):
        shape = yaml.safe_load((CONFIGS / "size" / f"{size}.yaml").read_text())["model"]
        for cfg in sorted((CONFIGS / "gate").glob("*.yaml")):
            hparams = {"vocab": vocab, **shape, **yaml.safe_load(cfg.read_text())["model"]}
            prints = []
            for on in (False, True):
                fused.FUSED_GATE_ARITHMETIC = on
                prints.append(code_fingerprint(hparams))
            same = prints[0] == prints[1]
            differ += [] if same else [f"{cfg.stem}@{size}"]
            print(f"{size:5s} {cfg.stem:28s} autograd {prints[0]} fused {prints[1]} {'equal' if same else 'DIFFER'}")
    print(f"differ: {', '.join(differ) or 'none'}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
