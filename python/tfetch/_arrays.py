"""_arrays - tensors between numpy and libtfetch without copies: the dtype table, documents
built from arrays (borrowed, TF_BORROW), arrays made over received documents (views), the
tfetch.Array type of bf16/fp8 tensors, and DLPack export for those.

Ownership. A document sent (put, call) borrows each array's memory: the arrays are kept in
a list that lives until the request is over, and the tf_doc_t is freed then. A document
received is owned by a _Doc, freed when the last array over it goes: each array's base is a
_View whose ``owner`` is the _Doc, and its data lies inside the buffer the response was
received into. DLPack capsules (bf16/fp8; numpy exports the other dtypes itself) keep their
array alive in _EXPORTS until the consumer calls the deleter. Documents are plain data used
by one thread at a time; the deleter and capsule destructor may run on any thread (ctypes
takes the GIL).
"""
from __future__ import annotations

import ctypes
import json
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int64, c_size_t,
                    c_uint8, c_uint16, c_void_p)
from typing import Any, Optional, Sequence

import numpy as np

from . import _lib
from ._errors import error_for

try:  # bf16 and fp8 as real dtypes when ml_dtypes is installed; else raw uint views
    import ml_dtypes
except ImportError:  # pragma: no cover - depends on the machine
    ml_dtypes = None

lib = _lib.lib

# name: (tf_dtype_t value, numpy storage dtype, DLPack (code, bits))
DTYPES = {
    "F64": (0, np.dtype("<f8"), (2, 64)), "F32": (1, np.dtype("<f4"), (2, 32)),
    "F16": (2, np.dtype("<f2"), (2, 16)), "BF16": (3, np.dtype("<u2"), (4, 16)),
    "F8_E4M3": (4, np.dtype("u1"), (10, 8)), "F8_E5M2": (5, np.dtype("u1"), (12, 8)),
    "I64": (6, np.dtype("<i8"), (0, 64)), "I32": (7, np.dtype("<i4"), (0, 32)),
    "I16": (8, np.dtype("<i2"), (0, 16)), "I8": (9, np.dtype("i1"), (0, 8)),
    "U64": (10, np.dtype("<u8"), (1, 64)), "U32": (11, np.dtype("<u4"), (1, 32)),
    "U16": (12, np.dtype("<u2"), (1, 16)), "U8": (13, np.dtype("u1"), (1, 8)),
    "BOOL": (14, np.dtype("?"), (6, 8)),
    "F8_E8M0": (15, np.dtype("u1"), (14, 8)), "F8_E4M3FNUZ": (19, np.dtype("u1"), (11, 8)),
    "F8_E5M2FNUZ": (20, np.dtype("u1"), (13, 8)), "C64": (21, np.dtype("<c8"), (5, 64)),
}
# Packed types (several elements per byte): name -> (tf_dtype_t value, bits per element).
# Received as a flat uint8 tfetch.Array of the tensor's bytes, its shape in packed_shape;
# sent as tfetch.tagged(uint8 bytes, "F4", shape=...).
PACKED = {"F4": (16, 4), "F6_E2M3": (17, 6), "F6_E3M2": (18, 6)}
BY_CODE = {v[0]: k for k, v in DTYPES.items()}
BY_CODE.update({v[0]: k for k, v in PACKED.items()})
# The numpy types without a name of their own in numpy: bf16 and fp8.
EXTENDED = ("BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ")
_ML_ATTRS = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
             "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
             "F8_E5M2FNUZ": "float8_e5m2fnuz"}
_ML_NAMES = {v: k for k, v in _ML_ATTRS.items()}
_NP_NAMES = {DTYPES[n][1].newbyteorder("="): n for n in DTYPES if n not in EXTENDED}


def _ml_dtype(name):
    """The ml_dtypes dtype of an extended type, or None."""
    t = getattr(ml_dtypes, _ML_ATTRS[name], None) if ml_dtypes is not None else None
    return np.dtype(t) if t is not None else None


