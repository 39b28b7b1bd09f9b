"""test_cond - the Python package's conditions, versions, lifetimes, ranges and listing
pages (Client.put's ttl/if_match/if_none_match, get's newer_than, list's prefix/after/limit,
get_range, Client.last.etag), and the same through the asyncio calls (aput, aget,
adelete, alist) against the real tfetchd on port 0, over each transport the
package offers. Run by tests/python.test beside test_tfetch.py (same environment).
"""
import asyncio
import os
import sys
import threading
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tfetch import DaemonPerClass  # noqa: E402

import tfetch  # noqa: E402


class Cond(DaemonPerClass):
    def name(self, n):
        return "%s-%s" % (self.transport, n)

    def test_create_only_and_compare_and_swap(self):
        c, n = self.c, self.name("cas")
        c.put(n, {"x": np.ones(4, np.float32)}, if_none_match="*")
        e1 = c.last.etag
        self.assertEqual(c.last.http_status, 201)
        self.assertTrue(e1.startswith('"'), e1)
        # Every transport carries a PUT's conditions; on one host auto takes shm for them
        want = {"http": "http", "ucx": "ucx/", "auto": "shm/memfd"}[self.transport]
        self.assertTrue(c.last.transport.startswith(want), c.last.transport)
        with self.assertRaises(tfetch.errors.EPRECOND) as cm:     # it exists already
            c.put(n, {"x": np.zeros(4, np.float32)}, if_none_match="*")
        self.assertIsInstance(cm.exception, tfetch.Error)
        self.assertEqual(cm.exception.http_status, 412)
        self.assertEqual(float(c.get(n)["x"][0]), 1.0)            # unchanged
        c.put(n, {"x": np.full(4, 2, np.float32)}, if_match=e1)    # swap
        e2 = c.last.etag
        self.assertNotEqual(e1, e2)
        with self.assertRaises(tfetch.errors.EPRECOND):            # e1 is stale now
            c.put(n, {"x": np.full(4, 3, np.float32)}, if_match=e1)
        self.assertEqual(float(c.get(n)["x"][0]), 2.0)
        with self.assertRaises(tfetch.errors.EPRECOND):
            c.delete(n, if_match=e1)
        c.delete(n, if_match=e2)
        with self.assertRaises(tfetch.errors.ENOTFOUND):
            c.get(n)

    def test_stages(self):
        """c.last.stages: where a put's and a get's time went, in ms, on every transport: the
        client's stages and the server's own (its Server-Timing or reply frame), sane."""
        c, n = self.c, self.name("stages")
        x = np.arange(1 << 18, dtype=np.float32)
        for call in (lambda: c.put(n, {"x": x}), lambda: c.get(n)):
            call()
            s, total = c.last.stages, c.last.seconds * 1000
            for k in ("send", "server", "queue", "handler", "receive", "decode", "total"):
                self.assertIn(k, s, (c.last.transport, s))
                self.assertGreaterEqual(s[k], 0, (k, s))
            self.assertAlmostEqual(s["total"], total, delta=0.01)
            self.assertAlmostEqual(s["server"], s["queue"] + s["handler"], delta=0.002)
            parts = sum(s.get(k, 0) for k in ("connect", "upgrade", "send", "server",
                                              "receive", "decode"))
            self.assertLessEqual(parts, total + 1.0, (c.last.transport, s))
        info = c.transport_info()
        self.assertEqual(info["last_stages"], c.last.stages)

    def test_newer_than(self):
        c, n = self.c, self.name("ckpt")
        c.put(n, {"x": np.ones(2, np.float32)}, if_none_match="*")
        e1 = c.last.etag
        with self.assertRaises(tfetch.errors.ENOTMODIFIED) as cm:
            c.get(n, newer_than=e1)
        self.assertEqual(cm.exception.http_status, 304)
        t0 = time.monotonic()
        with self.assertRaises(tfetch.errors.ENOTMODIFIED):
            c.get(n, wait=0.3, newer_than=e1)
        self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        # A writer puts a new version while the reader waits for it.
        w = tfetch.Client(self.d.base, transport=self.transport)
        timer = threading.Timer(0.3, lambda: w.put(n, {"x": np.full(2, 5, np.float32)}))
        timer.start()
        try:
            doc = c.get(n, wait=20, newer_than=e1)
        finally:
            timer.join()
            w.close()
        self.assertEqual(float(doc["x"][0]), 5.0)
        self.assertNotEqual(c.last.etag, e1)

    def test_ttl(self):
        c, n = self.c, self.name("ttl")
        c.put(n, {"x": np.ones(1, np.float32)}, ttl=1)
        c.get(n)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                c.get(n)
            except tfetch.errors.ENOTFOUND:
                break
            time.sleep(0.1)
        else:
            self.fail("a document with ttl=1 was still there after 10 s")
        with self.assertRaises(ValueError):
            c.put(n, {"x": np.ones(1, np.float32)}, ttl=0)

    def test_range(self):
        c, n = self.c, self.name("range")
        c.put(n, {"x": np.arange(4, dtype=np.float32)})
        head = c.get_range(n, 0, 8)
        self.assertEqual(len(head), 8)
        hlen = int.from_bytes(head, "little")
        tail = c.get_range(n, 8 + hlen)
        self.assertEqual(np.frombuffer(tail, np.float32).tolist(), [0, 1, 2, 3])
        with self.assertRaises(tfetch.errors.ERANGE):
            c.get_range(n, 1 << 20)

    def test_list_pages(self):
        c, p = self.c, self.name("page")
        for i in range(5):
            c.put("%s%d" % (p, i), {"x": np.ones(1, np.float32)})
        seen, after = [], None
        while True:
            page = c.list(prefix=p, after=after, limit=2)
            self.assertLessEqual(len(page), 2)
            seen += [e["name"] for e in page]
            if page.next is None:
                break
            after = page.next
        self.assertEqual(seen, ["%s%d" % (p, i) for i in range(5)])
        with self.assertRaises(tfetch.errors.EINVAL):
            c.list(prefix="a&b")

    # The asyncio calls take the same conditions and lifetime as the blocking ones.

    def test_async_put_conditions(self):
        c, n = self.c, self.name("acas")

        async def run():
            await c.aput(n, {"x": np.ones(2, np.float32)}, if_none_match="*")
            e1 = c.last.etag
            self.assertTrue(e1.startswith('"'), e1)
            with self.assertRaises(tfetch.errors.EPRECOND):        # exists already
                await c.aput(n, {"x": np.zeros(2, np.float32)}, if_none_match="*")
            await c.aput(n, {"x": np.full(2, 2, np.float32)}, if_match=e1)
            e2 = c.last.etag
            self.assertNotEqual(e1, e2)
            with self.assertRaises(tfetch.errors.EPRECOND):        # e1 is stale
                await c.aput(n, {"x": np.full(2, 3, np.float32)}, if_match=e1)
            self.assertEqual(float((await c.aget(n))["x"][0]), 2.0)
            with self.assertRaises(tfetch.errors.EPRECOND):
                await c.adelete(n, if_match=e1)
            await c.adelete(n, if_match=e2)
        asyncio.run(run())

    def test_async_get_newer_than(self):
        c, n = self.c, self.name("anewer")

        async def run():
            await c.aput(n, {"x": np.ones(2, np.float32)})
            e1 = c.last.etag
            with self.assertRaises(tfetch.errors.ENOTMODIFIED) as cm:
                await c.aget(n, newer_than=e1)
            self.assertEqual(cm.exception.http_status, 304)
            waiter = asyncio.ensure_future(c.aget(n, wait=20, newer_than=e1))
            await asyncio.sleep(0.3)
            self.assertFalse(waiter.done())                        # still waiting for one
            w = tfetch.Client(self.d.base, transport=self.transport)
            try:
                w.put(n, {"x": np.full(2, 5, np.float32)})
            finally:
                w.close()
            doc = await asyncio.wait_for(waiter, 30)
            self.assertEqual(float(doc["x"][0]), 5.0)
        asyncio.run(run())

    def test_async_ttl(self):
        c, n = self.c, self.name("attl")

        async def run():
            with self.assertRaises(ValueError):
                await c.aput(n, {"x": np.ones(1, np.float32)}, ttl=0)
            await c.aput(n, {"x": np.ones(1, np.float32)}, ttl=1)
            await c.aget(n)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    await c.aget(n)
                except tfetch.errors.ENOTFOUND:
                    return
                await asyncio.sleep(0.1)
            self.fail("a document put with ttl=1 was still there after 10 s")
        asyncio.run(run())

    def test_async_list_pages(self):
        c, p = self.c, self.name("apage")
        for i in range(5):
            c.put("%s%d" % (p, i), {"x": np.ones(1, np.float32)})

        async def run():
            seen, after = [], None
            while True:
                page = await c.alist(prefix=p, after=after, limit=2)
                self.assertLessEqual(len(page), 2)
                seen.extend(e["name"] for e in page)
                if page.next is None:
                    return seen
                after = page.next
        self.assertEqual(asyncio.run(run()), ["%s%d" % (p, i) for i in range(5)])


class TestCondHttp(Cond, unittest.TestCase):
    transport = "http"


class TestCondUcx(Cond, unittest.TestCase):
    transport = "ucx"


class TestCondAuto(Cond, unittest.TestCase):
    transport = "auto"


if __name__ == "__main__":
    unittest.main()
