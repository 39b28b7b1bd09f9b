"""_lib - the ctypes binding of libtfetch (client/tfetch.h): finding and loading
libtfetch.so.1, the structs it shares with callers, and the prototypes of the functions the
package calls.

Owns the one loaded library handle (``lib``). Which library is loaded, in order: the file
named by $TFETCH_LIBRARY (the test harness points it at the build tree's
client/.libs/libtfetch.so.1), the one ``make install`` put in the libdir recorded in
``_paths.py`` (written at install time; a pip install has none), whatever the dynamic loader
finds as libtfetch.so.1, then the one in ``pkg-config --variable=libdir tfetch``'s directory
(a prefix the loader does not search, PKG_CONFIG_PATH honoured). Calls go through ctypes.CDLL, which releases the GIL for each call, so a
blocking request never stops other Python threads. Nothing here keeps state besides the
handle; any thread.
"""
import ctypes
import os
import subprocess
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_int,
                    c_int64, c_long, c_size_t, c_uint, c_uint64, c_void_p)

TF_MAX_RANK = 8
TF_COPY, TF_BORROW = 0, 1
TF_OP_GET, TF_OP_PUT, TF_OP_DELETE, TF_OP_EXCHANGE = 1, 2, 3, 4
TRANSPORTS = {"auto": 1, "http": 2, "ucx": 3}
UPGRADES = {"eager": 1, "lazy": 2}
FORMATS = {"safetensors": 1, "shumai": 2}
TF_OK, TF_EAGAIN = 0, -38


class TensorSpec(Structure):
    """tf_tensor_spec_t"""
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("rank", c_int),
                ("shape", POINTER(c_int64))]


class Tensor(Structure):
    """tf_tensor_t"""
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("rank", c_int),
                ("shape", c_int64 * TF_MAX_RANK), ("data", c_void_p), ("nbytes", c_size_t)]


STAGES = ("connect", "upgrade", "send", "server", "queue", "handler", "receive", "decode",
          "total")


class Stages(Structure):
    """tf_stages_t: milliseconds, -1 where not known"""
    _fields_ = [(n, c_double) for n in STAGES]


class CResult(Structure):
    """tf_result_t"""
    _fields_ = [("status", c_int), ("http_status", c_int), ("request_id", c_char * 129),
                ("transport", c_char * 32), ("op", c_char * 16), ("bytes_sent", c_uint64),
                ("bytes_received", c_uint64), ("seconds", c_double), ("error", c_char * 256),
                ("fallback", c_char * 160), ("etag", c_char * 64), ("stages", Stages)]


class Request(Structure):
    """tf_request_t (a versioned struct: size is set by the caller)"""
    _fields_ = [("size", c_size_t), ("op", c_int), ("url", c_char_p), ("in_", c_void_p),
                ("wait_ms", c_long), ("timeout_ms", c_long), ("format", c_int),
                ("request_id", c_char_p), ("transport", c_int), ("user", c_char_p),
                ("if_match", c_char_p), ("if_none_match", c_char_p), ("ttl_s", c_uint64)]


class TransportInfo(Structure):
    """tf_transport_info_t (versioned)"""
    _fields_ = [("size", c_size_t), ("transport", c_char * 32), ("reason", c_char * 160),
                ("offered", c_int), ("retry_ms", c_long), ("caller_driven", c_uint64),
                ("ucx_memory", c_char * 64), ("same_host", c_int), ("shm", c_char * 32),
                ("shm_reason", c_char * 160), ("server_uid", c_long),
                ("protocol_min", c_uint), ("protocol_max", c_uint),
                ("last_stages", Stages), ("last_transport", c_char * 32),
                ("last_fallback", c_char * 160)]


class ListOpts(Structure):
    """tf_list_opts_t (versioned)"""
    _fields_ = [("size", c_size_t), ("prefix", c_char_p), ("after", c_char_p),
                ("limit", c_uint64)]


