"""_feeds - device feeds from Python (doc/PROTOCOL.md section 9): a device queue attached
through a Client (Client.feed), its items as Documents of views, the outfeed, and the
producer and operator calls (Client.feed_declare, infeed_push, feed_done, ...).

Ownership. An Item's arrays are views over the received item (no copy): the item is
released (acknowledged to the feed) once Item.release() was called and no array from it is
alive any more, so an array kept past release() stays valid and delays only the ack. A Feed
is used through its Client's lock, like every blocking call of that client; detach() (or the
with block's end, or the last reference) lets go of the queue.
"""
from __future__ import annotations

import ctypes
import json
from ctypes import byref, c_int, c_uint64, c_void_p
from typing import Any, Dict, Iterator, Optional, Union

from . import _lib
from ._arrays import Batch, build_doc, convert, release_doc, wrap_doc
from ._errors import Result, error_for, raise_for

lib = _lib.lib

TF_EAGAIN = -38
TF_EDONE = -18


def _ms(seconds, default):
    """Seconds (None: default ms) as the C API's milliseconds (-1: no limit)."""
    if seconds is None:
        return default
    if seconds < 0:
        return -1
    return int(seconds * 1000)


def _check(client, st):
    """Records the client's last result; raises for st (with the library's message for it
    when the last result is this failure)."""
    r = Result._from_c(lib.tf_client_last(client._c).contents)
    client._last = r
    if st == 0:
        return
    if r.status == st:
        raise_for(r)
    raise error_for(st, _lib.strerror(st))


class _Core:
    """The tf_feed_t and what is owed to it: detached only when the Feed let go of it and no
    item from it is alive (an item's memory is the feed's until released). Items released
    by the garbage collector are queued here and handed to libtfetch under the client's lock
    by the next call, never from a finalizer (which may run while the lock is held)."""

    def __init__(self, client, ptr):
        self.client = client
        self.ptr = ptr
        self.pending = []           # tf_item_t pointers whose owners are gone (list.append)

    def flush(self):
        """Releases the queued items. Caller holds the client's lock."""
        while self.pending:
            lib.tf_item_release(self.pending.pop())

    def detach_now(self):
        """Acknowledges what was released and detaches (the client closing). Caller holds
        the client's lock. Arrays of items still alive must not be used after this."""
        if self.ptr:
            self.flush()
            lib.tf_feed_detach(self.ptr)
        self.ptr = None

    def __del__(self):
        c = self.client
        if self.ptr and c._c:
            with c._lock:
                self.detach_now()


class _ItemOwner:
    """Holds a tf_item_t until Item.release() was called and no array over it is alive; keeps
    the feed alive until then."""
    __slots__ = ("ptr", "core", "__weakref__")

    def __init__(self, ptr, core):
        self.ptr = ptr
        self.core = core

    def __del__(self):
        if self.ptr:
            self.core.pending.append(self.ptr)
            self.ptr = None


class Item:
    """One item of a device queue: ``doc`` (a tfetch.Document of views), its ``position`` in
    the queue, the producer's ``seq``, its ``round`` and ``generation``. release() (or the
    with block's end) says the step is done with it."""

    def __init__(self, ptr, core, like=None):
        self._owner = _ItemOwner(ptr, core)
        self.position = lib.tf_item_position(ptr)
        self.seq = lib.tf_item_seq(ptr)
        self.round = lib.tf_item_round(ptr)
        self.generation = lib.tf_item_generation(ptr)
        self.doc = convert(wrap_doc(lib.tf_item_doc(ptr), owner=self._owner), like)

    def release(self) -> None:
        """Done with this item: it is acknowledged once no array from it is alive."""
        self.doc = None
        self._owner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        return "tfetch.Item(position=%d, seq=%d, round=%d)" % (self.position, self.seq,
                                                                self.round)


