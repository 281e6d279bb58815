#!/usr/bin/env bash
# The image, built and used here as a new user would: what CI runs after the test suite (.ci/run).
#
#   scripts/docker_smoke.sh        # as root on a Debian bookworm machine with apt; about 5 minutes
#
# The CUDA base image and PyTorch's index cannot be reached from this project's machines, and pip inside a
# container cannot verify the registry's certificate (an intercepting proxy only the host trusts). So:
#   base       a Debian image made from Debian's packages: debootstrap --variant=minbase bookworm, docker import
#   wheels     every package the image needs, downloaded on the host (pip download), served to the build over
#              http on 127.0.0.1 (PIP_NO_INDEX=1 PIP_FIND_LINKS=...), torch $EGA_SMOKE_TORCH (the CPU wheel)
#   image      docker/Dockerfile with those as build arguments, --network=host; cold (--no-cache), then cached
# and then, in the image (--network=none unless said):
#   1. `ega --help` as the entry point, as uid 1000 (user ega); the user step on a base with a uid-1000 user
#   2. a tiny `ega fit` into a named volume: checkpoints, events and config.yaml owned by ega
#   3. `docker stop` during a fit: exit 143 and the resume hint, then `--ckpt_path last` finishes it
#   4. a bind-mounted runs folder of another owner: one paragraph naming the fix; that fix (--user) trains,
#      and matplotlib has a config directory it can write
#   5. a packaged sweep spec from the image's WORKDIR (dry run), and a tiny sweep whose record lands in the
#      results volume
#   6. compose (docker-compose, v1, or `docker compose`): the train service's own command with a few-step
#      override appended, then TensorBoard started alone (host network) answering on 127.0.0.1, listing that run;
#      and `docker-compose config` accepts compose.yaml alone and with compose.gpu.yaml
# Each step prints PASS or FAIL and its seconds; the exit status is 1 if any failed. A container engine that
# cannot start at all (no dockerd, not root) is a skip: exit 77, saying why. It starts dockerd only when none
# answers (--iptables=false --ip-forward=false --bridge=none: the host's network is left as it was, which the
# script checks at the end), stops everything it started by PID or container id, and bounds every wait.
# EGA_SMOKE_WORK keeps the wheels and the logs somewhere (default: a temporary directory); EGA_SMOKE_COLD=0 lets
# the first build use the cache (a rerun, while changing the script).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PYTHON:-python3}
IMAGE=ega-lightning:smoke
BASE=${EGA_SMOKE_BASE:-local/debian:bookworm}
SUITE=bookworm
MIRROR=${EGA_SMOKE_MIRROR:-http://deb.debian.org/debian}
TORCH=${EGA_SMOKE_TORCH:-2.13.0+cpu}
PYTHON_TAG=3.11  # bookworm's python3: the wheels are downloaded for it, whatever runs this script
DATA=${EGA_DATA_DIR:-$(cd .. && pwd)/shared/data}
WORK=${EGA_SMOKE_WORK:-$(mktemp -d /tmp/ega-docker-smoke.XXXXXX)}
mkdir -p "$WORK/logs"
TAG=ega-smoke-$$  # this run's volumes and compose project
FAILED=0
T0=$(date +%s)

say() { echo "docker_smoke: $*"; }
verdict() {  # verdict NAME STATUS SECONDS [detail]
  if [ "$2" -eq 0 ]; then say "PASS  $1 (${3}s) ${4:-}"; else say "FAIL  $1 (${3}s) ${4:-}(logs: $WORK/logs)"; FAILED=1; fi
}
skip() { say "SKIP: $*"; exit 77; }
die() { say "FAIL  $*"; FAILED=1; exit 1; }
since() { echo $(($(date +%s) - $1)); }

# --- the host's network, to compare at the end: interfaces, forwarding, firewall rules
network_state() {
  ls /sys/class/net
  cat /proc/sys/net/ipv4/ip_forward
  if command -v iptables-save >/dev/null; then iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9:]*\]//'; fi
}
network_state >"$WORK/network.before"

