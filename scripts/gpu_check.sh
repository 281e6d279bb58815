#!/usr/bin/env bash
# The first GPU machine's one command: checks every CUDA-only line of the project and measures it.
#
#   scripts/gpu_check.sh            # the checks: a few minutes on one H200 (an estimate)
#   scripts/gpu_check.sh --study    # then, as a separate command: configs/sweeps/paper.yaml (~8 minutes)
#
# Run from a copy of the repository that carries, beside its files:
#   wheels/   what the machine lacks, made here by scripts/gpu_wheels.sh (jsonargparse, PyWavelets, ...)
#   data/     the corpora (tinyshakespeare/, ptb/), or point EGA_DATA_DIR at them
# The machine needs its own torch with CUDA, Lightning, TensorBoard, torchmetrics, scipy, matplotlib;
# nothing is fetched: the project is installed with --no-deps from the carried wheels.
#
# Checks (each one PASS or FAIL in summary.txt; the exit status is 1 if any failed):
#   1. fused / flex / reference attention agree, fp32 and bf16, values and gradients (ega_lightning.device_check)
#   2. a 50-step `ega fit` at the paper size with bf16-mixed, killed (SIGKILL) and resumed once
#   3. a 50-step DDP fit on all visible GPUs (one GPU: a world of one, still NCCL and the distributed sampler)
#   4. the bench tables at the paper size, fp32 and bf16-mixed: results/bench-cuda-*.{md,json}
# Everything is left in one archive, gpu_check-<time>.tar.gz ($EGA_CHECK_OUT, default: the repository root).
# Without a CUDA device it says so and exits 0, having checked nothing.
#
# Rehearsal of the script itself on a CPU machine (checks nothing about CUDA, and says so):
#   EGA_CHECK_DEVICE=cpu EGA_CHECK_SIZE=cpu EGA_WHEELS=/nowhere \
#   EGA_CHECK_BENCH_ARGS="--gates linear --repeats 3 --no_generation" scripts/gpu_check.sh
# and of the study, with a small spec and records kept out of results/:
#   EGA_CHECK_DEVICE=cpu EGA_STUDY_SPEC=my_small.yaml EGA_STUDY_RECORDS=/tmp/records scripts/gpu_check.sh --study
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
STUDY=0
case "${1:-}" in
  "") ;;
  --study) STUDY=1 ;;
  *) echo "usage: scripts/gpu_check.sh [--study]" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}

DEVICE=${EGA_CHECK_DEVICE:-cuda}
SIZE=${EGA_CHECK_SIZE:-paper}
if [ "$DEVICE" = cuda ] && ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  torch_version=$("$PY" -c "import torch; print(torch.__version__)" 2>/dev/null || echo "none")
  echo "gpu_check: no CUDA device on this machine (torch: $torch_version). Nothing was checked."
  exit 0
fi

STAMP=$(date -u +%Y%m%d-%H%M%S)
WORK=${EGA_CHECK_WORK:-$REPO/gpu_check-$STAMP}
mkdir -p "$WORK/logs"
SUMMARY=$WORK/summary.txt
FAILED=0
say() { echo "$*" | tee -a "$SUMMARY"; }
verdict() {  # verdict NAME STATUS [detail]
  if [ "$2" -eq 0 ]; then say "PASS  $1 ${3:-}"; else say "FAIL  $1 ${3:-}(status $2; see logs/)"; FAILED=1; fi
}

# --- install: the carried wheels and the project itself, no dependency resolution, no network
SITE=$WORK/site
WHEELS=${EGA_WHEELS:-$REPO/wheels}
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl >"$WORK/logs/install.log" 2>&1
  verdict "install wheels from $WHEELS" $?
else
  say "note  no wheels in $WHEELS: relying on the machine's own packages (scripts/gpu_wheels.sh makes them)"
fi
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation --target "$SITE/project" "$REPO" \
  >>"$WORK/logs/install.log" 2>&1