class Array(np.ndarray):
    """A numpy array holding a bf16 or fp8 tensor (numpy has no such types).

    Its elements are stored as uint16 (BF16) or uint8 (F8_E4M3, F8_E5M2), or as the
    ml_dtypes type when ml_dtypes is installed; ``dtype_name`` says what they are. It exports
    itself through DLPack with the right type code (``torch.from_dlpack(a)``), and put sends
    it as its dtype_name. Make one from raw bits with tfetch.tagged(bits, "BF16").
    """

    def __array_finalize__(self, obj):
        self._tf_name = getattr(obj, "_tf_name", None)
        self._tf_shape = getattr(obj, "_tf_shape", None)

    @property
    def packed_shape(self) -> Optional[tuple]:
        """A packed tensor's (F4, F6_*) shape in elements; None for the others."""
        return self._tf_shape

    @property
    def dtype_name(self) -> str:
        """The safetensors dtype name ("BF16"), while the storage still fits it."""
        return dtype_name(self)

    def __repr__(self):
        return "tfetch.Array(%s, dtype_name=%r)" % (np.array2string(self.view(np.ndarray)),
                                                    self.dtype_name)

    def __dlpack__(self, stream=None, **kwargs):
        return to_dlpack(self)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def dtype_name(a: Any) -> str:
    """The safetensors dtype name of an array ("F32", "BF16", ...); ValueError if it has none.
    A tfetch.Array keeps its name while its elements keep the size and kind of its storage."""
    dt = a.dtype
    n = getattr(a, "_tf_name", None)
    if n in PACKED and dt == np.uint8:
        return n
    if n in DTYPES and dt.itemsize == DTYPES[n][1].itemsize and \
            (dt.kind == "u" or dt.name in _ML_NAMES):
        return n
    if dt.name in _ML_NAMES:
        return _ML_NAMES[dt.name]
    n = _NP_NAMES.get(dt.newbyteorder("="))
    if n is None:
        raise ValueError("tfetch: numpy dtype %s has no safetensors dtype" % dt)
    return n


def tagged(a: Any, name: str, shape: Optional[Sequence[int]] = None) -> np.ndarray:
    """A view of a's bytes as a tensor of dtype `name` (e.g. raw uint16 bits as "BF16").
    For the extended types the view is a tfetch.Array; for the others a plain array. A packed
    type (F4, F6_E2M3, F6_E3M2) takes its bytes as uint8 and its `shape` in elements."""
    name = name.upper()
    if name in PACKED:
        a = np.ascontiguousarray(a).reshape(-1)
        if a.dtype != np.uint8 or shape is None:
            raise ValueError("tfetch: %s takes its packed bytes as uint8 and shape=" % name)
        shape = tuple(int(n) for n in shape)
        bits = int(np.prod(shape, dtype=np.int64)) * PACKED[name][1]
        if bits % 8 or bits // 8 != a.nbytes:
            raise ValueError("tfetch: %s %s needs %s bytes, not %d" %
                             (name, list(shape), bits / 8, a.nbytes))
        v = a.view(Array)
        v._tf_name, v._tf_shape = name, shape
        return v
    if name not in DTYPES:
        raise ValueError("tfetch: unknown dtype %r (one of %s)" % (
            name, " ".join(list(DTYPES) + list(PACKED))))
    a = np.asarray(a)
    store = _ml_dtype(name) if name in EXTENDED and _ml_dtype(name) is not None \
        else DTYPES[name][1]
    if a.dtype.itemsize != store.itemsize:
        raise ValueError("tfetch: %s needs %d-byte elements, not %s" %
                         (name, store.itemsize, a.dtype))
    if name not in EXTENDED:
        return a.view(store)
    v = a.view(store).view(Array)
    v._tf_name = name
    return v


# ---- sending: arrays -> a borrowed tf_doc_t ----------------------------------------------

def _wire_array(value):
    """(array in C order, little-endian; dtype name) for a value handed to put or call."""
    name = None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):
        value, name = value
        value = tagged(value, name)
    if not isinstance(value, np.ndarray):
        if hasattr(value, "__dlpack__"):           # torch, jax, cupy...: bf16 and fp8 too
            try:
                value, dl_name = from_dlpack(value)
                name = name or dl_name
            except (RuntimeError, BufferError, TypeError):
                if not hasattr(value, "__array__"):  # a type DLPack cannot carry (torch
                    raise                            # 1.13's bool): numpy's way, no copy
                value = np.asarray(value)
        else:
            value = np.asarray(value)
    if name is None:
        name = dtype_name(value)
    if name in PACKED:
        return value, name
    if value.dtype.byteorder == ">":
        value = value.astype(value.dtype.newbyteorder("<"))  # the one copy: wrong byte order
    if not value.flags.c_contiguous:
        value = np.ascontiguousarray(value)                 # the one copy: not C order
    if value.ndim > _lib.TF_MAX_RANK:
        raise ValueError("tfetch: rank %d is above %d" % (value.ndim, _lib.TF_MAX_RANK))
    return value, name


