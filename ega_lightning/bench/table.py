"""`ega bench`'s result as Markdown: one table per size and per question (the gates, the overhead split,
torch.compile, our baseline against the nanoGPT-style model, generation, the pipeline's own cost)."""

from __future__ import annotations

from typing import Any

from ega_lightning.bench.split import SPLIT_GATE


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def to_markdown(result: dict[str, Any]) -> str:
    """The benchmark's JSON as Markdown: the header, then per size the gates, the split and the compiled
    table, our baseline against the reference, and generation."""
    out = _header(result)
    for size in result["sizes"]:
        out += _gates(size)
    ref_rows = [_reference_row(size) for size in result["sizes"]]
    for size in result["sizes"]:
        out += _split(size) if size.get("split") is not None else []
    for size in result["sizes"]:
        out += _compiled(size)
    if ref_rows:
        both = ", both compiled" if result.get("compile") else ""  # the reference is compiled under --compile
        out += ["", f"## Our baseline against a nanoGPT-style model (same shape, same batch{both})", ""]
        out += [_table(["size", "ours (none) ms", "nanoGPT-style ms", "ours / nanoGPT"], ref_rows)]
    for g in result.get("generation", []):
        out += _generation(g)
    if result.get("pipeline"):
        out += _pipeline(result["pipeline"])
    return "\n".join(out) + "\n"


def _header(result: dict[str, Any]) -> list[str]:
    env = result["environment"]
    out = [
        f"# Benchmark: {env['device_name']}, {result['precision']}",
        "",
        f"Command: `{result['command']}`  ",
        f"torch {env['torch']}, {env['threads']} threads, {env['platform']}, {result['date']}.",
    ]
    if result["sizes"]:  # none under --generation_only
        out += [
            "",
            "Training step = forward + backward + AdamW step on one fixed batch; every contender is timed once per",
            f"repetition in a rotated order ({result['repeats']} repetitions after {result['warmup']} warm-up steps).",
            "`x none` is the median over repetitions of the step time divided by the baseline's in the same",
            "repetition (quartiles in brackets): pairing within a repetition cancels the machine's drift.",
            "Memory = tensors saved for backward (activations) + training state (parameters, gradients, two AdamW",
            "moments); on CUDA the allocator's peak is listed too.",
        ]
    return out


def _gates(size: dict[str, Any]) -> list[str]:
    rows = [
        [
            name,
            f"{r['median_ms']:.1f}",
            f"{r['min_ms']:.1f}-{r['max_ms']:.1f}",
            f"{r['time_ratio']:.3f} ({r['time_ratio_q1_q3'][0]:.3f}-{r['time_ratio_q1_q3'][1]:.3f})",
            f"{r['tokens_per_s']:,.0f}",
            f"{r['total_mb']:.1f}" + (f" (CUDA peak {r['cuda_peak_mb']:.0f})" if "cuda_peak_mb" in r else ""),
            f"{r['memory_ratio']:.3f}",
        ]
        for name, r in size["rows"].items()
        if name != "nanogpt_reference"
    ]
    shape = size["shape"]
    return [
        "",
        f"## Gates at the `{size['size']}` size ({shape['n_layer']}x{shape['n_head']}x{shape['n_embd']}, "
        f"block {shape['block_size']}, batch {size['batch_size']})",
        "",
        _table(["gate", "median ms", "min-max ms", "x none (quartiles)", "tokens/s", "memory MB", "x none"], rows),
    ]


def _reference_row(size: dict[str, Any]) -> list[str]:
    # under --compile the reference is compiled: against our compiled baseline
    ours, ref = size["rows"].get("none+compile", size["rows"]["none"]), size["rows"]["nanogpt_reference"]
    return [
        size["size"],
        f"{ours['median_ms']:.1f}",
        f"{ref['median_ms']:.1f}",
        f"{ours['median_ms'] / ref['median_ms']:.3f}",
    ]


