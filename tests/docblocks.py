#!/usr/bin/env python3
"""docblocks.py - runs the shell blocks of the README and doc/*.md that use curl, as a reader
would, against real tfetchd daemons on port 0 (tests/readme.test calls it).

Each file gets a scratch directory its blocks share, in order (a block may use what an
earlier one made), and a plain tfetchd for the blocks that do not start their own. A block is
split into commands (continuation lines and here-documents kept whole). A command that runs
tfetchd starts it here instead, on port 0 with --config /dev/null, in the background; the
block's http(s)://127.0.0.1:7070 then means that daemon. Paths a reader types from the source
tree (build/daemon/tfetchd, build/cli/tfetch, tests/mkcert.sh, $PWD/plugins/.libs/ from the
build directory, pkg-config's tfetch-plugin flags) are mapped to this build. A ```c block
whose first line is "/* NAME.c - ..." is saved as NAME.c: the doc made that file.

Checked: every curl command (in every block, run or not) carries --fail, -f or
--fail-with-body; each command exits 0, except that one followed by an expected error
("# {"error": ...}") must fail; a command followed by "# {JSON}" prints that JSON. A block
preceded by "<!-- readme.test: not run (REASON) -->" is only linted. Exit status 1 on any
failure.
"""
import argparse
import json
import os
import re
import select
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

SKIP_MARK = re.compile(r"<!--\s*readme\.test:\s*not run\s*\((.*)\)\s*-->")
CURL_FAIL = re.compile(r"(^|\s)(--fail|--fail-with-body|-f|-[A-Za-z]*f[A-Za-z]*)(\s|$)")


def blocks(path):
    """(line number, language, lines, skip reason or None) of each fenced block."""
    out, lang, body, start, prev = [], None, [], 0, ""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if lang is None:
                m = re.match(r"^```(\w*)\s*$", line)
                if m:
                    lang, body, start = m.group(1), [], n
                    m2 = SKIP_MARK.search(prev)
                    skip = m2.group(1) if m2 else None
                elif line.strip():
                    prev = line
            elif line.startswith("```"):
                out.append((start, lang, body, skip))
                lang, prev = None, ""
            else:
                body.append(line)
    return out


