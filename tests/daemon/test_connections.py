#!/usr/bin/python3
"""Connection slots against a real daemon on loopback: idle handshakes and
half-open sockets cannot lock a real client out, one address cannot take
every slot with connections that never show a token, one user's 64 idle
kept-alive connections do not lock another user of the same address out
(a user past max_connections_per_user loses its connection idle longest),
the heaviest user's idle connection makes room at max_connections, and a
new connection must send its whole first request within
first_request_timeout_s.

usage: test_connections.py TOPO_SCHEDULER_BIN
"""

import http.client
import socket
import ssl
import sys
import time

from harness import Daemon, check, run, serving

# Deadlines far beyond the test's length: whatever frees a slot here is
# eviction, not a timeout.
EVICTION = """max_connections = 50
first_request_timeout_s = 600
idle_timeout_s = 600
"""
PER_PEER = """max_connections = 500
max_unauthenticated_per_peer = 64
first_request_timeout_s = 600
"""
PER_USER = """max_connections = 500
max_unauthenticated_per_peer = 64
max_connections_per_user = 64
first_request_timeout_s = 600
idle_timeout_s = 600
"""
HEAVIEST = """max_connections = 20
max_connections_per_user = 100
first_request_timeout_s = 600
idle_timeout_s = 600
"""
SLOW = """first_request_timeout_s = 2
idle_timeout_s = 600
request_timeout_s = 600
"""


def tcp_connect(d, source="127.0.0.1"):
    return socket.create_connection(("127.0.0.1", d.port), timeout=10, source_address=(source, 0))


def tls_connect(d, source="127.0.0.1"):
    return d.ctx.wrap_socket(tcp_connect(d, source), server_hostname="127.0.0.1")


def https(d, source="127.0.0.1"):
    return http.client.HTTPSConnection("127.0.0.1", d.port, context=d.ctx, timeout=10,
                                       source_address=(source, 0))


def get(conn, path, token):
    conn.request("GET", path, headers={"Authorization": "Bearer " + token})
    resp = conn.getresponse()
    return resp.status, resp.read().decode(errors="replace")


def closed_by_server(conn, within):
    """True once the server has closed conn (end of stream or reset)."""
    conn.settimeout(within)
    try:
        return conn.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True
    except socket.timeout:
        return False


def counter(metrics_text, name, reason):
    prefix = '%s{reason="%s"} ' % (name, reason)
    for line in metrics_text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    raise AssertionError("no %s in /metrics" % prefix.strip())


def refused(d, source="127.0.0.1"):
    """True when a new connection is closed before its TLS handshake completes."""
    try:
        conn = tls_connect(d, source)
    except (ssl.SSLError, ConnectionResetError, OSError):
        return True
    try:
        return closed_by_server(conn, 5)
    finally:
        conn.close()


def eviction(binary):
    d = Daemon(binary, config=EVICTION).start()
    with serving(d):
        token = d.admin_token
        # Clients that proved their token keep their kept-alive connections.
        established = [https(d) for _ in range(5)]
        for c in established:
            check(get(c, "/v1/whoami", token)[0] == 200, "whoami")
        sockets = [c.sock for c in established]

        # 60 idle TLS connections (handshake done, no request) and 20
        # half-open TCP connections: more than max_connections.
        idle = [tls_connect(d) for _ in range(60)]
        half_open = [tcp_connect(d) for _ in range(20)]

        # A real client still gets in, and gets its answer.
        c = https(d)
        status, body = get(c, "/v1/whoami", token)
        check(status == 200 and "admin" in body, "a real client was locked out: %s %s" % (status, body))
        c.close()

        # The oldest idle connections were the ones closed to make room.
        check(closed_by_server(idle[0], 10), "the oldest idle connection is still open")
        # Established clients were never cut: the same sockets answer again.
        for conn, sock in zip(established, sockets):
            check(get(conn, "/v1/whoami", token)[0] == 200 and conn.sock is sock,
                  "an authenticated connection was closed to make room")
        status, metrics = get(established[0], "/metrics", token)
        check(status == 200, "metrics: %s" % status)
        # 45 slots (90 % of 50) less the 5 established ones leave 40 for
        # the 80 unauthenticated connections: at least 40 were evicted.
        evicted = counter(metrics, "topo_api_connections_closed_total", "evicted_unauthenticated")
        check(evicted >= 40, "evicted %s unauthenticated connections, expected at least 40" % evicted)
        check(counter(metrics, "topo_api_connections_refused_total", "max_connections") == 0,
              "no one should have been refused")
        for s in idle + half_open:
            s.close()
        for conn in established:
            conn.close()


def per_peer_cap(binary):
    d = Daemon(binary, config=PER_PEER).start()
    with serving(d):
        held = [tls_connect(d) for _ in range(64)]
        check(refused(d), "the 65th connection from 127.0.0.1 was served")
        # Another address of the loopback range is another peer.
        other = https(d, source="127.0.0.2")
        status, _ = get(other, "/healthz", d.admin_token)
        check(status == 200, "127.0.0.2 was refused: %s" % status)
        status, metrics = get(other, "/metrics", d.admin_token)
        check(status == 200, "metrics: %s" % status)
        check(counter(metrics, "topo_api_connections_refused_total",
                      "max_unauthenticated_per_peer") >= 1,
              "the refusal is not counted")
        other.close()
        # A slot freed is a slot for the same address again.
        held.pop().close()
        served = False
        for _ in range(50):  # bounded: the server notices the close quickly
            if not refused(d):
                served = True
                break
            time.sleep(0.1)
        check(served, "127.0.0.1 was not served again after one of its connections closed")
        for s in held:
            s.close()


