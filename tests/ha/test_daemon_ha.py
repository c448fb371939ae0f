"""topo-scheduler in HA mode against real etcd members on loopback (docs/ha.md, label `ha`).

    test_daemon_ha.py TOPO_SCHEDULER SCENARIO

  config   bad ha_* settings are refused at start with the key and the fix (no etcd needed)
  standby  replica a leads and serves; replica b (given a's CA and admin token file) waits
           with its listeners closed and follows etcd's replicated log into its store; a
           stops cleanly (resigns): b is elected at once and serves a's topology and jobs,
           with the same admin token; user and token changes are refused in HA mode
  fence    a successor takes the leader key (the test writes it): a's next submission is
           refused (503), nothing of it reaches etcd or a's store, a exits; restarted, a is a
           standby until the key is free, then leads with exactly the acknowledged jobs
  pause    SIGSTOP the leader past its lease, SIGCONT: it acknowledges nothing more, appends
           nothing to etcd, and exits to restart as a standby
  gap      a replica started with an empty state directory replays the whole log from etcd
           (topology epoch included) up to head; a log key that is not a batch, then a batch
           that does not follow on, stop its catch-up with errors that name the key and the
           seqs; elected, it refuses to lead, resigns and exits non-zero

Skips (77) where /usr/bin/etcd is missing (config runs without it).
"""

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
from etcd_cluster import EtcdCluster, skip_without_etcd  # noqa: E402
from harness import Daemon, setup_tiny  # noqa: E402

TTL = 2
CLUSTER = "t"


def b64(s):
    return base64.b64encode(s.encode()).decode()


def ha_config(etcd, name, ttl=TTL):
    return "\n".join([
        "ha_etcd_endpoints = " + ",".join(etcd.endpoints),
        "ha_etcd_ca = " + etcd.ca,
        "ha_etcd_cert = " + etcd.client_cert,
        "ha_etcd_key = " + etcd.client_key,
        f"ha_lease_ttl_s = {ttl}",
        f"ha_name = {name}",
        f"ha_cluster = {CLUSTER}",
        "",
    ])


def etcd_get(etcd, key):
    """The value of /toposched/t/<key>, or None."""
    for i in etcd.running():
        try:
            r = etcd.post(i, "/v3/kv/range", {"key": b64(f"/toposched/{CLUSTER}/{key}")})
        except Exception:  # noqa: BLE001 - a member that is down: the next
            continue
        kvs = r.get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None
    raise AssertionError("no etcd member answered")


def etcd_log(etcd):
    """Every batch in the replicated log, in order, as (key, text)."""
    prefix = f"/toposched/{CLUSTER}/log/"
    end = prefix[:-1] + "0"
    r = etcd.post(etcd.running()[0], "/v3/kv/range", {"key": b64(prefix), "range_end": b64(end)})
    return [(base64.b64decode(kv["key"]).decode(), base64.b64decode(kv["value"]).decode())
            for kv in r.get("kvs", [])]


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


class Replica(Daemon):
    """A Daemon whose start may wait (a standby writes no endpoint file)."""

    def __init__(self, binary, state_dir, config):
        os.makedirs(state_dir, exist_ok=True)
        super().__init__(binary, state_dir=state_dir, config=config)

    def start_standby(self):
        endpoint = os.path.join(self.state_dir, "endpoint")
        if os.path.exists(endpoint):
            os.unlink(endpoint)
        path = os.path.join(self.config_dir, "test.conf")
        with open(path, "w") as f:
            f.write(self.config)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, "--state-dir", self.state_dir, "--listen",
                                      "127.0.0.1:0", "--config", path], stdout=log, stderr=log)
        return self

    def serving(self):
        return os.path.exists(os.path.join(self.state_dir, "endpoint"))

    def attach(self):
        """Talk to the running process once it serves (after start_standby)."""
        with open(os.path.join(self.state_dir, "endpoint")) as f:
            self.url = f.read().strip()
        self.ctx = ssl.create_default_context(cafile=os.path.join(self.state_dir, "ca.pem"))