class Entry(Structure):
    """tf_entry_t"""
    _fields_ = [("name", c_char_p), ("bytes", c_uint64), ("ntensors", c_size_t)]


# void (*tf_fetch_cb)(tf_fetch_t *, tf_status_t, tf_doc_t *, const tf_result_t *, void *)
FETCH_CB = CFUNCTYPE(None, c_void_p, c_int, c_void_p, POINTER(CResult), c_void_p)


def _candidates():
    env = os.environ.get("TFETCH_LIBRARY")
    if env:
        return [env]
    out = []
    try:
        from . import _paths
        out.append(os.path.join(_paths.libdir, "libtfetch.so.1"))
    except ImportError:
        pass
    out.append("libtfetch.so.1")
    return out


def _pkg_config_libdir():
    """libtfetch's directory as pkg-config knows it (the tfetch module), or None."""
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", "tfetch"], timeout=10,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    d = r.stdout.decode(errors="replace").strip()
    return d if r.returncode == 0 and d else None


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    if not os.environ.get("TFETCH_LIBRARY"):        # last: ask pkg-config where it lives
        d = _pkg_config_libdir()
        if d:
            path = os.path.join(d, "libtfetch.so.1")
            try:
                return ctypes.CDLL(path)
            except OSError as e:
                errors.append("%s (pkg-config): %s" % (path, e))
        else:
            errors.append("pkg-config: no tfetch module")
    raise ImportError("tfetch: cannot load libtfetch (install it, or set TFETCH_LIBRARY to "
                      "libtfetch.so.1's path, or PKG_CONFIG_PATH to its tfetch.pc): " +
                      "; ".join(errors))


lib = _load()

