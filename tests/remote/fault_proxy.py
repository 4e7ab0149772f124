#!/usr/bin/python3
"""fault_proxy.py: an HTTP proxy in front of the tests' nginx that breaks
the block reads of a packed dataset on purpose (tests/integration/
check_remote.c, issue 24).

    fault_proxy.py UPSTREAM PORT_FILE

UPSTREAM is nginx's base URL (http://127.0.0.1:PORT). The proxy listens on
a free loopback port and writes it to PORT_FILE once it accepts. A request
for /MODE/REST is forwarded to UPSTREAM/REST with its method and Range.
What is not a block read (HEAD, the manifest, a shard's header, trailer
and index) always passes through, so a dataset opens; a block read is
then broken as MODE says:

    ok       passed through
    503      answered 503
    reset    the connection closed with no answer
    short    a 206 whose body stops halfway (Content-Length says more)
    changed  one byte of the body flipped (the server's bytes changed)
    slow     nothing sent for 30 s (the client's timeout fires first)
    flaky    every other request for a range gets 503, then it passes
    delay    passed through 10 ms late (a round trip to a remote store,
             for bench/remote.sh)

Each block request is counted per mode; GET /_count/MODE answers the
count, GET /_max/MODE the most block requests of that mode it was
answering at once. Runs until killed.
"""
import http.client
import http.server
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

UPSTREAM = urllib.parse.urlsplit(sys.argv[1])
COUNTS = {}
SEEN = {}
ACTIVE = {}
MOST = {}
LOCK = threading.Lock()
INDEX = {}  # upstream path -> (size, index_offset)


def upstream(method, path, headers):
    c = http.client.HTTPConnection(UPSTREAM.hostname, UPSTREAM.port, timeout=10)
    c.request(method, path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r, body


def layout(path):
    """The shard's size and index offset (its trailer), once per file."""
    with LOCK:
        if path in INDEX:
            return INDEX[path]
    r, _ = upstream("HEAD", path, {})
    size = int(r.getheader("Content-Length"))
    r, t = upstream("GET", path, {"Range": "bytes=%d-%d" % (size - 64, size - 1)})
    off = struct.unpack("<Q", t[:8])[0] if len(t) == 64 and t[56:64] == b"FEEDEND1" else 0
    with LOCK:
        INDEX[path] = (size, off)
    return size, off


def is_block(path, rng):
    if not rng or not path.endswith(".fsh") or not rng.startswith("bytes="):
        return False
    start, _, end = rng[6:].partition("-")
    start, end = int(start), int(end)
    size, off = layout(path)
    return start >= 64 and end < off


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go in separate writes: without this, Nagle holds
    # the body until the client's delayed ACK (40 ms a request)
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def reply(self, r, body, send_body=True):
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "keep-alive", "transfer-encoding"):
                self.send_header(k, v)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def do_HEAD(self):
        self.forward("HEAD")

    def do_GET(self):
        if self.path.startswith("/_count/") or self.path.startswith("/_max/"):
            what, mode = self.path[1:].split("/", 1)
            with LOCK:
                n = (COUNTS if what == "_count" else MOST).get(mode, 0)
            body = b"%d\n" % n
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.forward("GET")

    def forward(self, method):
        _, mode, rest = self.path.split("/", 2)
        block = method == "GET" and is_block("/" + rest, self.headers.get("Range"))
        if not block:
            return self.serve(method, mode, rest, False)
        with LOCK:
            ACTIVE[mode] = ACTIVE.get(mode, 0) + 1
            MOST[mode] = max(MOST.get(mode, 0), ACTIVE[mode])
        try:
            self.serve(method, mode, rest, True)
        finally:
            with LOCK:
                ACTIVE[mode] -= 1

    def serve(self, method, mode, rest, block):
        path = "/" + rest
        rng = self.headers.get("Range")
        headers = {"Range": rng} if rng else {}
        if block:
            with LOCK:
                COUNTS[mode] = COUNTS.get(mode, 0) + 1
                key = (mode, path, rng)
                SEEN[key] = SEEN.get(key, 0) + 1
                nth = SEEN[key]
        if block and (mode == "503" or (mode == "flaky" and nth % 2 == 1)):
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if block and mode == "reset":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if block and mode == "slow":
            time.sleep(30)
            self.close_connection = True
            return
        if block and mode == "delay":
            time.sleep(0.010)
        r, body = upstream(method, path, headers)
        if block and mode == "short":
            self.send_response(r.status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        if block and mode == "changed" and body:
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        self.reply(r, body, method == "GET")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # the default 5 drops parallel connects (1 s SYN retry)


def main():
    srv = Server(("127.0.0.1", 0), Handler)
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    import os
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    srv.serve_forever()


if __name__ == "__main__":
    main()
