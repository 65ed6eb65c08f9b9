#!/bin/bash
# Installs the Debian 12 packages hybrid3d needs, if any is missing. As root
# it runs apt-get; as another user it lists what to ask an administrator for.
set -e
PKGS="cmake make g++ pkg-config openmpi-bin libopenmpi-dev libdnnl-dev libhdf5-openmpi-dev libfftw3-dev libfftw3-mpi-dev
      libcli11-dev nlohmann-json3-dev libgtest-dev python3-torch python3-numpy python3-h5py python3-matplotlib libnifti2-dev
      clang libclang-rt-14-dev libomp-14-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  echo "installing:$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
else
  echo "hybrid3d needs these Debian packages:$missing" >&2
  echo "ask an administrator for: sudo apt-get install$missing" >&2
  exit 1
fi