_P = c_void_p
_PROTOS = {
    # name: (restype, argtypes)
    "tf_version": (c_char_p, []),
    "tf_strerror": (c_char_p, [c_int]),
    "tf_err_name": (c_char_p, [c_int]),
    "tf_free": (None, [_P]),
    "tf_dtype_name": (c_char_p, [c_int]),
    "tf_dtype_size": (c_size_t, [c_int]),
    "tf_doc_new": (_P, []),
    "tf_doc_free": (None, [_P]),
    "tf_doc_add": (c_int, [_P, c_char_p, c_int, c_int, POINTER(c_int64), _P, c_size_t, c_uint]),
    "tf_doc_count": (c_size_t, [_P]),
    "tf_doc_at": (POINTER(Tensor), [_P, c_size_t]),
    "tf_doc_writable": (_P, [_P, c_size_t]),
    "tf_doc_set_meta": (c_int, [_P, c_char_p, c_char_p]),
    "tf_doc_encode_header": (c_int, [_P, POINTER(_P), POINTER(c_size_t)]),
    "tf_doc_new_packed": (c_int, [_P, c_size_t, POINTER(_P)]),
    "tf_doc_new_staging": (c_int, [_P, c_char_p, _P, c_size_t, POINTER(_P)]),
    "tf_client_new": (c_int, [POINTER(_P)]),
    "tf_client_free": (None, [_P]),
    "tf_client_set_user": (c_int, [_P, c_char_p]),
    "tf_client_set_token": (c_int, [_P, c_char_p]),
    "tf_client_set_cert": (c_int, [_P, c_char_p, c_char_p]),
    "tf_client_set_request_id": (c_int, [_P, c_char_p]),
    "tf_client_set_timeout": (None, [_P, c_long]),
    "tf_client_set_max_body": (None, [_P, c_uint64]),
    "tf_client_set_stall": (c_int, [_P, c_uint64, c_long]),
    "tf_client_set_max_connections": (c_int, [_P, c_long]),
    "tf_client_set_format": (c_int, [_P, c_int]),
    "tf_client_set_transport": (c_int, [_P, c_int]),
    "tf_client_set_upgrade_policy": (c_int, [_P, c_int]),
    "tf_client_last": (POINTER(CResult), [_P]),
    "tf_client_upgrade": (c_int, [_P, c_char_p]),
    "tf_client_transport_info": (c_int, [_P, c_char_p, POINTER(TransportInfo)]),
    "tf_fetch": (c_int, [_P, c_char_p, _P, POINTER(_P)]),
    "tf_get": (c_int, [_P, c_char_p, c_long, POINTER(_P)]),
    "tf_put": (c_int, [_P, c_char_p, _P]),
    "tf_delete": (c_int, [_P, c_char_p]),
    "tf_list": (c_int, [_P, c_char_p, POINTER(POINTER(Entry)), POINTER(c_size_t)]),
    "tf_list_free": (None, [POINTER(Entry), c_size_t]),
    "tf_info": (c_int, [_P, c_char_p, POINTER(c_char_p)]),
    "tf_request": (c_int, [_P, POINTER(Request), POINTER(_P)]),
    "tf_list_page": (c_int, [_P, c_char_p, POINTER(ListOpts), POINTER(POINTER(Entry)),
                             POINTER(c_size_t), POINTER(_P)]),
    "tf_get_range": (c_int, [_P, c_char_p, c_uint64, c_uint64, POINTER(_P), POINTER(c_size_t),
                             POINTER(c_uint64)]),
    "tf_fetch_start": (c_int, [_P, POINTER(Request), FETCH_CB, _P, POINTER(_P)]),
    "tf_fetch_start_fd": (c_int, [_P, POINTER(Request), c_int, FETCH_CB, _P, POINTER(_P)]),
    "tf_fetch_wait": (c_int, [_P, c_long]),
    "tf_fetch_result": (POINTER(CResult), [_P]),
    "tf_doc_decode_msg": (c_int, [_P, c_size_t, c_uint, POINTER(_P), c_char_p, c_size_t]),
    "tf_fetch_cancel": (c_int, [_P]),
    "tf_fetch_free": (None, [_P]),
    "tf_client_run": (c_int, [_P, c_long]),
    "tf_client_pending": (c_size_t, [_P]),
    "tf_client_wakeup": (None, [_P]),
    # feeds
    "tf_feed_attach": (c_int, [_P, c_char_p, c_char_p, c_char_p, POINTER(_P)]),
    "tf_feed_backend": (c_char_p, [_P]),
    "tf_feed_transport": (c_char_p, [_P]),
    "tf_feed_set_prefetch": (c_int, [_P, c_int]),
    "tf_feed_detach": (None, [_P]),
    "tf_infeed_pop": (c_int, [_P, c_long, POINTER(_P)]),
    "tf_item_doc": (_P, [_P]),
    "tf_item_position": (c_uint64, [_P]),
    "tf_item_seq": (c_uint64, [_P]),
    "tf_item_round": (c_uint64, [_P]),
    "tf_item_generation": (c_uint64, [_P]),
    "tf_item_release": (None, [_P]),
    "tf_outfeed_push": (c_int, [_P, _P, POINTER(c_uint64)]),
    "tf_feed_declare": (c_int, [_P, c_char_p, c_char_p, POINTER(_P)]),
    "tf_infeed_push": (c_int, [_P, c_char_p, c_int, _P, c_uint64, c_long, POINTER(c_uint64)]),
    "tf_feed_done": (c_int, [_P, c_char_p]),
    "tf_feed_reset": (c_int, [_P, c_char_p, POINTER(c_uint64)]),
    "tf_feed_stats": (c_int, [_P, c_char_p, POINTER(_P)]),
    "tf_outfeed_get": (c_int, [_P, c_char_p, c_uint64, c_long, POINTER(_P), POINTER(c_uint64),
                               POINTER(c_int)]),
}
for _name, (_res, _args) in _PROTOS.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args
# tf_info hands back memory to release with tf_free: read it as a raw pointer.
lib.tf_info.argtypes = [_P, c_char_p, POINTER(_P)]


def version():
    """The version of the libtfetch loaded (tf_version)."""
    return lib.tf_version().decode()


def err_name(status):
    return lib.tf_err_name(status).decode()


def strerror(status):
    return lib.tf_strerror(status).decode()
