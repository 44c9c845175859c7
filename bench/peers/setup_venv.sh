#!/bin/sh
# Makes the virtual environment bench/peers/dcp.py and `make test-torch2`
# run in: torch 2.x, numpy and pytest from PyPI, outside the repository
# (about 5 GB, once). Prints the environment's python on its last line.
#
#   bench/peers/setup_venv.sh [DIR]     (default: $STAGGER_PEERS_VENV, or
#                                        ~/.cache/stagger/peers-venv)
#
# Exits 0 with a message, and no python line, when PyPI cannot be reached:
# the peer comparison is then skipped, not failed.
set -eu
dir=${1:-${STAGGER_PEERS_VENV:-$HOME/.cache/stagger/peers-venv}}
py=$dir/bin/python
if [ -x "$py" ] && "$py" -c 'import torch, numpy, pytest, sys
sys.exit(0 if int(torch.__version__.split(".")[0]) >= 2 else 1)' 2>/dev/null; then
  echo "$py"
  exit 0
fi
# The same interpreter the stagger module is built for.
if ! /usr/bin/python3 -m venv "$dir"; then
  echo "setup_venv.sh: python3 -m venv failed (python3-venv, installed by" \
    "scripts/install-deps.sh --test); the torch 2.x tests and the DCP peer are" \
    "skipped" >&2
  exit 0
fi
# No pip cache: the wheels would take as much disk again.
if ! "$dir/bin/pip" install --quiet --no-cache-dir \
    --disable-pip-version-check "torch>=2" numpy pytest; then
  echo "setup_venv.sh: could not install torch from PyPI; the torch 2.x" \
    "tests and the DCP peer are skipped" >&2
  exit 0
fi
echo "$py"
