#!/usr/bin/env python3
"""Decodes a Connect server stream's body (docs/e2b-wire.md §3.4) for the E2B tests: each
envelope on a line, a message as its JSON, the end-stream as "END <json>". Fails (exit 1)
on a bad envelope, compressed flags, bytes after the end-stream, or no end-stream at all
(unless --partial: a stream still being written, its incomplete tail ignored).
With --data KEY, prints instead the base64 payloads of the data events under KEY
(stdout, stderr, pty) joined and decoded, as raw bytes.
Usage: connect_decode.py [--partial] [--data KEY] FILE"""
import base64
import json
import sys


def main():
    args = sys.argv[1:]
    partial = "--partial" in args
    key = None
    if "--data" in args:
        key = args[args.index("--data") + 1]
    path = args[-1]
    b = open(path, "rb").read()
    i = 0
    out = []
    raw = b""
    ended = False
    while i < len(b):
        if ended:
            sys.exit("bytes after the end-stream envelope")
        if len(b) - i < 5:
            if partial:
                break
            sys.exit("a truncated envelope header")
        flags, n = b[i], int.from_bytes(b[i + 1:i + 5], "big")
        if len(b) - i - 5 < n:
            if partial:
                break
            sys.exit("a truncated envelope")
        msg = b[i + 5:i + 5 + n]
        i += 5 + n
        j = json.loads(msg)
        if flags == 2:
            ended = True
            out.append("END " + json.dumps(j, separators=(",", ":")))
        elif flags == 0:
            out.append(json.dumps(j, separators=(",", ":")))
            d = (j.get("event") or {}).get("data") or {}
            if key and key in d:
                raw += base64.b64decode(d[key])
        else:
            sys.exit("envelope flags %d" % flags)
    if not ended and not partial:
        sys.exit("no end-stream envelope")
    if key:
        sys.stdout.buffer.write(raw)
    else:
        print("\n".join(out))


main()