class Feed:
    """A device queue of a feed, attached through a Client (Client.feed). pop() takes the
    next item; iterating yields items until the feed is done and drained; push_outfeed()
    sends a step's results. detach() lets go of the queue once no item array is alive."""

    def __init__(self, client, url, device, backend, like=None):
        convert({}, like)                       # refuses an unknown like now, not per item
        self._like = like
        self._client = client
        self.url = url
        out = c_void_p()
        with client._lock:
            st = lib.tf_feed_attach(client._handle(), url.encode(), str(device).encode(),
                                    backend.encode() if backend else None, byref(out))
            _check(client, st)
        self._core = _Core(client, out.value)
        client._feeds.add(self._core)
        self.device = str(device)
        self.backend = lib.tf_feed_backend(out.value).decode()

    def _handle(self):
        if self._core is None or not self._core.ptr:
            raise error_for(-2, "the feed is detached")
        self._core.flush()
        return self._core.ptr

    def pop(self, timeout: Optional[float] = None) -> Optional[Item]:
        """The next item (a tfetch.Item), waiting up to timeout seconds (None: no limit;
        0: only what is ready); None when none came in time. Raises tfetch.Error subclasses:
        the one for TF_EDONE when the feed is done and this queue drained."""
        out = c_void_p()
        c = self._client
        with c._lock:
            st = lib.tf_infeed_pop(self._handle(), _ms(timeout, -1), byref(out))
            if st == TF_EAGAIN:
                return None
            _check(c, st)
            return Item(out.value, self._core, self._like)

    def __iter__(self) -> Iterator[Item]:
        """Items until the feed is done (then the iteration ends)."""
        while True:
            try:
                item = self.pop(timeout=1.0)
            except Exception as e:              # TF_EDONE ends the loop; the rest propagate
                if getattr(e, "status", None) == TF_EDONE:
                    return
                raise
            if item is not None:
                yield item

    def push_outfeed(self, tensors: Any, metadata: Optional[Dict[str, str]] = None) -> int:
        """Pushes a step's results (dict name -> array, borrowed while it runs) to the feed's
        outfeed from this device; returns the outfeed's sequence number."""
        doc, keep = build_doc(tensors, metadata)
        seq = c_uint64()
        c = self._client
        try:
            with c._lock:
                st = lib.tf_outfeed_push(self._handle(), doc, byref(seq))
                _check(c, st)
        finally:
            release_doc(doc, keep)
            del keep
        return seq.value

    @property
    def transport(self) -> str:
        """What carried the last pop or outfeed push: "http", "ucx/...", "shm/ring" (a
        same-host ring: its items' arrays are read-only views of the ring, writeable=False;
        copy one to change it), "none" before the first."""
        with self._client._lock:
            return lib.tf_feed_transport(self._handle()).decode()

    def set_prefetch(self, depth: int) -> None:
        """Items in flight or ready ahead of the caller (1..64)."""
        with self._client._lock:
            st = lib.tf_feed_set_prefetch(self._handle(), int(depth))
        if st:
            raise error_for(st, "prefetch %r: %s" % (depth, _lib.strerror(st)))

    def detach(self) -> None:
        """Lets go of the queue: at once when no array from its items is alive, else once the
        last one goes (released items are acknowledged first). Idempotent."""
        self._core = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()

    def __repr__(self):
        return "tfetch.Feed(%r, device=%s, backend=%s)" % (self.url, self.device, self.backend)


def _json_out(client, st, ptr):
    _check(client, st)
    try:
        return json.loads(ctypes.string_at(ptr).decode("utf-8")) if ptr.value else None
    finally:
        lib.tf_free(ptr)