# --- cleanup: what this script started, by PID or id, each wait bounded
DOCKERD_PID="" HTTP_PID="" CONTAINERS=() VOLUMES=() COMPOSE=()
stop_pid() {  # stop_pid PID SECONDS: SIGTERM, wait, then SIGKILL
  local pid=$1 t=0
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null && [ "$t" -lt "$2" ]; do sleep 1; t=$((t + 1)); done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  for c in "${CONTAINERS[@]}"; do timeout 60 docker rm -f -v "$c" >/dev/null 2>&1; done  # -v: its anonymous volumes
  if [ ${#COMPOSE[@]} -gt 0 ]; then timeout 120 "${COMPOSE[@]}" down --volumes >/dev/null 2>&1; fi
  for v in "${VOLUMES[@]}"; do timeout 60 docker volume rm -f "$v" >/dev/null 2>&1; done
  [ -n "$HTTP_PID" ] && stop_pid "$HTTP_PID" 10
  if [ -n "$DOCKERD_PID" ]; then
    local children
    children=$(ps -o pid= --ppid "$DOCKERD_PID" 2>/dev/null)  # the containerd dockerd started
    stop_pid "$DOCKERD_PID" 60
    for pid in $children; do stop_pid "$pid" 20; done
  fi
  network_state >"$WORK/network.after"
  if diff "$WORK/network.before" "$WORK/network.after" >"$WORK/logs/network.diff"; then
    say "host network: as it was (interfaces, ip_forward, iptables rules)"
  else
    say "FAIL  host network changed:"; cat "$WORK/logs/network.diff"; code=1
  fi
  say "total $(since "$T0")s; logs in $WORK/logs"
  [ "$code" -eq 0 ] && [ "$FAILED" -ne 0 ] && code=1
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the container engine: Debian's packages, installed when missing; a dockerd of our own if none answers
t=$(date +%s)
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || missing+=(docker-compose)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null || skip "no ${missing[*]} here, and no apt-get as root to install them"
  say "installing ${missing[*]} (apt-get)"
  if ! timeout 600 sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${missing[*]}" \
    >"$WORK/logs/apt.log" 2>&1; then
    tail -5 "$WORK/logs/apt.log"; die "apt-get install ${missing[*]}"
  fi
fi
if ! timeout 20 docker info >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] || skip "no docker daemon answers, and only root can start one"
  dockerd --iptables=false --ip-forward=false --bridge=none --pidfile "$WORK/dockerd.pid" \
    >"$WORK/logs/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 60); do
    timeout 5 docker info >/dev/null 2>&1 && break
    kill -0 "$DOCKERD_PID" 2>/dev/null || break
    sleep 0.5
  done
  if ! timeout 10 docker info >/dev/null 2>&1; then
    tail -5 "$WORK/logs/dockerd.log"
    skip "dockerd does not start on this machine (its log: $WORK/logs/dockerd.log)"
  fi
fi
if command -v docker-compose >/dev/null; then COMPOSE_CMD=(docker-compose); else COMPOSE_CMD=(docker compose); fi
engine="dockerd $(docker version -f '{{.Server.Version}}' 2>/dev/null) ${DOCKERD_PID:+(started here, pid $DOCKERD_PID)}"
verdict "container engine: $engine; compose $("${COMPOSE_CMD[@]}" version --short 2>/dev/null | head -1)" 0 "$(since "$t")"

# --- the base: Debian's own packages, no registry
t=$(date +%s)
if docker image inspect "$BASE" >/dev/null 2>&1; then
  verdict "base $BASE (already here)" 0 "$(since "$t")"
else
  rm -rf "$WORK/rootfs"
  timeout 900 debootstrap --variant=minbase "$SUITE" "$WORK/rootfs" "$MIRROR" >"$WORK/logs/debootstrap.log" 2>&1 \
    && tar -C "$WORK/rootfs" -c . | timeout 300 docker import - "$BASE" >>"$WORK/logs/debootstrap.log" 2>&1
  s=$?
  verdict "base $BASE (debootstrap --variant=minbase $SUITE, docker import)" $s "$(since "$t")"
  rm -rf "$WORK/rootfs"
  docker image inspect "$BASE" >/dev/null 2>&1 || die "no base image"
fi

# --- the wheels, downloaded here, where pip trusts the registry
t=$(date +%s)
lightning=$(sed -n 's/^ARG LIGHTNING_VERSION=//p' docker/Dockerfile)
mapfile -t requirements < <("$PY" -c '
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))
print("\n".join(project["project"]["dependencies"] + project["build-system"]["requires"]))')
timeout 600 "$PY" -m pip download --quiet --dest "$WORK/wheels" --only-binary=:all: --python-version "$PYTHON_TAG" \
  "torch==$TORCH" "lightning==$lightning" "${requirements[@]}" >"$WORK/logs/wheels.log" 2>&1
s=$?
verdict "wheelhouse: $(ls "$WORK/wheels" 2>/dev/null | wc -l) wheels, $(du -sh "$WORK/wheels" 2>/dev/null | cut -f1)" $s "$(since "$t")"
[ $s -eq 0 ] || { tail -5 "$WORK/logs/wheels.log"; die "pip download"; }
free_port() {  # free_port PREFERRED: that port when it is free, else any free one
  "$PY" -c 'import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])' "$1"
}
PORT=$(free_port 8765)  # the same port each time: its URL is a build argument, so a part of the cache key
"$PY" -m http.server --bind 127.0.0.1 --directory "$WORK/wheels" "$PORT" >"$WORK/logs/http.log" 2>&1 &
HTTP_PID=$!
for _ in $(seq 40); do curl -fs "http://127.0.0.1:$PORT/" >/dev/null && break; sleep 0.25; done

# --- the image: cold, then cached
BUILD_ARGS=(--build-arg "BASE=$BASE" --build-arg "TORCH_VERSION=$TORCH" --build-arg TORCH_INDEX=
  --build-arg PIP_NO_INDEX=1 --build-arg "PIP_FIND_LINKS=http://127.0.0.1:$PORT/")
build() {  # build LOG [docker build options]
  local log=$1
  shift
  timeout 1500 docker build --network=host -f docker/Dockerfile -t "$IMAGE" "${BUILD_ARGS[@]}" "$@" . >"$log" 2>&1
}
previous=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null)  # an earlier run's image, replaced below
t=$(date +%s)
if [ "${EGA_SMOKE_COLD:-1}" = 1 ]; then build "$WORK/logs/build-cold.log" --no-cache; else build "$WORK/logs/build-cold.log"; fi
status=$?
COLD=$(since "$t")
context=$(sed -n 's/^Sending build context to Docker daemon *//p' "$WORK/logs/build-cold.log" | tail -1)
verdict "image, cold build (context ${context:-?})" $status "$COLD"
[ $status -eq 0 ] || { tail -20 "$WORK/logs/build-cold.log"; die "the image did not build"; }
t=$(date +%s)
build "$WORK/logs/build-cached.log"
status=$?
CACHED=$(since "$t")
verdict "image, cached build" $status "$CACHED"
SIZE=$(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.2f GB", $1 / 1e9}')
if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]; then
  docker rmi "$previous" >/dev/null 2>&1  # untagged now: ours, and 1.7 GB