def share_identity(a, b):
    """Gives replica b the CA and the admin token file of a's state directory
    (docs/ha.md: every replica gets the same ones), before b's first start."""
    os.makedirs(b.state_dir, exist_ok=True)
    for f in ("ca.pem", "ca-key.pem", "admin-token"):
        shutil.copy2(os.path.join(a.state_dir, f), os.path.join(b.state_dir, f))


def submit(d, name):
    return d.request("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": name}, "command": ["true"]},
                     d.admin_token, timeout=15)


def job_names(d):
    out = d.api("GET", "/v1/jobs?all=1&limit=1000", expect=200)
    jobs = out["jobs"] if isinstance(out, dict) else out
    return sorted(j["spec"]["name"] if "spec" in j else j.get("name") for j in jobs)


def scenario_config(binary, tmp):
    cases = [
        ("ha_etcd_ca = /x/ca.pem\n", "need ha_etcd_endpoints"),
        ("ha_etcd_endpoints = http://127.0.0.1:2379\n", "must be https://HOST:PORT"),
        ("ha_etcd_endpoints = https://127.0.0.1:2379\n", "ha_etcd_ca is required"),
        ("ha_lease_ttl_s = 1\n", "ha_lease_ttl_s: 1 is out of range; use 2..60"),
        ("ha_name = a/b\n", "ha_name: \"a/b\" must be 1-64 characters"),
        ("ha_etcd_cert = relative.pem\n", "must be an absolute path"),
        ("ha_etcd_endpoints = https://127.0.0.1:2379\nha_etcd_ca = /nonexistent/ca.pem\n"
         "ha_etcd_cert = /nonexistent/c.pem\nha_etcd_key = /nonexistent/k.pem\n",
         "HA: ha_etcd_ca /nonexistent/ca.pem: No such file or directory"),
        ("ha_etcd_endpoints = https://127.0.0.1\nha_etcd_ca = /x\nha_etcd_cert = /x\n"
         "ha_etcd_key = /x\n", "etcd endpoint 'https://127.0.0.1': no :PORT"),
    ]
    for i, (text, want) in enumerate(cases):
        state = os.path.join(tmp, f"s{i}")
        conf = os.path.join(tmp, f"c{i}.conf")
        with open(conf, "w") as f:
            f.write(text)
        p = subprocess.run([binary, "--state-dir", state, "--listen", "127.0.0.1:0", "--config",
                            conf], capture_output=True, text=True, timeout=30)
        assert p.returncode != 0, f"{text!r} was accepted"
        assert want in p.stderr, f"{text!r}: wanted {want!r} in:\n{p.stderr}"
    print(f"{len(cases)} bad HA settings refused with their key")


def scenario_standby(binary, tmp):
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a"))
        b = Replica(binary, os.path.join(tmp, "b"), ha_config(etcd, "b"))
        try:
            a.start()
            assert etcd_get(etcd, "leader") == "a"
            share_identity(a, b)
            b.start_standby()
            wait_for(lambda: "standby: leader is 'a'" in b.log_all(), 15, "b says it is a standby")
            assert not b.serving() and b.proc.poll() is None, b.log()
            setup_tiny(a)
            for n in range(3):
                status, out = submit(a, f"j{n}")
                assert status == 201, (status, out)
            head = int(etcd_get(etcd, "head"))
            log = etcd_log(etcd)
            assert log, "no batch in etcd"
            text = "".join(v for _, v in log)
            for n in range(3):
                assert f'"j{n}"' in text, f"j{n} not in the replicated log"
            assert '"term"' in text and '"job_submitted"' in text, text[:500]
            # The keys sort in log order and the last batch ends at head.
            assert [k for k, _ in log] == sorted(k for k, _ in log)
            print(f"replicated log: {len(log)} batches, head at seq {head}")
            assert not b.serving()
            wait_for(lambda: f"the store is at seq {head}" in b.log_all(), 15,
                     "b follows the log up to head")
            status, out = a.request("POST", "/v1/users", {"name": "eve", "tenant": "default"},
                                    a.admin_token)
            assert status == 409 and "HA mode" in str(out), (status, out)
            names_a = job_names(a)

            t0 = time.monotonic()
            a.stop()  # SIGTERM: exit 0 and resign
            wait_for(b.serving, 15, "b takes over and serves")
            took = time.monotonic() - t0
            b.attach()
            assert b.admin_token == a.admin_token
            assert job_names(b) == names_a, (job_names(b), names_a)
            assert etcd_get(etcd, "leader") == "b"
            status, out = submit(b, "on-b")
            assert status == 201, (status, out)
            assert "caught up with the replicated log" in b.log_all()
            print(f"b serves {len(names_a)} jobs {took:.2f} s after a's clean stop")
        finally:
            for r in (a, b):
                r.kill9()


