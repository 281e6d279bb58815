"""`python -m ega_lightning.cli`: the documented ``python -m`` entry point of `ega` (the torchrun line of
docs/scale-out.md, `ega sweep`'s runs; DDP re-executes it on every rank). It only runs the dispatcher,
`ega_lightning.commands`: the same as the ``ega`` console script.
"""

from __future__ import annotations

from ega_lightning.commands import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
