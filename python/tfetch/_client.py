"""_client - tfetch.Client, a long-lived handle on one tf_client_t, its blocking calls, and
tfetch.fetch (Shumai's tfetch: no tensors: GET; with tensors: an exchange).

A Client owns one tf_client_t for its blocking calls, used under a lock, so any number of
Python threads may share a Client (their calls take turns; ctypes releases the GIL while
each runs). Its asynchronous calls (aget, ...) go through a second tf_client_t owned by a
driver thread (_aio.py), made at the first one: libtfetch lets one thread at a time use a
client. Both have the same settings. ``last`` is the outcome of the latest request that
completed through either.
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import secrets
import threading
import urllib.parse
import weakref
from ctypes import byref, c_size_t, c_void_p
from typing import Any, Dict, Mapping, Optional, Union

from . import _lib
from ._arrays import Document, build_doc, convert, release_doc, wrap_doc
from ._errors import Result, error_for, raise_for
from ._feeds import FeedCalls

# What put, call and fetch take: a dict of name -> array (numpy, or anything with
# __dlpack__ or __array__: torch, jax, ml_dtypes), one array (sent as "tensor"), or a Batch.
Tensors = Union[Mapping[str, Any], Any]
PathLike = Union[str, "os.PathLike[str]"]

lib = _lib.lib


def _seconds_to_ms(s):
    return 0 if s is None else max(1, int(s * 1000)) if s > 0 else 0


class Client(FeedCalls):
    """A connection to tfetchd servers, kept open and reused.

        c = tfetch.Client("http://127.0.0.1:7070", user="alice")
        c.put("w", {"w": np.ones((2, 3), np.float32)})
        c.get("w")["w"]              # a numpy view over the received bytes
        c.get("w", like="torch")     # the same bytes as torch tensors, no copy
        c.put("t", {"t": torch.ones(3, dtype=torch.bfloat16)})   # anything with __dlpack__

    url: the base of the server that names resolve against (http://host:port); methods
      also take full URLs (http://host:port/v1/tensors/NAME).
    user: the user id sent with every request (Tfetch-User), [A-Za-z0-9._-]{1,128}.
    transport: "auto" (upgrade to UCX when both sides can, else HTTP, saying why in
      last.fallback), "http", or "ucx" (strict: fail rather than fall back); None:
      $TFETCH_TRANSPORT when set, else "auto".
    upgrade: under "auto", "eager" (negotiate UCX before the first request to a server on
      this host, or with a body of 1 MiB or more) or "lazy" (only once the server offered
      it); None: $TFETCH_UPGRADE when set, else "eager".
    timeout: whole-request timeout in seconds (0 or None: none, the default: a stalled
      server is caught by the stall limit, so a slow but moving transfer is never cut).
    stall_time, stall_rate: a request fails (tfetch.errors.ETIMEDOUT, "stalled") once its
      transfer moves fewer than stall_rate bytes a second for stall_time seconds in a row,
      waiting for the answer included (a long-poll's wait is added); None: the library's
      defaults, 10 s and 1024 bytes/s; stall_time 0: never.
    max_body: refuse a response body larger than this many bytes (tfetch.errors.ETOOBIG), as
      soon as its announced length or the bytes received pass it; None: the library's
      default, this machine's memory (at least 2 GiB); 0: no limit.
    format: "safetensors" (any document) or "shumai" (stock Shumai's one-F32 format).
    token: the bearer token sent as Authorization with every request, for a tfetchd run
      with auth-tokens; None: $TFETCH_TOKEN when set. Never shown by repr.
    cert, key: https: the PEM client certificate presented to a tfetchd run with
      tls-client-ca, and its PEM private key (key None: in the cert file); without a token
      the server serves requests as the principal the certificate's subject maps to.
      None: $TFETCH_CERT and $TFETCH_KEY when set.

    Blocking: get, put, call, delete, list, info, upgrade, transport_info; get_file and
    put_file move a document between the server and a file, never held whole in memory.
    Asynchronous (asyncio, many in flight): aget, aput, acall, adelete, alist, ainfo.
    Results: get and call return a tfetch.Document (a dict name -> numpy array, the arrays
    being views over the received bytes, not copies; like="torch": torch tensors over
    them) and ``last`` is a tfetch.Result. put and call send numpy arrays and anything with
    __dlpack__ (torch, jax; bf16 and fp8 included) from where they lie.
    Errors raise tfetch.Error subclasses (tfetch.errors).
    Feeds: c.feed(name, device) attaches to a device queue (a tfetch.Feed: pop, iterate,
    push_outfeed); c.feed_declare, infeed_push, feed_done, feed_reset, feed_stats and
    outfeed_get are the producer and operator calls.
    """

    def __init__(self, url: Optional[str] = None, user: Optional[str] = None,
                 transport: Optional[str] = None, timeout: Optional[float] = None,
                 format: str = "safetensors", max_connections: Optional[int] = None,
                 max_body: Optional[int] = None, token: Optional[str] = None,
                 upgrade: Optional[str] = None, cert: Optional[str] = None,
                 key: Optional[str] = None, stall_time: Optional[float] = None,
                 stall_rate: Optional[int] = None) -> None:
        if transport is not None and transport not in _lib.TRANSPORTS:
            raise ValueError("tfetch: transport must be one of %s" % ", ".join(_lib.TRANSPORTS))
        if upgrade is not None and upgrade not in _lib.UPGRADES:
            raise ValueError("tfetch: upgrade must be one of %s" % ", ".join(_lib.UPGRADES))
        if format not in _lib.FORMATS:
            raise ValueError("tfetch: format must be one of %s" % ", ".join(_lib.FORMATS))
        self.url = url.rstrip("/") if url else None
        self.user = user
        self.transport = transport
        self.upgrade_policy = upgrade
        self.timeout = timeout
        self.format = format
        self.max_connections = max_connections
        self.max_body = max_body
        self.stall_time = stall_time
        self.stall_rate = stall_rate
        self._token = token
        if key is not None and cert is None:
            raise ValueError("tfetch: key needs cert")
        self._cert = (cert, key)
        self._lock = threading.Lock()
        self._feeds = weakref.WeakSet()          # the _Core of every attached feed
        self._last = None
        self._driver = None
        self._c = self._new_handle()

    # ---- the handles ----------------------------------------------------------------------

    def _new_handle(self):
        """A tf_client_t with this client's settings."""
        c = c_void_p()
        st = lib.tf_client_new(byref(c))
        if st != 0:
            raise error_for(st, "tf_client_new failed")
        try:
            if self.user is not None:
                st = lib.tf_client_set_user(c, self.user.encode())
                if st != 0:
                    raise error_for(st, "bad user id %r (expected [A-Za-z0-9._-]{1,128})"
                                    % self.user)
            if self._token is not None:
                st = lib.tf_client_set_token(c, self._token.encode())
                if st != 0:         # the token itself is not repeated
                    raise error_for(st, "bad token (expected [A-Za-z0-9-._~+/]+ then '='s, "
                                    "at most 512 characters)")
            if self._cert[0] is not None:
                cert, key = self._cert
                st = lib.tf_client_set_cert(c, os.fsencode(cert),
                                            None if key is None else os.fsencode(key))
                if st != 0:
                    raise error_for(st, "cannot read the client certificate %r or its key %r"
                                    % (cert, key))
            lib.tf_client_set_timeout(c, _seconds_to_ms(self.timeout))
            if self.transport is not None:
                lib.tf_client_set_transport(c, _lib.TRANSPORTS[self.transport])
            if self.upgrade_policy is not None:
                lib.tf_client_set_upgrade_policy(c, _lib.UPGRADES[self.upgrade_policy])
            lib.tf_client_set_format(c, _lib.FORMATS[self.format])
            if self.max_connections is not None:
                st = lib.tf_client_set_max_connections(c, int(self.max_connections))
                if st != 0:
                    raise error_for(st, "max_connections must be 1..4096")
            if self.max_body is not None:
                lib.tf_client_set_max_body(c, int(self.max_body))
            if self.stall_time is not None or self.stall_rate is not None:
                ms = 10000 if self.stall_time is None else int(self.stall_time * 1000)
                rate = 1024 if self.stall_rate is None else int(self.stall_rate)
                st = lib.tf_client_set_stall(c, rate, ms)
                if st != 0:
                    raise error_for(st, "stall_time must be >= 0 and stall_rate >= 1")
        except BaseException:
            lib.tf_client_free(c)
            raise
        return c

    def close(self) -> None:
        """Cancels what is in flight and releases the connections. Idempotent."""
        d, self._driver = self._driver, None
        if d is not None:
            d.close()
        with self._lock:
            for core in list(self._feeds):      # a feed must not outlive its client
                core.detach_now()
            c, self._c = self._c, None
            if c:
                lib.tf_client_free(c)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return "tfetch.Client(url=%r, user=%r, transport=%r)" % (self.url, self.user,
                                                                 self.transport)

    # ---- URLs -----------------------------------------------------------------------------

    def _resolve(self, name, kind="tensors"):
        """A full URL: name itself when it is one, else base/v1/<kind>/<name>."""
        if "://" in name:
            return name
        if not self.url:
            raise error_for(-37, "%r is not a URL and the client has no base url" % name)
        return "%s/v1/%s/%s" % (self.url, kind, urllib.parse.quote(name, safe=""))

    def _base(self, base):
        b = base or self.url
        if not b:
            raise error_for(-37, "no server: pass a base URL or make the client with url=")
        return b

    # ---- outcomes -------------------------------------------------------------------------

    @property
    def last(self) -> Optional[Result]:
        """The tfetch.Result of the latest request that completed (None before any)."""
        return self._last

    def _finish(self, st):
        """Records tf_client_last; raises when st is an error."""
        r = Result._from_c(lib.tf_client_last(self._c).contents)
        self._last = r
        if st != 0:
            raise_for(r)
        return r

    def _handle(self):
        if not self._c:
            raise error_for(-2, "the client is closed")
        return self._c

    # ---- blocking calls -------------------------------------------------------------------

    def get(self, name, wait=None, like=None, *, newer_than=None):
        """GET a document: a tfetch.Document (dict name -> numpy array, views over the
        received buffer). name: a tensor name under the client's url, or a full URL.
        wait: seconds to long-poll for it to appear (None: fail at once if absent).
        like: "torch" for torch tensors over the same received buffer (no copy; bf16 as
        torch.bfloat16), "numpy" or None for numpy arrays.
        newer_than: an ETag (a Result.etag, e.g. c.last.etag after a get or put): only a
        newer version; with wait, the server waits up to wait seconds for one to be put.
        None newer came: tfetch.errors.ENOTMODIFIED (http_status 304). c.last.etag is the
        version got."""
        url = self._resolve(name).encode()
        out = c_void_p()
        if newer_than is not None:
            rq = _request(_lib.TF_OP_GET, url, wait_ms=_seconds_to_ms(wait),
                          if_none_match=newer_than)
            with self._lock:
                self._finish(lib.tf_request(self._handle(), byref(rq), byref(out)))
            return convert(wrap_doc(out.value), like)
        with self._lock:
            st = lib.tf_get(self._handle(), url, _seconds_to_ms(wait), byref(out))
            self._finish(st)
        return convert(wrap_doc(out.value), like)

    def get_range(self, name, offset, length=None):
        """Bytes offset .. offset+length-1 of the stored document (its safetensors bytes;
        length None: to the end), as bytes (HTTP Range). tfetch.errors.ERANGE when offset is
        at or past its end."""
        url = self._resolve(name).encode()
        buf, n, total = c_void_p(), c_size_t(), ctypes.c_uint64()
        with self._lock:
            st = lib.tf_get_range(self._handle(), url, int(offset), int(length or 0),
                                  byref(buf), byref(n), byref(total))
            self._finish(st)
        try:
            return ctypes.string_at(buf, n.value) if n.value else b""
        finally:
            lib.tf_free(buf)

    def put(self, name, tensors, metadata=None, *, ttl=None, if_match=None,
            if_none_match=None):
        """PUT a document: tensors is a dict name -> array (or one array, stored as
        "tensor"); metadata a dict of strings. The arrays are sent from where they are
        (borrowed while the call runs): only a non-C-order or big-endian array is copied.
        bf16/fp8: pass a tfetch.Array, an ml_dtypes array, or (raw_bits, "BF16").
        ttl: seconds the document lives (1 .. a year), then it is gone as if deleted.
        if_match: an ETag (c.last.etag of the get or put it read): store only while that is
        still the stored version (compare-and-swap), or "*": only if the name exists.
        if_none_match="*": only if the name does not exist (create-only). A condition that
        does not hold raises tfetch.errors.EPRECOND (a tfetch.Error, http_status 412) and
        changes nothing. c.last.etag is the version stored."""
        url = self._resolve(name).encode()
        cond = ttl is not None or if_match is not None or if_none_match is not None
        _check_ttl(ttl)
        doc, keep = build_doc(tensors, metadata)
        try:
            with self._lock:
                if cond:
                    rq = _request(_lib.TF_OP_PUT, url, doc=doc, if_match=if_match,
                                  if_none_match=if_none_match, ttl_s=int(ttl or 0))
                    st = lib.tf_request(self._handle(), byref(rq), None)
                else:
                    st = lib.tf_put(self._handle(), url, doc)
                self._finish(st)
        finally:
            release_doc(doc, keep)
            del keep

    # ---- big documents: files, never held whole in memory ---------------------------------

    def get_file(self, name: str, path: PathLike) -> Result:
        """GET a document straight into the file at path (a str or os.PathLike), never
        holding it whole in memory (tf_fetch_start_fd): over HTTP written as it arrives,
        same-host from the mapping of the stored document. It goes to a temporary file
        beside path (PATH.tfetch-XXXXXXXX), checked to be a safetensors document, then
        renamed over path: a failed get leaves path as it was and no temporary file. A
        path that exists and is not a regular file (/dev/null, a FIFO) is written in place.
        Returns c.last (bytes_received: the document's size)."""
        url = self._resolve(name).encode()
        path = os.fspath(path)
        direct = os.path.exists(path) and not os.path.isfile(path)
        if direct:
            fd, tmp = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC), None
        else:
            fd, tmp = _tmp_open(path)
        ok = False
        try:
            rq = _request(_lib.TF_OP_GET, url)
            r = self._run_fd(rq, fd)
            if not direct:
                _check_doc(fd, r)
            ok = True
        finally:
            os.close(fd)
            if tmp is not None:
                if ok:
                    try:
                        os.replace(tmp, path)
                    except BaseException:
                        os.unlink(tmp)
                        raise
                else:
                    os.unlink(tmp)
        return r

    def put_file(self, name: str, path: PathLike) -> Result:
        """PUT the safetensors document in the file at path (a str or os.PathLike, a
        non-empty regular file), never holding it whole in memory (tf_fetch_start_fd): over
        HTTP read as it is sent, same-host read straight into the memory the server lends.
        The server checks it as any upload. Returns c.last (c.last.etag: the version
        stored)."""
        url = self._resolve(name).encode()
        fd = os.open(os.fspath(path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            return self._run_fd(_request(_lib.TF_OP_PUT, url), fd)
        finally:
            os.close(fd)

    def _run_fd(self, rq, fd):
        """tf_fetch_start_fd, waited for: the request's Result; raises when it failed."""
        f = c_void_p()
        with self._lock:
            c = self._handle()
            st = lib.tf_fetch_start_fd(c, byref(rq), fd, _lib.FETCH_CB(), None, byref(f))
            if st != 0:
                return self._finish(st)
            try:
                st = lib.tf_fetch_wait(f, -1)
                r = Result._from_c(lib.tf_fetch_result(f).contents)
            finally:
                lib.tf_fetch_free(f)
        self._last = r
        if st != 0:
            raise_for(r)
        return r

    def call(self, route: str, tensors: Tensors,
             metadata: Optional[Mapping[str, str]] = None,
             like: Optional[str] = None) -> Document:
        """Exchange: POST a document to a route (/v1/call/ROUTE) and return its reply
        (a tfetch.Document; like="torch": of torch tensors, as get)."""
        return convert(self._exchange(self._resolve(route, "call"), tensors, metadata), like)

    def _exchange(self, url, tensors, metadata=None):
        doc, keep = build_doc(tensors, metadata)
        out = c_void_p()
        try:
            with self._lock:
                st = lib.tf_fetch(self._handle(), url.encode(), doc, byref(out))
                self._finish(st)
        finally:
            release_doc(doc, keep)
            del keep
        return wrap_doc(out.value)

    def fetch(self, url: str, tensors: Optional[Tensors] = None,
              like: Optional[str] = None) -> Document:
        """Shumai's tfetch: no tensors: GET url; with tensors: exchange (POST them to url,
        return the reply). url is a full URL or a name (a tensor for GET, a route for an
        exchange). like: as get's."""
        if tensors is None:
            return self.get(url, like=like)
        return convert(self._exchange(self._resolve(url, "call"), tensors), like)

    def delete(self, name: str, *, if_match: Optional[str] = None) -> None:
        """DELETE a stored document. if_match: an ETag: only while that is the stored
        version (else tfetch.errors.EPRECOND, http_status 412)."""
        url = self._resolve(name).encode()
        with self._lock:
            if if_match is None:
                self._finish(lib.tf_delete(self._handle(), url))
                return
            rq = _request(_lib.TF_OP_DELETE, url, if_match=if_match)
            self._finish(lib.tf_request(self._handle(), byref(rq), None))

    def list(self, base=None, *, prefix=None, after=None, limit=None):
        """The stored documents, in name order: a list of dicts {name, bytes, ntensors}.
        prefix: only names that start so; after: only names after this one; limit: at
        most this many. When more names follow, the list's .next is the name to pass as
        after= for the next page (None on the last page)."""
        b = self._base(base)
        if limit is not None and int(limit) < 1:
            raise ValueError("tfetch: limit is at least 1")
        with self._lock:
            st, out = _list_on(self._handle(), b, prefix, after, limit)
            self._finish(st)
        return out

    def info(self, base: Optional[str] = None) -> Dict[str, Any]:
        """The server's /v1/info, parsed (version, transports, limits, features)."""
        b = self._base(base).encode()
        text = c_void_p()
        with self._lock:
            st = lib.tf_info(self._handle(), b, byref(text))
            self._finish(st)
        try:
            return json.loads(ctypes.string_at(text).decode("utf-8"))
        finally:
            lib.tf_free(text)

    def upgrade(self, base: Optional[str] = None) -> None:
        """Negotiates the UCX upgrade with a server now (tf_client_upgrade), rather than
        after its first response: ConnectError (TF_ECONNECT) when it cannot."""
        b = self._base(base).encode()
        with self._lock:
            self._finish(lib.tf_client_upgrade(self._handle(), b))

    def transport_info(self, base: Optional[str] = None) -> Dict[str, Any]:
        """What this client knows of a server's transports: {transport, reason, offered,
        retry_ms, caller_driven, ucx_memory} (tf_client_transport_info). offered: True, False
        or None (not seen yet); caller_driven: requests whose UCX round trip the calling
        thread drove itself (blocking calls); ucx_memory: the memory types this process's UCX
        moves ("host"; "" before it started); last_stages, last_transport, last_fallback:
        the last completed request to that server's stages (as Result.stages), what carried
        it, and why it went over HTTP rather than a faster path ("" when it did not)."""
        b = self._base(base).encode()
        ti = _lib.TransportInfo(size=ctypes.sizeof(_lib.TransportInfo))
        with self._lock:
            st = lib.tf_client_transport_info(self._handle(), b, byref(ti))
        if st != 0:
            raise error_for(st, "bad URL %r" % b.decode())
        st = ti.last_stages
        return {"transport": ti.transport.decode(), "reason": ti.reason.decode(),
                "offered": {1: True, 0: False}.get(ti.offered), "retry_ms": ti.retry_ms,
                "caller_driven": ti.caller_driven, "ucx_memory": ti.ucx_memory.decode(),
                "last_stages": {n: getattr(st, n) for n in _lib.STAGES
                                if getattr(st, n) >= 0},
                "last_transport": ti.last_transport.decode(),
                "last_fallback": ti.last_fallback.decode()}

    # ---- asynchronous calls (asyncio) -----------------------------------------------------

    def _async(self):
        if self._driver is None:
            if not self._c:
                raise error_for(-2, "the client is closed")
            from ._aio import Driver
            with self._lock:
                if self._driver is None:
                    self._driver = Driver(self._new_handle(), self)
        return self._driver

    async def aget(self, name: str, wait: Optional[float] = None,
                   timeout: Optional[float] = None, like: Optional[str] = None, *,
                   newer_than: Optional[str] = None) -> Document:
        """await: get(name, wait, like, newer_than=...) through the async engine. timeout:
        this request's, in seconds (None: the client's)."""
        return convert(await self._async().fetch(_lib.TF_OP_GET, self._resolve(name), None,
                                                 wait=wait, timeout=timeout,
                                                 if_none_match=newer_than), like)

    async def aput(self, name: str, tensors: Tensors,
                   metadata: Optional[Mapping[str, str]] = None,
                   timeout: Optional[float] = None, *, ttl: Optional[int] = None,
                   if_match: Optional[str] = None,
                   if_none_match: Optional[str] = None) -> None:
        """await: put(name, tensors, metadata, ttl=..., if_match=..., if_none_match=...)
        through the async engine; the arrays are borrowed until it completes."""
        _check_ttl(ttl)
        doc = build_doc(tensors, metadata)
        await self._async().fetch(_lib.TF_OP_PUT, self._resolve(name), doc, timeout=timeout,
                                  if_match=if_match, if_none_match=if_none_match,
                                  ttl_s=int(ttl or 0))

    async def acall(self, route: str, tensors: Tensors,
                    metadata: Optional[Mapping[str, str]] = None,
                    timeout: Optional[float] = None, like: Optional[str] = None) -> Document:
        """await: call(route, tensors, metadata, like) through the async engine."""
        doc = build_doc(tensors, metadata)
        return convert(await self._async().fetch(_lib.TF_OP_EXCHANGE,
                                                 self._resolve(route, "call"), doc,
                                                 timeout=timeout), like)

    async def afetch(self, url: str, tensors: Optional[Tensors] = None,
                     timeout: Optional[float] = None, like: Optional[str] = None) -> Document:
        """await: fetch(url, tensors, like) through the async engine."""
        if tensors is None:
            return await self.aget(url, timeout=timeout, like=like)
        return await self.acall(url, tensors, timeout=timeout, like=like)

    async def adelete(self, name: str, timeout: Optional[float] = None, *,
                      if_match: Optional[str] = None) -> None:
        """await: delete(name, if_match=...) through the async engine."""
        await self._async().fetch(_lib.TF_OP_DELETE, self._resolve(name), None,
                                  timeout=timeout, if_match=if_match)

    async def alist(self, base: Optional[str] = None, *, prefix: Optional[str] = None,
                    after: Optional[str] = None, limit: Optional[int] = None) -> Listing:
        """await: list(base, prefix=..., after=..., limit=...), run on the driver thread."""
        b = self._base(base)
        if limit is not None and int(limit) < 1:
            raise ValueError("tfetch: limit is at least 1")
        return await self._async().blocking(lambda c: _list_on(c, b, prefix, after, limit))

    async def ainfo(self, base: Optional[str] = None) -> Dict[str, Any]:
        """await: info(base), run on the driver thread."""
        b = self._base(base)
        return await self._async().blocking(lambda c: _info_on(c, b))



class Listing(list):
    """A page of the stored documents (a list of dicts {name, bytes, ntensors}); next: the
    name to pass as list(after=...) for the following page, None on the last."""
    next = None


def _request(op, url, doc=None, wait_ms=0, if_match=None, if_none_match=None, ttl_s=0):
    """A tf_request_t for tf_request (url already bytes)."""
    enc = lambda v: None if v is None else v.encode()  # noqa: E731
    return _lib.Request(size=ctypes.sizeof(_lib.Request), op=op, url=url, in_=doc,
                        wait_ms=wait_ms, if_match=enc(if_match),
                        if_none_match=enc(if_none_match), ttl_s=ttl_s)


def _tmp_open(path):
    """PATH.tfetch-XXXXXXXX, created exclusively with mode 0666 less the umask (as open(2)
    would make PATH): (fd, name)."""
    while True:
        tmp = "%s.tfetch-%s" % (path, secrets.token_hex(4))
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                           0o666), tmp
        except FileExistsError:
            continue


def _check_doc(fd, r):
    """The file fd holds a safetensors document (a streamed reply is not decoded on the
    way): only its header is read, through a private mapping. Raises as the get would."""
    size = os.fstat(fd).st_size
    why = ctypes.create_string_buffer(256)
    st = -4                                     # TF_EPROTO (tfetch-status.h): empty
    if size:
        m = mmap.mmap(fd, size, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
        try:
            buf = (ctypes.c_char * size).from_buffer(m)
            doc = c_void_p()
            st = lib.tf_doc_decode_msg(ctypes.addressof(buf), size, _lib.TF_BORROW,
                                       byref(doc), why, len(why))
            lib.tf_doc_free(doc)
            del buf
        finally:
            m.close()
    if st != 0:
        raise error_for(st, "bad safetensors response: %s" % (
            why.value.decode(errors="replace") or ("empty response body" if not size
                                                   else _lib.strerror(st))),
            r.http_status, r)


def _check_ttl(ttl):
    if ttl is not None and (int(ttl) != ttl or not 1 <= ttl <= 31622400):
        raise ValueError("tfetch: ttl is whole seconds from 1 to 31622400 (a year)")


def _list_on(c, base, prefix=None, after=None, limit=None):
    """One page of the listing (tf_list_page): (status, Listing or None)."""
    entries, n, nxt = ctypes.POINTER(_lib.Entry)(), c_size_t(), c_void_p()
    opts = _lib.ListOpts(size=ctypes.sizeof(_lib.ListOpts),
                         prefix=None if prefix is None else prefix.encode(),
                         after=None if after is None else after.encode(),
                         limit=0 if limit is None else int(limit))
    st = lib.tf_list_page(c, base.encode(), byref(opts), byref(entries), byref(n), byref(nxt))
    if st != 0:
        return st, None
    try:
        out = Listing({"name": entries[i].name.decode(), "bytes": entries[i].bytes,
                       "ntensors": entries[i].ntensors} for i in range(n.value))
        out.next = ctypes.string_at(nxt).decode() if nxt.value else None
        return 0, out
    finally:
        lib.tf_list_free(entries, n)
        lib.tf_free(nxt)


def _info_on(c, base):
    text = c_void_p()
    st = lib.tf_info(c, base.encode(), byref(text))
    if st != 0:
        return st, None
    try:
        return 0, json.loads(ctypes.string_at(text).decode("utf-8"))
    finally:
        lib.tf_free(text)


_default = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The module's shared Client (transport from $TFETCH_TRANSPORT, else auto), used by
    tfetch.fetch."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def fetch(url: str, tensors: Optional[Tensors] = None) -> Document:
    """Shumai's tfetch, over the shared client: fetch(url) GETs the document at url;
    fetch(url, tensors) is an exchange: POSTs tensors (a dict, or one array sent as
    "tensor") to the route at url and returns the reply. Both return a tfetch.Document."""
    return default_client().fetch(url, tensors)