verdict "install ega-lightning --no-deps" $?
# the installed package first; the repository after it, for configs/ and tests.helpers (a slowed-down step)
export PYTHONPATH="$SITE/project:$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
EGA=("$PY" -m ega_lightning.cli)
export EGA_DATA_DIR=${EGA_DATA_DIR:-$REPO/data}
if [ ! -f "$EGA_DATA_DIR/tinyshakespeare/input.txt" ] || [ ! -f "$EGA_DATA_DIR/ptb/ptb.train.txt" ]; then
  say "FAIL  corpora: none in $EGA_DATA_DIR (carry data/ beside the repository or set EGA_DATA_DIR)"
  exit 1
fi
{
  echo "# gpu_check $STAMP ($([ $STUDY -eq 1 ] && echo study || echo checks)) on $DEVICE, size $SIZE"
  [ "$DEVICE" = cuda ] || echo "REHEARSAL on $DEVICE: nothing about CUDA was checked"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
  "$PY" -c "import torch, lightning; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'lightning', lightning.__version__, 'gpus', torch.cuda.device_count())"
  git -C "$REPO" rev-parse HEAD 2>/dev/null || true
} | tee -a "$SUMMARY"

archive() {
  local out=${EGA_CHECK_OUT:-$REPO}/gpu_check-$STAMP.tar.gz
  # checkpoints and the installed packages stay out: the archive is the evidence, not the state
  tar -czf "$out" --exclude='*.ckpt' --exclude="$(basename "$WORK")/site" -C "$(dirname "$WORK")" "$(basename "$WORK")"
  echo "gpu_check: everything is in $out"
}

FIT=(fit -c configs/base.yaml -c "configs/size/$SIZE.yaml" -c configs/corpus/tinyshakespeare.yaml
     -c configs/gate/linear.yaml --trainer.max_steps=50 --trainer.val_check_interval=25
     --data.max_eval_windows=256 --trainer.enable_progress_bar=false --runs_dir="$WORK/runs")
step_of() {  # the global step a checkpoint was written at
  "$PY" -c "import sys, torch; print(torch.load(sys.argv[1], map_location='cpu', weights_only=False)['global_step'])" "$1"
}

if [ $STUDY -eq 1 ]; then
  # --- the paper-size study: every run of the spec at once on the one GPU, stopped before the deadline
  SPEC=${EGA_STUDY_SPEC:-configs/sweeps/paper.yaml}
  RECORDS=${EGA_STUDY_RECORDS:-$REPO/results/runs}
  SECONDS_LEFT=${EGA_STUDY_SECONDS:-480}
  SWEEP=(sweep "$SPEC" --runs_dir "$WORK/runs" --records_dir "$RECORDS")
  mapfile -t RUNS < <("${EGA[@]}" "${SWEEP[@]}" --dry_run | sed -n 's/^\[[0-9]*\/[0-9]*\] \([^:]*\): would .*/\1/p')
  say "study: ${#RUNS[@]} runs of $SPEC to do, all at once, stopped after $SECONDS_LEFT s"
  start=$(date +%s)
  pids=()
  for run in "${RUNS[@]}"; do  # its own session each: stopping one stops its `ega fit` too
    setsid "${EGA[@]}" "${SWEEP[@]}" --only "$run" >"$WORK/logs/sweep-$run.log" 2>&1 &
    pids+=($!)
  done
  while [ $(( $(date +%s) - start )) -lt "$SECONDS_LEFT" ]; do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 5
  done
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done  # a run cut short resumes next time
  for pid in "${pids[@]}"; do wait "$pid"; done
  mkdir -p "$WORK/records"
  recorded=0
  for run in "${RUNS[@]}"; do
    [ -f "$RECORDS/$run.json" ] && recorded=$((recorded + 1)) && cp "$RECORDS/$run.json" "$WORK/records/"
  done
  say "study: $recorded of ${#RUNS[@]} runs finished and recorded in $RECORDS after $(( $(date +%s) - start )) s"
  cat "$WORK"/logs/sweep-*.log 2>/dev/null | grep -E "done in|failed" | tee -a "$SUMMARY"
  "${EGA[@]}" report "$SPEC" --runs_dir "$WORK/runs" --out "$WORK/report" >"$WORK/logs/report.log" 2>&1 \
    || say "note  ega report did not finish (logs/report.log)"
  [ "$recorded" -eq "${#RUNS[@]}" ] || { say "note  rerun scripts/gpu_check.sh --study to finish the rest"; FAILED=1; }
  archive
  exit $FAILED
