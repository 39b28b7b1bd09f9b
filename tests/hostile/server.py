#!/usr/bin/env python3
"""server.py - a hostile tfetch server: it answers the way a broken, lying or stalling peer
would, one behaviour (a mode) per process, so a test can hold the clients (the tfetch CLI,
libtfetch, Python) to the rule that a peer's bytes never crash them, hang them past their
limits or make them keep more memory than they asked for.

Usage: server.py MODE  -- listens on 127.0.0.1, port 0, prints "PORT\n" on stdout, serves
until killed. Every GET/PUT/POST of /v1/tensors/... and /v1/call/... gets the mode's answer;
POST /v1/upgrade gets the mode's upgrade answer (a plain refusal unless the mode is about the
upgrade); every answer offers UCX (Tfetch-Upgrade: ucx) so a client under policy auto asks.
Python 3 standard library only. `server.py --list` prints the modes.
"""
import base64
import json
import os
import socket
import socketserver
import struct
import sys
import threading
import time

TOKEN = "0123456789abcdef0123456789abcdef"


def doc(nbytes=8):
    """A valid safetensors document: one U8 tensor "x" of nbytes bytes."""
    hdr = json.dumps({"x": {"dtype": "U8", "shape": [nbytes],
                            "data_offsets": [0, nbytes]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    return struct.pack("<Q", len(hdr)) + hdr + bytes(i & 0xff for i in range(nbytes))


def st_lying(kind):
    if kind == "offsets":       # offsets past the body
        hdr = json.dumps({"x": {"dtype": "U8", "shape": [8],
                                "data_offsets": [0, 1 << 40]}}).encode()
        return struct.pack("<Q", len(hdr)) + hdr + b"\0" * 8
    if kind == "shape":         # shape says 1e12 elements, offsets say 8 bytes
        hdr = json.dumps({"x": {"dtype": "F32", "shape": [1000000, 1000000],
                                "data_offsets": [0, 8]}}).encode()
        return struct.pack("<Q", len(hdr)) + hdr + b"\0" * 8
    if kind == "hdrlen":        # header length 2^63
        return struct.pack("<Q", 1 << 63) + b"{}"
    raise ValueError(kind)


def crc16(s):
    """UCX's ucs_crc16_string: the checksum a packed worker address names a transport by."""
    crc = 0xffff
    for ch in s.encode():
        crc ^= ch
        for _ in range(8):
            crc = (crc >> 1) ^ (0x8408 if crc & 1 else 0)
    return ~crc & 0xffff


def ucx_addr_short_tl(tl):
    """A UCX 1.13 (v1) worker address that parses exactly but names transport tl with an
    empty device and interface address: UCX reads that transport's fixed-size addresses
    past them (NULL device address)."""
    a = bytes([0x20]) + b"\x11" * 8          # v1, flags: uuid; the uuid
    a += bytes([0x00, 0x80])                 # md 0; device: last, 0-byte address
    a += struct.pack("<H", crc16(tl))
    a += struct.pack("<fffI", 0.0, 1e9, 1e-7, 0x3fff00 | 10)
    a += bytes([0x80])                       # iface: last, 0-byte address
    return a


def up_ucx(**over):
    r = {"transport": "ucx", "token": TOKEN, "expires_ms": 10000,
         "worker_address": base64.b64encode(os.urandom(200)).decode(),
         "same_host": False, "server_pid": 1}
    r.update(over)
    return {k: v for k, v in r.items() if v is not None}


# mode -> the upgrade answer (bytes of a JSON body), or None for a plain refusal.
UPGRADES = {
    "up-random": lambda: up_ucx(),
    "up-random-samehost": lambda: up_ucx(same_host=True, server_pid=os.getpid()),
    "up-short-tcp": lambda: up_ucx(worker_address=base64.b64encode(
        ucx_addr_short_tl("tcp")).decode()),
    "up-short-posix": lambda: up_ucx(same_host=True, server_pid=os.getpid(),
                                     worker_address=base64.b64encode(
                                         ucx_addr_short_tl("posix")).decode()),
    "up-short-sysv": lambda: up_ucx(same_host=True, server_pid=os.getpid(),
                                    worker_address=base64.b64encode(
                                        ucx_addr_short_tl("sysv")).decode()),
    "up-trunc": lambda: up_ucx(worker_address=base64.b64encode(
        ucx_addr_short_tl("tcp")[:-3]).decode()),
    "up-noaddr": lambda: up_ucx(worker_address=None),
    "up-emptyaddr": lambda: up_ucx(worker_address=""),
    "up-hugeaddr": lambda: up_ucx(worker_address=base64.b64encode(
        os.urandom(70000)).decode()),
    "up-hugebody": lambda: {"transport": "http", "reason": "x" * (300 * 1024)},
    "up-expired": lambda: up_ucx(expires_ms=0),
    "up-types": lambda: up_ucx(expires_ms="soon", same_host=1, server_pid=-4),
    "up-shm-contradict": lambda: up_ucx(same_host=False, shm_socket="tfetch-x",
                                        shm_token=TOKEN),
    "up-shm-noucx": lambda: up_ucx(same_host=True, server_pid=os.getpid(),
                                   shm_socket="tfetch-hostile-" + str(os.getpid()),
                                   shm_token=TOKEN),
    "up-badtoken": lambda: up_ucx(token="NOT-HEX"),
    "up-notjson": lambda: "{\"transport\": \"ucx\", ",
    "up-unknown-key": lambda: up_ucx(extra=1),
}


class Handler(socketserver.BaseRequestHandler):
    def read_request(self):
        f = self.request.makefile("rb")
        line = f.readline(65536)
        if not line:
            return None, None, None
        method, path = (line.decode("latin-1").split() + ["", ""])[:2]
        headers = {}
        while True:
            h = f.readline(65536)
            if not h or h in (b"\r\n", b"\n"):
                break
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0") or 0)
        body = f.read(n) if n else b""
        return method, path, body

    def send(self, data):
        self.request.sendall(data if isinstance(data, bytes) else data.encode())

    def head(self, status=200, length=None, ctype="application/x-safetensors", extra=""):
        h = "HTTP/1.1 %d X\r\nContent-Type: %s\r\nTfetch-Upgrade: ucx\r\n" % (status, ctype)
        if length is not None:
            h += "Content-Length: %d\r\n" % length
        h += extra + "\r\n"
        self.send(h)

    def answer(self, status, body, ctype="application/x-safetensors", extra=""):
        self.head(status, len(body), ctype, extra)
        self.send(body)

    def handle(self):
        try:
            while True:
                method, path, _ = self.read_request()
                if method is None:
                    return
                if path.startswith("/v1/upgrade"):
                    self.upgrade()
                else:
                    if self.tensor() == "close":
                        return
        except (BrokenPipeError, ConnectionResetError):
            pass

    def upgrade(self):
        mode = self.server.mode
        make = UPGRADES.get(mode)
        if make is None:
            body = json.dumps({"transport": "http", "reason": "hostile test server"})
        else:
            body = make()
            if not isinstance(body, str):
                body = json.dumps(body)
        self.answer(200, body.encode(), "application/json")

    def tensor(self):
        mode = self.server.mode
        if mode == "garbage":
            self.send(b"\x00\xffNOT HTTP AT ALL\r\n\r\n" + os.urandom(512))
            return "close"
        if mode == "bad-status":
            self.send("HTTP/1.1 99999999999999999999 X\r\nContent-Length: 0\r\n\r\n")
            return "close"
        if mode == "cl-short":      # promises 1000 bytes, sends 10, closes
            self.head(200, 1000)
            self.send(doc()[:10])
            return "close"
        if mode == "cl-twice":      # two different Content-Lengths
            body = doc()
            self.head(200, None, extra="Content-Length: %d\r\nContent-Length: 5\r\n" % len(body))
            self.send(body)
            return "close"
        if mode == "cl-huge":       # announces a petabyte
            self.head(200, 1 << 50)
            self.send(doc())
            stall()
        if mode == "stream-huge":   # no length, streams until the client gives up
            self.head(200, None, extra="Connection: close\r\n")
            chunk = b"\0" * (1 << 20)
            while True:
                self.send(chunk)
        if mode in ("st-offsets", "st-shape", "st-hdrlen"):
            self.answer(200, st_lying(mode[3:]))
            return None
        if mode == "json-error-huge":   # an error body far larger than any message
            self.answer(500, b"{\"error\":\"" + b"e" * (8 << 20) + b"\"}", "application/json")
            return None
        if mode == "stall-head":    # accepts, reads the request, never answers
            stall()
        if mode == "stall-body":    # headers, half the body, then nothing
            body = doc(4096)
            self.head(200, len(body))
            self.send(body[:100])
            stall()
        if mode == "drip":          # one byte per second, forever
            body = doc(1 << 20)
            self.head(200, len(body))
            for b in body:
                self.send(bytes([b]))
                time.sleep(1.0)
            return None
        if mode == "throttled":     # 256 KiB at ~64 KiB/s: slow but moving
            body = doc(256 << 10)
            self.head(200, len(body))
            for i in range(0, len(body), 4096):
                self.send(body[i:i + 4096])
                time.sleep(4096 / (64 << 10))
            return None
        # the upgrade modes and "ok": a valid small document
        self.answer(200, doc())
        return None


def stall():
    while True:
        time.sleep(3600)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


MODES = sorted(list(UPGRADES) + ["ok", "garbage", "bad-status", "cl-short", "cl-twice",
                                 "cl-huge", "stream-huge", "st-offsets", "st-shape",
                                 "st-hdrlen", "json-error-huge", "stall-head", "stall-body",
                                 "drip", "throttled"])


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--list":
        print("\n".join(MODES))
        return
    if sys.argv[1] not in MODES:
        sys.exit("unknown mode %r (--list)" % sys.argv[1])
    srv = Server(("127.0.0.1", 0), Handler)
    srv.mode = sys.argv[1]
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
