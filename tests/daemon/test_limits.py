#!/usr/bin/python3
"""Limits: connections, request rate and deadlines, against a real daemon
with tight settings. Slow or idle clients are cut off and never stall the
others; past the rate limit a user gets 429 with Retry-After.

usage: test_limits.py TOPO_SCHEDULER_BIN
"""

import http.client
import socket
import ssl
import sys
import time

from harness import Daemon, check, run, serving

CONFIG = """max_connections = 6
request_timeout_s = 2
idle_timeout_s = 2
first_request_timeout_s = 2
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
        # A connection that never sends a request is closed after
        # first_request_timeout_s.
        silent = tls_connect(d)
        check(closed_by_server(silent, 6), "a silent connection was kept past first_request_timeout_s")
        # Idle keep-alive connections are closed after idle_timeout_s.
        idle = http.client.HTTPSConnection("127.0.0.1", d.port, context=d.ctx, timeout=10)
        idle.request("GET", "/healthz")
        check(idle.getresponse().read() == b"ok\n", "healthz")
        check(closed_by_server(idle.sock, 6), "an idle connection was kept past idle_timeout_s")
        idle.close()

        # The connection limit: with every slot held by one user's idle
        # kept-alive connections, a newcomer is served and that user's
        # connection idle longest is closed for it (docs/daemon.md,
        # Connections; with every slot busy the newcomer would be refused:
        # connection_table_test.cpp). Idle ones that never proved a token
        # would have been evicted first: test_connections.py.
        held = []
        for _ in range(6):
            c = http.client.HTTPSConnection("127.0.0.1", d.port, context=d.ctx, timeout=10)
            c.request("GET", "/v1/whoami", headers={"Authorization": "Bearer " + d.admin_token})
            resp = c.getresponse()
            resp.read()
            check(resp.status == 200, "whoami: %s" % resp.status)
            held.append(c)
        status, _ = d.request("GET", "/healthz", timeout=5)
        check(status == 200, "a connection past max_connections was refused: %s" % status)
        check(closed_by_server(held[0].sock, 1), "the idle-longest connection was kept")
        check(not any(closed_by_server(c.sock, 0.1) for c in held[1:]),
              "another authenticated connection was closed for the newcomer")
        for c in held:
            c.close()
        served = False
        for _ in range(50):  # bounded: the slots free as the server sees the closes
            try:
                served = d.request("GET", "/healthz", timeout=5)[0] == 200
            except (ssl.SSLError, ConnectionResetError, OSError):
                served = False
            if served:
                break
            time.sleep(0.1)
        check(served, "not served again after connections closed")
        # Let the rate limit's bucket refill after the six whoami requests.
        time.sleep(2.5)

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
        print("ok: slow, silent and idle clients cut off, connection limit (the heaviest user's "
              "idle connection makes room) and rate limit enforced")


if __name__ == "__main__":
    run(main)
