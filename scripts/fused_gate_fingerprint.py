"""Whether the fused gate arithmetic (`ega_lightning.gates.fused`) leaves each shipped gate config's code
fingerprint as the autograd graph's: the test issue 55 set for making it a gate's default.

    PYTHONPATH=. python scripts/fused_gate_fingerprint.py     # one line per configs/gate/*.yaml and size

Each config's model options at the cpu and paper sizes' shapes (their own dropout), fingerprinted three
ways, each model built as that variant: an energy gate's ``fused_arithmetic`` option off (autograd's graph of the
gate); on, with the padded layout as it was before the fused channel (the fused path's ``fused_channel`` option off,
`ROW_ALIGN` 1); and everything on (the default: EGA-1's channel as `FusedGateChannel`, the Q/K/V buffer's rows
aligned). Exits 1 if any differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from ega_lightning.data.corpora import CORPORA
from ega_lightning.fingerprint import code_fingerprint
from ega_lightning.gates import Gate, resolve_gate
from ega_lightning.model import fused as model_fused

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ROW_ALIGN = model_fused.ROW_ALIGN


def main() -> int:
    vocab = CORPORA["tinyshakespeare"].vocab
    differ = []
    for size in ("cpu", "paper"):
        shape = yaml.safe_load((CONFIGS / "size" / f"{size}.yaml").read_text())["model"]
        for cfg in sorted((CONFIGS / "gate").glob("*.yaml")):
            hparams = {"vocab": vocab, **shape, **yaml.safe_load(cfg.read_text())["model"]}
            energy_gate = issubclass(resolve_gate(hparams["gate"]).cls or type, Gate)
            prints = []
            for arithmetic, channel, align in ((False, False, 1), (True, False, 1), (True, True, ROW_ALIGN)):
                model_fused.ROW_ALIGN = align
                variant = {**hparams, "attention_options": {"fused_channel": channel}}
                if energy_gate:  # the option of every energy gate (gates.base.COMMON_OPTIONS)
                    variant["gate_options"] = {**hparams.get("gate_options", {}), "fused_arithmetic": arithmetic}
                prints.append(code_fingerprint(variant))
            same = len(set(prints)) == 1
            differ += [] if same else [f"{cfg.stem}@{size}"]
            print(
                f"{size:5s} {cfg.stem:28s} autograd {prints[0]} fused {prints[1]} fused channel, aligned {prints[2]} "
                f"{'equal' if same else 'DIFFER'}"
            )
    print(f"differ: {', '.join(differ) or 'none'}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