def _split(size: dict[str, Any]) -> list[str]:
    split = size["split"]
    plain, padded = split["head_sizes"]
    rows = [
        [label, f"{split[key]['points']:+.1f}", f"{split[key]['interval'][0]:+.1f} to {split[key]['interval'][1]:+.1f}"]
        for key, label in (
            ("total", f"`{SPLIT_GATE}` over `none`"),
            ("kernel", f"the attention kernel at head size {padded} vs {plain}"),
            ("matmuls", f"the Q/K/V and c_proj matmuls at head size {padded} vs {plain}"),
            ("gate", "the gate's z-norm and sigmoid (the model against itself with log g = 0)"),
            ("rest", "everything else (the write of log g, the padded path's copies and gathers, their Python)"),
            ("floor", "the design's floor: the kernel and the matmuls at the padded head size (the two rows above)"),
            ("above_floor", f"`{SPLIT_GATE}` over the floor (its target: within 2 points, issue 55)"),
        )
        if key in split
    ]
    alone = [
        f"{what} ({split[key]['ms']['plain']:.2f} ms at head size {plain}, {split[key]['ms']['padded']:.2f} ms "
        f"at {padded}: {split[key]['ratio']:.3f}x)"
        for key, what in (
            ("kernel", "SDPA forward + backward on the model's shapes"),
            ("matmuls", "the two matmuls forward + backward, padded weights built as training builds them"),
        )
    ]
    gate = split["gate"]["ms"]
    alone.append(f"the whole step with log g = 0 and as trained ({gate['plain']:.1f} ms, {gate['padded']:.1f} ms)")
    return [
        "",
        f"## Where `{SPLIT_GATE}`'s time goes at the `{size['size']}` size "
        "(points of the baseline's step: medians of per-repetition values, 95% intervals)",
        "",
        _table(["part", "points", "95% interval"], rows),
        "",
        f"Kernel and matmuls alone, one layer's call (the points count it {size['shape']['n_layer']} times), and "
        "the gate's arithmetic in the whole model, per-repetition medians: " + "; ".join(alone) + ".",
    ]


def _compiled(size: dict[str, Any]) -> list[str]:
    compiled = {name: r for name, r in size["rows"].items() if "eager_ratio" in r}
    if not compiled:
        return []
    rows = [
        [
            name.removesuffix("+compile"),
            f"{size['rows'][name.removesuffix('+compile')]['median_ms']:.1f}",
            f"{r['median_ms']:.1f}",
            f"{r['eager_ratio']:.3f}",
            f"{r['compile_s']:.1f}",
        ]
        for name, r in compiled.items()
    ]
    return [
        "",
        f"## torch.compile at the `{size['size']}` size (compile s: the first step's excess, in no ratio)",
        "",
        _table(["gate", "eager ms", "compiled ms", "compiled / eager", "compile s"], rows),
    ]


def _generation(g: dict[str, Any]) -> list[str]:
    rows = [
        [name, f"{r['cached_tokens_per_s']:.1f}", f"{r['recompute_tokens_per_s']:.1f}", f"{r['speedup']:.1f}x"]
        for name, r in g["rows"].items()
    ]
    repeats = next(iter(g["rows"].values())).get("repeats", 1)
    timing = "" if repeats == 1 else f" (medians of {repeats} alternating repetitions)"
    out = [
        "",
        f"## Generation, `{g['size']}` size, {g['new_tokens']} new tokens from a 1-token prompt, batch 1{timing}",
        "",
        _table(["gate", "KV cache tokens/s", "recompute tokens/s", "speed-up"], rows),
    ]
    if g.get("uncached"):
        names = ", ".join(f"`{n}`" for n in g["uncached"])
        out += ["", f"Not timed: {names}, whose z-norm reads the whole window, so there is no cached form."]
    return out


def _pipeline(rows: list[dict[str, Any]]) -> list[str]:
    first = rows[0]
    lines = [
        [
            r["size"],
            r["gate"],
            f"{r['bare_median_ms']:.1f}",
            f"{r['fit_median_ms']:.1f}",
            f"{r['time_ratio']:.3f} ({r['time_ratio_q1_q3'][0]:.3f}-{r['time_ratio_q1_q3'][1]:.3f})",
            f"{r['total_ratio']:.3f}",
        ]
        for r in rows
    ]
    return [
        "",
        "## The pipeline's own cost: a training step inside `ega fit` against the bare step of the same model",
        "",
        _table(["size", "gate", "bare step ms", "`ega fit` step ms", "x bare (quartiles)", "x bare, totals"], lines),
        "",
        "`ega fit` runs with the default configs (every callback: "
        + ", ".join(first["callbacks"])
        + f"; logger {', '.join(first['loggers']) or 'none'}; gradient clipping at {first['gradient_clip_val']}; "
        "the learning-rate schedule; the data loader), a copy of its model taking one bare step (forward + "
        "backward + AdamW step, as in the gate tables, nanoGPT's loop) on the batch Lightning trains on next, "
        f"between Lightning's steps: {first['repeats']} pairs in the fit's own process after "
        "the warm-up steps. A fit step is one loop iteration (the step with every hook, the logging, fetching "
        "the next batch); `x bare` is the median of the per-step ratios, `totals` the ratio of the sums, "
        "which counts the steps that write the logs. Validation, checkpoints and the sanity check fall outside "
        "the timed steps.",
    ]