def build_doc(tensors, metadata=None):
    """A new tf_doc_t borrowing the arrays of `tensors` (a dict name -> array, or one array,
    sent as "tensor"), plus string metadata; a Batch's own document. Returns (doc pointer,
    what to keep alive until the request is over). The caller releases it (release_doc)."""
    if isinstance(tensors, Batch):
        if metadata:
            raise ValueError("tfetch: a Batch carries no metadata")
        return tensors._owner.ptr, [tensors]
    if isinstance(tensors, np.ndarray) or not hasattr(tensors, "items"):
        tensors = {"tensor": tensors}
    doc = lib.tf_doc_new()
    if not doc:
        raise MemoryError("tfetch: tf_doc_new failed")
    keep = []
    try:
        shape = (c_int64 * _lib.TF_MAX_RANK)()
        for key, value in tensors.items():
            arr, name = _wire_array(value)
            keep.append(arr)
            dims = arr.packed_shape if name in PACKED else arr.shape
            for k, n in enumerate(dims):
                shape[k] = n
            ptr = arr.__array_interface__["data"][0] if arr.nbytes else None
            code = PACKED[name][0] if name in PACKED else DTYPES[name][0]
            st = lib.tf_doc_add(doc, str(key).encode(), code, len(dims), shape,
                                ptr, arr.nbytes, _lib.TF_BORROW)
            if st != 0:
                raise error_for(st, "tensor %r (%s %s): %s" % (key, name, list(arr.shape),
                                                               _lib.strerror(st)))
        for k, v in (metadata or {}).items():
            st = lib.tf_doc_set_meta(doc, str(k).encode(), str(v).encode())
            if st != 0:
                raise error_for(st, "metadata %r: %s" % (k, _lib.strerror(st)))
    except BaseException:
        lib.tf_doc_free(doc)
        raise
    return doc, keep


def release_doc(doc, keep):
    """The request that sent a build_doc document is over: frees it (a Batch's stays)."""
    if doc and not (keep and isinstance(keep[0], Batch)):
        lib.tf_doc_free(doc)


# ---- receiving: a tf_doc_t -> arrays over its buffer ---------------------------------------

class _Doc:
    """Owns a received tf_doc_t: freed with the last array over it."""
    __slots__ = ("ptr", "__weakref__")

    def __init__(self, ptr):
        self.ptr = ptr

    def __del__(self, _free=lib.tf_doc_free):
        if self.ptr:
            _free(self.ptr)
            self.ptr = None


class _View:
    """The base of an array received: describes one tensor's memory (the array interface)
    and keeps the document that holds it alive (owner)."""
    __slots__ = ("__array_interface__", "owner")

    def __init__(self, owner, shape, typestr, addr, readonly):
        self.owner = owner
        self.__array_interface__ = {"version": 3, "shape": shape, "typestr": typestr,
                                    "data": (addr, readonly)}


class Document(dict):
    """A received document: a dict of tensor name -> numpy array (views over the received
    buffer, in the document's order), with ``metadata``, its string metadata."""

    def __init__(self, tensors=(), metadata=None):
        super().__init__(tensors)
        self.metadata = dict(metadata or {})

    def __repr__(self):
        body = ", ".join("%r: %s%s" % (k, _type_name(v), list(v.shape)) for k, v in self.items())
        meta = ", metadata=%r" % self.metadata if self.metadata else ""
        return "tfetch.Document({%s}%s)" % (body, meta)


def _type_name(v):
    """A value's dtype for a repr: its safetensors name, else what it says (torch's)."""
    try:
        return dtype_name(v)
    except (ValueError, AttributeError, TypeError):
        return str(getattr(v, "dtype", type(v).__name__))


def _doc_metadata(ptr):
    """The document's metadata, read from its safetensors header (tf_doc_encode_header)."""
    hdr, hlen = c_void_p(), c_size_t()
    if lib.tf_doc_encode_header(ptr, ctypes.byref(hdr), ctypes.byref(hlen)) != 0:
        return {}
    try:
        raw = ctypes.string_at(hdr, hlen.value)
    finally:
        lib.tf_free(hdr)
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n].decode("utf-8")).get("__metadata__", {})