fi

# --- 1. attention paths agree
"$PY" -m ega_lightning.device_check --device "$DEVICE" --out "$WORK/equality.json" >"$WORK/logs/equality.log" 2>&1
verdict "fused/flex/reference equality (fp32, bf16; values, gradients)" $? "$(tail -n 1 "$WORK/logs/equality.log")"

# --- 2. bf16-mixed fit, killed mid-run and resumed
BF16=("${FIT[@]}" --trainer.precision=bf16-mixed --checkpoint_every_n_steps=10 --run_name=bf16)
LAST=$WORK/runs/bf16/checkpoints/last.ckpt
"${EGA[@]}" "${BF16[@]}" --trainer.callbacks+=tests.helpers.SleepEachStep --trainer.callbacks.seconds=0.2 \
  >"$WORK/logs/fit-bf16-killed.log" 2>&1 &
pid=$!
for _ in $(seq 600); do [ -f "$LAST" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
killed_at=$([ -f "$LAST" ] && step_of "$LAST" || echo none)
"${EGA[@]}" "${BF16[@]}" --ckpt_path=last >"$WORK/logs/fit-bf16-resumed.log" 2>&1
status=$?
final=$([ -f "$LAST" ] && step_of "$LAST" || echo none)
[ $status -eq 0 ] && [ "$killed_at" != none ] && [ "$killed_at" -lt 50 ] && [ "$final" = 50 ]
verdict "bf16-mixed fit killed at step $killed_at, resumed to step $final" $?

# --- 3. DDP on every visible GPU
DEVICES=$([ "$DEVICE" = cuda ] && echo -1 || echo 1)
"${EGA[@]}" "${FIT[@]}" --trainer.devices="$DEVICES" --trainer.strategy=ddp --trainer.precision=bf16-mixed \
  --run_name=ddp >"$WORK/logs/fit-ddp.log" 2>&1
status=$?
final=$([ -f "$WORK/runs/ddp/checkpoints/last.ckpt" ] && step_of "$WORK/runs/ddp/checkpoints/last.ckpt" || echo none)
[ $status -eq 0 ] && [ "$final" = 50 ]
verdict "DDP fit on $("$PY" -c 'import torch; print(torch.cuda.device_count())') GPU(s), world of $DEVICES, to step $final" $?

# --- 4. the bench tables at the paper size (a rehearsal writes into the work directory, not results/)
BENCH_OUT=$([ "$DEVICE" = cuda ] && echo "$REPO/results" || echo "$WORK/results")
for precision in bf16-mixed 32-true; do
  # shellcheck disable=SC2086  # EGA_CHECK_BENCH_ARGS is a list of words
  "${EGA[@]}" bench --sizes "$SIZE" --generation_sizes "$SIZE" --precision "$precision" --device "$DEVICE" \
    --out "$BENCH_OUT" ${EGA_CHECK_BENCH_ARGS:-} >"$WORK/logs/bench-$precision.log" 2>&1
  verdict "bench at the $SIZE size, $precision (results/bench-$DEVICE-$precision.md)" $?
done
mkdir -p "$WORK/results" && cp "$BENCH_OUT"/bench-"$DEVICE"-* "$WORK/results/" 2>/dev/null

say "$([ $FAILED -eq 0 ] && echo 'all checks passed' || echo 'SOME CHECKS FAILED')"
archive
exit $FAILED
