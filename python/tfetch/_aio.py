"""_aio - the asynchronous side of tfetch.Client: a driver thread that owns a tf_client_t
and runs libtfetch's async engine for asyncio callers.

libtfetch lets one thread at a time use a client, and runs callbacks only on the thread
driving it. So one thread, the driver, does everything with its tf_client_t: it starts the
requests other threads queue (tf_fetch_start), drives them (tf_client_run) and runs their
callbacks, which hand each outcome to the caller's event loop (call_soon_threadsafe). A
caller queues a job under the condition variable and calls tf_client_wakeup, the one
libtfetch call any thread may make, so a tf_client_run in progress returns to start it.
Many requests may be in flight at once (all of one client's, over up to max_connections
connections per server; the rest wait in libtfetch's queue).

Owns: the tf_client_t (freed by the driver when it stops, which cancels what is pending:
those callers get tfetch.errors.ECANCELED), the documents sent (borrowing the caller's
arrays, both kept until the callback has run) and the jobs in flight. Threads: the driver;
callers touch only the queue and tf_client_wakeup, both under the lock, which the driver
also takes to give up the client before freeing it.
"""
import asyncio
import collections
import ctypes
import itertools
import threading
import weakref
from ctypes import byref, c_void_p

from . import _lib
from ._arrays import release_doc, wrap_doc
from ._errors import Result, error_for

lib = _lib.lib


def _settle(fut, value, exc, owner, result):
    """On the caller's loop: records the outcome (on the Client, if it still exists) and
    resolves the future."""
    client = owner()
    if result is not None and client is not None:
        client._last = result
    if fut.cancelled():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


class _Job:
    __slots__ = ("id", "loop", "fut", "op", "url", "doc", "keep", "wait_ms", "timeout_ms",
                 "fn", "handle", "if_match", "if_none_match", "ttl_s")

    def __init__(self, loop, fut):
        self.id, self.loop, self.fut = next(_ids), loop, fut
        self.doc, self.keep, self.handle, self.fn = None, None, None, None


_ids = itertools.count(1)


