# Sourced by the scripts: puts the CUDA toolkit on PATH where it exists, so
# meson's cuda=auto finds nvcc and builds the CUDA plugin.
if [ -x /usr/local/cuda/bin/nvcc ]; then
  case ":$PATH:" in *":/usr/local/cuda/bin:"*) ;; *) export PATH="$PATH:/usr/local/cuda/bin" ;; esac
fi