def user_token(d, name):
    d.api("POST", "/v1/users", {"name": name, "tenant": "default", "role": "user"}, expect=201)
    return d.api("POST", "/v1/tokens", {"user": name}, expect=201)["token"]


def kept_alive(d, token, n):
    """n kept-alive connections, each of which answered one request with token."""
    conns = [https(d) for _ in range(n)]
    for c in conns:
        check(get(c, "/v1/whoami", token)[0] == 200, "whoami")
    return conns


def per_user_cap(binary):
    d = Daemon(binary, config=PER_USER).start()
    with serving(d):
        alice, bob = user_token(d, "alice"), user_token(d, "bob")
        # alice holds 64 idle kept-alive connections from 127.0.0.1 (a login node) ...
        held = kept_alive(d, alice, 64)
        # ... and bob, from the same address, still gets in and keeps his.
        b = https(d)
        status, body = get(b, "/v1/whoami", bob)
        check(status == 200 and "bob" in body, "bob was locked out: %s %s" % (status, body))
        sock = b.sock
        check(get(b, "/v1/whoami", bob)[0] == 200 and b.sock is sock, "bob's connection was cut")
        # alice's 65th: answered; her connection idle longest is closed for it.
        extra = https(d)
        check(get(extra, "/v1/whoami", alice)[0] == 200, "alice's 65th connection")
        check(closed_by_server(held[0].sock, 10), "alice's oldest idle connection is still open")
        for c in held[1:4] + [extra]:
            s_before = c.sock
            check(get(c, "/v1/whoami", alice)[0] == 200 and c.sock is s_before,
                  "another of alice's connections was cut")
        status, metrics = get(b, "/metrics", d.admin_token)
        check(counter(metrics, "topo_api_connections_closed_total", "max_connections_per_user") >= 1,
              "the per-user cap's closes are not counted")
        check(counter(metrics, "topo_api_connections_refused_total",
                      "max_unauthenticated_per_peer") == 0, "no one should have been refused")
        for c in held + [b, extra]:
            c.close()


def heaviest_user(binary):
    d = Daemon(binary, config=HEAVIEST).start()
    with serving(d):
        alice, bob, carol = (user_token(d, u) for u in ("alice", "bob", "carol"))
        a = kept_alive(d, alice, 12)
        b = kept_alive(d, bob, 6)
        c = kept_alive(d, carol, 2)  # 20 of 20 slots
        # One more: the heaviest user (alice) gives up her connection idle longest.
        late = https(d)
        check(get(late, "/v1/whoami", carol)[0] == 200, "a newcomer at max_connections")
        check(closed_by_server(a[0].sock, 10), "alice's idle-longest connection is still open")
        for conn in b + c:
            s_before = conn.sock
            check(get(conn, "/v1/whoami", bob if conn in b else carol)[0] == 200 and
                  conn.sock is s_before, "a lighter user's connection was cut")
        status, metrics = get(late, "/metrics", d.admin_token)
        check(counter(metrics, "topo_api_connections_closed_total", "evicted_heaviest_user") >= 1,
              "the heaviest user's eviction is not counted")
        for conn in a + b + c + [late]:
            conn.close()


def slow_first_request(binary):
    d = Daemon(binary, config=SLOW).start()
    with serving(d):
        token = d.admin_token
        # A byte a second: cut after first_request_timeout_s, long before its
        # request is complete (idle and request timeouts are 600 s here).
        request = b"GET /v1/whoami HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + \
            token.encode() + b"\r\n\r\n"
        slow = tls_connect(d)
        cut = False
        for i in range(len(request) - 1):  # never the last byte
            try:
                slow.sendall(request[i:i + 1])
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                cut = True
                break
            if closed_by_server(slow, 1):
                cut = True
                break
        check(cut, "a client sending a byte a second kept its connection")
        slow.close()
        # Silence after the handshake, and no handshake at all: cut too.
        silent = tls_connect(d)
        half_open = tcp_connect(d)
        check(closed_by_server(silent, 15), "a silent TLS client kept its connection")
        check(closed_by_server(half_open, 15), "a half-open TCP connection was kept")
        # The deadline is for the first request only: a kept-alive client
        # may pause longer between requests.
        c = https(d)
        check(get(c, "/v1/whoami", token)[0] == 200, "whoami")
        sock = c.sock
        time.sleep(3)
        check(get(c, "/v1/whoami", token)[0] == 200 and c.sock is sock,
              "a kept-alive client was cut by the first-request deadline")
        status, metrics = get(c, "/metrics", token)
        check(counter(metrics, "topo_api_connections_closed_total", "first_request_timeout") >= 3,
              "first-request timeouts are not counted")
        check(counter(metrics, "topo_api_connections_closed_total", "idle_timeout") == 0,
              "cut by idle_timeout_s instead")
        c.close()


def main():
    binary = sys.argv[1]
    eviction(binary)
    per_peer_cap(binary)
    per_user_cap(binary)
    heaviest_user(binary)
    slow_first_request(binary)
    print("ok: idle and half-open connections evicted for a real client, per-address cap on "
          "unauthenticated connections, per-user cap, the heaviest user evicted first, "
          "first-request deadline")


if __name__ == "__main__":
    run(main)