def scenario_fence(binary, tmp):
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a", ttl=5))
        try:
            a.start()
            setup_tiny(a)
            status, out = submit(a, "kept")
            assert status == 201, (status, out)
            head = etcd_get(etcd, "head")
            # A successor: the leader key deleted and created again by another.
            key = b64(f"/toposched/{CLUSTER}/leader")
            etcd.post(0, "/v3/kv/deleterange", {"key": key})
            etcd.post(0, "/v3/kv/put", {"key": key, "value": b64("intruder")})
            status, out = submit(a, "refused")
            assert status == 503, (status, out)
            wait_for(lambda: a.proc.poll() is not None, 10, "a exits")
            assert a.proc.returncode != 0
            alog = a.log_all()
            assert "held by 'intruder'" in alog, alog[-2000:]
            assert etcd_get(etcd, "head") == head, "the refused batch reached etcd"
            assert "refused" not in "".join(v for _, v in etcd_log(etcd))

            a.start_standby()
            wait_for(lambda: "standby: leader is 'intruder'" in a.log_all(), 15, "a waits")
            assert not a.serving()
            etcd.post(0, "/v3/kv/deleterange", {"key": key})
            wait_for(a.serving, 15, "a leads again")
            a.attach()
            names = job_names(a)
            assert names == ["kept"], names
            print("fenced: the refused submission is nowhere; a leads again with 'kept' only")
        finally:
            a.kill9()


def scenario_pause(binary, tmp):
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a"))
        try:
            a.start()
            setup_tiny(a)
            status, out = submit(a, "before")
            assert status == 201, (status, out)
            head = etcd_get(etcd, "head")
            os.kill(a.proc.pid, signal.SIGSTOP)
            time.sleep(TTL + 2)
            assert etcd_get(etcd, "leader") is None, "the lease outlived the pause"
            os.kill(a.proc.pid, signal.SIGCONT)
            try:
                status, out = submit(a, "after")
            except Exception as e:  # noqa: BLE001 - the daemon went away mid-request
                status, out = None, repr(e)
            assert status != 201, f"a paused leader acknowledged a submission: {out}"
            wait_for(lambda: a.proc.poll() is not None, 10, "a exits")
            assert a.proc.returncode != 0
            alog = a.log_all()
            assert "lost the leadership" in alog or "leader key is gone" in alog, alog[-2000:]
            assert etcd_get(etcd, "head") == head, "a paused leader appended to the log"
            print(f"paused leader: answer {status}, exit {a.proc.returncode}, log unchanged")
        finally:
            a.kill9()


def scenario_gap(binary, tmp):
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a"))
        b = Replica(binary, os.path.join(tmp, "b"), ha_config(etcd, "b"))
        try:
            a.start()
            setup_tiny(a)
            for n in range(2):
                status, out = submit(a, f"j{n}")
                assert status == 201, (status, out)
            a.stop()  # resigns: the key is free, head stays
            head = int(etcd_get(etcd, "head"))
            assert etcd_get(etcd, "topology/00000000000000000001") is not None
            # Someone else leads (a key without a lease), so b stays a standby.
            key = b64(f"/toposched/{CLUSTER}/leader")
            etcd.post(0, "/v3/kv/put", {"key": key, "value": b64("intruder")})
            share_identity(a, b)
            b.start_standby()
            wait_for(lambda: f"the store is at seq {head}" in b.log_all(), 15,
                     "an empty replica replays the whole log")
            bad = f"/toposched/{CLUSTER}/log/{head + 1:020d}"
            etcd.post(0, "/v3/kv/put", {"key": b64(bad), "value": b64("not json")})
            wait_for(lambda: f"etcd key {bad}: not a batch" in b.log_all(), 15,
                     "b names the key it cannot read")
            batch = json.dumps({"term": 1, "first_seq": head + 5, "entries": [{}]})
            etcd.post(0, "/v3/kv/put", {"key": b64(bad), "value": b64(batch)})
            want = (f"holds the batch from seq {head + 5} but this replica's store ends at "
                    f"seq {head}")
            wait_for(lambda: want in b.log_all(), 15, "b names the gap")
            assert not b.serving()
            etcd.post(0, "/v3/kv/deleterange", {"key": key})
            wait_for(lambda: b.proc.poll() is not None, 15, "b is elected and refuses to lead")
            assert b.proc.returncode != 0
            blog = b.log_all()
            assert "HA: catching up with the replicated log: " in blog, blog[-2000:]
            assert not b.serving()
            wait_for(lambda: etcd_get(etcd, "leader") is None, 5, "b resigned")
            print(f"empty replica replayed {head} seqs; bad key and gap refused by name")
        finally:
            for r in (a, b):
                r.kill9()


