"""ctypes mirror of api/ffpa.h and the search for libffpa.

Only this module knows the C declarations; keep it in step with api/ffpa.h
(struct field order and types must match exactly).
"""

import collections
import ctypes
import ctypes.util
import glob
import os
import threading

# ffpa_status
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_UNSUPPORTED = 2
ERR_NO_BACKEND = 3
ERR_OUT_OF_MEMORY = 4
ERR_DEVICE = 5
ERR_INTERNAL = 6

# ffpa_dtype
F16 = 0
BF16 = 1
F32 = 2

# ffpa_grad_accum
GRAD_ACCUM_F32 = 0
GRAD_ACCUM_OUTPUT = 1

MAX_HEAD_DIM = 1024
MERGE_MAX_PARTS = 16


class Tensor(ctypes.Structure):
    """struct ffpa_tensor: shape [B, H, N, D], strides in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),  # enum ffpa_dtype
        ("shape", ctypes.c_int64 * 4),
        ("stride", ctypes.c_int64 * 4),
    ]


class Options(ctypes.Structure):
    """struct ffpa_options (field order as in api/ffpa.h)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("bias", ctypes.POINTER(Tensor)),
        ("dropout_p", ctypes.c_float),
        ("dropout_seed", ctypes.c_uint64),
        ("dropout_offset", ctypes.c_uint64),
        ("cu_seqlens_q", ctypes.POINTER(ctypes.c_int32)),
        ("cu_seqlens_k", ctypes.POINTER(ctypes.c_int32)),
        ("varlen_batch", ctypes.c_int32),
        ("grad_accum", ctypes.c_int),  # enum ffpa_grad_accum
        ("deterministic", ctypes.c_int),
        ("dbias", ctypes.POINTER(Tensor)),
        ("window", ctypes.c_int),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", ctypes.POINTER(Tensor)),
        ("cu_seqlens_on_device", ctypes.c_int),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
    ]


class KvCache(ctypes.Structure):
    """struct ffpa_kv_cache."""

    _fields_ = [
        ("k", Tensor),
        ("v", Tensor),
        ("block_table", ctypes.POINTER(ctypes.c_int32)),
        ("max_pages_per_seq", ctypes.c_int64),
        ("block_table_stride", ctypes.c_int64),
        ("cache_seqlens", ctypes.POINTER(ctypes.c_int32)),
        ("trusted_tables", ctypes.c_int),
    ]


