"""`python -m ega_lightning.commands`: runs the dispatcher, as the ``ega`` console script does."""

from __future__ import annotations

from ega_lightning.commands import main

main()
