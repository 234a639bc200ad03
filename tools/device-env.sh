# Sourced on the GPU machine: makes the carried .deps/ (see device-deps.sh)
# visible to pkg-config, the linker and the loader.
_deps="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.deps/root/usr/lib/x86_64-linux-gnu"
export PKG_CONFIG_PATH="$_deps/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LIBRARY_PATH="$_deps${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$_deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PATH:/usr/local/cuda/bin"
unset _deps
