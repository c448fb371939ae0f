"""Leader election against real etcd members on loopback (docs/ha.md, ctest label `ha`).

    test_election.py HA_PROBE SCENARIO

HA_PROBE is scheduler/ha/tests/ha_probe.cpp: one contender (EtcdClient + Election) per process,
printing one JSON line per happening. Scenarios, each on a fresh 3-member TLS cluster:

  kill      two contenders: one wins, the other sees it; kill -9 the winner: the other wins
            within the TTL plus a margin, with a larger term
  resign    the winner revokes its lease: the other wins well before the TTL would have run out
  pause     SIGSTOP the winner past its TTL: the other wins; SIGCONT: the paused one reports
            the leadership lost at once (before touching etcd) and exits
  minority  one etcd member killed (the first endpoint each contender tries): the leader keeps
            its term past several TTLs, and a new election after it is killed still succeeds
  watch     a watcher of the key wakes when a contender wins it (also with the first member
            killed), and returns quiet when nothing changes
  majority  two members killed: the leader loses within its TTL, a campaign fails with an error
            naming the endpoints and the missing quorum; one member back: a campaign wins

Skips (77) where /usr/bin/etcd is missing. Standard library only.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from etcd_cluster import EtcdCluster, skip_without_etcd  # noqa: E402

TTL = 2
KEY = "/toposched/test/leader"
# The standby polls every TTL/6 and etcd expires leases on its own tick;
# leadership moves within TTL + this after a kill.
MARGIN_S = 2.0


class Probe:
    """One ha_probe process and the JSON lines it printed, read on a thread."""

    def __init__(self, binary, cluster, args, endpoints=None):
        base = ["--endpoints", ",".join(endpoints or cluster.endpoints), "--ca", cluster.ca,
                "--cert", cluster.client_cert, "--key", cluster.client_key, "--key-name", KEY,
                "--timeout-ms", "1000"]
        self.proc = subprocess.Popen([binary] + args[:1] + base + args[1:], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                self.lines.put({"event": "garbage", "text": line})
        self.lines.put(None)

    def next(self, timeout):
        """The next line (None when the process ended), or an AssertionError at timeout."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"ha_probe printed nothing within {timeout} s") from None

    def expect(self, event, timeout):
        line = self.next(timeout)
        assert line is not None and line.get("event") == event, f"expected {event}, got {line}"
        return line

    def expect_after_held(self, event, timeout):
        """Like expect, letting "held" lines pass before it."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.next(max(0.01, deadline - time.monotonic()))
            if line is not None and line.get("event") == "held":
                continue
            assert line is not None and line.get("event") == event, f"expected {event}, got {line}"
            return line

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout):
        return self.proc.wait(timeout=timeout)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def observe(binary, cluster):
    r = subprocess.run([binary, "observe", "--endpoints", ",".join(cluster.endpoints), "--ca",
                        cluster.ca, "--cert", cluster.client_cert, "--key", cluster.client_key,
                        "--key-name", KEY], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def campaign(binary, cluster, name, *extra, endpoints=None):
    return Probe(binary, cluster,
                 ["campaign", "--name", name, "--ttl", str(TTL), "--wait-s", "30", *extra],
                 endpoints)


def scenario_kill(binary, c, probes):
    a = campaign(binary, c, "a")
    probes.append(a)
    won_a = a.expect("won", 10)
    b = campaign(binary, c, "b")
    probes.append(b)
    held = b.expect("held", 10)
    assert held["holder"] == "a" and held["term"] == won_a["term"], held
    assert observe(binary, c) == {"holder": "a", "term": won_a["term"]}
    t0 = time.monotonic()
    a.kill()
    won_b = b.expect("won", TTL + MARGIN_S + 2)
    took = time.monotonic() - t0
    assert took <= TTL + MARGIN_S, f"b won {took:.2f} s after the kill (TTL {TTL} s)"
    assert won_b["term"] > won_a["term"], (won_a, won_b)
    assert observe(binary, c) == {"holder": "b", "term": won_b["term"]}
    print(f"failover after kill -9: {took:.2f} s (TTL {TTL} s)")


def scenario_resign(binary, c, probes):
    a = campaign(binary, c, "a", "--hold-s", "1", "--resign")
    probes.append(a)
    a.expect("won", 10)
    b = campaign(binary, c, "b")
    probes.append(b)
    b.expect("held", 10)
    a.expect("resigned", 10)
    t0 = time.monotonic()
    assert a.wait(5) == 0
    b.expect("won", TTL)
    took = time.monotonic() - t0
    # b polls every TTL/6; a revoked lease deletes the key at once.
    assert took < TTL * 0.75, f"b won {took:.2f} s after the resignation"
    print(f"handover after resign: {took:.2f} s")


def scenario_pause(binary, c, probes):
    a = campaign(binary, c, "a")
    probes.append(a)
    won_a = a.expect("won", 10)
    b = campaign(binary, c, "b")
    probes.append(b)
    b.expect("held", 10)
    a.kill(signal.SIGSTOP)
    won_b = b.expect("won", TTL + MARGIN_S + 2)
    assert won_b["term"] > won_a["term"]
    time.sleep(0.5)
    a.kill(signal.SIGCONT)
    lost = a.expect("lost", TTL)
    assert "no keepalive succeeded" in lost["reason"] or "held by 'b'" in lost["reason"], lost
    assert a.wait(5) == 4
    assert observe(binary, c) == {"holder": "b", "term": won_b["term"]}
    print(f"paused leader stepped down: {lost['reason']}")


def scenario_minority(binary, c, probes):
    a = campaign(binary, c, "a")
    probes.append(a)
    won_a = a.expect("won", 10)
    c.kill(0)  # every probe tries endpoint 0 first
    time.sleep(3 * TTL)
    assert a.proc.poll() is None, f"the leader exited: {a.next(1)}"
    assert a.lines.empty(), f"the leader reported {a.next(1)}"
    assert observe(binary, c) == {"holder": "a", "term": won_a["term"]}
    b = campaign(binary, c, "b")
    probes.append(b)
    b.expect("held", 10)
    a.kill()
    won_b = b.expect("won", TTL + MARGIN_S + 3)
    assert won_b["term"] > won_a["term"]
    print("one member of three down: the leader kept its term; a new election succeeded")


def scenario_majority(binary, c, probes):
    a = campaign(binary, c, "a")
    probes.append(a)
    a.expect("won", 10)
    c.kill(0)
    c.kill(1)
    # Keepalives cannot reach a quorum: within the TTL (plus one renewal's
    # timeouts) the leader knows it may no longer lead.
    lost = a.expect("lost", TTL + 4)
    assert "no keepalive succeeded" in lost["reason"], lost
    b = Probe(binary, c, ["campaign", "--name", "b", "--ttl", str(TTL), "--wait-s", "3"])
    probes.append(b)
    err = b.expect("error", 20)
    assert b.wait(5) == 2
    msg = err["message"]
    assert "no member answered" in msg and "quorum" in msg, msg
    for ep in c.endpoints:
        assert ep in msg, f"{ep} not named in: {msg}"
    print(f"no quorum: {msg}")
    c.restart(1)
    b2 = campaign(binary, c, "b")
    probes.append(b2)
    # The old leader's lease may outlive the outage (etcd extends leases on a
    # new raft leader): b wins once it expires.
    t0 = time.monotonic()
    b2.expect_after_held("won", 20 + TTL)
    print(f"quorum back: a campaign won after {time.monotonic() - t0:.2f} s")


def watch(binary, cluster, wait_s, endpoints=None):
    return Probe(binary, cluster, ["watch", "--wait-s", str(wait_s)], endpoints)


def scenario_watch(binary, c, probes):
    # A change of the key after the watcher read it wakes the watcher (long
    # before its 30 s); nothing changing lets it return quiet, not an error.
    w = watch(binary, c, 30)
    probes.append(w)
    w.expect("watching", 10)
    a = campaign(binary, c, "a")
    probes.append(a)
    a.expect("won", 10)
    w.expect("changed", 30)
    assert w.wait(5) == 0
    quiet = watch(binary, c, 1)
    probes.append(quiet)
    quiet.expect("watching", 10)
    quiet.expect("quiet", 10)
    assert quiet.wait(5) == 0
    # The first member gone: the watch is placed on the next, and still wakes.
    # Member 0 may have been the raft leader: until the other two elect one,
    # every member refuses reads ("leader changed", or no answer), which the
    # daemon's watch loop rides out by retrying and this one-shot probe would
    # report as an error. The election is not what this checks, so wait it out.
    c.kill(0)
    c.wait_healthy(timeout_s=10)
    w2 = watch(binary, c, 30)
    probes.append(w2)
    w2.expect("watching", 10)
    a.kill()
    a.wait(5)
    b = campaign(binary, c, "b")
    probes.append(b)
    b.expect_after_held("won", 10 + TTL)
    w2.expect("changed", 30)


SCENARIOS = {
    "watch": scenario_watch,
    "kill": scenario_kill,
    "resign": scenario_resign,
    "pause": scenario_pause,
    "minority": scenario_minority,
    "majority": scenario_majority,
}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in SCENARIOS:
        print(f"usage: {sys.argv[0]} HA_PROBE {{{','.join(SCENARIOS)}}}")
        return 2
    skip_without_etcd()
    binary, name = sys.argv[1], sys.argv[2]
    probes = []
    with EtcdCluster(3) as c:
        try:
            SCENARIOS[name](binary, c, probes)
        finally:
            for p in probes:
                p.close()
    print(f"ha election {name}: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
