#!/usr/bin/python3
"""Limits: connections, request rate and deadlines, against a real daemon
with tight settings. Slow or idle clients are cut off and never stall the
others; past the rate limit a user gets 429 with Retry-After.

usage: test_limits.py TOPO_SCHEDULER_BIN
"""

import socket
import ssl
import sys
import time

from harness import Daemon, check, run, serving

CONFIG = """max_connections = 6
request_timeout_s = 2
idle_timeout_s = 2
rate_limit_per_second = 5
"""


def tls_connect(d):
    sock = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    return d.ctx.wrap_socket(sock, server_hostname="127.0.0.1")


def closed_by_server(conn, within):
    conn.settimeout(within)
    try:
        return conn.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True
    except socket.timeout:
        return False


def main():
    d = Daemon(sys.argv[1], config=CONFIG).start()
    with serving(d):
        # A slow client (half a request) does not stall anyone, and is cut
        # off after request_timeout_s.
        slow = tls_connect(d)
        slow.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"spec\"")
        t0 = time.time()
        status, _ = d.request("GET", "/healthz")
        check(status == 200 and time.time() - t0 < 1.0, "a slow client stalled the daemon")
        check(closed_by_server(slow, 6), "a half-sent request was not cut off")
        # Idle keep-alive connections are closed after idle_timeout_s.
        idle = tls_connect(d)
        check(closed_by_server(idle, 6), "an idle connection was kept past idle_timeout_s")

        # The connection limit: past it, new connections are closed at once;
        # once the others go, new ones are served again.
        held = [tls_connect(d) for _ in range(6)]
        extra = socket.create_connection(("127.0.0.1", d.port), timeout=5)
        refused = False
        try:
            d.ctx.wrap_socket(extra, server_hostname="127.0.0.1").recv(1)
            refused = True
        except (ssl.SSLError, ConnectionResetError, OSError):
            refused = True
        check(refused, "a connection past max_connections was served")
        for c in held:
            c.close()
        time.sleep(0.3)
        status, _ = d.request("GET", "/healthz")
        check(status == 200, "not served again after connections closed")

        # The rate limit: bursts of twice the rate, then 429 with Retry-After.
        token = d.admin_token
        statuses = []
        for _ in range(30):
            status, out = d.request("GET", "/v1/whoami", token=token)
            statuses.append(status)
        check(200 in statuses and 429 in statuses, "rate limit: %s" % statuses)
        first_429 = statuses.index(429)
        check(first_429 >= 8, "the burst should allow about 10 requests, got %d" % first_429)
        time.sleep(1.5)
        status, _ = d.request("GET", "/v1/whoami", token=token)
        check(status == 200, "the bucket refills")
        print("ok: slow and idle clients cut off, connection limit and rate limit enforced")


if __name__ == "__main__":
    run(main)
