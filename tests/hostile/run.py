#!/usr/bin/env python3
"""run.py - the hostile-server suite: every mode of server.py against the tfetch CLI,
libtfetch (driver.c) and the Python package (pyclient.py), each client a process of its
own, held to what a client owes its user whatever a server sends:

  * no crash: the client exits with a status, never by a signal (SIGABRT from UCX, SIGSEGV);
  * a clear outcome: success, or a refusal naming the fault (the words each case expects),
    or a fallback to HTTP that says why (policy auto), or an error (policy ucx);
  * bounded time: each case within its limit (a stalled server is noticed by the stall
    limit, not a whole-request timeout: none is set);
  * bounded memory: the client's peak RSS within its limit (a body cap is honoured as the
    bytes arrive, not after).

Usage: run.py --cli TFETCH --driver HOSTILE_DRIVER [--python PY] [--tfetchd TFETCHD]
              [-j N] [-k WORD]
The Python client runs when --python is given (with PYTHONPATH and TFETCH_LIBRARY set by
the caller). With --tfetchd (and UCX in the build) the shm-* modes run too: a real tfetchd
(port 0) holds the tensor, server.py proxies it and answers the same-host shm socket
itself; each client must get the tensor over UCX or HTTP instead, and, as a control, gets
it over shm from the real daemon directly. Prints one line per failed case and a summary; exit 0 when all pass.
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MB = 1024 * 1024

# (mode, policy, stall_ms, max_body or None, ok?, words expected in the output, seconds, RSS MB)
CASES = []
for policy in ("auto", "ucx"):
    ok = policy == "auto"
    for mode, words in [
            ("up-random", "UCX worker address: "),
            ("up-random-samehost", "UCX worker address: "),
            ("up-short-tcp", "not the sizes our UCX reads"),
            ("up-short-posix", "not the sizes our UCX reads"),
            ("up-short-sysv", "not the sizes our UCX reads"),
            ("up-trunc", "truncated transport attributes"),
            ("up-noaddr", "worker_address"), ("up-emptyaddr", "worker_address"),
            ("up-hugeaddr", "worker_address"),
            ("up-hugebody", "more than this client takes"),
            ("up-expired", "expires_ms"), ("up-types", "expires_ms"),
            ("up-shm-contradict", "offered to a peer on another host"),
            ("up-shm-noucx", "UCX worker address: "), ("up-badtoken", "token"),
            ("up-notjson", "upgrade response"), ("up-unknown-key", "upgrade response")]:
        CASES.append((mode, policy, 10000, None, ok, words, 15, 300))
CASES += [
    ("ok", "http", 10000, None, True, "TF_OK", 10, 300),
    ("garbage", "http", 10000, None, False, "TF_EPROTO", 10, 300),
    ("bad-status", "http", 10000, None, False, "TF_EPROTO", 10, 300),
    ("cl-short", "http", 10000, None, False, "TF_EIO", 10, 300),
    ("cl-twice", "http", 10000, None, False, "TF_E", 10, 300),
    ("cl-huge", "http", 10000, None, False, "more than this client takes", 10, 300),
    ("stream-huge", "http", 10000, 64 * MB, False, "more than this client takes", 20, 400),
    ("st-offsets", "http", 10000, None, False, "data_offsets", 10, 300),
    ("st-shape", "http", 10000, None, False, "data_offsets", 10, 300),
    ("st-hdrlen", "http", 10000, None, False, "header length", 10, 300),
    ("json-error-huge", "http", 10000, None, False, "TF_E", 15, 400),
    ("stall-head", "http", 2000, None, False, "stalled", 8, 300),
    ("stall-body", "http", 2000, None, False, "stalled", 8, 300),
    ("stall-head", "auto", 2000, None, False, "stalled", 10, 300),
    ("drip", "http", 3000, None, False, "stalled", 10, 300),
    ("throttled", "http", 2000, None, True, "TF_OK", 25, 300),
]


SHM_MODES = ["shm-hello-garbage", "shm-hello-refused", "shm-hello-stall", "shm-hello-fd",
             "shm-get-nofd", "shm-get-pipe", "shm-get-unsealed", "shm-get-small",
             "shm-get-offset", "shm-get-baddoc", "shm-get-wrongseq", "shm-get-garbage",
             "shm-get-twofds", "shm-get-close", "shm-get-stall"]
SHM_CASES = [(m, "auto", 10000, None, True, "TF_OK", 15, 300) for m in SHM_MODES]
# The control: the real daemon itself, whose answers take the shm path.
SHM_CASES.append(("direct", "auto", 10000, None, True, "shm/memfd", 15, 300))


def start_tfetchd(path, cli, tmp):
    """A real tfetchd on port 0 holding the tensor x (64 bytes); (process, base URL)."""
    log = open(os.path.join(tmp, "tfetchd.log"), "w+")
    p = subprocess.Popen([path, "--port", "0", "--listen", "127.0.0.1", "--config",
                          "/dev/null"], stdout=log, stderr=subprocess.STDOUT)
    base = None
    for _ in range(300):
        log.seek(0)
        for line in log:
            if "listening on http://" in line:
                base = "http://" + line.split("http://", 1)[1].split()[0].rstrip("/")
        if base:
            break
        time.sleep(0.05)
    if not base:
        p.kill()
        raise RuntimeError("tfetchd did not start")
    sys.path.insert(0, HERE)
    import server
    doc = os.path.join(tmp, "x.safetensors")
    with open(doc, "wb") as f:
        f.write(server.doc(64))
    subprocess.run([cli, "-q", "--transport", "http", "put", base + "/v1/tensors/x", doc],
                   check=True)
    return p, base


def start_server(mode, upstream=None):
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "server.py"), mode] +
                         ([upstream] if mode.startswith("shm-") else []),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = p.stdout.readline().strip()
    if not port.isdigit():
        p.kill()
        p.wait()
        raise RuntimeError("server.py %s did not start" % mode)
    return p, int(port)


def command(kind, args, url, policy, stall_ms, max_body, tmp):
    mb = "-" if max_body is None else str(max_body)
    if kind == "cli":
        cmd = [args.cli, "-q", "-s", "--transport", policy, "--stall-time", str(stall_ms)]
        if max_body is not None:
            cmd += ["--max-body", mb]
        return cmd + ["get", url, os.path.join(tmp, "out.safetensors")]
    if kind == "c":
        return [args.driver, url, policy, str(stall_ms), mb]
    return [args.python, os.path.join(HERE, "pyclient.py"), url, policy, str(stall_ms), mb]


def run_case(kind, case, args):
    mode, policy, stall_ms, max_body, ok, words, limit_s, limit_mb = case
    name = "%s %s --transport %s" % (kind, mode, policy)
    if mode == "direct":
        srv, url = None, args.upstream + "/v1/tensors/x"
    else:
        srv, port = start_server(mode, args.upstream)
        url = "http://127.0.0.1:%d/v1/tensors/x" % port
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XDG_CACHE_HOME=tmp)
        env.pop("TFETCH_TRANSPORT", None)
        env.pop("TFETCH_UPGRADE", None)
        t0 = time.monotonic()
        p = subprocess.Popen(command(kind, args, url, policy, stall_ms, max_body, tmp),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        killed = False
        try:
            out, _ = p.communicate(timeout=limit_s + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            killed = True
            out, _ = p.communicate()
        took = time.monotonic() - t0
    if srv:
        srv.kill()
        srv.wait()
    text = out.decode("utf-8", "replace")
    rss_mb = peak_rss_mb(p)
    why = []
    if killed:
        why.append("hung: killed after %d s" % (limit_s + 30))
    elif p.returncode < 0 or p.returncode >= 128:
        why.append("died of a signal (exit %d)" % p.returncode)
    elif ok and p.returncode != 0:
        why.append("failed (exit %d), expected success" % p.returncode)
    elif not ok and p.returncode == 0:
        why.append("succeeded, expected a refusal")
    if words not in text:
        why.append("no %r in its output" % words)
    if mode.startswith("shm-") and "shm/memfd" in text:
        why.append("took a hostile shm answer")
    if took > limit_s:
        why.append("took %.1f s, limit %d s" % (took, limit_s))
    if rss_mb is not None and rss_mb > limit_mb:
        why.append("peak RSS %d MB, limit %d MB" % (rss_mb, limit_mb))
    return name, why, took, text.strip().splitlines()[-3:]


class Popen(subprocess.Popen):
    """subprocess.Popen that reaps with os.wait4, keeping the child's own peak RSS."""
    rusage = None

    def _try_wait(self, wait_flags):
        try:
            pid, sts, ru = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            return (self.pid, 0)
        if pid == self.pid:
            self.rusage = ru
        return (pid, sts)


