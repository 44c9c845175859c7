#!/usr/bin/env bash
# Installs the Debian 12 packages stagger builds against, only when missing.
# Idempotent: a second run with everything present does nothing and exits 0.
#
#   scripts/install-deps.sh          what building needs (make demo, make build)
#   scripts/install-deps.sh --test   and what the test suite runs (make test)
#   scripts/install-deps.sh --fuzz   and clang with libFuzzer (make fuzz)
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libucx-dev ucx-utils
  liburing-dev libzstd-dev librocksdb-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libxxhash-dev libcli11-dev
  librados-dev           # the RADOS durable tier
  libcurl4-openssl-dev   # the S3 durable tier
  pybind11-dev python3-dev python3-numpy
)
TEST_PKGS=(
  ceph-mon ceph-mgr ceph-osd radosgw   # a one-node cluster and S3 endpoint
  python3-pytest
  python3-venv    # the torch 2.x venv (bench/peers/setup_venv.sh)
  python3-torch   # stagger.torch and its tests (CPU build, ~80 MB of .debs)
)

for arg in "$@"; do
  case "$arg" in
    --test) PKGS+=("${TEST_PKGS[@]}") ;;
    --fuzz) PKGS+=(clang-14 libclang-rt-14-dev) ;;
    *) echo "install-deps.sh: unknown argument $arg (--test, --fuzz)" >&2
       exit 2 ;;
  esac
done

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
