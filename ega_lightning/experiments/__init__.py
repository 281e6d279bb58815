"""Experiment tools: `ega sweep` runs a spec of (config, seed) pairs, `ega report` summarises them."""