def scenario_quorum(binary, tmp):
    """One etcd member of three lost: the leader goes on. A second lost (no
    quorum): a write is refused with 503 and nothing is acknowledged; the
    leader's lease cannot be kept, so it steps down (exits non-zero, for the
    service manager to restart). Quorum back: the replica, restarted as
    systemd's Restart=on-failure would, leads again with every acknowledged job
    and takes writes."""
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a"))
        try:
            a.start()
            setup_tiny(a)
            acked = []
            status, out = submit(a, "three-members")
            assert status == 201, (status, out)
            acked.append("three-members")
            etcd.kill(2)
            status, out = submit(a, "two-members")
            assert status == 201, f"one member lost: {status} {out}"
            acked.append("two-members")
            etcd.kill(1)
            try:
                status, out = submit(a, "one-member")
            except Exception as e:  # noqa: BLE001 - the daemon went away mid-request
                status, out = None, repr(e)
            assert status != 201, f"a write was acknowledged without a quorum: {out}"
            if status is not None:
                assert status == 503, (status, out)
            no_quorum = status_text(status)
            wait_for(lambda: a.proc.poll() is not None, 4 * TTL + 10, "a steps down")
            assert a.proc.returncode != 0, a.proc.returncode
            etcd.restart(1)
            etcd.restart(2)
            a.start()
            names = job_names(a)
            # Every acknowledged job once. The refused write may exist too: etcd
            # can commit a proposal it took before losing its quorum once the
            # members are back (a request without an answer may or may not have
            # happened; a client retries it with its client_request_id).
            assert len(names) == len(set(names)), f"a job twice: {names}"
            assert set(acked) <= set(names) <= set(acked) | {"one-member"}, \
                f"after quorum returned: {names}, acknowledged {acked}"
            status, out = submit(a, "quorum-back")
            assert status == 201, (status, out)
            print(f"quorum: one member lost, writes go on; two lost: {no_quorum}, "
                  f"step-down; quorum back: {len(names)} acknowledged jobs, writes again")
        finally:
            a.kill9()


def status_text(status):
    return "no answer" if status is None else str(status)


SCENARIOS = {"config": scenario_config, "standby": scenario_standby, "fence": scenario_fence,
             "pause": scenario_pause, "gap": scenario_gap, "quorum": scenario_quorum}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in SCENARIOS:
        print(f"usage: {sys.argv[0]} TOPO_SCHEDULER {{{','.join(SCENARIOS)}}}")
        return 2
    binary, name = sys.argv[1], sys.argv[2]
    if name != "config":
        skip_without_etcd()
    return run_scenario("topo-ha-", f"ha daemon {name}", lambda tmp: SCENARIOS[name](binary, tmp))


def run_scenario(prefix, label, body):
    """body(tmp) in a fresh temporary directory; on a failure each replica's
    daemon.log tail is printed; the directory goes in any case."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        body(tmp)
    except Exception:
        for d in sorted(os.listdir(tmp)):
            log = os.path.join(tmp, d, "daemon.log")
            if os.path.exists(log):
                with open(log, errors="replace") as f:
                    print(f"---- {d}/daemon.log\n" + f.read()[-3000:], file=sys.stderr)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{label}: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