fi

RUN=(timeout 600 docker run --rm --network=none -v "$DATA:/data:ro")  # on a timeout the client passes the signal on
TINY=(--model.n_layer=2 --model.n_head=2 --model.n_embd=32 --model.block_size=32 --data.batch_size=4
  --data.max_eval_windows=4 --trainer.enable_progress_bar=false)
SHORT=(--trainer.max_steps=2 --trainer.val_check_interval=2)
volume() {  # volume NAME: a named volume of this run, removed at the end (call it in this shell, not in $(...))
  VOLUMES+=("$1")
  docker volume create "$1" >/dev/null
}

# 1. the entry point, the user
t=$(date +%s)
{ "${RUN[@]}" "$IMAGE" --help && "${RUN[@]}" --entrypoint id "$IMAGE"; } >"$WORK/logs/1-help.log" 2>&1 \
  && grep -q '^  fit ' "$WORK/logs/1-help.log" && grep -q '^uid=1000(ega)' "$WORK/logs/1-help.log"
s=$?
verdict "1. ega --help as the entry point, as $(grep -o '^uid=[^ ]*' "$WORK/logs/1-help.log")" $s "$(since "$t")"
t=$(date +%s)
timeout 120 docker run --rm --network=none -v "$REPO/docker/add-user.sh:/add-user.sh:ro" "$BASE" sh -c \
  'useradd --create-home --uid 1000 --user-group ubuntu && sh /add-user.sh && ls -d /home/ega' \
  >"$WORK/logs/1-user.log" 2>&1 && grep -q '^user: uid=1000(ega) gid=1000(ega)' "$WORK/logs/1-user.log"
s=$?
verdict "1. the user step on a base that has uid 1000 already (ubuntu): $(grep -o 'uid=.*' "$WORK/logs/1-user.log")" \
  $s "$(since "$t")"

# 2. a tiny fit into a named volume; what it wrote belongs to ega
t=$(date +%s)
RUNS=$TAG-runs
volume "$RUNS"
"${RUN[@]}" -v "$RUNS:/workspace/lightning_logs" "$IMAGE" fit "${TINY[@]}" "${SHORT[@]}" --run_name=tiny \
  >"$WORK/logs/2-fit.log" 2>&1 \
  && "${RUN[@]}" -v "$RUNS:/runs" --entrypoint find "$IMAGE" /runs/tiny -type f -printf '%u %P\n' \
    >"$WORK/logs/2-owners.log" 2>&1 \
  && grep -q '^ega checkpoints/best.ckpt$' "$WORK/logs/2-owners.log" \
  && grep -q '^ega config.yaml$' "$WORK/logs/2-owners.log" \
  && grep -q '^ega events.out.tfevents' "$WORK/logs/2-owners.log" \
  && ! grep -qv '^ega ' "$WORK/logs/2-owners.log"