subprocess.Popen = Popen


def peak_rss_mb(p):
    ru = getattr(p, "rusage", None)
    return None if ru is None else ru.ru_maxrss // 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--python")
    ap.add_argument("--tfetchd")
    ap.add_argument("-j", type=int, default=4)
    ap.add_argument("-k", default="")
    args = ap.parse_args()
    kinds = ["cli", "c"] + (["py"] if args.python else [])
    cases = CASES
    daemon = None
    tmp = tempfile.TemporaryDirectory()
    args.upstream = None
    if args.tfetchd:
        daemon, args.upstream = start_tfetchd(args.tfetchd, args.cli, tmp.name)
        cases = CASES + SHM_CASES
    jobs = [(k, c) for k in kinds for c in cases if args.k in "%s %s %s" % (k, c[0], c[1])]
    failed = 0
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.j) as ex:
        for name, why, took, tail in ex.map(lambda j: run_case(j[0], j[1], args), jobs):
            if why:
                failed += 1
                print("FAIL %s: %s\n    %s" % (name, "; ".join(why), "\n    ".join(tail)))
            else:
                print("ok   %s (%.1f s)" % (name, took))
    if daemon:
        daemon.kill()
        daemon.wait()
    tmp.cleanup()
    print("hostile: %d of %d cases passed in %.0f s (clients: %s%s)"
          % (len(jobs) - failed, len(jobs), time.monotonic() - t0, ", ".join(kinds),
             "; shm modes against a real tfetchd" if daemon else ""))
    return 1 if failed or not jobs else 0


if __name__ == "__main__":
    sys.exit(main())
