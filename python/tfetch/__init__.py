"""Move tensors to and from tfetchd servers, zero-copy into numpy.

A thin layer over libtfetch (ctypes; no compiler needed). Requests travel over HTTP, or
over UCX (shared memory on one host, RDMA or TCP between hosts) when the server offers the
upgrade; ``Client.last`` says what carried each one and, when UCX was allowed but HTTP was
used, why.

    import asyncio, numpy as np, tfetch

    c = tfetch.Client("http://127.0.0.1:7070", user="alice")
    c.put("w", {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, metadata={"step": "1"})
    doc = c.get("w")                     # tfetch.Document: {"w": array(...)}, .metadata
    print(doc["w"][1, 2], doc.metadata, c.last.transport)
    y = c.call("echo", {"x": doc["w"]})  # an exchange with a route
    x = tfetch.fetch("http://127.0.0.1:7070/v1/tensors/w")   # Shumai's tfetch
    async def many():                    # asyncio, on libtfetch's async engine
        return await asyncio.gather(*(c.aget("w") for _ in range(1000)))

Zero copy: arrays put are sent from their own memory (borrowed while the request runs);
arrays got are views over the buffer the response was received into, kept alive by their
base (no copy); bf16 and fp8 arrive as tfetch.Array (uint16/uint8 storage, or ml_dtypes'
types when installed) with ``dtype_name``; every array exports DLPack (``__dlpack__``), so
torch.from_dlpack / jax.dlpack take them without a copy.

torch (optional): put and call take torch tensors and anything with ``__dlpack__`` (bf16 and
fp8 included) from where they lie; ``c.get(name, like="torch")`` and ``c.feed(name, device,
like="torch")`` return torch tensors over the received buffer, no copy.

Errors raise tfetch.Error subclasses (tfetch.errors.ENOTFOUND, ...), carrying name,
http_status and the server's message.

The library: $TFETCH_LIBRARY if set, else the libtfetch.so.1 make install put beside the
package's configuration, else the dynamic loader's.

Device feeds: ``with c.feed("batches", device=0) as f: for item in f: ... item.release();
f.push_outfeed({"loss": loss})`` (tfetch.Feed, tfetch.Item); c.feed_declare, infeed_push,
feed_done, outfeed_get for producers and receivers. A producer fills a tfetch.Batch (one
buffer, writable arrays) in place and pushes it: it goes in one piece.

Contents: Client, Feed, Item, fetch, default_client, Document, Batch, Array, Result, Error, errors (and the
short names NotFound, ConnectError, Timeout, TooBig, BadURL), tagged, dtype_name, to_dlpack,
DTYPES, library_version, __version__. See also doc/python.md.
"""
from . import _lib
from ._arrays import DTYPES, PACKED, Array, Batch, Document, dtype_name, tagged, to_dlpack
from ._client import Client, default_client, fetch
from ._errors import Error, Result, errors
from ._feeds import Feed, Item

__version__ = "0.1.0"
__all__ = ["Client", "Feed", "Item", "fetch", "default_client", "Document", "Batch", "Array", "Result", "Error",
           "errors", "tagged", "dtype_name", "to_dlpack", "DTYPES", "PACKED", "library_version",
           "NotFound", "ConnectError", "Timeout", "TooBig", "BadURL"]

# help(tfetch) and reprs show the public classes where users import them from.
for _cls in (Client, Feed, Item, Document, Batch, Array, Result, Error):
    _cls.__module__ = "tfetch"
del _cls

# Friendly names for the errors people catch most.
NotFound = errors.ENOTFOUND
ConnectError = errors.ECONNECT
Timeout = errors.ETIMEDOUT
TooBig = errors.ETOOBIG
BadURL = errors.EURL


def library_version() -> str:
    """The version of the libtfetch loaded (tf_version)."""
    return _lib.version()
