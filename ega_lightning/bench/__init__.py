"""What each gate costs, measured side by side in one process: the library `ega bench` runs.

- `harness`: contenders timed one training step at a time, interleaved, after warm-up; their memory.
- `settings`: the sizes and gates to measure, from a configs directory.
- `split`: where EGA-1's overhead goes (the attention kernel, the padded matmuls, the gate's arithmetic).
- `reference`: a nanoGPT-style model, timed beside our baseline.
- `pipeline`, `bare_step`: a step inside `ega fit` against the bare step of the same model, paired.
- `run`: one run of all of them, and generation with and without the KV cache, as the JSON.
- `table`: that JSON as Markdown.

The command is `ega_lightning.commands.bench`; the statistics are `ega_lightning.experiments.stats`'.
"""
