#!/usr/bin/env bash
# Installs the Debian packages anyep builds and tests with. Safe to run again; does nothing when
# everything is already there. The CUDA toolkit is optional (CUDA code is compiled when nvcc exists).
set -euo pipefail
PKGS=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libfabric-dev libfabric-bin python3)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "anyep: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
