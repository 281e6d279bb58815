"""`python -m ega_lightning.device_check`: the documented ``python -m`` entry point of the device check (run
by `scripts/gpu_check.sh`). It only runs the command, `ega_lightning.commands.device_check`.
"""

from __future__ import annotations

import sys

from ega_lightning.commands.device_check import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