def wrap_doc(ptr, owner=None):
    """A Document over a received tf_doc_t, which it takes over (freed with its arrays); or,
    with owner, over a borrowed one that owner keeps alive (a feed item's)."""
    owner = _Doc(ptr) if owner is None else owner
    out = Document(metadata=_doc_metadata(ptr))
    for i in range(lib.tf_doc_count(ptr)):
        t = lib.tf_doc_at(ptr, i).contents
        name = BY_CODE[t.dtype]
        shape = tuple(t.shape[k] for k in range(t.rank))
        # Writable exactly where libtfetch says the caller may write (tf_doc_writable(3)):
        # a same-host get is copy-on-write; a feed item in a same-host ring's slot lies in
        # memory mapped read-only, so its arrays say writeable=False and refuse writes.
        ro = not lib.tf_doc_writable(ptr, i)
        if name in PACKED:                          # bytes, with the shape beside them
            a = np.asarray(_View(owner, (t.nbytes,), "|u1", t.data, ro)).view(Array)
            a._tf_name, a._tf_shape = name, shape
            out[t.name.decode("utf-8")] = a
            continue
        store = DTYPES[name][1]
        a = np.asarray(_View(owner, shape, store.str, t.data, ro))
        if name in EXTENDED:
            ml = _ml_dtype(name)
            a = (a.view(ml) if ml is not None else a).view(Array)
            a._tf_name = name
        out[t.name.decode("utf-8")] = a
    return out


class Batch(Document):
    """A document built in one buffer (tf_doc_new_packed): a dict of tensor name -> writable
    array over that buffer, zeroed. layout: a dict name -> (dtype, shape), dtype a safetensors
    name ("F32", "BF16", ...) or a numpy dtype. Fill its arrays in place and pass the Batch
    itself to put, call or infeed_push: it is sent in one piece (over UCX a tfetchd on this
    host copies it straight from the buffer, where arrays sent from where they lie go in
    pieces through its FIFO). Reuse it for every request of that layout; never write it
    while a request that sends it is running. No metadata; the packed types (F4, F6_*) are
    not offered. Client.staging_batch builds one in a staging buffer a same-host tfetchd
    lends (tf_doc_new_staging) instead."""

    def __init__(self, layout, _staging=None):
        specs = (_lib.TensorSpec * max(len(layout), 1))()
        keep = []
        for i, (key, (dt, shape)) in enumerate(layout.items()):
            name = dt.upper() if isinstance(dt, str) else dtype_name(np.empty(0, dtype=dt))
            if name not in DTYPES:
                raise ValueError("tfetch: a Batch takes one of %s, not %r" %
                                 (" ".join(DTYPES), dt))
            dims = tuple(int(n) for n in shape)
            arr = (c_int64 * max(len(dims), 1))(*dims)
            kb = str(key).encode()
            keep += [arr, kb]
            specs[i].name, specs[i].dtype, specs[i].rank = kb, DTYPES[name][0], len(dims)
            specs[i].shape = arr
        ptr = c_void_p()
        if _staging is None:
            st = lib.tf_doc_new_packed(ctypes.cast(specs, c_void_p), len(layout),
                                       ctypes.byref(ptr))
        else:                                       # (client handle, feed URL, on failure)
            st = lib.tf_doc_new_staging(_staging[0], _staging[1].encode(),
                                        ctypes.cast(specs, c_void_p), len(layout),
                                        ctypes.byref(ptr))
            if st != 0:
                _staging[2](st)                     # raises with the client's words
        if st != 0:
            raise error_for(st, "tfetch: Batch %r: %s" % (layout, _lib.strerror(st)))
        self._owner = _Doc(ptr.value)
        super().__init__(wrap_doc(ptr.value, self._owner))

    def __repr__(self):
        return "tfetch.Batch(%s)" % super().__repr__()[len("tfetch.Document("):-1]


# ---- DLPack ----------------------------------------------------------------------------

