"""pyclient.py - the Python package against a hostile server (tests/hostile/run.py): one
Client.get of URL under a transport policy, stall limit and body cap, and one line saying
what came of it (a GET that succeeds is made once more, as driver.c does, so the second
may take the shm path the first one's upgrade opened), like driver.c: "TF_OK transport=T fallback=F" or "TF_Exxx error=M
fallback=F"; exit 0 on success, 1 on a tfetch.Error. Anything else (a signal, another
exception) is the defect run.py looks for.

    python3 pyclient.py URL auto|http|ucx STALL_MS MAX_BODY
"""
import sys

import tfetch


def main():
    url, policy, stall_ms, max_body = sys.argv[1:5]
    c = tfetch.Client(transport=policy, stall_time=int(stall_ms) / 1000.0,
                      max_body=None if max_body == "-" else int(max_body))
    try:
        c.get(url)
        c.get(url)
        r = c.last
        print("TF_OK transport=%s fallback=%s" % (r.transport, r.fallback))
        return 0
    except tfetch.Error as e:
        r = c.last
        print("%s error=%s fallback=%s" % (e.name, e.message, r.fallback if r else ""))
        return 1
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