class FeedCalls:
    """The producer and operator calls of a Client (mixed into tfetch.Client)."""

    def feed(self, name: str, device: Union[int, str] = 0, backend: str = "host",
             like: Optional[str] = None) -> Feed:
        """Attaches to device queue `device` (index or declared name) of feed `name` (a name
        under the client's url, or http://host:port/v1/feeds/NAME) with a backend ("host",
        "sim", "cuda"): a tfetch.Feed. like="torch": its items' documents hold torch tensors
        over the received item (no copy; a same-host ring's are read-only memory that torch
        cannot mark: clone() one to write it)."""
        return Feed(self, self._resolve(name, "feeds"), device, backend, like)

    def feed_declare(self, name: str, declaration: Union[Dict[str, Any], str]) -> Dict[str, Any]:
        """Declares the feed (a dict or JSON text, doc/PROTOCOL.md section 9); returns its
        stats. The same declaration again is fine; a different one raises (TF_ECONFLICT)."""
        text = declaration if isinstance(declaration, str) else json.dumps(declaration)
        out = c_void_p()
        with self._lock:
            st = lib.tf_feed_declare(self._handle(), self._resolve(name, "feeds").encode(),
                                     text.encode(), byref(out))
            return _json_out(self, st, out)

    def infeed_push(self, name: str, tensors: Any, device: Optional[Union[int, str]] = None,
                    seq: int = 0, wait: Optional[float] = None,
                    metadata: Optional[Dict[str, str]] = None) -> int:
        """Pushes one item to device queue `device` (per_device feeds), or with device None
        one round to every device (split, broadcast). seq > 0 makes a retry idempotent;
        wait: seconds the server may hold it while the queue is full (None: refuse at once,
        TF_EFULL). Returns the item's round."""
        doc, keep = build_doc(tensors, metadata)
        rnd = c_uint64()
        try:
            with self._lock:
                st = lib.tf_infeed_push(self._handle(), self._resolve(name, "feeds").encode(),
                                        -1 if device is None else int(device), doc, int(seq),
                                        _ms(wait, 0), byref(rnd))
                _check(self, st)
        finally:
            release_doc(doc, keep)
            del keep
        return rnd.value

    def staging_batch(self, name: str, layout: Dict[str, Any]) -> Batch:
        """A tfetch.Batch built in a staging buffer that the tfetchd of feed `name` (on this
        host, transport "auto" or "ucx") lends this client: infeed_push and push_outfeed of it over
        this client send only where it lies, and tfetchd copies it from there (one memcpy
        on its side instead of the kernel's copy out of this process; doc/PROTOCOL.md
        section 9.9). Refill it between pushes, never while one runs. Raises (TF_ENOTIMPL)
        where the server offers no shared memory: another host, transport http."""
        with self._lock:
            return Batch(layout, _staging=(self._handle(), self._resolve(name, "feeds"),
                                           lambda st: _check(self, st)))

    def feed_done(self, name: str) -> None:
        """Marks the feed done: consumers drain it, then their iteration ends."""
        with self._lock:
            _check(self, lib.tf_feed_done(self._handle(),
                                          self._resolve(name, "feeds").encode()))

    def feed_reset(self, name: str) -> int:
        """Starts a new generation (queued items dropped); returns it."""
        gen = c_uint64()
        with self._lock:
            _check(self, lib.tf_feed_reset(self._handle(), self._resolve(name, "feeds").encode(),
                                           byref(gen)))
        return gen.value

    def feed_stats(self, name: str) -> Dict[str, Any]:
        """The feed's stats (depths, positions, consumers, generation), parsed."""
        out = c_void_p()
        with self._lock:
            st = lib.tf_feed_stats(self._handle(), self._resolve(name, "feeds").encode(),
                                   byref(out))
            return _json_out(self, st, out)

    def outfeed_get(self, name: str, after: int = 0, wait: Optional[float] = None) -> Any:
        """The first outfeed item after sequence number `after`, waiting up to wait seconds:
        (seq, device, tfetch.Document), or None when none came. An item no longer kept raises
        (TF_EGONE); its ``resume_after`` is not needed: read after the seq it names."""
        doc, seq, dev = c_void_p(), c_uint64(), c_int()
        with self._lock:
            st = lib.tf_outfeed_get(self._handle(), self._resolve(name, "feeds").encode(),
                                    int(after), _ms(wait, 0), byref(doc), byref(seq),
                                    byref(dev))
            if st == TF_EAGAIN:
                return None
            _check(self, st)
        return seq.value, dev.value, wrap_doc(doc.value)
