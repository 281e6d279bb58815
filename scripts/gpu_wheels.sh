#!/usr/bin/env bash
# Downloads, into wheels/ (ignored by git), what scripts/gpu_check.sh installs on a GPU machine that
# reaches no package registry: the project's dependencies such a machine lacks, as wheels for its
# Python (3.12 by default: PY_VERSION=3.11 scripts/gpu_wheels.sh for another). Run where pip works:
#   scripts/gpu_wheels.sh && ls wheels/
# Versions: the ones this project is tested with. Their own needs (PyYAML, numpy, typing-extensions)
# are on such machines already (see scripts/gpu_check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY_VERSION=${PY_VERSION:-3.12}
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest wheels \
  --python-version "$PY_VERSION" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 \
  "jsonargparse==4.53.0" "docstring-parser==0.18.0" "typeshed-client==2.15.0" "pywavelets==1.9.0"
ls -l wheels/
