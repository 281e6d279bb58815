"""Run a registered study seed by seed, each seed's runs back to back on one CPU kind.

A study's verdicts pair the runs of one seed, and rounding differs between CPUs, so every run of a seed must run on
one machine, one after another (nothing else of the study beside it). This runner takes the seeds in order; for each
it runs every run of that seed in the spec (`ega sweep SPEC --only <run>`, one at a time) and moves on only when all
are finished. A seed's runs stay on one CPU kind (configs/protocol.yaml, the amendments of issue 50): the CPU's model
and the vector instructions torch's kernels dispatch to, since one model name covers kinds that round differently (AMD
EPYC with AVX2 alone or with AVX-512). A seed an earlier sitting left part-done on this kind continues (its finished
runs stand, `ega sweep` resumes an interrupted run from its last checkpoint, bit for bit, or starts it over where the
checkpoint went with its machine), and only a seed taken up on another kind is rerun whole, its records, evaluations
and run directories removed first, so no seed's pairs straddle two CPU kinds. Records land in ``--records_dir``, each
seed's CPU kind beside them (``<records_dir>/seed<N>.cpu``). With ``--whole_split`` each run's final checkpoint is
evaluated over the whole validation split as soon as the run finishes (`ega validate`, the default evaluation), into
``<records_dir>/whole_split/<run>.json``: for a study whose recorded val/loss is another estimate (the author's 50
random batches), the number it is read beside. With ``--beyond_the_block 2 4`` each final checkpoint is evaluated on
windows of 2 and 4 times its training block (`ega validate --data.eval_block_size`, for a model with rope or no
position embedding), into ``<records_dir>/beyond_the_block/<run>-T<L>.json``: the loss over the split and at each
position 1..L (issue 56's length extrapolation). Where the machine does not outlive the sitting, keep
``--records_dir`` in the checkout (``results/in-progress/<study>``) and commit each run's files as they land: a new
machine of the seed's kind then goes on from them (the run directories, outside it, are lost with the machine; with
``--across_kinds`` a machine of any kind goes on, for runs too long to rerun a seed whole whose protocol says so,
seed<N>.cpu listing every kind the seed ran on); move a whole seed's records to ``results/runs/`` (its evaluations
beside the study's) when it is done, and the runner skips it.

A run the study checkout's sweep could not record is recorded from its finished run directory by this checkout's sweep
(`ega report` would also write it, later, where the run directory is still there); a seed is done when each run has a
record or a finished run directory (a DONE file). A record is read by its content, not its file name: one of that name
made with other configs, arguments, seed or steps than the spec entry gives (a shipped run named like a new spec's
entry) is refused, exit 2, before anything is written; so are a spec, checkout or directory that cannot be used and a
seed the spec lacks. Pause it while a benchmark times (``kill -STOP <pid>`` on its
process group, ``kill -CONT`` after); stop it with SIGTERM (the run in progress stops at its next step and resumes at
the next sitting). Beside other work on a 2-core machine, give it the higher priority from the start (a run's two
compute threads wait for each other: one starved thread stalls both, ~4.5 s a step instead of ~0.5 s beside two test
workers on an AMD EPYC). Where the kernel groups processes by session (/proc/sys/kernel/sched_autogroup_enabled is 1),
nice weighs processes only within one session: set the runner's session weight too, ``echo -10 >
/proc/<pid>/autogroup`` (0.4 s a step beside two helpers' tests instead of 4 s). `renice` of a running process changes
only the thread it names: renice every /proc/<pid>/task/*.

    nice -n -10 python scripts/seed_runner.py configs/sweeps/author.yaml --seeds 1 2 3 4 5 \\
        --records_dir results/in-progress/author --runs_dir ../study-runs --whole_split

``--checkout`` names another checkout whose code trains (by default this one): a clean worktree at the study's
commit (`git worktree add --detach ../study <commit>`), so that work in this one neither marks the runs as run from
a modified tree nor changes their code midway; its package comes first on the runs' PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REPORTED = REPO / "results" / "runs"  # the records `ega report` reads: a seed's, once the seed is whole
sys.path.insert(0, str(REPO))

from ega_lightning import host  # noqa: E402
from ega_lightning.errors import UserError  # noqa: E402
from ega_lightning.experiments.records import load_record, record_path  # noqa: E402
from ega_lightning.experiments.rundirs import read_scalars  # noqa: E402
from ega_lightning.experiments.spec import DONE_FILE, Run, collect_runs, load_spec, static_value  # noqa: E402
from ega_lightning.io import read_yaml, write_atomic  # noqa: E402
from ega_lightning.run_policy import evaluation_name  # noqa: E402


def cpu() -> str:
    """This machine's CPU kind: its model and the vector instructions torch's kernels dispatch to. One model name
    covers CPUs of either kind (the project's "AMD EPYC" machines come with AVX2 alone or with AVX-512), and the
    kernels, so the rounding, differ between them: a seed's pairs on one kind need both."""
    import torch  # here, not at the top: the rest of the runner (and its tests) do without it

    return f"{host.cpu_model()} ({torch.backends.cpu.get_cpu_capability()})"


def env_of(checkout: Path) -> dict[str, str]:
    """The environment of a run: ``checkout``'s package first on the path."""
    path = os.pathsep.join(p for p in (str(checkout.resolve()), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def evaluate(
    run_name: str, runs_dir: Path, checkout: Path, eval_block_size: int | None = None
) -> dict[str, Any] | None:
    """`ega validate` of the run's final checkpoint over the whole validation split, in windows of the training
    block or of ``eval_block_size``: its evaluation's step, val/loss and (on longer windows) val/loss_by_position,
    read at full precision from the evaluation's event file (``<run>/validate`` or ``<run>/validate-T<L>``); None
    (the output printed) when it fails."""
    checkpoint = runs_dir / run_name / "checkpoints" / "last.ckpt"
    command = ["ega", "validate", "--ckpt_path", str(checkpoint), "--trainer.enable_progress_bar=false"]
    command += [] if eval_block_size is None else [f"--data.eval_block_size={eval_block_size}"]
    done = subprocess.run(command, cwd=checkout, env=env_of(checkout), capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
        return None
    scalars = read_scalars(runs_dir / run_name / evaluation_name("validate", eval_block_size))
    (step, loss), *_ = scalars["val/loss"][-1:]
    return {"step": step, "loss": loss, "by_position": [v for _, v in scalars.get("val/loss_by_position", [])]}


def whole_split(run_name: str, runs_dir: Path, out: Path, checkout: Path) -> int:
    """The run's final checkpoint over the whole validation split, written to ``out`` (a JSON)."""
    if (found := evaluate(run_name, runs_dir, checkout)) is None:
        return 1
    result = {
        "run_name": run_name,
        "step": found["step"],  # the evaluation's step: the checkpoint's last training step, counted from 0
        "val_loss_whole_split": found["loss"],
        "command": f"ega validate --ckpt_path <runs_dir>/{run_name}/checkpoints/last.ckpt",
        "cpu": cpu(),
    }
    write_atomic(out, json.dumps(result, indent=1) + "\n")
    print(f"{run_name}: whole validation split {found['loss']:.4f} at step {found['step']}", flush=True)
    return 0


def beyond_the_block(run_name: str, runs_dir: Path, out: Path, checkout: Path, eval_block_size: int) -> int:
    """The run's final checkpoint on windows of ``eval_block_size`` (length extrapolation, issue 56), written to
    ``out`` (a JSON): the loss over the whole validation split and the loss at each position 1..L."""
    if (found := evaluate(run_name, runs_dir, checkout, eval_block_size)) is None:
        return 1
    result = {
        "run_name": run_name,
        "step": found["step"],
        "eval_block_size": eval_block_size,
        "val_loss": found["loss"],
        "loss_by_position": found["by_position"],
        "command": f"ega validate --ckpt_path <runs_dir>/{run_name}/checkpoints/last.ckpt "
        f"--data.eval_block_size={eval_block_size}",
        "cpu": cpu(),
    }
    write_atomic(out, json.dumps(result, indent=1) + "\n")
    print(f"{run_name}: windows of {eval_block_size}, validation split {found['loss']:.4f}", flush=True)
    return 0


def evaluation_files(r: Run, args: argparse.Namespace) -> list[Path]:
    """The evaluations of run ``r`` that ``args.records_dir`` holds."""
    found = [args.records_dir / "whole_split" / f"{r.run_name}.json"]
    found += sorted((args.records_dir / "beyond_the_block").glob(f"{r.run_name}-T*.json"))
    return [f for f in found if f.is_file()]


def evaluations(r: Run, args: argparse.Namespace) -> int:
    """The evaluations of finished run ``r`` that ``args`` asks for and ``args.records_dir`` lacks: 0, or the first
    failure's status. Where they lack and the run's checkpoint is gone (a record committed from a machine that did
    not outlive its sitting) it says so and goes on: they cannot be made here."""
    run_dir = args.runs_dir / r.run_name
    if not (run_dir / "checkpoints" / "last.ckpt").is_file():
        held = {f.name for f in evaluation_files(r, args)}
        wanted = int(args.whole_split) + len(args.beyond_the_block)
        if len(held) < wanted:
            print(f"{r.run_name}: {wanted - len(held)} evaluation(s) missing and no checkpoint to make them from")
        return 0
    wanted: list[tuple[Path, int | None]] = []
    if args.whole_split:
        wanted.append((args.records_dir / "whole_split" / f"{r.run_name}.json", None))
    if args.beyond_the_block:
        block = int(read_yaml(run_dir / "hparams.yaml")["block_size"])
        for length in (factor * block for factor in args.beyond_the_block):
            wanted.append((args.records_dir / "beyond_the_block" / f"{r.run_name}-T{length}.json", length))
    for out, length in wanted:
        if out.is_file():
            continue
        if length is None:
            status = whole_split(r.run_name, args.runs_dir, out, args.checkout)
        else:
            status = beyond_the_block(r.run_name, args.runs_dir, out, args.checkout, length)
        if status:
            return status
    return 0


class Refused(UserError):
    """A runner's command that cannot be run as given; the message says what is wrong and the way out."""


def has_record(r: Run, records_dir: Path) -> bool:
    """Whether ``records_dir`` holds run ``r``'s record, judged by its content: a record file of that name made with
    other configs, arguments, seed or steps than the spec entry gives is another run's (a shipped run named like a
    new spec's entry), and :class:`Refused` says so; no file: False."""
    try:
        record = load_record(r, records_dir)  # its run name, seed, configs and arguments, and curves to max_steps
    except UserError as err:
        raise Refused(
            f"{err} The seed runner decides a run done by its record's content: it neither skips the run on that "
            "record nor runs it beside it. Give the spec entry another name, or move the record away."
        ) from None
    if record is None:
        return False
    wanted = static_value(r, "trainer.max_steps")
    if isinstance(wanted, int) and record.max_steps != wanted:
        raise Refused(
            f"{record_path(records_dir, r.run_name)} is the record of a run of {record.max_steps} steps, but the spec "
            f"entry {r.entry} gives {wanted}: it is another run's. Give the spec entry another name, or move the "
            "record away."
        )
    return True


def check_arguments(args: argparse.Namespace) -> list[Run]:
    """The runs of ``args.spec``, every argument checked before anything is written (:class:`Refused`): the spec
    found (a path relative to this directory made absolute: the sweeps run in the checkout), the checkout and the
    directories usable, every seed in the spec, and every record already there the spec entry's run."""
    if args.spec.is_file():
        args.spec = args.spec.resolve()
    runs = collect_runs([load_spec(args.spec)])
    if not args.checkout.is_dir():
        raise Refused(f"--checkout {args.checkout} is not a directory: give the checkout whose code trains.")
    for flag, directory in (("--records_dir", args.records_dir), ("--runs_dir", args.runs_dir)):
        if directory.exists() and not directory.is_dir():
            raise Refused(f"{flag} {directory} is a file: give a directory (it is made if missing).")
    seeds = sorted({r.seed for r in runs})
    if unknown := [seed for seed in args.seeds if seed not in seeds]:
        raise Refused(f"the spec {args.spec} has no run of seed(s) {unknown}: its seeds are {seeds}.")
    for r in runs:
        if r.seed in args.seeds:
            has_record(r, REPORTED)
            has_record(r, args.records_dir)
    return runs


def main(argv: list[str] | None = None) -> int:
    try:
        return run_seeds(argv)
    except UserError as err:  # a bad spec, checkout, directory, seed or record: one paragraph, nothing written
        print(f"seed_runner: error: {err}", file=sys.stderr)
        return 2


def run_seeds(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--records_dir", type=Path, required=True)
    parser.add_argument("--runs_dir", type=Path, required=True)
    parser.add_argument("--checkout", type=Path, default=REPO, help="the checkout whose code trains (default: this)")
    parser.add_argument("--whole_split", action="store_true", help="evaluate each final checkpoint on the whole split")
    parser.add_argument(
        "--across_kinds",
        action="store_true",
        help="a seed begun on another CPU kind goes on here instead of rerunning whole (runs too long to rerun: the "
        "paper-size study, whose protocol reads its pairs with the kinds beside them); seed<N>.cpu lists every kind",
    )
    parser.add_argument(
        "--beyond_the_block",
        type=int,
        nargs="+",
        default=[],
        metavar="FACTOR",
        help="evaluate each final checkpoint on windows of FACTOR x its training block (e.g. 2 4)",
    )
    args = parser.parse_args(argv)
    # absolute: the sweeps run in the checkout, the runner's own checks here
    args.records_dir, args.runs_dir = args.records_dir.resolve(), args.runs_dir.resolve()
    runs = check_arguments(args)
    args.records_dir.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        mine = [r for r in runs if r.seed == seed]
        if all(has_record(r, REPORTED) for r in mine):  # a whole seed, moved where it is read (by content)
            print(f"seed {seed}: done (its records are the report's)", flush=True)
            continue
        records = [args.records_dir / f"{r.run_name}.json" for r in mine]

        def finished(r: Run, record: Path) -> bool:
            return has_record(r, record.parent) or (args.runs_dir / r.run_name / DONE_FILE).is_file()

        if not all(finished(r, p) for r, p in zip(mine, records, strict=True)):
            cpu_file = args.records_dir / f"seed{seed}.cpu"
            kinds = cpu_file.read_text().split("\n") if cpu_file.is_file() else []
            kinds = [kind.strip() for kind in kinds if kind.strip()]
            started_on = kinds[0] if kinds else None
            if started_on is not None and started_on != cpu() and args.across_kinds:
                # its runs resume where their checkpoints survived, else restart; each record's segments say which
                # steps each kind trained
                print(f"seed {seed}: began on {started_on}, this is {cpu()}: going on here (--across_kinds)")
                if cpu() not in kinds:
                    kinds.append(cpu())
            elif started_on is not None and started_on != cpu():  # a seed's pairs on one CPU kind: start over
                for r, p in zip(mine, records, strict=True):
                    if p.is_file() or (args.runs_dir / r.run_name).exists() or evaluation_files(r, args):
                        print(f"seed {seed}: began on {started_on}, this is {cpu()}: removing {r.run_name}'s runs")
                        for made in [p, *evaluation_files(r, args)]:  # its evaluations too: they ran on its kind
                            made.unlink(missing_ok=True)
                        shutil.rmtree(args.runs_dir / r.run_name, ignore_errors=True)
                kinds = []
            cpu_file.write_text("".join(f"{kind}\n" for kind in (kinds or [cpu()])))
            for r, p in zip(mine, records, strict=True):
                if finished(r, p):
                    continue
                start = time.monotonic()
                command = ["ega", "sweep", str(args.spec), "--only", r.run_name]
                command += ["--records_dir", str(args.records_dir), "--runs_dir", str(args.runs_dir)]
                done = subprocess.run(command, cwd=args.checkout, env=env_of(args.checkout))
                took = time.monotonic() - start
                print(f"seed {seed}: {r.run_name} exited {done.returncode} after {took:.0f} s", flush=True)
                if done.returncode != 0:
                    return done.returncode
                if not finished(r, p):  # the sweep exits 0 for a run it skips: nothing finished is nothing done
                    print(f"seed {seed}: {r.run_name} has neither a record nor a finished run directory", flush=True)
                    return 1
                if not p.is_file() and args.checkout.resolve() != REPO:
                    # the study's checkout could not record it (e2ababa refuses the author's attention order with
                    # gate none); this checkout's sweep writes the record from the finished run directory, so that
                    # the run is not lost with a machine that does not outlive the sitting
                    subprocess.run(command, cwd=REPO, env=env_of(REPO))
                    print(f"seed {seed}: {r.run_name} recorded by {REPO.name}'s sweep: {p.is_file()}", flush=True)
                # evaluated at once, not when the seed is done: a machine that does not outlive the sitting takes
                # the run directory (its checkpoint) with it, while the record and its evaluations are committed
                if status := evaluations(r, args):
                    return status
        for r in mine:  # runs an earlier sitting finished before their evaluations
            if status := evaluations(r, args):
                return status
        print(f"seed {seed}: done ({len(mine)} records)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
