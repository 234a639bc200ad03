"""ffpa: PyTorch front end to libffpa, fused attention for large head dimensions.

    import ffpa
    out = ffpa.scaled_dot_product_attention(q, k, v, is_causal=True)

Pure Python over the C library (ctypes); no extension to build. libffpa is
found through FFPA_LIBRARY (path of libffpa.so), next to this package, or
where the dynamic loader finds it (ctypes.util.find_library('ffpa')).
CPU tensors run on libffpa's cpu backend, CUDA tensors on its cuda backend on
PyTorch's current stream.
"""

from ._clib import LibraryNotFoundError, backends, library_path, library_version
from ._runtime import FFPAError, FFPAUnsupportedError, FFPAValueError
from ._ops import USES_CUSTOM_OP
from .functional import (attention_with_lse, flash_attn_with_kvcache, merge_partials,
                         scaled_dot_product_attention, varlen_attention)

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention",
    "attention_with_lse",
    "varlen_attention",
    "flash_attn_with_kvcache",
    "merge_partials",
    "FFPAError",
    "FFPAValueError",
    "FFPAUnsupportedError",
    "LibraryNotFoundError",
    "backends",
    "library_path",
    "library_version",
    "USES_CUSTOM_OP",
]
