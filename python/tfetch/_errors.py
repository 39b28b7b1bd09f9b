"""_errors - tfetch.Error and one subclass per libtfetch status, and tfetch.Result, what a
request reports (tf_result_t).

The classes are made at import from the library's own table (tf_err_name, tf_strerror over
the codes of tfetch-status.h), so they cannot drift from it: ``tfetch.errors.ENOTFOUND`` is
the class of TF_ENOTFOUND. A few also derive from the built-in exception that fits, so
``except LookupError`` or ``except ConnectionError`` work too. Pure data; any thread.
"""
import types
from dataclasses import dataclass, field

from . import _lib


@dataclass(frozen=True)
class Result:
    """What happened to one request (tf_result_t).

    status: the tf_status_t value (0 on success); name: its name ("TF_OK", "TF_ENOTFOUND");
    http_status: the HTTP status (0 when no response arrived); request_id: the id the server
    echoed (or the one sent); transport: what carried it ("http", "ucx/sysv+cma", ...);
    fallback: why it went over HTTP although the policy allowed UCX ("" when it did not fall
    back); op: "get", "put", "delete", "list", "info", "call"; bytes_sent, bytes_received:
    body bytes; seconds: wall time; error: the server's or client's message ("" on success);
    etag: the version the server named (its ETag, quotes included: what a get read or a put
    stored; "" when it named none), for put(if_match=...) and get(newer_than=...).
    stages: where its time went, in milliseconds: {"connect", "upgrade", "send", "server",
    "queue", "handler", "receive", "decode", "total"} (server, queue and handler: the
    server's own time, as its answer said); a stage not known is left out.
    """
    status: int
    name: str
    http_status: int
    request_id: str
    transport: str
    fallback: str
    op: str
    bytes_sent: int
    bytes_received: int
    seconds: float
    error: str
    etag: str = ""
    stages: dict = field(default_factory=dict, hash=False)

    @property
    def ok(self):
        return self.status == 0

    @classmethod
    def _from_c(cls, r):
        d = lambda b: b.decode("utf-8", "replace")  # noqa: E731
        return cls(status=r.status, name=_lib.err_name(r.status), http_status=r.http_status,
                   request_id=d(r.request_id), transport=d(r.transport),
                   fallback=d(r.fallback), op=d(r.op), bytes_sent=r.bytes_sent,
                   bytes_received=r.bytes_received, seconds=r.seconds, error=d(r.error),
                   etag=d(r.etag),
                   stages={n: getattr(r.stages, n) for n in _lib.STAGES
                           if getattr(r.stages, n) >= 0})


class Error(Exception):
    """A request failed. Attributes: status (the tf_status_t value), name ("TF_ENOTFOUND"),
    http_status (0 when no response arrived), message (the server's or the client's words),
    result (the whole tfetch.Result, or None when the request never started)."""

    def __init__(self, status, message="", http_status=0, result=None):
        self.status = status
        self.name = _lib.err_name(status)
        self.http_status = http_status
        self.message = message or _lib.strerror(status)
        self.result = result
        super().__init__(str(self))

    def __str__(self):
        http = " (HTTP %d)" % self.http_status if self.http_status else ""
        return "%s%s: %s" % (self.name, http, self.message)

    def __reduce__(self):
        return (error_for, (self.status, self.message, self.http_status))


# Built-in bases for the codes where one fits.
_BASES = {
    "TF_ENOTFOUND": (LookupError,),
    "TF_EINVAL": (ValueError,),
    "TF_EURL": (ValueError,),
    "TF_ECONNECT": (ConnectionError,),
    "TF_ETIMEDOUT": (TimeoutError,),
    "TF_ENOMEM": (MemoryError,),
}

errors = types.ModuleType("tfetch.errors", "One tfetch.Error subclass per libtfetch status "
                          "(tfetch-status.h), named after it without the TF_ prefix.")
errors.Error = Error
_BY_STATUS = {}
for _v in range(-1, -128, -1):
    _n = _lib.err_name(_v)
    if _n == "TF_EUNKNOWN":
        continue
    _short = _n[3:]
    _cls = type(_short, (Error,) + _BASES.get(_n, ()),
                {"__doc__": "%s: %s." % (_n, _lib.strerror(_v)), "__module__": "tfetch.errors"})
    setattr(errors, _short, _cls)
    _BY_STATUS[_v] = _cls


def error_for(status, message="", http_status=0, result=None):
    """The tfetch.Error (subclass) instance for a status."""
    return _BY_STATUS.get(status, Error)(status, message, http_status, result)


def raise_for(result):
    """Raises the error a failed Result stands for."""
    raise error_for(result.status, result.error, result.http_status, result)
