#!/usr/bin/env python3
"""python_bench - the Python package's get and put of one large tensor against the C client
(tfetch-bench) in the same run, on the same daemon, with `requests` + numpy beside them
(what people do today: a safetensors body built and parsed by hand; urllib when requests
is not installed) for scale. Prints GB/s and the ratios; --json for JSON lines.

    PYTHONPATH=python TFETCH_LIBRARY=build/client/.libs/libtfetch.so.1 \\
        python3 bench/python_bench.py --tfetchd build/daemon/tfetchd \\
        --tfetch-bench build/bench/tfetch-bench

The C and Python measurements alternate in rounds (--rounds), each round reporting its median
(p50) of --reps timed requests after --warmup untimed ones; a figure is the median of its
rounds' p50s, so a loaded machine slows both alike. The document is one U8 tensor of --size
bytes, as tfetch-bench sends.
"""
import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time

import numpy as np

import tfetch


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def start_daemon(path):
    proc = subprocess.Popen([path, "--port", "0", "--listen", "127.0.0.1", "--config",
                             "/dev/null", "--max-body", "1G", "--store-memory", "4G",
                             "--log-level", "warning"],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    deadline, buf = time.monotonic() + 30, b""
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            for line in buf.decode(errors="replace").splitlines():
                if "listening on " in line:
                    return proc, line.split("listening on ", 1)[1].strip()
    proc.kill()
    sys.exit("python_bench: tfetchd did not start")


def p50(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def c_round(exe, base, size, transport, reps, warmup):
    """tfetch-bench's put and get p50 (seconds) and the transport it reports."""
    out = subprocess.run([exe, "--url", base, "--sizes", str(size), "--exchange-sizes", "none",
                          "--transports", transport, "--reps", str(reps), "--warmup",
                          str(warmup), "--memcpy-reps", "1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    got = {}
    for line in out.splitlines():
        rec = json.loads(line)
        if rec["bench"] in ("put", "get") and rec["bytes"] == size:
            got[rec["bench"]] = (rec["p50_us"] / 1e6, rec["transport"])
    if "put" not in got or "get" not in got:
        raise RuntimeError("tfetch-bench measured no %s put/get: %s" % (transport, out))
    return got


def py_round(c, name, doc, reps, warmup):
    put = p50(lambda: c.put(name, doc), reps, warmup)
    tput = c.last.transport
    get = p50(lambda: c.get(name), reps, warmup)
    return {"put": (put, tput), "get": (get, c.last.transport)}


def st_body(arr):
    """A one-tensor safetensors body, by hand (a copy of the data, as people write it)."""
    hdr = json.dumps({"x": {"dtype": "U8", "shape": list(arr.shape),
                            "data_offsets": [0, arr.nbytes]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    return len(hdr).to_bytes(8, "little") + hdr + arr.tobytes()


def st_parse(body):
    n = int.from_bytes(body[:8], "little")
    meta = json.loads(body[8:8 + n])
    t = meta["x"]
    a, b = t["data_offsets"]
    return np.frombuffer(body, dtype=np.uint8, count=b - a, offset=8 + n + a).reshape(t["shape"])


def plain_round(base, name, arr, reps, warmup):
    """`requests` (else urllib) + numpy + a hand-written safetensors codec."""
    url = "%s/v1/tensors/%s" % (base, name)
    hdrs = {"Content-Type": "application/x-safetensors"}
    try:
        import requests
        s = requests.Session()
        lib = "requests"

        def put():
            s.put(url, data=st_body(arr), headers=hdrs).raise_for_status()

        def get():
            r = s.get(url)
            r.raise_for_status()
            st_parse(r.content)
    except ImportError:
        import urllib.request
        lib = "urllib"

        def put():
            rq = urllib.request.Request(url, data=st_body(arr), headers=hdrs, method="PUT")
            urllib.request.urlopen(rq).read()

        def get():
            st_parse(urllib.request.urlopen(url).read())
    return lib, {"put": (p50(put, reps, warmup), "http"), "get": (p50(get, reps, warmup),
                                                                   "http")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="benchmark the daemon at URL instead of spawning one")
    ap.add_argument("--tfetchd", default=os.environ.get("TFETCHD", "./daemon/tfetchd"))
    ap.add_argument("--tfetch-bench", default="./bench/tfetch-bench")
    ap.add_argument("--size", default="64M")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transports", default="http,ucx")
    ap.add_argument("--no-plain", action="store_true", help="skip requests/urllib")
    ap.add_argument("--json", action="store_true")
    o = ap.parse_args()
    size = parse_size(o.size)
    proc = None
    base = o.url
    if not base:
        proc, base = start_daemon(o.tfetchd)
    arr = np.frombuffer(np.random.default_rng(1).bytes(size), dtype=np.uint8).copy()
    doc = {"x": arr}
    rows = []
    try:
        for tr in o.transports.split(","):
            c = tfetch.Client(base, transport="http" if tr == "http" else "ucx", timeout=300)
            if tr != "http":
                try:
                    c.upgrade()
                except tfetch.Error as e:
                    print("python_bench: %s skipped: %s" % (tr, e), file=sys.stderr)
                    continue
            res = {"C": [], "python": []}
            for _ in range(o.rounds):
                res["C"].append(c_round(o.tfetch_bench, base, size, tr, o.reps, o.warmup))
                res["python"].append(py_round(c, "pybench", doc, o.reps, o.warmup))
            c.close()
            for who, rs in res.items():
                for op in ("put", "get"):
                    secs = statistics.median(r[op][0] for r in rs)
                    rows.append({"client": who, "op": op, "transport": rs[-1][op][1],
                                 "bytes": size, "p50_s": secs, "gbps": size / secs / 1e9})
        if not o.no_plain:
            lib, r = None, []
            for _ in range(o.rounds):
                lib, one = plain_round(base, "plainbench", arr, max(2, o.reps // 2), 1)
                r.append(one)
            for op in ("put", "get"):
                secs = statistics.median(x[op][0] for x in r)
                rows.append({"client": lib + "+numpy", "op": op, "transport": "http",
                             "bytes": size, "p50_s": secs, "gbps": size / secs / 1e9})
    finally:
        if proc:
            proc.terminate()
            proc.wait()
    report(rows, o.json)


def report(rows, as_json):
    def find(client, op, tr):
        for r in rows:
            if r["client"] == client and r["op"] == op and r["transport"].split("/")[0] == tr:
                return r
    for r in rows:
        c = find("C", r["op"], r["transport"].split("/")[0])
        r["vs_c"] = round(c["p50_s"] / r["p50_s"], 3) if c else None
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    print("%-16s %-4s %-14s %9s %8s %8s" % ("client", "op", "transport", "p50 ms", "GB/s",
                                           "vs C"))
    for r in rows:
        print("%-16s %-4s %-14s %9.1f %8.3f %8s" % (
            r["client"], r["op"], r["transport"], r["p50_s"] * 1e3, r["gbps"],
            "%.2f" % r["vs_c"] if r["vs_c"] is not None else "-"))


if __name__ == "__main__":
    main()
