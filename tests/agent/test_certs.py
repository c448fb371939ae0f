#!/usr/bin/python3
"""Node certificates end to end: a real topo-scheduler, real topo-agent
processes, real mutual TLS on loopback.

  - `ca issue --days 1` gives notAfter = now + 1 day (`openssl x509 -enddate`),
    no --days gives agent_cert_days from --config, and the index records the
    serial `openssl x509 -serial` prints;
  - the agent with the 1-day certificate and --cert-warn-days 2 logs the
    expiry warning at start, the one with a 90-day certificate does not;
  - both nodes come up; `ca revoke --node n0` closes n0's open connection
    (no restart), the node goes down, every reconnect is refused at the TLS
    handshake (a `certificate revoked` alert; logged by the daemon, counted in
    /metrics) while n1 stays up;
  - after a daemon restart the revoked certificate is still refused;
  - `ca renew --node n0` gives a certificate that connects and brings n0 up;
  - `ca renew --node n1 --revoke-old` closes n1's session on the old
    certificate, which is refused from then on, and the new one connects.

usage: test_certs.py TOPO_SCHEDULER_BIN TOPO_AGENT_BIN TOPO_BIN
Standard library only (/usr/bin/python3), plus the openssl command.
"""

import calendar
import os
import socket
import ssl
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
from harness import Daemon, Failure, check, run  # noqa: E402
from agent_client import AgentConnection  # noqa: E402
from agents import Agent, agent_cluster, nodes, setup, wait_for  # noqa: E402


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ca(d, *args):
    """`topo-scheduler --state-dir STATE ca ARGS`: its stdout; a failure raises."""
    p = subprocess.run([d.binary, "--state-dir", d.state_dir, "ca"] + list(args),
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise Failure("ca %s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
    return p.stdout


def openssl_x509(cert, what):
    """`openssl x509 -noout -enddate|-serial` -> the value after '='."""
    out = subprocess.run(["openssl", "x509", "-noout", what, "-in", cert],
                         capture_output=True, text=True, check=True).stdout.strip()
    return out.split("=", 1)[1]


def not_after(cert):
    # "Jan  2 03:04:05 2026 GMT"
    return calendar.timegm(time.strptime(openssl_x509(cert, "-enddate"), "%b %d %H:%M:%S %Y GMT"))


def probe(d, port, cert, key):
    """A TLS + WebSocket handshake with cert on the agents' port: "accepted",
    or the error the daemon's alert gave. Sends nothing else: no registration."""
    try:
        c = AgentConnection(port, os.path.join(d.state_dir, "ca.pem"), cert, key, timeout=5)
    except (ssl.SSLError, ConnectionError, OSError) as e:
        return str(e)
    c.close()
    return "accepted"


def metric(d, name):
    status, text = d.request("GET", "/metrics", token=d.admin_token)
    check(status == 200, "/metrics: %s" % status)
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise Failure("%s not in /metrics:\n%s" % (name, text[-2000:]))


def test(d, agent_bin, work, agents, port):
    setup(d, work, [])  # the topology; the certificates come below
    out = os.path.join(work, "certs")

    # ---- lifetime and the index
    t0 = time.time()
    ca(d, "issue", "--node", "n0", "--out", out, "--days", "1")
    n0_cert, n0_key = os.path.join(out, "n0.pem"), os.path.join(out, "n0-key.pem")
    end = not_after(n0_cert)
    check(t0 - 5 <= end - 86400 <= time.time() + 5,
          "--days 1: notAfter %s is not a day from now" % openssl_x509(n0_cert, "-enddate"))
    conf = os.path.join(work, "certs.conf")
    with open(conf, "w") as f:
        f.write("# a lifetime of its own\nagent_cert_days = 7\n")
    p = subprocess.run([d.binary, "--state-dir", d.state_dir, "--config", conf, "ca", "issue",
                        "--node", "n9", "--out", out], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "issue with --config: %s %s" % (p.stdout, p.stderr))
    days7 = not_after(os.path.join(out, "n9.pem")) - time.time()
    check(abs(days7 - 7 * 86400) < 60, "agent_cert_days = 7 gave %.0f s" % days7)
    ca(d, "issue", "--node", "n1", "--out", out)  # the default: 90 days
    n1_cert, n1_key = os.path.join(out, "n1.pem"), os.path.join(out, "n1-key.pem")
    days90 = not_after(n1_cert) - time.time()
    check(abs(days90 - 90 * 86400) < 60, "the default lifetime is 90 days, got %.0f s" % days90)
    index = os.path.join(d.state_dir, "pki", "issued.tsv")
    check(stat.S_IMODE(os.stat(index).st_mode) == 0o600, "issued.tsv is 0600")
    with open(index) as f:
        rows = [line.split("\t") for line in f.read().splitlines() if not line.startswith("#")]
    serial0 = openssl_x509(n0_cert, "-serial")
    check([r[0] for r in rows if r[1] == "n0"] == [serial0],
          "issued.tsv records n0's serial %s: %s" % (serial0, rows))
    check(int(rows[0][3]) == end, "issued.tsv records notAfter: %s vs %s" % (rows[0], end))
    p = subprocess.run([d.binary, "--state-dir", d.state_dir, "ca", "issue", "--node", "n0",
                        "--out", out, "--days", "0"], capture_output=True, text=True)
    check(p.returncode != 0 and "--days" in p.stderr, "--days 0 is refused: %r" % p.stderr)

    # ---- the agents: the 1-day certificate warns, the 90-day one does not
    agents["n0"] = Agent(agent_bin, d, work, "n0", n0_cert, n0_key, "true",
                         extra=["--cert-warn-days", "2"]).start()
    agents["n1"] = Agent(agent_bin, d, work, "n1", n1_cert, n1_key, "true").start()
    wait_for(lambda: all(nodes(d)[n]["state"] == "up" for n in ("n0", "n1")), 20, "n0 and n1 up")
    log0 = agents["n0"].log()
    check("warning: certificate " + n0_cert + " expires in" in log0 and
          "(--cert-warn-days 2)" in log0 and "topo-scheduler ca renew --node n0" in log0,
          "n0's agent warns of the expiry:\n" + log0)
    check("warning: certificate" not in agents["n1"].log(), "n1's agent has nothing to warn of")
    check(probe(d, port, n0_cert, n0_key) == "accepted", "n0's certificate is good before revoking")

    # ---- revoke n0 under the running daemon
    before = len(agents["n0"].log())
    said = ca(d, "revoke", "--node", "n0")
    check(("revoked 1 certificate(s) of node n0: " + serial0) in said, "revoke says what: " + said)
    crl = os.path.join(d.state_dir, "crl.pem")
    listed = subprocess.run(["openssl", "crl", "-in", crl, "-noout", "-text", "-CAfile",
                             os.path.join(d.state_dir, "ca.pem")],
                            capture_output=True, text=True)
    check(listed.returncode == 0 and serial0 in listed.stdout.replace(":", "").upper(),
          "crl.pem is signed by the CA and lists %s:\n%s%s" % (serial0, listed.stdout, listed.stderr))
    wait_for(lambda: nodes(d)["n0"]["state"] == "down", 10, "n0 to go down after the revocation")
    wait_for(lambda: "agent n0: closing the connection: certificate serial " + serial0 in d.log(),
             5, "the daemon to close n0's session")
    wait_for(lambda: "certificate revoked" in agents["n0"].log()[before:], 15,
             "the agent to see its reconnects refused with a `certificate revoked` alert")
    refused = probe(d, port, n0_cert, n0_key)
    check("CERTIFICATE_REVOKED" in refused.upper(), "n0's certificate is refused at the TLS "
          "handshake: %s" % refused)
    check("agent n0: TLS handshake refused: certificate serial %s of node n0 was revoked" % serial0
          in d.log(), "the daemon logs the refusal with node and reason:\n" + d.log())
    check(metric(d, 'topo_agent_certificates_revoked_total{stage="handshake"}') >= 2,
          "refused handshakes are counted")
    check(metric(d, 'topo_agent_certificates_revoked_total{stage="connected"}') == 1,
          "the closed session is counted")
    check(nodes(d)["n1"]["state"] == "up", "n1 is untouched")
    check(probe(d, port, n1_cert, n1_key) == "accepted", "n1's certificate still connects")
    agents["n0"].kill9()

    # ---- a restart keeps the revocation
    d.stop()
    restarted = len(d.log_all())
    d.start()
    refused = probe(d, port, n0_cert, n0_key)
    check("CERTIFICATE_REVOKED" in refused.upper(), "still refused after a restart: %s" % refused)
    # The store remembers n1 as up, so wait for its agent's new session
    # itself: --revoke-old below must find it connected to cut it off.
    wait_for(lambda: "agent n1 registered" in d.log_all()[restarted:], 20,
             "n1's agent to register with the restarted daemon")
    wait_for(lambda: nodes(d)["n1"]["state"] == "up", 20, "n1 back up after the restart")

    # ---- renew: a fresh certificate connects again
    said = ca(d, "renew", "--node", "n0", "--out", os.path.join(work, "renewed"))
    new0 = os.path.join(work, "renewed", "n0.pem"), os.path.join(work, "renewed", "n0-key.pem")
    check("node n0 had 1 earlier certificate(s)" in said, "renew says what it found: " + said)
    check(openssl_x509(new0[0], "-serial") != serial0, "a new serial")
    check(probe(d, port, *new0) == "accepted", "the renewed certificate is accepted")
    mark = len(agents["n0"].log())  # the new agent appends to the same log
    agents["n0"] = Agent(agent_bin, d, work, "n0", new0[0], new0[1], "true").start()
    wait_for(lambda: "registered;" in agents["n0"].log()[mark:], 20, "n0's new agent to register")
    wait_for(lambda: nodes(d)["n0"]["state"] == "up", 20, "n0 up again on its renewed certificate")

    # ---- renew --revoke-old: n1's running agent on the old certificate is cut off
    serial1 = openssl_x509(n1_cert, "-serial")
    said = ca(d, "renew", "--node", "n1", "--out", os.path.join(work, "renewed"), "--revoke-old")
    check("revoked 1 of them now" in said, "renew --revoke-old says so: " + said)
    wait_for(lambda: "agent n1: closing the connection: certificate serial " + serial1 in d.log_all(),
             5, "the daemon to close n1's old session")
    check("CERTIFICATE_REVOKED" in probe(d, port, n1_cert, n1_key).upper(), "n1's old certificate is refused")
    agents["n1"].kill9()
    new1 = os.path.join(work, "renewed", "n1.pem"), os.path.join(work, "renewed", "n1-key.pem")
    mark = len(agents["n1"].log())
    agents["n1"] = Agent(agent_bin, d, work, "n1", new1[0], new1[1], "true").start()
    wait_for(lambda: "registered;" in agents["n1"].log()[mark:], 20, "n1's new agent to register")
    wait_for(lambda: nodes(d)["n1"]["state"] == "up", 20, "n1 up on its renewed certificate")
    check(nodes(d)["n0"]["state"] == "up", "n0 stays up")
    for n, a in agents.items():
        check(a.terminate() == 0, "agent %s stops on SIGTERM" % n)
    print("ok: --days and agent_cert_days set notAfter, the index records each serial, the agent "
          "warns before expiry, a revocation closes the node's session and is refused at every "
          "handshake (also after a restart), renew connects again, --revoke-old cuts off the old one")


def main():
    sched_bin, agent_bin = sys.argv[1], sys.argv[2]
    port = free_port()  # fixed, so that agents find the restarted daemon
    config = "heartbeat_interval_ms = 200\nagent_listen = 127.0.0.1:%d\n" % port
    d = Daemon(sched_bin, config=config).start()
    with agent_cluster(d, "topo-certs-test-") as (work, agents):
        test(d, agent_bin, work, agents, port)


if __name__ == "__main__":
    run(main)