class Driver:
    """The driver thread of one Client's async calls (see the module's docstring)."""

    def __init__(self, handle, owner):
        self._c = handle
        self._owner = weakref.ref(owner)   # the Client: its last, never kept alive
        self._queue = collections.deque()
        self._cv = threading.Condition()
        self._stopping = False
        self._jobs = {}                  # id -> job, started and not completed
        self.peak_pending = 0            # the most requests in flight at once (driver's count)
        self._cb = _lib.FETCH_CB(self._on_done)
        self._thread = threading.Thread(target=self._run, name="tfetch-driver", daemon=True)
        self._thread.start()

    # ---- callers (any thread; an event loop) ----------------------------------------------

    def _submit(self, job):
        with self._cv:
            if self._stopping:
                raise error_for(-2, "the client is closed")
            self._queue.append(job)
            self._cv.notify()
            self._wakeup()

    def _wakeup(self):
        """tf_client_wakeup, under the lock: the driver frees the client only after taking
        it from self._c under the same lock, so no wakeup can reach a freed client."""
        if self._c:
            lib.tf_client_wakeup(self._c)

    def fetch(self, op, url, doc, wait=None, timeout=None, if_match=None, if_none_match=None,
              ttl_s=0):
        """A future for one request (op, url, doc = (tf_doc_t, arrays) or None), with the
        conditions and lifetime of tf_request_t (if_match, if_none_match: str or None)."""
        loop = asyncio.get_running_loop()
        job = _Job(loop, loop.create_future())
        job.op, job.url = op, url.encode()
        enc = lambda v: None if v is None else v.encode()  # noqa: E731
        job.if_match, job.if_none_match = enc(if_match), enc(if_none_match)
        job.ttl_s = int(ttl_s)
        if doc is not None:
            job.doc, job.keep = doc
        job.wait_ms = 0 if not wait else max(1, int(wait * 1000))
        job.timeout_ms = 0 if timeout is None else (max(1, int(timeout * 1000))
                                                     if timeout > 0 else -1)
        try:
            self._submit(job)
        except BaseException:
            self._release(job)
            raise
        job.fut.add_done_callback(lambda f, j=job: f.cancelled() and self._cancel(j))
        return job.fut

    def blocking(self, fn):
        """A future for fn(tf_client_t) -> (status, value), run on the driver thread (list,
        info: libtfetch has them as blocking calls, which drive the other requests too)."""
        loop = asyncio.get_running_loop()
        job = _Job(loop, loop.create_future())
        job.fn = fn
        self._submit(job)
        return job.fut

    def _cancel(self, job):
        """The caller's future was canceled: cancel the request too (on the driver)."""
        cancel = _Job(None, None)
        cancel.fn = job
        try:
            self._submit(cancel)
        except Exception:
            pass

    def close(self):
        """Stops the driver: what is in flight completes with ECANCELED. Joins it."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
            self._wakeup()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    # ---- the driver thread ----------------------------------------------------------------

    def _run(self):
        c = self._c
        while True:
            with self._cv:
                while not self._queue and not self._stopping and not self._jobs:
                    self._cv.wait()
                jobs = list(self._queue)
                self._queue.clear()
                stopping = self._stopping
            for job in jobs:
                self._start(job, stopping)
            if stopping:
                break
            n = len(self._jobs)
            if n > self.peak_pending:
                self.peak_pending = n
            if self._jobs:
                lib.tf_client_run(c, -1)     # returns when all are done, or when woken
        with self._cv:                   # no wakeup after this (see _wakeup)
            self._c = None
        lib.tf_client_free(c)            # cancels the rest: their callbacks run now
        for job in list(self._jobs.values()):   # (cannot happen: each completed above)
            self._post(job, None, error_for(-36, "the client was closed"), None)

    def _start(self, job, stopping):
        if job.loop is None:             # a cancel job: job.fn is the job to cancel
            target = job.fn
            if target.id in self._jobs and target.handle:
                lib.tf_fetch_cancel(target.handle)
            return
        if stopping:
            self._post(job, None, error_for(-36, "the client was closed"), None)
            return
        if job.fn is not None:           # a blocking call on this thread
            try:
                st, value = job.fn(self._c)
                r = Result._from_c(lib.tf_client_last(self._c).contents)
                self._post(job, value, error_for(st, r.error, r.http_status, r) if st else None,
                           r)
            except BaseException as e:   # noqa: B902 - handed to the caller
                self._post(job, None, e, None)
            return
        rq = _lib.Request(size=ctypes.sizeof(_lib.Request), op=job.op, url=job.url,
                          in_=job.doc, wait_ms=job.wait_ms, timeout_ms=job.timeout_ms,
                          if_match=job.if_match, if_none_match=job.if_none_match,
                          ttl_s=job.ttl_s)
        handle = c_void_p()
        self._jobs[job.id] = job
        st = lib.tf_fetch_start(self._c, byref(rq), self._cb, job.id, byref(handle))
        if st != 0:
            del self._jobs[job.id]
            r = Result._from_c(lib.tf_client_last(self._c).contents)
            self._post(job, None, error_for(st, r.error, r.http_status, r), r)
            return
        job.handle = handle.value

    def _on_done(self, f, status, doc, result, ud):
        """tf_fetch_cb: runs on the driver, inside libtfetch, exactly once per request."""
        job = self._jobs.pop(ud, None)
        r = Result._from_c(result.contents)
        lib.tf_fetch_free(f)             # from its own callback: freed when this returns
        if job is None:                  # cannot happen; never leak the reply
            lib.tf_doc_free(doc)
            return
        job.handle = None
        try:
            if status != 0:
                lib.tf_doc_free(doc)
                self._post(job, None, error_for(status, r.error, r.http_status, r), r)
            else:
                self._post(job, wrap_doc(doc) if doc else None, None, r)
        except BaseException as e:       # noqa: B902 - never let it unwind into C
            self._post(job, None, e, r)

    def _post(self, job, value, exc, result):
        self._release(job)
        try:
            job.loop.call_soon_threadsafe(_settle, job.fut, value, exc, self._owner, result)
        except RuntimeError:             # the caller's loop is closed: nobody is waiting
            pass

    @staticmethod
    def _release(job):
        if job.doc:
            release_doc(job.doc, job.keep)
        job.doc = job.keep = None