s=$?
verdict "2. a tiny fit into a named volume, $(wc -l <"$WORK/logs/2-owners.log") files, all owned by ega" $s "$(since "$t")"

# 3. docker stop during a fit: 143 and the resume hint; the resume finishes
t=$(date +%s)
LONG=(fit "${TINY[@]}" --trainer.max_steps=60 --trainer.val_check_interval=60 --checkpoint_every_n_steps=5
  --run_name=stopped)
cid=$(timeout 60 docker run -d --network=none -v "$DATA:/data:ro" -v "$RUNS:/workspace/lightning_logs" "$IMAGE" "${LONG[@]}")
CONTAINERS+=("$cid")
for _ in $(seq 240); do  # at most 2 minutes for the first last.ckpt
  timeout 10 docker exec "$cid" test -f /workspace/lightning_logs/stopped/checkpoints/last.ckpt 2>/dev/null && break
  [ "$(docker inspect -f '{{.State.Running}}' "$cid")" = true ] || break
  sleep 0.5
done
timeout 90 docker stop -t 60 "$cid" >/dev/null
code=$(timeout 30 docker wait "$cid")
docker logs "$cid" >"$WORK/logs/3-stopped.log" 2>&1
[ "$code" = 143 ] && grep -q 'stopped by SIGTERM' "$WORK/logs/3-stopped.log" \
  && grep -q -- '--ckpt_path last' "$WORK/logs/3-stopped.log" \
  && "${RUN[@]}" -v "$RUNS:/workspace/lightning_logs" "$IMAGE" "${LONG[@]}" --ckpt_path last \
    >"$WORK/logs/3-resumed.log" 2>&1 \
  && grep -q 'finished at step 60 of 60' "$WORK/logs/3-resumed.log"
s=$?
verdict "3. docker stop during a fit: exit $code, then --ckpt_path last finished it" $s "$(since "$t")"

# 4. a bind-mounted runs folder of another owner: the paragraph, then its fix
t=$(date +%s)
mkdir -p "$WORK/theirs" && chown 4242:4242 "$WORK/theirs" && chmod 755 "$WORK/theirs"
"${RUN[@]}" -v "$WORK/theirs:/workspace/lightning_logs" "$IMAGE" fit "${TINY[@]}" "${SHORT[@]}" --run_name=r \
  >"$WORK/logs/4-refused.log" 2>&1
code=$?
[ "$code" -eq 74 ] && ! grep -q Traceback "$WORK/logs/4-refused.log" \
  && grep '^ega fit: error: ' "$WORK/logs/4-refused.log" | grep -q 'named volume.*--user 4242:4242'
s=$?
verdict "4. a runs folder owned by uid 4242: exit $code, one paragraph naming a named volume or --user 4242:4242" \
  $s "$(since "$t")"
t=$(date +%s)
"${RUN[@]}" --user 4242:4242 -v "$WORK/theirs:/workspace/lightning_logs" "$IMAGE" fit "${TINY[@]}" "${SHORT[@]}" \
  --run_name=r >"$WORK/logs/4-user.log" 2>&1 \
  && [ "$(stat -c %u "$WORK/theirs/r/checkpoints/best.ckpt")" = 4242 ] && ! grep -qi matplotlib "$WORK/logs/4-user.log"
s=$?
verdict "4. the same fit with --user 4242:4242: trained, its files the folder owner's, no matplotlib warning" \
  $s "$(since "$t")"
rm -rf "$WORK/theirs"

# 5. sweep specs from the package; records in the results volume
t=$(date +%s)
"${RUN[@]}" "$IMAGE" sweep configs/sweeps/paper.yaml --dry_run >"$WORK/logs/5-dry.log" 2>&1 \
  && [ "$(grep -c 'would start' "$WORK/logs/5-dry.log")" -eq 12 ]
s=$?
verdict "5. ega sweep configs/sweeps/paper.yaml --dry_run in /workspace: $(grep -c 'would start' "$WORK/logs/5-dry.log") runs" \
  $s "$(since "$t")"
