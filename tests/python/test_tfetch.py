"""test_tfetch - the Python package (python/tfetch) against the real tfetchd on port 0.

Every dtype, multi-tensor documents and metadata, arrays got being views over the received
buffer (their base chain and their address) and arrays put being borrowed, DLPack export,
the UCX upgrade and the fallback report in Client.last, asyncio with 1,000 requests in
flight, and the errors (404, 413, a bad URL, a refused connection). Run by tests/python.test
(make check), which sets TFETCHD, TFETCH_LIBRARY and PYTHONPATH.
"""
import asyncio
import ctypes
import gc
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import numpy as np

try:  # optional: the DLPack cases run through torch where it is installed
    import torch
except ImportError:
    torch = None

import tfetch
from tfetch import _arrays, _lib

TFETCHD = os.environ.get("TFETCHD", "./daemon/tfetchd")


class Daemon:
    """tfetchd --port 0 with extra flags; learns its port from the 'listening on' line."""

    def __init__(self, *args):
        self.log = tempfile.NamedTemporaryFile(prefix="tfetchd-py-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [TFETCHD, "--port", "0", "--listen", "127.0.0.1", "--config", "/dev/null", *args],
            stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline, buf = time.monotonic() + 30, b""
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                for line in buf.decode(errors="replace").splitlines():
                    if "listening on " in line:
                        self.base = line.split("listening on ", 1)[1].strip()
                        return
        self.stop()
        with open(self.log.name) as f:
            raise RuntimeError("tfetchd did not start: %s" % f.read()[-2000:])

    def url(self, path):
        return self.base + path

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
        os.unlink(self.log.name)



class DaemonPerClass:
    """A mixin for a TestCase run once per transport: one tfetchd for the class (self.d)
    and a client of it on the class's transport (self.c)."""
    transport = None

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon()
        cls.c = tfetch.Client(cls.d.base, transport=cls.transport)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.d.stop()


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def ucx_available(client):
    info = client.info()
    return info.get("ucx", {}).get("enabled", False)


def address(a):
    return a.__array_interface__["data"][0]


def sample(name, shape=(2, 3), seed=0):
    """An array of the dtype `name` (the raw bits for BF16/F8, as tfetch.Array)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    store = _arrays.DTYPES[name][1]
    if name == "BOOL":
        return (rng.integers(0, 2, n) == 1).reshape(shape)
    if name in _arrays.EXTENDED:
        bits = rng.integers(0, np.iinfo(store).max, n, dtype=store, endpoint=True)
        return tfetch.tagged(bits.reshape(shape), name)
    if store.kind == "f":
        return rng.standard_normal(n).astype(store).reshape(shape)
    if store.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(store).reshape(shape)
    info = np.iinfo(store)
    return rng.integers(info.min, info.max, n, dtype=store, endpoint=True).reshape(shape)


def raw(a):
    return np.asarray(a).tobytes()


class Base(unittest.TestCase):
    args = ()

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(*cls.args)
        cls.c = tfetch.Client(cls.d.base, user="py-test", transport="http")

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.d.stop()


class TestDocuments(Base):
    def test_every_dtype_round_trip(self):
        for name in tfetch.DTYPES:
            for shape in [(2, 3), (), (0, 4), (1, 2, 1, 2, 1, 2, 1, 2)]:
                with self.subTest(dtype=name, shape=shape):
                    a = sample(name, shape, seed=len(shape))
                    self.c.put("dt-" + name, {"t": a})
                    self.assertEqual(self.c.last.op, "put")
                    self.assertIn(self.c.last.http_status, (201, 204))
                    got = self.c.get("dt-" + name)["t"]
                    self.assertEqual(got.shape, tuple(shape))
                    self.assertEqual(tfetch.dtype_name(got), name)
                    self.assertEqual(raw(got), raw(a))
                    if name in _arrays.EXTENDED:
                        self.assertIsInstance(got, tfetch.Array)
                        self.assertEqual(got.dtype_name, name)
                        if _arrays.ml_dtypes is None:
                            self.assertEqual(got.dtype, _arrays.DTYPES[name][1])
                    else:
                        self.assertEqual(type(got), np.ndarray)
                        self.assertEqual(got.dtype, _arrays.DTYPES[name][1])
                        np.testing.assert_array_equal(got, a)

    def test_feed_infeed_pop_outfeed_done(self):
        """A feed end to end: declare, push with seqs (a retry is not enqueued twice), pop
        views in order, release, push a loss per step, read it back, done ends the loop."""
        decl = {"devices": 1, "signature": [{"name": "x", "dtype": "F32", "shape": [2]}],
                "max_items": 8}
        stats = self.c.feed_declare("pyfeed", decl)
        self.assertEqual(stats["name"], "pyfeed")
        self.c.feed_declare("pyfeed", decl)                  # the same again: fine
        for i in range(1, 4):
            self.c.infeed_push("pyfeed", {"x": np.full(2, i, np.float32)}, device=0, seq=i)
        self.c.infeed_push("pyfeed", {"x": np.full(2, 3, np.float32)}, device=0, seq=3)
        with self.assertRaises(tfetch.Error) as e:             # signature mismatch: 422
            self.c.infeed_push("pyfeed", {"x": np.zeros(3, np.float32)}, device=0, seq=4)
        self.assertEqual(e.exception.http_status, 422)
        seen = []
        with self.c.feed("pyfeed", device=0) as f:
            self.assertEqual(f.backend, "host")
            for step, item in enumerate(f, 1):
                with item:
                    x = item.doc["x"]
                    self.assertEqual(item.position, step)
                    self.assertEqual(item.seq, step)
                    seen.append(float(x[0]))
                    f.push_outfeed({"loss": np.array([x.sum()], np.float32)})
                if step == 3:
                    self.c.feed_done("pyfeed")
        self.assertEqual(seen, [1.0, 2.0, 3.0])
        got = self.c.outfeed_get("pyfeed", after=0, wait=1.0)
        self.assertIsNotNone(got)
        seq, dev, doc = got
        self.assertEqual((seq, dev), (1, 0))
        self.assertEqual(float(doc["loss"][0]), 2.0)
        self.assertIsNone(self.c.outfeed_get("pyfeed", after=3, wait=0))
        self.assertEqual(self.c.feed_stats("pyfeed")["done"], True)
        with self.assertRaises(tfetch.NotFound):
            self.c.feed("nosuchfeed", device=0)

    def test_batch_one_buffer(self):
        """A Batch: writable arrays over one buffer, put and pushed as it is (its document is
        the Batch's, not freed by the request), rewritten in place between requests; no
        metadata; an invalid layout refused."""
        b = tfetch.Batch({"x": ("F32", (4, 2)), "i": (np.int64, (3,))})
        self.assertEqual(list(b), ["x", "i"])
        self.assertEqual(b["x"].dtype, np.float32)
        self.assertEqual(b["x"].shape, (4, 2))
        self.assertTrue(b["x"].flags.writeable)
        self.assertEqual(float(b["x"].sum()), 0.0)          # zeroed
        # one buffer: i follows x
        self.assertEqual(b["i"].__array_interface__["data"][0],
                         b["x"].__array_interface__["data"][0] + 32)
        for k in range(2):
            b["x"][:] = np.arange(8, dtype=np.float32).reshape(4, 2) + k
            b["i"][:] = [k, -1, 7]
            self.c.put("batch%d" % k, b)
        for k in range(2):
            got = self.c.get("batch%d" % k)
            np.testing.assert_array_equal(got["x"], np.arange(8, dtype=np.float32).reshape(4, 2) + k)
            np.testing.assert_array_equal(got["i"], [k, -1, 7])
        with self.assertRaises(ValueError):
            self.c.put("batchm", b, metadata={"k": "v"})
        decl = {"devices": 1, "signature": [{"name": "x", "dtype": "F32", "shape": [2]}]}
        self.c.feed_declare("pybatch", decl)
        xb = tfetch.Batch({"x": ("F32", (2,))})
        for i in range(1, 3):
            xb["x"][:] = i
            self.c.infeed_push("pybatch", xb, device=0, seq=i)
        with self.c.feed("pybatch", device=0) as f:
            for step in range(1, 3):
                item = f.pop(timeout=5)
                with item:
                    self.assertEqual(float(item.doc["x"][1]), float(step))
        self.assertEqual(float(xb["x"][0]), 2.0)               # still ours, still mapped
        with self.assertRaises(ValueError):
            tfetch.Batch({"p": ("F4", (2,))})
        with self.assertRaises(tfetch.Error):
            tfetch.Batch({"n": ("F32", (-1,))})

    def test_packed_dtypes_round_trip(self):
        """F4 and F6_*: bytes as uint8 with the element shape beside them, no copy."""
        for name, (_, bits) in tfetch.PACKED.items():
            with self.subTest(dtype=name):
                shape = (4, 6)
                raw_bytes = np.arange(4 * 6 * bits // 8, dtype=np.uint8)
                a = tfetch.tagged(raw_bytes, name, shape=shape)
                self.assertEqual(tfetch.dtype_name(a), name)
                self.c.put("pk-" + name, {"t": a})
                got = self.c.get("pk-" + name)["t"]
                self.assertIsInstance(got, tfetch.Array)
                self.assertEqual(got.dtype_name, name)
                self.assertEqual(got.packed_shape, shape)
                self.assertEqual(got.dtype, np.uint8)
                self.assertEqual(raw(got), raw(raw_bytes))
        with self.assertRaises(ValueError):
            tfetch.tagged(np.zeros(3, dtype=np.uint8), "F4", shape=(3,))   # 1.5 bytes
        with self.assertRaises(ValueError):
            tfetch.tagged(np.zeros(2, dtype=np.uint8), "F4")                # no shape

    def test_extended_dtype_tuples_and_tags(self):
        bits = np.array([0x3F80, 0x4000, 0xC040], dtype=np.uint16)     # 1.0, 2.0, -3.0 bf16
        self.c.put("bf", {"b": (bits, "BF16"), "e4": (np.arange(3, dtype=np.uint8), "F8_E4M3"),
                          "e5": tfetch.tagged(np.arange(3, dtype=np.uint8), "f8_e5m2")})
        doc = self.c.get("bf")
        self.assertEqual([tfetch.dtype_name(v) for v in doc.values()], ["BF16", "F8_E4M3",
                                                                       "F8_E5M2"])
        self.assertEqual(raw(doc["b"]), bits.tobytes())
        as_f32 = (doc["b"].view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_array_equal(as_f32, [1.0, 2.0, -3.0])
        self.assertIn("BF16", repr(doc["b"]))
        # A slice keeps the name; a conversion to another dtype does not.
        self.assertEqual(doc["b"][1:].dtype_name, "BF16")
        self.assertEqual(tfetch.dtype_name(doc["b"].astype(np.float32)), "F32")
        with self.assertRaises(ValueError):
            tfetch.tagged(np.zeros(2, np.float32), "BF16")
        with self.assertRaises(ValueError):
            tfetch.tagged(np.zeros(2, np.uint16), "F17")
        with self.assertRaises(ValueError):        # C64 exists; complex128 has no dtype
            self.c.put("cx", {"z": np.zeros(2, np.complex128)})

    def test_multi_tensor_documents_and_metadata(self):
        tensors = {"w%d" % i: sample(n, (i + 1, 2), seed=i)
                   for i, n in enumerate(["F32", "I8", "F64", "BF16", "BOOL", "U64"])}
        meta = {"step": "42", "model": "résumé", "empty": ""}
        self.c.put("multi", tensors, metadata=meta)
        doc = self.c.get("multi")
        self.assertIsInstance(doc, dict)
        self.assertEqual(list(doc), list(tensors))
        for k, v in tensors.items():
            self.assertEqual(raw(doc[k]), raw(v))
        self.assertEqual(doc.metadata, meta)
        self.assertIn("w3", repr(doc))
        # A single array is the tensor "tensor".
        self.c.put("single", np.arange(5, dtype=np.int32))
        np.testing.assert_array_equal(self.c.get("single")["tensor"], np.arange(5))

    def test_layouts_that_must_be_copied(self):
        a = np.arange(24, dtype=np.float32).reshape(4, 6)
        self.c.put("t", {"t": a.T, "s": a[:, ::2], "be": a.astype(">f4")})
        doc = self.c.get("t")
        np.testing.assert_array_equal(doc["t"], a.T)
        np.testing.assert_array_equal(doc["s"], a[:, ::2])
        np.testing.assert_array_equal(doc["be"], a)
        self.assertEqual(doc["be"].dtype, np.dtype("<f4"))

    def test_list_info_delete(self):
        self.c.put("ld", {"x": np.zeros(4, np.float32)})
        names = {e["name"]: e for e in self.c.list()}
        self.assertIn("ld", names)
        self.assertEqual(names["ld"]["ntensors"], 1)
        info = self.c.info()
        self.assertEqual(info["name"], "tfetchd")
        self.assertIn("F32", info["dtypes"])
        self.c.delete("ld")
        self.assertEqual(self.c.last.op, "delete")
        with self.assertRaises(tfetch.NotFound):
            self.c.get("ld")

    def test_call_and_shumai_fetch(self):
        x = np.linspace(0, 1, 7, dtype=np.float32)
        y = self.c.call("echo", {"x": x}, metadata={"k": "v"})
        np.testing.assert_array_equal(y["x"], x)
        self.assertEqual(self.c.last.op, "call")
        # tfetch.fetch: no tensors GETs, tensors exchange (full URLs, the shared client).
        self.c.put("sh", {"s": x})
        np.testing.assert_array_equal(tfetch.fetch(self.d.url("/v1/tensors/sh"))["s"], x)
        np.testing.assert_array_equal(tfetch.fetch(self.d.url("/v1/call/echo"), x)["tensor"], x)
        np.testing.assert_array_equal(self.c.fetch("echo", {"q": x})["q"], x)
        self.assertEqual(tfetch.default_client().last.op, "call")

    def test_user_and_result(self):
        self.c.put("r", {"x": np.zeros(3, np.float32)})
        r = self.c.last
        self.assertTrue(r.ok)
        self.assertEqual(r.name, "TF_OK")
        self.assertEqual(r.transport, "http")
        self.assertGreater(r.bytes_sent, 12)
        self.assertGreater(r.seconds, 0)
        self.assertTrue(r.request_id)
        with self.assertRaises(tfetch.errors.EINVAL) as cm:
            tfetch.Client(self.d.base, user="no spaces")
        self.assertIsInstance(cm.exception, ValueError)

    def test_help_is_useful(self):
        self.assertIn("Zero copy", tfetch.__doc__)
        for obj in (tfetch.Client, tfetch.Client.get, tfetch.Client.aget, tfetch.fetch,
                    tfetch.Array, tfetch.Document, tfetch.Result, tfetch.Error):
            self.assertTrue(obj.__doc__ and len(obj.__doc__) > 30, obj)
        self.assertTrue(tfetch.library_version())


class TestZeroCopy(Base):
    def check_views(self, c, name):
        a = {"a": np.arange(1000, dtype=np.float32), "b": np.arange(10, dtype=np.int64),
             "c": np.ones((3, 5), dtype=np.float64)}
        c.put(name, a)
        doc = c.get(name)
        views = [doc[k].base for k in a]
        for k, v in zip(a, views):
            with self.subTest(tensor=k):
                # The base chain: array -> _View (the array interface) -> _Doc (the tf_doc_t).
                self.assertIsInstance(v, _arrays._View)
                self.assertIsInstance(v.owner, _arrays._Doc)
                self.assertIs(v.owner, views[0].owner)
                self.assertFalse(doc[k].flags.owndata)
                self.assertTrue(doc[k].flags.writeable)
        # Each array's data is the tensor's own data in the received document ...
        owner = views[0].owner
        ptrs = []
        for i, k in enumerate(a):
            t = _lib.lib.tf_doc_at(owner.ptr, i).contents
            self.assertEqual(address(doc[k]), t.data)
            self.assertEqual(doc[k].nbytes, t.nbytes)
            ptrs.append((t.data, t.nbytes))
        # ... which lie in one buffer, laid out as the safetensors header says.
        hdr = c_header(owner.ptr)
        offs = [hdr[k]["data_offsets"] for k in a]
        lo, hi = ptrs[0][0] - offs[0][0], ptrs[0][0] - offs[0][0] + offs[-1][1]
        for (p, n), (o0, o1) in zip(ptrs, offs):
            self.assertEqual(p - lo, o0)
            self.assertTrue(lo <= p and p + n <= hi)
        # The document outlives the dict and the other arrays while one array is held.
        keep = doc["a"]
        del doc, views, owner
        gc.collect()
        np.testing.assert_array_equal(keep, np.arange(1000, dtype=np.float32))
        keep[0] = 7          # a view of our own buffer: writable
        self.assertEqual(keep[0], 7)

    def test_get_returns_views_over_http(self):
        self.check_views(self.c, "zc")
        self.assertEqual(self.c.last.transport, "http")

    def test_get_returns_views_over_ucx(self):
        if not ucx_available(self.c):
            self.skipTest("the daemon has no UCX")
        with tfetch.Client(self.d.base, transport="ucx") as c:
            self.check_views(c, "zcu")
            self.assertTrue(c.last.transport.startswith("ucx/"), c.last)

    def test_put_borrows(self):
        a = np.arange(100, dtype=np.float32)
        b = np.zeros((4, 4), dtype=np.uint8)
        doc, keep = _arrays.build_doc({"a": a, "b": b, "t": a[::2]})
        try:
            self.assertEqual(_lib.lib.tf_doc_at(doc, 0).contents.data, address(a))
            self.assertEqual(_lib.lib.tf_doc_at(doc, 1).contents.data, address(b))
            # The strided one is the one copy, kept alive with the doc.
            t = _lib.lib.tf_doc_at(doc, 2).contents
            self.assertNotEqual(t.data, address(a))
            self.assertEqual(ctypes.string_at(t.data, t.nbytes), a[::2].tobytes())
            self.assertEqual(len(keep), 3)
        finally:
            _lib.lib.tf_doc_free(doc)

    def test_dlpack(self):
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        self.c.put("dl", {"x": x, "b": tfetch.tagged(np.arange(6, dtype=np.uint16), "BF16"),
                          "f8": (np.arange(4, dtype=np.uint8), "F8_E5M2")})
        doc = self.c.get("dl")
        # numpy's own export for numpy's dtypes: no copy.
        y = np.from_dlpack(doc["x"])
        self.assertEqual(address(y), address(doc["x"]))
        np.testing.assert_array_equal(y, x)
        # bf16 / fp8: tfetch's capsule, with DLPack's own type codes.
        for k, code, bits in (("b", 4, 16), ("f8", 12, 8)):
            with self.subTest(tensor=k):
                a = doc[k]
                self.assertEqual(a.__dlpack_device__(), (1, 0))
                cap = a.__dlpack__()
                get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
                get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                      ctypes.c_char_p]
                mt = _arrays.DLManagedTensor.from_address(get_ptr(cap, b"dltensor"))
                t = mt.dl_tensor
                self.assertEqual((t.dtype.code, t.dtype.bits, t.dtype.lanes), (code, bits, 1))
                self.assertEqual(t.data, address(a))
                self.assertEqual(t.ndim, 1)
                self.assertEqual(t.shape[0], a.shape[0])
                self.assertEqual(t.strides[0], 1)
                self.assertEqual(t.device.device_type, 1)
                self.assertIn(ctypes.addressof(mt), _arrays._EXPORTS)
                # A consumer calls the deleter: the export is released.
                mt.deleter(ctypes.pointer(mt))
                self.assertNotIn(ctypes.addressof(mt), _arrays._EXPORTS)
                # A capsule never consumed is released with the capsule.
                n = len(_arrays._EXPORTS)
                cap2 = a.__dlpack__()
                self.assertEqual(len(_arrays._EXPORTS), n + 1)
                del cap2
                gc.collect()
                self.assertEqual(len(_arrays._EXPORTS), n)
                del cap


class TestWritableArrays(Base):
    """Every kind of array the package returns either takes a write or says writeable=False
    and refuses it: none may crash the interpreter (a write into a read-only mapping is a
    SIGSEGV). A same-host get is a copy-on-write mapping: the write stays ours, the stored
    tensor keeps its bytes. A same-host ring's items are read-only views of the ring."""

    def write_and_check(self, arr, stored):
        """Writes into arr (writable), then shows what the server keeps is unchanged."""
        self.assertTrue(arr.flags.writeable)
        arr[0] = 42
        self.assertEqual(arr[0], 42)
        np.testing.assert_array_equal(stored(), np.arange(8, dtype=np.float32))

    def refused(self, arr):
        self.assertFalse(arr.flags.writeable)
        with self.assertRaises(ValueError):
            arr[0] = 42
        with self.assertRaises(BufferError):   # DLPack cannot say read-only: refused too
            arr.__dlpack__()

    def test_get_and_call_over_every_transport(self):
        x = np.arange(8, dtype=np.float32)
        self.c.put("wr", {"x": x, "b": tfetch.tagged(np.arange(8, dtype=np.uint16), "BF16")})
        stored = lambda: self.c.get("wr")["x"]                      # noqa: E731, over HTTP
        clients = [("http", self.c)]
        if ucx_available(self.c):
            clients += [("ucx/", tfetch.Client(self.d.base, transport="ucx")),
                        ("shm/memfd", tfetch.Client(self.d.base, transport="auto"))]
        for want, c in clients:
            with self.subTest(transport=want):
                c.get("wr")                                 # the first may go before shm is up
                doc = c.get("wr")
                self.assertTrue(c.last.transport.startswith(want), c.last)
                self.write_and_check(doc["x"], stored)
                doc["b"][1] = 7                                     # bf16: a tfetch.Array
                self.assertEqual(int(doc["b"].view(np.uint16)[1]), 7)
                self.assertEqual(int(self.c.get("wr")["b"].view(np.uint16)[1]), 1)
                out = c.call("echo", {"x": x})
                self.write_and_check(out["x"], stored)
                if torch is not None:                               # through DLPack too
                    torch.from_dlpack(doc["x"]).add_(1)
                    self.assertEqual(doc["x"][1], 2)
                    np.testing.assert_array_equal(stored(), x)
        for _, c in clients[1:]:
            c.close()

    def test_feed_items(self):
        decl = {"devices": 2, "signature": [{"name": "x", "dtype": "F32", "shape": [8]}]}
        self.c.feed_declare("wrfeed", decl)
        x = np.arange(8, dtype=np.float32)
        cases = [("http", self.c)]
        if ucx_available(self.c):
            cases.append(("shm/ring", tfetch.Client(self.d.base, transport="auto")))
        for dev, (want, c) in enumerate(cases):
            with self.subTest(transport=want):
                self.c.infeed_push("wrfeed", {"x": x}, device=dev)
                with c.feed("wrfeed", device=dev) as f:
                    with f.pop(timeout=5) as item:
                        self.assertEqual(f.transport, want)
                        arr = item.doc["x"]
                        np.testing.assert_array_equal(arr, x)
                        if want == "shm/ring":
                            self.refused(arr)
                            np.testing.assert_array_equal(arr, x)   # untouched
                            mine = arr.copy()                       # the way to change one
                            mine[0] = 42
                            self.assertEqual(mine[0], 42)
                        else:
                            arr[0] = 42
                            self.assertEqual(arr[0], 42)
        for _, c in cases[1:]:
            c.close()

    def test_batch_stays_writable(self):
        b = tfetch.Batch({"x": ("F32", (8,))})
        b["x"][:] = np.arange(8, dtype=np.float32)
        self.c.put("wrb", b)
        b["x"][0] = 42                                  # ours to refill after the request
        self.assertEqual(self.c.get("wrb")["x"][0], 0)


def c_header(doc_ptr):
    return _arrays_header(doc_ptr)


def _arrays_header(doc_ptr):
    hdr, hlen = ctypes.c_void_p(), ctypes.c_size_t()
    assert _lib.lib.tf_doc_encode_header(doc_ptr, ctypes.byref(hdr), ctypes.byref(hlen)) == 0
    raw_hdr = ctypes.string_at(hdr, hlen.value)
    _lib.lib.tf_free(hdr)
    return json.loads(raw_hdr[8:8 + int.from_bytes(raw_hdr[:8], "little")])


class TestUpgrade(Base):
    def test_auto_upgrades_and_reports(self):
        if not ucx_available(self.c):
            self.skipTest("the daemon has no UCX")
        # Eager (the default): a server on this host is upgraded before the first request.
        with tfetch.Client(self.d.base, transport="auto") as c:
            c.put("up", {"x": np.arange(4, dtype=np.float32)})
            self.assertTrue(c.last.transport.startswith(("ucx/", "shm/")), c.last)
        with self.assertRaises(ValueError):
            tfetch.Client(self.d.base, upgrade="sometimes")
        with tfetch.Client(self.d.base, transport="auto", upgrade="lazy") as c:
            c.put("up", {"x": np.arange(4, dtype=np.float32)})
            self.assertEqual(c.last.transport, "http")
            self.assertIn("not offered", c.last.fallback)      # why the first went over HTTP
            deadline = time.monotonic() + 20
            # Upgraded: a get on this host then takes the shm socket (or UCX).
            while (not c.last.transport.startswith(("ucx/", "shm/")) and
                   time.monotonic() < deadline):
                c.get("up")
                time.sleep(0.05)
            self.assertTrue(c.last.transport.startswith(("ucx/", "shm/")), c.last)
            self.assertEqual(c.last.fallback, "")
            # UCX settles beside the requests (no request waits for it): on a loaded
            # machine later than the shm socket.
            while (not c.transport_info()["transport"].startswith("ucx/") and
                   time.monotonic() < deadline):
                c.get("up")
                time.sleep(0.05)
            self.assertTrue(c.transport_info()["transport"].startswith("ucx/"),
                            c.transport_info())
            self.assertIs(c.transport_info()["offered"], True)
            c.call("echo", {"x": np.arange(4, dtype=np.float32)})   # an exchange: UCX's
            self.assertTrue(c.last.transport.startswith("ucx/"), c.last)
            self.assertGreaterEqual(c.transport_info()["caller_driven"], 1)   # blocking calls

    def test_staging_batch(self):
        """A Batch in a staging buffer the same-host tfetchd lends (Client.staging_batch):
        pushes over UCX name it and tfetchd copies each item out of it at the push, so
        refilling it after a push changes no queued item; the daemon counts the staged
        pushes. A client on transport http has no shared memory: refused."""
        if not ucx_available(self.c):
            self.skipTest("the daemon has no UCX")
        decl = {"devices": 1, "signature": [{"name": "x", "dtype": "F32", "shape": [4]}]}
        self.c.feed_declare("pystaged", decl)
        with tfetch.Client(self.d.base, transport="auto") as c:
            b = c.staging_batch("pystaged", {"x": ("F32", (4,))})
            self.assertTrue(b["x"].flags.writeable)
            for i in range(1, 4):
                b["x"][:] = i
                c.infeed_push("pystaged", b, device=0, seq=i)
                self.assertTrue(c.last.transport.startswith("ucx/"), c.last)
            b["x"][:] = -1
            with c.feed("pystaged", device=0) as f:
                for i in range(1, 4):
                    item = f.pop(timeout=5)
                    with item:
                        np.testing.assert_array_equal(item.doc["x"], np.full(4, i, np.float32))
        metrics = urllib.request.urlopen(self.d.base + "/metrics", timeout=5).read().decode()
        self.assertIn("\ntfetch_shm_staged_pushes_total 3\n", metrics)
        with self.assertRaises(tfetch.errors.ENOTIMPL) as e:
            self.c.staging_batch("pystaged", {"x": ("F32", (4,))})
        self.assertIn("policy http", str(e.exception))

    def test_strict_ucx(self):
        if not ucx_available(self.c):
            self.skipTest("the daemon has no UCX")
        with tfetch.Client(self.d.base, transport="ucx") as c:
            c.upgrade()
            c.put("strict", {"x": np.arange(4, dtype=np.int16)})
            self.assertTrue(c.last.transport.startswith("ucx/"), c.last)
            np.testing.assert_array_equal(c.get("strict")["x"], np.arange(4))
            self.assertTrue(c.last.transport.startswith("ucx/"), c.last)


class TestFallback(Base):
    args = ("--ucx", "off")

    def test_fallback_reported(self):
        with tfetch.Client(self.d.base, transport="auto") as c:
            for _ in range(3):
                c.put("fb", {"x": np.arange(4, dtype=np.float32)})
                c.get("fb")
                self.assertEqual(c.last.transport, "http")
                self.assertTrue(c.last.fallback, c.last)
            self.assertIs(c.transport_info()["offered"], False)
        with tfetch.Client(self.d.base, transport="ucx") as c:
            with self.assertRaises(tfetch.ConnectError) as cm:
                c.get("fb")
            self.assertEqual(cm.exception.name, "TF_ECONNECT")
            self.assertIsInstance(cm.exception, ConnectionError)
        with tfetch.Client(self.d.base, transport="http") as c:
            c.get("fb")
            self.assertEqual((c.last.transport, c.last.fallback), ("http", ""))


class TestErrors(Base):
    args = ("--max-body", "1K")

    def test_not_found(self):
        with self.assertRaises(tfetch.Error) as cm:
            self.c.get("missing")
        e = cm.exception
        self.assertIsInstance(e, tfetch.errors.ENOTFOUND)
        self.assertIsInstance(e, LookupError)
        self.assertEqual((e.name, e.http_status, e.status), ("TF_ENOTFOUND", 404, -5))
        self.assertIn("missing", e.message)                 # the server's message
        self.assertIn("404", str(e))
        self.assertEqual(e.result.op, "get")
        self.assertEqual(self.c.last.http_status, 404)

    def test_too_big(self):
        with self.assertRaises(tfetch.TooBig) as cm:
            self.c.put("big", {"x": np.zeros(4096, np.float32)})
        self.assertEqual((cm.exception.name, cm.exception.http_status), ("TF_ETOOBIG", 413))
        self.assertTrue(cm.exception.message)

    def test_bad_url(self):
        for url in ("ftp://x/v1/tensors/a", "http:///v1/tensors/a", "nonsense://"):
            with self.subTest(url=url), self.assertRaises(tfetch.BadURL) as cm:
                self.c.get(url)
            self.assertIsInstance(cm.exception, ValueError)
            self.assertEqual(cm.exception.http_status, 0)
        with self.assertRaises(tfetch.BadURL):
            tfetch.Client().get("no-base")

    def test_connection_refused(self):
        with tfetch.Client("http://127.0.0.1:%d" % closed_port()) as c:
            with self.assertRaises(tfetch.ConnectError) as cm:
                c.get("x")
            self.assertEqual((cm.exception.name, cm.exception.http_status), ("TF_ECONNECT", 0))
            self.assertIsInstance(cm.exception, ConnectionError)
            with self.assertRaises(tfetch.ConnectError):
                asyncio.run(c.aget("x"))

    def test_async_errors(self):
        async def run():
            with self.assertRaises(tfetch.NotFound) as cm:
                await self.c.aget("missing-async")
            self.assertEqual(cm.exception.http_status, 404)
            with self.assertRaises(tfetch.TooBig):
                await self.c.aput("big", {"x": np.zeros(4096, np.float32)})
            with self.assertRaises(tfetch.BadURL):
                await self.c.aget("ftp://x/v1/tensors/a")
            # A listener that never answers: this request's own timeout.
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                s.listen(8)
                url = "http://127.0.0.1:%d/v1/tensors/a" % s.getsockname()[1]
                t0 = time.monotonic()
                with self.assertRaises(tfetch.Timeout) as cm:
                    await self.c.aget(url, timeout=0.3)
                self.assertLess(time.monotonic() - t0, 10)
                self.assertIsInstance(cm.exception, TimeoutError)
        asyncio.run(run())
        self.assertEqual(self.c.last.name, "TF_ETIMEDOUT")

    def test_errors_table(self):
        # One class per status of the library's table, named after it.
        for v, n, h in ((-5, "ENOTFOUND", 404), (-17, "ECONFLICT", 409), (-32, "ECONNECT", 0)):
            cls = getattr(tfetch.errors, n)
            self.assertTrue(issubclass(cls, tfetch.Error))
            self.assertEqual(cls(v).name, "TF_" + n)


class TestAsync(Base):
    args = ("--max-waiters", "2048")

    def test_thousand_long_polls_in_flight(self):
        # 1,000 agets long-poll a tensor not there yet: all in flight at once (64 on the
        # wire, the rest queued in libtfetch), then one put completes them all.
        N = 1000
        payload = np.arange(256, dtype=np.float32)

        async def run():
            with tfetch.Client(self.d.base, max_connections=64) as c:
                tasks = [asyncio.ensure_future(c.aget("later", wait=60)) for _ in range(N)]
                deadline = time.monotonic() + 60
                while (c._driver is None or c._driver.peak_pending < N) and \
                        time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                self.assertEqual(c._driver.peak_pending, N)
                self.assertFalse(any(t.done() for t in tasks))
                # Over the client's blocking side (its own connections: the async side's
                # are all held by the long-polls, and the rest of them are queued).
                c.put("later", {"p": payload})
                docs = await asyncio.gather(*tasks)
                self.assertEqual(c.last.op, "get")
                return docs
        docs = asyncio.run(run())
        self.assertEqual(len(docs), N)
        for d in docs:
            np.testing.assert_array_equal(d["p"], payload)

    def test_thousand_exchanges_each_its_answer(self):
        N = 1000

        async def run():
            with tfetch.Client(self.d.base) as c:
                ins = [np.full(8, i, dtype=np.int32) for i in range(N)]
                outs = await asyncio.gather(*(c.acall("echo", {"x": x}) for x in ins))
                for i, o in enumerate(outs):
                    np.testing.assert_array_equal(o["x"], ins[i])
                self.assertGreater(c._driver.peak_pending, 1)
        asyncio.run(run())

    def test_async_operations(self):
        async def run():
            with tfetch.Client(self.d.base) as c:
                x = np.arange(9, dtype=np.float64).reshape(3, 3)
                await c.aput("ao", {"x": x}, metadata={"m": "1"})
                doc = await c.aget("ao")
                np.testing.assert_array_equal(doc["x"], x)
                self.assertEqual(doc.metadata, {"m": "1"})
                self.assertIsInstance(doc["x"].base, _arrays._View)
                self.assertIn("ao", [e["name"] for e in await c.alist()])
                self.assertEqual((await c.ainfo())["name"], "tfetchd")
                y = await c.afetch("echo", {"y": x})
                np.testing.assert_array_equal(y["y"], x)
                await c.adelete("ao")
                self.assertEqual(c.last.op, "delete")
                with self.assertRaises(tfetch.NotFound):
                    await c.aget("ao")
                # The sync and async sides of one client at once.
                c.put("both", {"x": x})
                got = await asyncio.gather(c.aget("both"), c.aget("both"))
                np.testing.assert_array_equal(got[1]["x"], c.get("both")["x"])
        asyncio.run(run())

    def test_close_right_after_a_request(self):
        # close() wakes the driver while it may be freeing its client: the wakeup must never
        # reach a freed client (this crashed, in curl_multi_wakeup, before the fix).
        url = "http://127.0.0.1:%d" % closed_port()
        for _ in range(150):
            c = tfetch.Client(url)
            with self.assertRaises(tfetch.ConnectError):
                asyncio.run(c.aget("x"))
            c.close()

    def test_cancel_and_close(self):
        async def run():
            # Over HTTP: a long-poll in flight over UCX cannot be stopped midway.
            c = tfetch.Client(self.d.base, upgrade="lazy")
            t = asyncio.ensure_future(c.aget("never-there", wait=30))
            await asyncio.sleep(0.3)
            t.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await t
            deadline = time.monotonic() + 10     # the request is canceled too
            while c._driver._jobs and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            self.assertEqual(c._driver._jobs, {})
            # Closing cancels what is in flight: those calls raise ECANCELED.
            t2 = asyncio.ensure_future(c.aget("never-there", wait=30))
            await asyncio.sleep(0.3)
            c.close()
            with self.assertRaises(tfetch.errors.ECANCELED):
                await t2
            with self.assertRaises(tfetch.Error):
                await c.aget("x")
            with self.assertRaises(tfetch.Error):
                c.get("x")
        asyncio.run(run())


class TestAuth(unittest.TestCase):
    """Client(token=...) against tfetchd --auth-tokens."""

    def setUp(self):
        self.tokens = tempfile.NamedTemporaryFile("w", suffix=".tokens", delete=False)
        self.tokens.write("tka-py alice read:alice.* write:alice.*\ntkb-py bob read:bob.*\n")
        self.tokens.close()
        self.d = Daemon("--auth-tokens", self.tokens.name)

    def tearDown(self):
        self.d.stop()
        os.unlink(self.tokens.name)

    def test_token(self):
        arr = np.arange(4, dtype=np.float32)
        with tfetch.Client(self.d.base, token="tka-py") as c:
            self.assertNotIn("tka-py", repr(c))
            c.put("alice.x", {"t": arr})
            self.assertTrue(np.array_equal(c.get("alice.x")["t"], arr))
        with tfetch.Client(self.d.base, token="tkb-py") as c:
            with self.assertRaises(tfetch.Error) as e:
                c.get("alice.x")
            self.assertEqual(e.exception.name, "TF_EFORBIDDEN")
            self.assertEqual(e.exception.http_status, 403)
        env = os.environ.pop("TFETCH_TOKEN", None)
        try:
            with tfetch.Client(self.d.base) as c:
                with self.assertRaises(tfetch.Error) as e:
                    c.get("alice.x")
                self.assertEqual(e.exception.name, "TF_EUNAUTH")
        finally:
            if env is not None:
                os.environ["TFETCH_TOKEN"] = env
        with self.assertRaises(tfetch.Error) as e:
            tfetch.Client(self.d.base, token="not a token")
        self.assertNotIn("not a token", str(e.exception))


class TestClientCert(unittest.TestCase):
    """Client(cert=..., key=...) against tfetchd --tls-client-ca: the certificate's principal."""

    def cert(self, name, tmpl, ca=None):
        d = self.dir.name
        with open(os.path.join(d, name + ".tmpl"), "w") as f:
            f.write(tmpl)
        # Without the sanitizer runtime python.test preloads for libtfetch under ASan: certtool
        # deadlocks in a futex with it. A time limit, so a hang fails instead of blocking.
        env = {k: v for k, v in os.environ.items()
               if k != "LD_PRELOAD" and not k.endswith("SAN_OPTIONS")}
        run = lambda *a: subprocess.run(a, cwd=d, check=True, capture_output=True, env=env,
                                        stdin=subprocess.DEVNULL, timeout=60)
        run("certtool", "--generate-privkey", "--key-type=ecdsa", "--outfile", name + ".key")
        if ca:
            run("certtool", "--generate-certificate", "--load-privkey", name + ".key",
                "--load-ca-certificate", ca + ".pem", "--load-ca-privkey", ca + ".key",
                "--template", name + ".tmpl", "--outfile", name + ".pem")
        else:
            run("certtool", "--generate-self-signed", "--load-privkey", name + ".key",
                "--template", name + ".tmpl", "--outfile", name + ".pem")
        return os.path.join(d, name + ".pem"), os.path.join(d, name + ".key")

    def setUp(self):
        if not shutil.which("certtool"):
            self.skipTest("certtool not found (gnutls-bin)")
        self.dir = tempfile.TemporaryDirectory(prefix="tfetch-py-mtls-")
        ca, _ = self.cert("ca", 'cn = "py CA"\nca\ncert_signing_key\nexpiration_days = 30\n')
        srv, srv_key = self.cert("srv", 'cn = "127.0.0.1"\nip_address = "127.0.0.1"\n'
                                 'tls_www_server\nexpiration_days = 30\n', "ca")
        self.alice = self.cert("alice", 'cn = "alice"\norganization = "ml"\ntls_www_client\n'
                               'expiration_days = 30\n', "ca")
        tokens = os.path.join(self.dir.name, "tokens")
        with open(os.open(tokens, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("cert:CN=alice,O=ml alice read:alice.* write:alice.*\n")
        self.d = Daemon("--tls-cert", srv, "--tls-key", srv_key, "--tls-client-ca", ca,
                        "--auth-tokens", tokens)
        self.env = {k: os.environ.pop(k, None) for k in ("TFETCH_CA_FILE", "TFETCH_CERT",
                                                         "TFETCH_KEY", "TFETCH_TOKEN")}
        os.environ["TFETCH_CA_FILE"] = ca

    def tearDown(self):
        self.d.stop()
        for k, v in self.env.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
        self.dir.cleanup()

    def test_cert(self):
        arr = np.arange(4, dtype=np.float32)
        cert, key = self.alice
        with tfetch.Client(self.d.base, cert=cert, key=key) as c:
            c.put("alice.x", {"t": arr})
            self.assertTrue(np.array_equal(c.get("alice.x")["t"], arr))
            with self.assertRaises(tfetch.Error) as e:
                c.put("bob.x", {"t": arr})
            self.assertEqual(e.exception.name, "TF_EFORBIDDEN")
        with tfetch.Client(self.d.base) as c:
            with self.assertRaises(tfetch.Error) as e:
                c.get("alice.x")
            self.assertEqual(e.exception.name, "TF_EUNAUTH")
        with self.assertRaises(tfetch.Error):
            tfetch.Client(self.d.base, cert=cert + ".missing", key=key)
        with self.assertRaises(ValueError):
            tfetch.Client(self.d.base, key=key)


class DLPackOnly:
    """An object that offers its memory only through DLPack (as jax or cupy do), not
    __array__: what put must take without numpy's help (fp8 here, which torch 1.13 lacks)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def received_at(t):
    """Where libtfetch received the tensor that torch tensor t was made over: the data
    pointer of the tf_doc_t tensor under the numpy view its DLPack export came from (the
    view's base is the _View whose owner holds the received document or feed item)."""
    for mt, _shape, _strides, a in list(_arrays._EXPORTS.values()):
        if mt.dl_tensor.data != t.data_ptr():
            continue
        base = a
        while not isinstance(base, _arrays._View):
            base = base.base
        owner = base.owner
        doc = owner.ptr if isinstance(owner, _arrays._Doc) else \
            _lib.lib.tf_item_doc(owner.ptr)
        return [_lib.lib.tf_doc_at(doc, i).contents.data
                for i in range(_lib.lib.tf_doc_count(doc))]
    return []


def bf16_bits(n, seed=0):
    """n random bf16 bit patterns (no NaNs: torch.equal would call them unequal)."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 0x7f00, n, dtype=np.uint16)
    bits[::2] |= 0x8000
    return bits


@unittest.skipIf(torch is None, "torch is not installed (apt-get install python3-torch)")
class TestTorch(Base):
    """torch in and out: put takes any __dlpack__ object from where it lies (bf16, fp8),
    get(like="torch") and feeds give torch tensors over the received buffer, no copy."""

    def tensor_bf16(self, n=12, seed=0):
        bits = torch.from_numpy(bf16_bits(n, seed).view(np.int16).copy())
        return bits.view(torch.bfloat16).reshape(3, -1)

    def test_put_takes_dlpack_without_copy(self):
        t = self.tensor_bf16()
        f8 = DLPackOnly(tfetch.tagged(np.arange(1, 7, dtype=np.uint8).reshape(2, 3), "F8_E4M3"))
        doc, keep = _arrays.build_doc({"t": t, "f": f8, "g": torch.ones(2, 2).T})
        try:
            self.assertEqual(tfetch.dtype_name(keep[0]), "BF16")
            self.assertEqual(address(keep[0]), t.data_ptr())          # borrowed, not copied
            self.assertEqual(tfetch.dtype_name(keep[1]), "F8_E4M3")
            self.assertEqual(address(keep[1]), address(f8.a))
            self.assertTrue(keep[2].flags.c_contiguous)                # the one copy: order
        finally:
            _arrays.release_doc(doc, keep)
            del keep
        self.c.put("f8", {"f": f8})
        self.assertEqual(raw(self.c.get("f8")["f"]), raw(f8.a))

    def check_round_trip(self, c, name):
        t = self.tensor_bf16(seed=len(name))
        c.put(name, {"t": t, "x": torch.arange(4, dtype=torch.int32)}, metadata={"k": "v"})
        got = c.get(name, like="torch")
        self.assertEqual(got.metadata, {"k": "v"})
        self.assertEqual(got["t"].dtype, torch.bfloat16)
        self.assertEqual(tuple(got["t"].shape), tuple(t.shape))
        self.assertEqual(got["t"].view(torch.int16).numpy().tobytes(),
                         t.view(torch.int16).numpy().tobytes())   # bytes unchanged
        self.assertTrue(torch.equal(got["x"], torch.arange(4, dtype=torch.int32)))
        where = received_at(got["t"])
        self.assertIn(got["t"].data_ptr(), where)                 # no copy on the get side
        self.assertIn(got["x"].data_ptr(), where)
        return got

    def test_get_like_torch_shares_the_received_buffer(self):
        self.check_round_trip(self.c, "tb-http")
        with tfetch.Client(self.d.base, user="py-test") as c:        # auto: same-host shm
            got = self.check_round_trip(c, "tb-auto")
            del got
        self.assertIsInstance(self.c.get("tb-http", like="numpy")["t"], tfetch.Array)
        with self.assertRaises(ValueError):
            self.c.get("tb-http", like="tensorflow")

    def test_feed_like_torch(self):
        decl = {"devices": 1, "signature": [{"name": "t", "dtype": "BF16", "shape": [3, 4]}]}
        for transport in ("http", "auto"):
            with self.subTest(transport=transport):
                name = "tfeed-" + transport
                self.c.feed_declare(name, decl)
                sent = [self.tensor_bf16(seed=i) for i in range(3)]
                for i, t in enumerate(sent, 1):
                    self.c.infeed_push(name, {"t": t}, device=0, seq=i)
                with tfetch.Client(self.d.base, user="py-test",
                                   transport=transport) as c, \
                        c.feed(name, device=0, like="torch") as f:
                    for t in sent:
                        with f.pop(timeout=10) as item:
                            got = item.doc["t"]
                            self.assertEqual(got.dtype, torch.bfloat16)
                            self.assertEqual(got.view(torch.int16).numpy().tobytes(),
                                             t.view(torch.int16).numpy().tobytes())
                            self.assertIn(got.data_ptr(), received_at(got))
                            del got


class TestReadme(Base):
    def test_readme_example_runs(self):
        """The ```python block under "## Python" in README.md, verbatim."""
        srcdir = os.environ.get("TF_TOP_SRCDIR",
                                os.path.join(os.path.dirname(__file__), "..", ".."))
        with open(os.path.join(srcdir, "README.md"), encoding="utf-8") as f:
            readme = f.read().splitlines()
        sec, block = 0, []
        for line in readme:
            if line.startswith("## "):
                if sec:
                    break
                sec = line == "## Python"
            elif sec and line == "```python" and not block:
                block.append("")
            elif sec and block and line == "```":
                break
            elif block:
                block.append(line)
        self.assertTrue(block, "no ```python block under '## Python' in README.md")
        env = dict(os.environ, TFETCH_URL=self.d.base)
        out = subprocess.run([sys.executable, "-c", "\n".join(block)], env=env,
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(len(lines), 3, out.stdout)
        self.assertTrue(lines[0].startswith("5.0 {'step': '1'} "), lines[0])
        self.assertEqual(lines[1], "15.0")
        self.assertEqual(lines[2], "100 (2, 3)")


if __name__ == "__main__":
    unittest.main(verbosity=2)
