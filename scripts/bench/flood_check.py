#!/usr/bin/env python3
"""Issue 45's floods against a running `nanovllm serve`, while a small request is timed (the "done when": a small
/v1/completions answers within 2 s on a GPU, 10 s on the CPU backend, under each flood).

  python3 scripts/bench/flood_check.py PORT [--limit 2.0] [--long-len 16000]

Floods, each held while five small requests (8 prompt ids, max_tokens 2) are timed one after another:
  wide-json     4 bodies of 200,000 keys in "metadata" (~2.3 MB each), sent at once, repeatedly
  header-only   16 connections that send a POST header announcing 8 MiB and then nothing
  slow-readers  16 connections that pipeline 64 `GET /metrics` and never read
  long-prefill  one request of 8 prompts x --long-len token ids (max_tokens 1), streaming
Prints one line per flood: the small requests' worst and median seconds, and exits 1 if a worst exceeds --limit.
"""
import argparse
import http.client
import json
import socket
import statistics
import sys
import threading
import time


def small_request(port):
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps({"prompt": list(range(1, 9)), "max_tokens": 2}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"small request got {r.status}")
    return time.monotonic() - t0


def raw_send(port, data, keep):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        s.sendall(data)
    except OSError:
        pass
    keep.append(s)


def wide_json(port, stop, keep):
    body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 1,
                       "metadata": {f"k{i}": i for i in range(200_000)}}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    while not stop.is_set():
        threads = [threading.Thread(target=raw_send, args=(port, head + body, keep)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(0.2)


def header_only(port, stop, keep):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8388608\r\n\r\n"
    for _ in range(16):
        raw_send(port, head, keep)
    stop.wait()


def slow_readers(port, stop, keep):
    req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 64
    for _ in range(16):
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        try:
            s.send(req)
        except OSError:
            pass
        keep.append(s)
    stop.wait()


def long_prefill(port, stop, keep, long_len, ends):
    prompts = [[100 + (p * 7919 + i * 31) % 400 for i in range(long_len)] for p in range(8)]
    body = json.dumps({"prompt": prompts, "max_tokens": 1, "ignore_eos": True, "stream": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    keep.append(s)
    s.sendall(head + body)
    got = b""
    while b"data: [DONE]" not in got:  # the long request's end (all 8 prompts prefilled)
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    ends.append(time.monotonic())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--limit", type=float, default=2.0)
    ap.add_argument("--long-len", type=int, default=16000)
    a = ap.parse_args()
    small_request(a.port)  # warm up
    failed = False
    for name, flood in [("wide-json", wide_json), ("header-only", header_only), ("slow-readers", slow_readers),
                        ("long-prefill", lambda port, stop, keep: long_prefill(port, stop, keep, a.long_len, ends))]:
        stop, keep, ends = threading.Event(), [], []
        t = threading.Thread(target=flood, args=(a.port, stop, keep), daemon=True)
        t.start()
        time.sleep(0.2 if name == "long-prefill" else 1.0)  # the flood is on (the long prefill: just started)
        times = []
        for _ in range(5):
            times.append(small_request(a.port))
            if name == "long-prefill" and len(times) == 1:
                first_small_done = time.monotonic()
        stop.set()
        t.join(timeout=120)
        note = ""
        if name == "long-prefill":
            note = (f"; the long request ended {ends[0] - first_small_done:+.3f} s after the first small one"
                    if ends else "; the long request did not end")
        for s in keep:
            s.close()
        worst = max(times)
        failed |= worst > a.limit
        print(f"{name:13s} small request worst {worst:.3f} s, median {statistics.median(times):.3f} s "
              f"({'ok' if worst <= a.limit else 'OVER ' + str(a.limit)}){note}", flush=True)
        time.sleep(1.0)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