def commands(lines):
    """(command text, expected JSON text or None) for a shell block."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        i += 1
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            if s.startswith("# {") and out and out[-1][1] is None:
                out[-1] = (out[-1][0], s[2:])
            continue
        cmd = line
        while cmd.endswith("\\") and i < len(lines):
            cmd = cmd + "\n" + lines[i]
            i += 1
        m = re.search(r"<<-?\s*'?(\w+)'?", cmd)
        if m:                                   # a here-document: up to its end word
            end = m.group(1)
            while i < len(lines):
                cmd += "\n" + lines[i]
                i += 1
                if lines[i - 1].strip() == end:
                    break
        out.append((cmd, None))
    return out


def curl_calls(cmd):
    """The curl invocations in a command, as text from 'curl' to the end of its pipeline
    segment."""
    return [m.group(0) for m in re.finditer(r"(?<![\w/.-])curl\s[^;|&)]*", cmd)]


class Env:
    def __init__(self, a, workdir):
        self.a = a
        self.workdir = workdir
        self.daemons = []

    def map(self, cmd, base):
        a = self.a
        cmd = cmd.replace("build/daemon/tfetchd", a.tfetchd)
        cmd = cmd.replace("build/cli/tfetch", a.cli)
        cmd = cmd.replace("tests/mkcert.sh", os.path.join(a.srcdir, "tests/mkcert.sh"))
        cmd = cmd.replace("$PWD/plugins/.libs/", os.path.join(a.builddir, "plugins/.libs/"))
        cmd = cmd.replace("$(pkg-config --cflags tfetch-plugin)",
                          "-I%s/daemon -I%s/proto" % (a.srcdir, a.srcdir))
        if base:
            host = base.split("://", 1)[1]
            cmd = re.sub(r"https?://127\.0\.0\.1:7070", lambda m: m.group(0).split("://")[0] +
                         "://" + host, cmd)
        return cmd

    def is_daemon(self, cmd):
        try:
            words = shlex.split(cmd.replace("$PWD", self.workdir), comments=True)
        except ValueError:                      # not one simple command
            return False, []
        while words and re.match(r"^\w+=", words[0]):
            words.pop(0)
        return bool(words) and (words[0] == "tfetchd" or words[0] == self.a.tfetchd), words

    def start(self, words):
        words = [w for w in words if w != "&"]
        args = [self.a.tfetchd]
        it = iter(words[1:])
        for w in it:
            if w == "--port":
                next(it, None)
                continue
            args.append(w)
        args += ["--port", "0", "--listen", "127.0.0.1", "--config", "/dev/null"]
        log = open(os.path.join(self.workdir, "tfetchd-%d.log" % len(self.daemons)), "wb")
        p = subprocess.Popen(args, cwd=self.workdir, stdout=subprocess.PIPE, stderr=log,
                             stdin=subprocess.DEVNULL)
        buf, deadline = b"", time.monotonic() + 30
        while time.monotonic() < deadline:
            if select.select([p.stdout], [], [], 0.2)[0]:
                chunk = os.read(p.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                m = re.search(rb"listening on (\S+)", buf)
                if m:
                    self.daemons.append(p)
                    return m.group(1).decode()
        p.kill()
        p.wait()
        log.close()
        with open(log.name, errors="replace") as f:
            raise RuntimeError("tfetchd %s did not start: %s" % (" ".join(args),
                                                                  f.read()[-1500:]))

    def stop(self, keep=0):
        while len(self.daemons) > keep:
            p = self.daemons.pop()
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def expected(text):
    """The JSON value at the start of an expected-output comment (text may follow it)."""
    return json.JSONDecoder().raw_decode(text)[0]


def run_file(a, path, failures):
    rel = os.path.relpath(path, a.srcdir)
    workdir = tempfile.mkdtemp(prefix="tf-docblocks-")
    env = Env(a, workdir)
    shell_env = dict(os.environ, PATH=os.path.join(a.builddir, "client") + ":" +
                     os.environ.get("PATH", ""))
    shell_env.pop("TFETCH_URL", None)
    default = None
    ran = 0
    try:
        for line, lang, body, skip in blocks(path):
            where = "%s:%d" % (rel, line)
            if lang == "c" and body and re.match(r"^/\* (\w+\.c) - ", body[0]):
                name = re.match(r"^/\* (\w+\.c) - ", body[0]).group(1)
                with open(os.path.join(workdir, name), "w") as f:
                    f.write("\n".join(body) + "\n")
                continue
            if lang != "sh":
                continue
            cmds = commands(body)
            for cmd, _ in cmds:
                for call in curl_calls(cmd):
                    if not CURL_FAIL.search(call):
                        failures.append("%s: curl without --fail: %s" % (where, call.strip()))
            if not any(curl_calls(c) for c, _ in cmds):
                continue
            if skip:
                print("SKIP %s: %s" % (where, skip))
                continue
            base = None
            ndaemons = len(env.daemons)
            for cmd, want in cmds:
                is_d, words = env.is_daemon(env.map(cmd, None))
                if is_d:
                    base = env.start(words)
                    print("%s: started %s at %s" % (where, " ".join(words[1:]), base))
                    continue
                if base is None:
                    if default is None:
                        default = env.start(["tfetchd"])
                        ndaemons = len(env.daemons)
                    base = default
                text = env.map(cmd, base)
                r = subprocess.run(["bash", "-c", text], cwd=workdir, env=shell_env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
                out = r.stdout.decode(errors="replace")
                if r.returncode == 77 and "mkcert" in text:
                    print("SKIP %s: %s" % (where, r.stderr.decode(errors="replace").strip()))
                    break
                want_v = expected(want) if want else None
                is_error = isinstance(want_v, dict) and "error" in want_v
                if is_error and r.returncode == 0:
                    failures.append("%s: expected an HTTP error, exit 0: %s" % (where, text))
                elif not is_error and r.returncode != 0:
                    failures.append("%s: exit %d: %s\n%s%s" % (
                        where, r.returncode, text, out[-500:],
                        r.stderr.decode(errors="replace")[-500:]))
                elif want_v is not None:
                    try:
                        got = json.loads(out)
                    except ValueError:
                        got = out
                    if got != want_v:
                        failures.append("%s: printed %s, the doc says %s" % (
                            where, out.strip()[:300], want))
                ran += 1
            env.stop(ndaemons)
    finally:
        env.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print("%s: %d commands run" % (rel, ran))
    return ran


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--srcdir", required=True)
    p.add_argument("--builddir", required=True)
    p.add_argument("--tfetchd", required=True)
    p.add_argument("--cli", required=True)
    p.add_argument("files", nargs="+")
    a = p.parse_args()
    for k in ("srcdir", "builddir", "tfetchd", "cli"):        # the blocks run elsewhere
        setattr(a, k, os.path.abspath(getattr(a, k)))
    failures = []
    total = 0
    for f in a.files:
        total += run_file(a, f, failures)
    for f in failures:
        print("FAIL: " + f)
    if not total:
        print("FAIL: no block was run")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
