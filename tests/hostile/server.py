#!/usr/bin/env python3
"""server.py - a hostile tfetch server: it answers the way a broken, lying or stalling peer
would, one behaviour (a mode) per process, so a test can hold the clients (the tfetch CLI,
libtfetch, Python) to the rule that a peer's bytes never crash them, hang them past their
limits or make them keep more memory than they asked for.

Usage: server.py MODE [UPSTREAM]  -- listens on 127.0.0.1, port 0, prints "PORT\n" on
stdout, serves until killed. Every GET/PUT/POST of /v1/tensors/... and /v1/call/... gets the mode's answer;
POST /v1/upgrade gets the mode's upgrade answer (a plain refusal unless the mode is about the
upgrade); every answer offers UCX (Tfetch-Upgrade: ucx) so a client under policy auto asks.
Python 3 standard library only. `server.py --list` prints the modes.

The shm-* modes need UPSTREAM, a real tfetchd (http://127.0.0.1:PORT): the server forwards
every request to it, except that an upgrade answer's shm socket is replaced by one of its
own (an abstract unix socket) that answers the same-host shm messages (proto/shmframe.h)
the mode's way: garbage, refusals, the wrong seq, no descriptor, a descriptor that is no
memfd, an unsealed memfd, one smaller than the span it claims, a document that does not
decode, silence. UCX still connects to the real daemon, so a client that refuses the shm
answer goes on over UCX or HTTP.
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
import urllib.error
import urllib.request

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


# ---- the shm socket (proto/shmframe.h): 48 fixed bytes, then the string -------------------
SF_MAGIC, SF_HELLO, SF_GET, SF_REPLY = 0x31534654, 1, 2, 6
SF_FMT = "<IBBHQiIQQQ"


def sf_encode(op, seq, status=0, s=b"", lease=0, a=0, b=0):
    return struct.pack(SF_FMT, SF_MAGIC, 1, op, len(s), seq, status, 0, lease, a, b) + s


def sf_decode(m):
    if len(m) < 48:
        return None
    magic, ver, op, slen, seq, status, _, lease, a, b = struct.unpack(SF_FMT, m[:48])
    return op, seq


def memfd(data, size=None, seal=True):
    fd = os.memfd_create("hostile", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if size is not None:
        os.ftruncate(fd, size)
    if seal:
        import fcntl
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    return fd


def shm_answer(mode, conn, op, seq):
    """Answers one shm request (HELLO or GET) the mode's way."""
    ok = sf_encode(SF_REPLY, seq)
    if op == SF_HELLO:
        if mode == "shm-hello-garbage":
            conn.send(os.urandom(100))
        elif mode == "shm-hello-refused":
            conn.send(sf_encode(SF_REPLY, seq, -5, b"no such token"))
        elif mode == "shm-hello-stall":
            stall()
        elif mode == "shm-hello-fd":      # an fd on a HELLO answer: never expected
            socket.send_fds(conn, [ok], [memfd(b"x" * 64)])
        else:
            conn.send(ok)
        return
    if op != SF_GET:
        return
    d = doc(64)
    if mode == "shm-hello-fd":           # a valid answer: only the HELLO's fd was wrong
        socket.send_fds(conn, [sf_encode(SF_REPLY, seq, 0, b"", 1, 0, len(d))], [memfd(d)])
    elif mode == "shm-get-nofd":
        conn.send(sf_encode(SF_REPLY, seq, 0, b"", 1, 0, len(d)))
    elif mode == "shm-get-pipe":          # a descriptor that is no memfd
        r, w = os.pipe()
        socket.send_fds(conn, [sf_encode(SF_REPLY, seq, 0, b"", 1, 0, len(d))], [r])
    elif mode == "shm-get-unsealed":
        socket.send_fds(conn, [sf_encode(SF_REPLY, seq, 0, b"", 1, 0, len(d))],
                        [memfd(d, seal=False)])
    elif mode == "shm-get-small":         # the span claims more than the memfd holds
        socket.send_fds(conn, [sf_encode(SF_REPLY, seq, 0, b"", 1, 0, 1 << 30)],
                        [memfd(d)])
    elif mode == "shm-get-offset":        # an offset far past the end
        socket.send_fds(conn, [sf_encode(SF_REPLY, seq, 0, b"", 1, (1 << 62), len(d))],
                        [memfd(d)])
    elif mode == "shm-get-baddoc":        # a sealed memfd whose bytes are no document
        socket.send_fds(conn, [sf_encode(SF_REPLY, seq, 0, b"", 1, 0, 64)],
                        [memfd(os.urandom(64))])
    elif mode == "shm-get-wrongseq":
        socket.send_fds(conn, [sf_encode(SF_REPLY, seq + 7, 0, b"", 1, 0, len(d))],
                        [memfd(d)])
    elif mode == "shm-get-garbage":
        conn.send(os.urandom(300))
    elif mode == "shm-get-twofds":
        socket.send_fds(conn, [sf_encode(SF_REPLY, seq, 0, b"", 1, 0, len(d))],
                        [memfd(d), memfd(d)])
    elif mode == "shm-get-close":
        conn.close()
    elif mode == "shm-get-stall":
        stall()


