#!/usr/bin/env bash
# The pictures of docs/tensorboard.md: trains three small example runs (EGA-1, the baseline, FoX) into a scratch
# directory, validates and tests EGA-1's best checkpoint, starts TensorBoard on 127.0.0.1 and a free port, and
# takes headless-Chromium screenshots of its Custom Scalars, HPARAMS, Images and Text dashboards into
# docs/tensorboard/. Event files stay in the scratch directory (never in git); the PNGs are committed.
#   scripts/tensorboard_screenshots.sh            (from the repository root; installs Debian's chromium if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/tensorboard
work=$(mktemp -d)
python=${PYTHON:-python}
tb_pid=""
cleanup() {
  [ -n "$tb_pid" ] && kill "$tb_pid" 2>/dev/null && wait "$tb_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

command -v chromium >/dev/null || { apt-get install -y -q chromium >/dev/null; }
mkdir -p "$out"

# small runs: 2 layers of 4 heads, 300 steps, an evaluation every 50 (a minute or two each on 2 cores)
size=(--model.n_layer=2 --model.n_head=4 --model.n_embd=64 --model.block_size=64 --data.batch_size=16
      --data.max_eval_windows=32 --trainer.max_steps=300 --trainer.val_check_interval=50
      --trainer.enable_progress_bar=false)
fit() { (cd "$work" && "$python" -m ega_lightning.cli fit "${size[@]}" "$@" >/dev/null); }
fit --run_name=ega1
fit --model.gate=none --run_name=baseline
fit --model.gate=fox --run_name=fox
for command in validate test; do
  (cd "$work" && "$python" -m ega_lightning.cli "$command" --ckpt_path lightning_logs/ega1/checkpoints/best.ckpt \
      --data.max_eval_windows=32 >/dev/null)
done

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# from inside the scratch directory, so the pictures show the logdir a user types (lightning_logs), not a /tmp path
(cd "$work" && exec tensorboard --logdir lightning_logs --host 127.0.0.1 --port "$port" >/dev/null 2>&1) &
tb_pid=$!
for _ in $(seq 60); do
  curl -sf "http://127.0.0.1:$port/data/runs" >/dev/null && break
  sleep 1
done
sleep 5  # the loader reads the event files in the background

shot() {  # dashboard, file, window width
  timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
    --user-data-dir="$work/chromium" --window-size="$3",1000 --virtual-time-budget=20000 \
    --screenshot="$out/$2" "http://127.0.0.1:$port/#$1" >/dev/null 2>&1
  echo "$out/$2"
}
shot custom_scalars custom_scalars.png 1400
shot hparams hparams.png 2400  # wide enough for the metric columns after the hyper-parameters
shot images images.png 1400
shot text text.png 1400
