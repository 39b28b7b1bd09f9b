"""test_files - the Python package's big-document calls (Client.get_file, Client.put_file:
tf_fetch_start_fd, a document streamed between a file and the server, never held whole in
memory) against the real tfetchd on port 0, over HTTP and same-host (auto), and the bound on
a client's memory that is their point: a get_file of a 512 MiB document grows the process's
peak RSS by far less than the document (measured in a child process, where nothing else has
touched memory). Run by tests/python.test beside test_tfetch.py (same environment).
"""
import http.server
import json
import os
import shutil
import subprocess
import sys
import pathlib
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tfetch import Daemon, DaemonPerClass  # noqa: E402

import tfetch  # noqa: E402


def write_doc(path, nbytes, fill=True):
    """A safetensors document at path: one U8 tensor "x" of nbytes bytes; fill: varied
    bytes (a few MiB), else a sparse file of zeros (costs no disk or memory to make)."""
    hdr = json.dumps({"x": {"dtype": "U8", "shape": [nbytes],
                            "data_offsets": [0, nbytes]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    with open(path, "wb") as f:
        f.write(len(hdr).to_bytes(8, "little") + hdr)
        if fill:
            f.write(bytes(range(256)) * (nbytes // 256) + bytes(nbytes % 256))
        else:
            f.truncate(8 + len(hdr) + nbytes)


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


class Files(DaemonPerClass):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tfetch-files-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def path(self, n):
        return os.path.join(self.dir, n)

    def test_round_trip(self):
        c, name = self.c, "%s-big" % self.transport
        src, dst = self.path("src.safetensors"), self.path("dst.safetensors")
        write_doc(src, 5 << 20)
        r = c.put_file(name, src)
        self.assertIs(r, c.last)
        self.assertEqual(r.http_status, 201)
        self.assertTrue(r.etag)
        want = {"http": "http", "auto": "shm/memfd"}[self.transport]
        self.assertTrue(r.transport.startswith(want), r.transport)
        r = c.get_file(name, pathlib.Path(dst))          # os.PathLike
        self.assertIs(r, c.last)
        self.assertTrue(r.transport.startswith(want), r.transport)
        self.assertEqual(r.bytes_received, os.path.getsize(src))
        self.assertTrue(same_bytes(src, dst))
        self.assertEqual(sorted(os.listdir(self.dir)), ["dst.safetensors", "src.safetensors"])
        doc = c.get(name)                                 # the same document as get sees
        self.assertEqual(doc["x"].nbytes, 5 << 20)
        self.assertEqual(int(doc["x"][257]), 1)

    def test_failed_get_leaves_the_file(self):
        c, dst = self.c, self.path("keep.safetensors")
        with open(dst, "wb") as f:
            f.write(b"as it was")
        with self.assertRaises(tfetch.errors.ENOTFOUND) as cm:
            c.get_file("%s-absent" % self.transport, dst)
        self.assertIsInstance(cm.exception, tfetch.Error)
        self.assertEqual(c.last.http_status, 404)
        with open(dst, "rb") as f:
            self.assertEqual(f.read(), b"as it was")
        self.assertEqual(os.listdir(self.dir), ["keep.safetensors"])   # no temporary left

    def test_put_file_refuses_what_is_no_document(self):
        c, src = self.c, self.path("junk")
        with open(src, "wb") as f:
            f.write(b"\xff" * 64)
        with self.assertRaises(tfetch.Error):
            c.put_file("%s-junk" % self.transport, src)
        with self.assertRaises(FileNotFoundError):
            c.put_file("%s-junk" % self.transport, self.path("absent"))
        with self.assertRaises(tfetch.errors.ENOTFOUND):
            c.get("%s-junk" % self.transport)


class Garbage(http.server.BaseHTTPRequestHandler):
    """A server whose every GET answers 200 with bytes that are no safetensors document."""

    def do_GET(self):
        body = (8).to_bytes(8, "little") + b"notjson!"
        self.send_response(200)
        self.send_header("Content-Type", "application/x-safetensors")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class TestBadReply(unittest.TestCase):
    def test_get_file_checks_what_it_wrote(self):
        # A streamed reply is not decoded on the way: get_file checks the file before
        # renaming it into place, and a bad one leaves nothing behind.
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Garbage)
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        tmp = tempfile.mkdtemp(prefix="tfetch-bad-")
        try:
            c = tfetch.Client("http://127.0.0.1:%d" % srv.server_address[1], transport="http")
            with self.assertRaises(tfetch.errors.EPROTO) as cm:
                c.get_file("x", os.path.join(tmp, "x.safetensors"))
            self.assertIn("bad safetensors response", str(cm.exception))
            self.assertEqual(os.listdir(tmp), [])
            c.close()
        finally:
            srv.shutdown()
            srv.server_close()
            shutil.rmtree(tmp)


class TestFilesHttp(Files, unittest.TestCase):
    transport = "http"


class TestFilesAuto(Files, unittest.TestCase):
    transport = "auto"


# The child: put_file then get_file of the document at argv[2] as argv[3], over HTTP;
# prints how far each call raised its peak RSS (KiB) above the RSS before it. The peak is
# the kernel's (VmHWM, as ru_maxrss), reset before each call through clear_refs: a child's
# ru_maxrss starts at what its parent's was when it forked, which says nothing of the call.
CHILD = r"""
import sys, tfetch
def status(key):
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith(key + ":")).split()[1])
def growth(call):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                        # peak := now
    before = status("VmRSS")
    call()
    return status("VmHWM") - before
c = tfetch.Client(sys.argv[1], transport="http")
put = growth(lambda: c.put_file("rss", sys.argv[2]))
get = growth(lambda: c.get_file("rss", sys.argv[3]))
print(put, get, c.last.bytes_received)
"""


class TestBoundedMemory(unittest.TestCase):
    SIZE = 512 << 20

    def test_get_and_put_file_do_not_hold_the_document(self):
        d = Daemon("--store-memory", "1G", "--max-body", "1G")
        tmp = tempfile.mkdtemp(prefix="tfetch-rss-")
        try:
            src, dst = os.path.join(tmp, "src"), os.path.join(tmp, "dst")
            write_doc(src, self.SIZE, fill=False)
            out = subprocess.run([sys.executable, "-c", CHILD, d.base, src, dst],
                                 capture_output=True, text=True, timeout=300)
            self.assertEqual(out.returncode, 0, out.stderr)
            put_kib, get_kib, got = (int(v) for v in out.stdout.split())
            self.assertEqual(got, os.path.getsize(src))
            self.assertEqual(os.path.getsize(dst), os.path.getsize(src))
            # Holding the document would cost 512 MiB; streaming costs a few buffers.
            limit = (self.SIZE >> 10) // 8                  # 64 MiB, in KiB
            self.assertLess(get_kib, limit, "get_file grew peak RSS by %d KiB" % get_kib)
            self.assertLess(put_kib, limit, "put_file grew peak RSS by %d KiB" % put_kib)
        finally:
            shutil.rmtree(tmp)
            d.stop()


if __name__ == "__main__":
    unittest.main()