def shm_serve(mode, name):
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ls.bind("\0" + name)
    ls.listen(16)

    def one(conn):
        try:
            while True:
                m = conn.recv(4096)
                if not m:
                    return
                h = sf_decode(m)
                if h is None:
                    return
                shm_answer(mode, conn, h[0], h[1])
        except OSError:
            pass

    while True:
        conn, _ = ls.accept()
        threading.Thread(target=one, args=(conn,), daemon=True).start()


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
        self.req_headers = headers
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
                method, path, body = self.read_request()
                if method is None:
                    return
                if self.server.upstream:
                    self.forward(method, path, body)
                elif path.startswith("/v1/upgrade"):
                    self.upgrade()
                else:
                    if self.tensor() == "close":
                        return
        except (BrokenPipeError, ConnectionResetError):
            pass

    def forward(self, method, path, body):
        """Proxy mode: the real daemon answers; an upgrade's shm socket becomes ours."""
        hdrs = {k: v for k, v in self.req_headers.items()
                if k in ("content-type", "accept", "tfetch-user", "tfetch-request-id",
                         "authorization")}
        rq = urllib.request.Request(self.server.upstream + path, data=body or None,
                                    method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(rq, timeout=30) as r:
                status, ctype, data = r.status, r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            status, ctype, data = e.code, e.headers.get("Content-Type", ""), e.read()
        if path.startswith("/v1/upgrade") and status == 200:
            a = json.loads(data)
            if "shm_socket" in a:
                a["shm_socket"] = self.server.shm_name
            data = json.dumps(a).encode()
        self.answer(status, data, ctype or "application/octet-stream")

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


SHM_MODES = ["shm-hello-garbage", "shm-hello-refused", "shm-hello-stall", "shm-hello-fd",
             "shm-get-nofd", "shm-get-pipe", "shm-get-unsealed", "shm-get-small",
             "shm-get-offset", "shm-get-baddoc", "shm-get-wrongseq", "shm-get-garbage",
             "shm-get-twofds", "shm-get-close", "shm-get-stall"]
MODES = sorted(list(UPGRADES) + SHM_MODES + ["ok", "garbage", "bad-status", "cl-short", "cl-twice",
                                 "cl-huge", "stream-huge", "st-offsets", "st-shape",
                                 "st-hdrlen", "json-error-huge", "stall-head", "stall-body",
                                 "drip", "throttled"])


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    if sys.argv[1] == "--list":
        print("\n".join(MODES))
        return
    if sys.argv[1] not in MODES:
        sys.exit("unknown mode %r (--list)" % sys.argv[1])
    srv = Server(("127.0.0.1", 0), Handler)
    srv.mode = sys.argv[1]
    srv.upstream = sys.argv[2].rstrip("/") if len(sys.argv) == 3 else None
    if srv.mode.startswith("shm-"):
        if not srv.upstream:
            sys.exit("mode %s needs UPSTREAM (a real tfetchd)" % srv.mode)
        srv.shm_name = "tfetch-hostile-%d" % os.getpid()
        threading.Thread(target=shm_serve, args=(srv.mode, srv.shm_name), daemon=True).start()
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