class BackendInfo(ctypes.Structure):
    """struct ffpa_backend_info."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("available", ctypes.c_int),
        ("detail", ctypes.c_char * 512),
        ("version", ctypes.c_char * 32),
    ]


class LibraryNotFoundError(OSError):
    """libffpa could not be loaded from any of the places searched."""


_T = ctypes.POINTER(Tensor)
_O = ctypes.POINTER(Options)
_CTX = ctypes.c_void_p
_STATUS = ctypes.c_int

# name -> (restype, argtypes)
_PROTOTYPES = {
    "ffpa_status_string": (ctypes.c_char_p, [_STATUS]),
    "ffpa_version": (ctypes.c_int, []),
    "ffpa_version_string": (ctypes.c_char_p, []),
    "ffpa_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
    "ffpa_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
    "ffpa_options_default": (Options, []),
    "ffpa_backend_count": (ctypes.c_int, []),
    "ffpa_backend_get_info": (_STATUS, [ctypes.c_int, ctypes.POINTER(BackendInfo)]),
    "ffpa_create": (_STATUS, [ctypes.POINTER(_CTX), ctypes.c_char_p]),
    "ffpa_destroy": (None, [_CTX]),
    "ffpa_backend_name": (ctypes.c_char_p, [_CTX]),
    "ffpa_device_name": (ctypes.c_char_p, [_CTX]),
    "ffpa_last_error": (ctypes.c_char_p, [_CTX]),
    "ffpa_set_stream": (_STATUS, [_CTX, ctypes.c_void_p]),
    "ffpa_synchronize": (_STATUS, [_CTX]),
    "ffpa_set_workspace": (_STATUS, [_CTX, ctypes.c_void_p, ctypes.c_size_t]),
    "ffpa_forward_workspace_size": (_STATUS, [_CTX, _T, _T, _T, _O, ctypes.POINTER(ctypes.c_size_t)]),
    "ffpa_backward_workspace_size": (_STATUS, [_CTX, _T, _T, _T, _O, ctypes.POINTER(ctypes.c_size_t)]),
    "ffpa_forward": (_STATUS, [_CTX, _T, _T, _T, _T, _T, _O]),
    "ffpa_backward": (_STATUS, [_CTX, _T, _T, _T, _T, _T, _T, _T, _T, _T, _O]),
    "ffpa_forward_kvcache": (_STATUS, [_CTX, _T, ctypes.POINTER(KvCache), _T, _T, _T, _T, _O]),
    "ffpa_forward_kvcache_workspace_size": (_STATUS, [_CTX, _T, ctypes.POINTER(KvCache), _O,
                                                      ctypes.POINTER(ctypes.c_size_t)]),
    "ffpa_merge_partials": (_STATUS, [_CTX, ctypes.c_int, _T, _T, _T, _T]),
}

_lib = None
_lib_lock = threading.Lock()


def _candidates():
    """Where libffpa is looked for, in order."""
    env = os.environ.get("FFPA_LIBRARY")
    if env:
        # An explicit choice is the only candidate: never silently use another.
        return [env]
    found = []
    here = os.path.dirname(os.path.abspath(__file__))
    # A wheel built by `pip install ./python` (meson-python) carries libffpa
    # and its plugins in site-packages/.ffpa.mesonpy.libs.
    bundled = os.path.join(os.path.dirname(here), ".ffpa.mesonpy.libs")
    for path in sorted(glob.glob(os.path.join(bundled, "libffpa.so*")), key=len):
        found.append(path)
    for folder in (here, os.path.join(here, "lib")):
        for name in ("libffpa.so", "libffpa.so.0", "libffpa.dylib", "ffpa.dll"):
            path = os.path.join(folder, name)
            if os.path.exists(path):
                found.append(path)
    system = ctypes.util.find_library("ffpa")
    if system:
        found.append(system)
    # Let the dynamic loader try its own search path (LD_LIBRARY_PATH, rpath).
    found.extend(["libffpa.so.0", "libffpa.so"])
    return found


def _bind(lib):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def library():
    """The loaded libffpa (loaded on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            errors = []
            for path in _candidates():
                try:
                    lib = ctypes.CDLL(path)
                except OSError as exc:
                    errors.append("%s (%s)" % (path, exc))
                    continue
                try:
                    _lib = _bind(lib)
                except AttributeError as exc:
                    errors.append("%s (not libffpa: %s)" % (path, exc))
                    continue
                _lib.ffpa_path = path
                break
            else:
                raise LibraryNotFoundError(
                    "libffpa not found; set FFPA_LIBRARY to the path of libffpa.so, or install "
                    "the library where the dynamic loader finds it. Tried: " + "; ".join(errors))
    return _lib


def library_path():
    """Path (or loader name) libffpa was loaded from."""
    return library().ffpa_path


def status_string(status):
    return library().ffpa_status_string(status).decode()


Backend = collections.namedtuple("Backend", "name available detail version")


def backends():
    """[Backend(name, available, detail, version)] for every backend this
    build knows (version: the libffpa version the backend was built from, ""
    when its plugin was not found or was refused)."""
    lib = library()
    out = []
    for i in range(lib.ffpa_backend_count()):
        info = BackendInfo()
        if lib.ffpa_backend_get_info(i, ctypes.byref(info)) == OK:
            out.append(Backend(info.name.decode(), bool(info.available), info.detail.decode(),
                               info.version.decode()))
    return out


def library_version():
    """The loaded libffpa's version string ("0.1.0")."""
    return library().ffpa_version_string().decode()