class _DLDevice(Structure):
    _fields_ = [("device_type", c_int), ("device_id", c_int)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", _DLDevice), ("ndim", c_int),
                ("dtype", _DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(Structure):
    pass


_DELETER = CFUNCTYPE(None, POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", _DELETER)]
_CAPSULE_DTOR = CFUNCTYPE(None, c_void_p)
_EXPORTS = {}        # address of a DLManagedTensor -> what it needs alive

# The capsule API, through pythonapi (which holds the GIL). The destructor gets the capsule
# as a raw pointer, being destroyed: it must not be turned back into a reference.
_capi = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, c_void_p, c_char_p, c_void_p)(
    ("PyCapsule_New", _capi))
_capsule_valid = ctypes.PYFUNCTYPE(c_int, c_void_p, c_char_p)(("PyCapsule_IsValid", _capi))
_capsule_ptr = ctypes.PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(("PyCapsule_GetPointer", _capi))


@_DELETER
def _deleter(mt):
    _EXPORTS.pop(ctypes.addressof(mt.contents), None)


@_CAPSULE_DTOR
def _capsule_dtor(capsule):
    # Never consumed (a consumer renames it "used_dltensor"): the producer deletes.
    if _capsule_valid(capsule, b"dltensor"):
        _EXPORTS.pop(_capsule_ptr(capsule, b"dltensor"), None)


def to_dlpack(a: np.ndarray, readonly_ok: bool = False, as_name: Optional[str] = None) -> Any:
    """A DLPack capsule ("dltensor") over a's memory, no copy: bf16 as kDLBfloat, fp8 as
    kDLFloat8_e4m3fn / kDLFloat8_e5m2, the rest as numpy would. as_name: export under this
    safetensors dtype instead (same element size); readonly_ok: export a read-only array
    too (the consumer must not write it)."""
    name = as_name or dtype_name(a)
    if name in PACKED:
        raise BufferError("tfetch: packed %s has no DLPack export here" % name)
    if not a.flags.writeable and not readonly_ok:
        # as numpy: DLPack cannot say read-only, and a consumer writes
        raise BufferError("tfetch: cannot export a read-only array through DLPack "
                          "(a same-host ring's item: copy it first, a.copy())")
    code, bits = DTYPES[name][2]
    if a.dtype.itemsize * 8 != bits:
        raise BufferError("tfetch: %s stored in %d-byte elements" % (name, a.dtype.itemsize))
    if any(s % a.dtype.itemsize for s in a.strides):
        raise BufferError("tfetch: strides are not a multiple of the element size")
    nd = a.ndim
    shape = (c_int64 * max(nd, 1))(*a.shape)
    strides = (c_int64 * max(nd, 1))(*[s // a.dtype.itemsize for s in a.strides])
    mt = DLManagedTensor()
    mt.dl_tensor.data = a.__array_interface__["data"][0] if a.size else None
    mt.dl_tensor.device = _DLDevice(1, 0)
    mt.dl_tensor.ndim = nd
    mt.dl_tensor.dtype = _DLDataType(code, bits, 1)
    mt.dl_tensor.shape = shape
    mt.dl_tensor.strides = strides
    mt.dl_tensor.byte_offset = 0
    mt.manager_ctx = None
    mt.deleter = _deleter
    addr = ctypes.addressof(mt)
    _EXPORTS[addr] = (mt, shape, strides, a)
    return _capsule_new(addr, b"dltensor", ctypes.cast(_capsule_dtor, c_void_p))


# ---- DLPack in: any object with __dlpack__ -> a numpy view over its memory ----------------

_BY_DL = {v[2]: k for k, v in DTYPES.items()}      # (code, bits) -> safetensors name
_HOST_DEVICES = (1, 3)                              # kDLCPU, kDLCUDAHost (pinned host)
_capsule_get = ctypes.PYFUNCTYPE(c_void_p, ctypes.py_object, c_char_p)(
    ("PyCapsule_GetPointer", _capi))
_capsule_rename = ctypes.PYFUNCTYPE(c_int, ctypes.py_object, c_char_p)(
    ("PyCapsule_SetName", _capi))


class _Imported:
    """A DLManagedTensor taken from a producer's capsule: its deleter runs when the last
    numpy view over its memory goes (the request that sent it is over)."""
    __slots__ = ("mt",)

    def __init__(self, mt):
        self.mt = mt

    def __del__(self):
        mt, self.mt = self.mt, None
        if mt is not None and mt.contents.deleter:
            mt.contents.deleter(mt)


def _host_object(value):
    """value, or a host copy of it when its memory is a device's (the one copy: torch's
    .cpu()); a tensor that requires grad is detached first (no copy)."""
    if getattr(value, "requires_grad", False) and hasattr(value, "detach"):
        value = value.detach()
    dev = value.__dlpack_device__()[0] if hasattr(value, "__dlpack_device__") else 1
    if dev in _HOST_DEVICES:
        return value
    if hasattr(value, "cpu"):
        return value.cpu()
    raise BufferError("tfetch: DLPack device type %d is not host memory: copy it to the "
                      "host first" % dev)


def from_dlpack(value: Any):
    """(numpy view over value's memory, its safetensors dtype name): any object with
    __dlpack__ (torch, jax, cupy's pinned arrays, tfetch.Array), bf16 and fp8 included,
    without a copy when the memory is host memory and C-contiguous. The view keeps the
    producer's tensor alive and calls its DLPack deleter once the view is gone."""
    capsule = _host_object(value).__dlpack__()
    addr = _capsule_get(capsule, b"dltensor")
    if not addr:
        raise BufferError("tfetch: __dlpack__ gave no dltensor capsule")
    _capsule_rename(capsule, b"used_dltensor")     # consumed: its deleter is ours to call
    mt = ctypes.cast(addr, POINTER(DLManagedTensor))
    owner = _Imported(mt)
    t = mt.contents.dl_tensor
    key = (t.dtype.code, t.dtype.bits)
    if t.dtype.lanes != 1 or key not in _BY_DL:
        raise ValueError("tfetch: DLPack dtype (code %d, bits %d, lanes %d) has no "
                         "safetensors dtype" % (t.dtype.code, t.dtype.bits, t.dtype.lanes))
    if t.device.device_type not in _HOST_DEVICES:
        raise BufferError("tfetch: DLPack device type %d is not host memory" %
                          t.device.device_type)
    name = _BY_DL[key]
    if name == "U8" and str(getattr(value, "dtype", "")) == "torch.bool":
        name = "BOOL"                           # torch before DLPack's kDLBool says uint8
    store = DTYPES[name][1]
    shape = tuple(t.shape[k] for k in range(t.ndim))
    size = store.itemsize
    strides = None if not t.strides else tuple(t.strides[k] * size for k in range(t.ndim))
    data = (t.data or 0) + t.byte_offset
    view = _View(owner, shape, store.str, data, False)
    if strides is not None:
        view.__array_interface__["strides"] = strides
    a = np.asarray(view)
    if name in EXTENDED:
        a = a.view(Array)
        a._tf_name = name
    return a, name


# ---- out as torch: a Document's arrays -> torch tensors over the same bytes ----------------

LIKES = ("numpy", "torch")


def _torch_dtype(torch, name):
    """The torch dtype of a safetensors name for a DLPack import, or None when this torch
    has none (fp8 before torch 2.1): such a tensor comes as its raw bits (uint8)."""
    return getattr(torch, {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
                           "F8_E5M2": "float8_e5m2"}.get(name, ""), None)


def _to_torch(torch, a):
    """A torch tensor over a's memory (no copy), through DLPack."""
    name = dtype_name(a)
    if name in PACKED:                          # its bytes, as received
        return torch.from_dlpack(to_dlpack(a.view(np.ndarray), True, "U8"))
    if name in ("BOOL",) + EXTENDED[1:]:        # raw bytes, then torch's type over them
        raw = torch.from_dlpack(to_dlpack(a.view(np.ndarray).view(np.uint8), True, "U8"))
        dt = torch.bool if name == "BOOL" else _torch_dtype(torch, name)
        return raw.view(dt) if dt is not None else raw
    return torch.from_dlpack(to_dlpack(a, True))


def convert(doc, like):
    """doc (a Document of numpy views) as `like` asks: "numpy" (itself) or "torch" (a
    Document of torch tensors over the same received buffer, no copy). A same-host ring's
    read-only item becomes torch tensors over read-only memory (torch has no read-only
    tensors, as with torch.from_numpy: writing one is a crash; clone() it to write)."""
    if like is None or like == "numpy":
        return doc
    if like != "torch":
        raise ValueError("tfetch: like must be one of %s, not %r" % (", ".join(LIKES), like))
    try:
        import torch
    except ImportError as e:
        raise ImportError("tfetch: like=\"torch\" needs torch (python3-torch, or pip "
                          "install torch)") from e
    out = Document(metadata=getattr(doc, "metadata", None))
    for k, v in doc.items():
        out[k] = _to_torch(torch, v)
    out._like = "torch"
    return out
