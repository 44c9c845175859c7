#!/usr/bin/env bash
# Installs the Debian 12 packages stagger builds against, only when missing.
# Idempotent: a second run with everything present does nothing and exits 0.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libucx-dev ucx-utils
  liburing-dev libzstd-dev librocksdb-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libxxhash-dev libcli11-dev
  librados-dev ceph-mon ceph-mgr ceph-osd   # the durable tier and its tests
  libcurl4-openssl-dev radosgw   # the S3 durable tier, and an S3 endpoint for its tests
  pybind11-dev python3-dev python3-numpy python3-pytest
  python3-venv    # the torch 2.x venv (bench/peers/setup_venv.sh)
  python3-torch   # stagger.torch and its tests (CPU build, ~80 MB of .debs)
)

# --fuzz: also clang and its libFuzzer runtime (make fuzz).
if [ "${1:-}" = "--fuzz" ]; then
  PKGS+=(clang-14 libclang-rt-14-dev)
fi

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