t=$(date +%s)
"$PY" - "${TINY[@]}" "${SHORT[@]}" >"$WORK/tiny-sweep.yaml" <<'EOF'
import json, sys
spec = {"name": "smoke", "configs": ["configs/base.yaml", "size/cpu.yaml"], "args": sys.argv[1:],
        "runs": [{"name": "smoke-db4", "configs": ["configs/corpus/tinyshakespeare.yaml", "gate/db4.yaml"], "seeds": [1]}]}
print(json.dumps(spec))  # JSON is YAML
EOF
RESULTS=$TAG-results
volume "$RESULTS"
"${RUN[@]}" -v "$RUNS:/workspace/lightning_logs" -v "$RESULTS:/workspace/results" \
  -v "$WORK/tiny-sweep.yaml:/specs/smoke.yaml:ro" "$IMAGE" sweep /specs/smoke.yaml >"$WORK/logs/5-sweep.log" 2>&1 \
  && "${RUN[@]}" -v "$RESULTS:/results" --entrypoint find "$IMAGE" /results -type f -printf '%u %P\n' \
    >"$WORK/logs/5-records.log" 2>&1 && grep -q '^ega runs/smoke-db4-seed1.json$' "$WORK/logs/5-records.log"
s=$?
verdict "5. a sweep naming packaged configs: its record in the results volume, owned by ega" $s "$(since "$t")"

# 6. compose: the train service's command with a few steps appended; TensorBoard alone, on the host network
t=$(date +%s)
TB_PORT=$(free_port 0)
"$PY" - "$IMAGE" "$DATA" "$TB_PORT" >"$WORK/compose.smoke.yaml" <<'EOF'
import json, sys
import yaml
image, data, port = sys.argv[1:]
services = yaml.safe_load(open("docker/compose.yaml"))["services"]
few_steps = ["--trainer.max_steps=2", "--trainer.val_check_interval=2", "--trainer.enable_progress_bar=false",
             "--data.batch_size=8", "--data.max_eval_windows=2", "--run_name=compose"]
board = services["tensorboard"]["entrypoint"]
board[board.index("--host") + 1], board[board.index("--port") + 1] = "127.0.0.1", port  # loopback only
print(json.dumps({"services": {
    "train": {"image": image, "network_mode": "none", "volumes": [f"{data}:/data:ro"],
              "command": services["train"]["command"] + few_steps},
    "tensorboard": {"image": image, "network_mode": "host", "entrypoint": board},
}}))
EOF
{ "${COMPOSE_CMD[@]}" -f docker/compose.yaml config -q \
  && "${COMPOSE_CMD[@]}" -f docker/compose.yaml -f docker/compose.gpu.yaml config -q; } >"$WORK/logs/6-config.log" 2>&1 \
  && ! grep -q . "$WORK/logs/6-config.log"
s=$?
verdict "6. compose config: compose.yaml, and with compose.gpu.yaml, without a warning" $s "$(since "$t")"
t=$(date +%s)
COMPOSE=("${COMPOSE_CMD[@]}" -p "$TAG" -f docker/compose.yaml -f "$WORK/compose.smoke.yaml")
timeout 900 "${COMPOSE[@]}" run --rm -T train >"$WORK/logs/6-compose-train.log" 2>&1 \
  && grep -q 'finished at step 2 of 2' "$WORK/logs/6-compose-train.log"
s=$?
verdict "6. compose: the train service's command + a few-step override" $s "$(since "$t")"
t=$(date +%s)
# `run` publishes no ports (compose v1 refuses host networking with them) and would start any depends_on
timeout 120 "${COMPOSE[@]}" run -d --rm tensorboard >"$WORK/logs/6-compose-tensorboard.log" 2>&1
board=$(tail -1 "$WORK/logs/6-compose-tensorboard.log")
[ -n "$board" ] && CONTAINERS+=("$board")
for _ in $(seq 120); do  # at most a minute for TensorBoard to answer
  curl -fs "http://127.0.0.1:$TB_PORT/data/runs" >"$WORK/logs/6-runs.json" 2>/dev/null && break
  sleep 0.5
done
started=$(docker ps --filter "label=com.docker.compose.project=$TAG" --format '{{.Label "com.docker.compose.service"}}')
[ "$started" = tensorboard ] && grep -q compose "$WORK/logs/6-runs.json"
s=$?
verdict "6. compose: tensorboard alone (running: $(echo $started)), on 127.0.0.1:$TB_PORT, lists $(cat "$WORK/logs/6-runs.json" 2>/dev/null)" \
  $s "$(since "$t")"

say "timings: cold build ${COLD}s, cached build ${CACHED}s; image $IMAGE $SIZE"
