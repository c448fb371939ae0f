"""Snapshots in etcd and the bounded replicated log (docs/ha.md, label `ha`).

    test_snapshot.py TOPO_SCHEDULER SCENARIO

Every replica takes a local snapshot every SNAP events (snapshot_every_events), so a few
dozen submissions make several.

  bounded  a leads, b follows. After a's snapshots, etcd holds at most two snapshot/
           manifests, each complete (every chunk the manifest names, SHA-256 as stated),
           and log/ no longer starts at seq 1 while b keeps following. A live standby is
           never trimmed past: with an applied/ key at seq S (a batch's end) on a lease the
           test keeps alive, log/ is trimmed exactly to S + 1 and stays there through more
           snapshots; once the test revokes that lease, the next snapshot trims past it.
           log/ never starts above b's applied seq + 1, and ends up within two snapshot
           intervals of head. b then serves every job.
  restore  a leads, b follows and is killed (kill -9); its applied/ key expires with its
           lease and a's snapshots trim log/ past b's store. b restarted on its old store
           and c started with an EMPTY state directory both load the newest snapshot from
           etcd and follow the log from there. kill -9 a: the successor serves every
           acknowledged job and takes submissions; kill -9 it: the third does the same.
  nosnap   log/ trimmed past seq 1 and the snapshots deleted (the test deletes them): a
           replica started empty cannot catch up, says why naming the gap, and once
           elected refuses to lead (resigns, exits non-zero). The same with log/ emptied
           below head (the test deletes the rest).
  bigbatch a job array whose submission logs about 13.5 MiB of JSON in one group commit
           (members started with --max-request-bytes 16 MiB) is acknowledged; etcd holds
           it as a header at log/<seq> and its parts under log/<seq>/; the standby applies
           it. The store's snapshot in etcd then takes several 1 MiB chunks, and a replica
           started empty after the trim loads them; after a's stop the successor serves
           every task with its command.
  bigepoch a topology import of about 1.3 MiB of JSON is split into topology/<seq> and its
           parts in one txn; the standby applies it, and after a's stop serves the same
           topology and the job submitted after it.
  toolarge the same submission against etcd's default 1.5 MiB request limit (and the
           daemon's ha_etcd_max_request_bytes at its default, the same): acknowledged,
           appended as ten or more batches in seq order, followed by the standby.
  overlimit ha_etcd_max_request_bytes set above the members' limit: not acknowledged,
           nothing in etcd, the leader exits naming --max-request-bytes.

Skips (77) where /usr/bin/etcd is missing.
"""

import base64
import hashlib
import json
import os
import random
import string
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
from etcd_cluster import EtcdCluster, skip_without_etcd  # noqa: E402
from harness import setup_tiny  # noqa: E402
from test_daemon_ha import (CLUSTER, COMPRESSED_MARKER, Replica, b64, json_text,  # noqa: E402
                            etcd_get, ha_config, job_names, run_scenario, share_identity, submit,
                            wait_for)

SNAP = 10  # snapshot_every_events of every replica
PREFIX = f"/toposched/{CLUSTER}/"


def config(etcd, name):
    return (ha_config(etcd, name) + f"snapshot_every_events = {SNAP}\n" +
            f"ha_etcd_max_request_bytes = {etcd.max_request_bytes or 1572864}\n")


def keys(etcd, sub, values=False):
    """[(key without the cluster prefix, value or None)] under PREFIX + sub, in key order."""
    start = PREFIX + sub
    end = start[:-1] + chr(ord(start[-1]) + 1)
    body = {"key": b64(start), "range_end": b64(end)}
    if not values:
        body["keys_only"] = True
    r = etcd.post(etcd.running()[0], "/v3/kv/range", body, timeout=10)
    out = []
    for kv in r.get("kvs", []):
        k = base64.b64decode(kv["key"]).decode()[len(PREFIX):]
        out.append((k, base64.b64decode(kv.get("value", "")) if values else None))
    return out


def log_seqs(etcd):
    """The first seqs of the batches in log/ (headers and plain batches, not parts)."""
    return [int(k.split("/")[1]) for k, _ in keys(etcd, "log/") if k.count("/") == 1]


def oldest_batch(etcd):
    """The first seq of the oldest batch left in log/; with log/ trimmed empty, head + 1
    (the next batch's)."""
    seqs = log_seqs(etcd)
    return seqs[0] if seqs else int(etcd_get(etcd, "head")) + 1


def manifests(etcd, snapshot_keys=None):
    """{seq: manifest} of the snapshots in etcd (or in snapshot_keys, one read of them)."""
    out = {}
    for k, v in (snapshot_keys or keys(etcd, "snapshot/", values=True)):
        if k.count("/") == 1:
            out[int(k.split("/")[1])] = json.loads(v)
    return out


def check_snapshots(etcd):
    """Every snapshot in etcd is whole, from one read of snapshot/ (the
    publisher may replace the oldest between two reads). Returns {seq: manifest}."""
    snapshot_keys = keys(etcd, "snapshot/", values=True)
    ms = manifests(etcd, snapshot_keys)
    for seq, m in ms.items():
        check_snapshot(etcd, seq, m, snapshot_keys)
    return ms


def check_snapshot(etcd, seq, m, snapshot_keys=None):
    prefix = f"snapshot/{seq:020d}/"
    chunks = {k: v for k, v in (snapshot_keys or keys(etcd, prefix, values=True))
              if k.startswith(prefix)}
    assert len(chunks) == m["chunks"], (seq, sorted(chunks), m)
    data = b"".join(chunks[f"snapshot/{seq:020d}/{i:06d}"] for i in range(m["chunks"]))
    assert len(data) == m["bytes"], (len(data), m)
    assert hashlib.sha256(data).hexdigest() == m["sha256"], m
    assert data.startswith(b"SQLite format 3\0"), data[:16]


def submit_n(d, first, n):
    names = []
    for i in range(first, first + n):
        status, out = submit(d, f"j{i}")
        assert status == 201, (status, out)
        names.append(f"j{i}")
    return names


def store_seq(r):
    """The seq the replica's log says its store reached last."""
    seq = 0
    for line in r.log_all().splitlines():
        for marker in ("the store is at seq ", "caught up with the replicated log at seq "):
            if marker in line:
                seq = int(line.split(marker)[1].split()[0].rstrip("\",}"))
    return seq


class Lease:
    """A lease of the test's own, kept alive until revoke()."""

    def __init__(self, etcd, ttl=2):
        self.etcd = etcd
        self.id = etcd.post(0, "/v3/lease/grant", {"TTL": str(ttl)})["ID"]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._keep, daemon=True)
        self.thread.start()

    def _keep(self):
        while not self.stop.wait(0.5):
            try:
                self.etcd.post(0, "/v3/lease/keepalive", {"ID": self.id})
            except Exception:  # noqa: BLE001 - the next round tries again
                pass

    def revoke(self):
        self.stop.set()
        self.thread.join()
        self.etcd.post(0, "/v3/lease/revoke", {"ID": self.id})


def scenario_bounded(binary, tmp):
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), config(etcd, "a"))
        b = Replica(binary, os.path.join(tmp, "b"), config(etcd, "b"))
        try:
            a.start()
            share_identity(a, b)
            b.start_standby()
            wait_for(lambda: etcd_get(etcd, "applied/b") is not None, 15, "b reports its seq")
            setup_tiny(a)
            acked = submit_n(a, 0, 2)
            # A live standby that lags: the test's own applied/ key, at a batch's end,
            # on a lease the test keeps alive.
            slow = int(etcd_get(etcd, "head"))
            lease = Lease(etcd)
            etcd.post(0, "/v3/kv/put", {"key": b64(PREFIX + "applied/slow"),
                                        "value": b64(str(slow)), "lease": lease.id})
            acked += submit_n(a, len(acked), 4 * SNAP)
            wait_for(lambda: len(manifests(etcd)) == 2 and oldest_batch(etcd) > 1, 20,
                     "two snapshots in etcd and log/ trimmed")
            ms = check_snapshots(etcd)
            # The publisher trims again every TTL as b advances, down to the lagging
            # standby's seq and never past it.
            def trimmed_to_slow():
                oldest = oldest_batch(etcd)
                assert oldest <= slow + 1, f"trimmed past a live standby at seq {slow}: {oldest}"
                return oldest == slow + 1
            wait_for(trimmed_to_slow, 20, f"log/ trimmed up to the live standby at seq {slow}")
            # Two more snapshots and trims: still kept for the standby.
            before = max(manifests(etcd))
            acked += submit_n(a, len(acked), 2 * SNAP)
            wait_for(lambda: max(manifests(etcd)) >= before + 2 * SNAP, 20, "two more snapshots")
            time.sleep(2.5)  # past the publisher's next trim (every TTL)
            assert trimmed_to_slow()
            print(f"snapshots at {sorted(ms)}; a live standby at seq {slow} keeps log/ from "
                  f"seq {slow + 1}")
            lease.revoke()
            assert etcd_get(etcd, "applied/slow") is None
            before = max(manifests(etcd))
            acked += submit_n(a, len(acked), 2 * SNAP)
            wait_for(lambda: max(manifests(etcd)) > before and oldest_batch(etcd) > slow + 1, 20,
                     "trimmed past the standby once its lease is gone")
            # Two kept: the publisher writes a new manifest before it deletes the
            # oldest, so a read in between sees three for a moment.
            wait_for(lambda: len(manifests(etcd)) == 2, 10, "two snapshots kept in etcd")
            # Every live standby keeps what it needs: sample log/, then b's applied seq
            # (both only grow), many times while b follows.
            for _ in range(20):
                oldest = oldest_batch(etcd)
                applied = int(etcd_get(etcd, "applied/b"))
                assert oldest <= applied + 1, (oldest, applied)
                time.sleep(0.05)
            # The log stays bounded: below two snapshot intervals plus b's lag.
            acked += submit_n(a, len(acked), 3 * SNAP)
            head = int(etcd_get(etcd, "head"))

            # About one snapshot interval once b has caught up.
            wait_for(lambda: head - oldest_batch(etcd) < 2 * SNAP, 20, "log/ bounded")
            oldest = oldest_batch(etcd)
            a.stop()
            wait_for(b.serving, 15, "b takes over")
            b.attach()
            assert job_names(b) == sorted(acked)
            print(f"bounded: {len(acked)} jobs, log/ holds seqs {oldest}..{head}, "
                  f"b serves every job")
        finally:
            for r in (a, b):
                r.kill9()


def scenario_restore(binary, tmp):
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), config(etcd, "a"))
        b = Replica(binary, os.path.join(tmp, "b"), config(etcd, "b"))
        c = Replica(binary, os.path.join(tmp, "c"), config(etcd, "c"))
        try:
            a.start()
            share_identity(a, b)
            share_identity(a, c)
            b.start_standby()
            setup_tiny(a)
            acked = submit_n(a, 0, 5)
            head = int(etcd_get(etcd, "head"))
            wait_for(lambda: store_seq(b) == head, 15, "b follows")
            b.kill9()
            b_seq = store_seq(b)
            wait_for(lambda: etcd_get(etcd, "applied/b") is None, 10,
                     "b's applied key expires with its lease")
            acked += submit_n(a, len(acked), 4 * SNAP)
            wait_for(lambda: oldest_batch(etcd) > b_seq + 1, 20,
                     "log/ trimmed past b's store")
            print(f"b's store at seq {b_seq}; log/ now from seq {oldest_batch(etcd)}")
            b.start_standby()
            c.start_standby()
            for r in (b, c):
                wait_for(lambda r=r: "loaded the snapshot at seq" in r.log_all(), 20,
                         f"{os.path.basename(r.state_dir)} loads the snapshot")
            acked += submit_n(a, len(acked), 3)
            head = int(etcd_get(etcd, "head"))
            for r in (b, c):
                wait_for(lambda r=r: store_seq(r) == head, 15, "follows the log after the snapshot")
            a.kill9()
            wait_for(lambda: b.serving() or c.serving(), 20, "a successor serves")
            first, second = (b, c) if b.serving() else (c, b)
            first.attach()
            assert job_names(first) == sorted(acked), (len(job_names(first)), len(acked))
            acked += submit_n(first, len(acked), 3)
            first.kill9()
            wait_for(second.serving, 20, "the third replica serves")
            second.attach()
            assert job_names(second) == sorted(acked), (len(job_names(second)), len(acked))
            status, out = submit(second, "last")
            assert status == 201, (status, out)
            print(f"restore: old store and empty state dir loaded the snapshot; "
                  f"{len(acked)} acknowledged jobs served after two kill -9")
        finally:
            for r in (a, b, c):
                r.kill9()


def scenario_nosnap(binary, tmp):
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), config(etcd, "a"))
        b = Replica(binary, os.path.join(tmp, "b"), config(etcd, "b"))
        c = Replica(binary, os.path.join(tmp, "c"), config(etcd, "c"))
        try:
            a.start()
            setup_tiny(a)
            submit_n(a, 0, 3 * SNAP)
            wait_for(lambda: oldest_batch(etcd) > 1, 20, "log/ trimmed")
            submit_n(a, 3 * SNAP, 1)  # a batch after the newest snapshot stays in log/
            a.stop()
            start = PREFIX + "snapshot/"
            etcd.post(0, "/v3/kv/deleterange", {"key": b64(start), "range_end": b64(PREFIX + "snapshot0")})
            key = b64(PREFIX + "leader")
            etcd.post(0, "/v3/kv/put", {"key": key, "value": b64("intruder")})
            share_identity(a, b)
            b.start_standby()
            oldest = log_seqs(etcd)[0]  # no standby: trimmed to the newest snapshot only
            want = f"holds the batch from seq {oldest} but this replica's store ends at seq 0"
            wait_for(lambda: want in b.log_all(), 15, "b names the gap")
            assert "no snapshot in etcd covers" in b.log_all(), b.log()
            etcd.post(0, "/v3/kv/deleterange", {"key": key})
            wait_for(lambda: b.proc.poll() is not None, 15, "b is elected and refuses to lead")
            assert b.proc.returncode != 0
            assert not b.serving()
            # log/ trimmed empty (the test deletes the rest): the gap is named too.
            etcd.post(0, "/v3/kv/deleterange", {"key": b64(PREFIX + "log/"),
                                                "range_end": b64(PREFIX + "log0")})
            etcd.post(0, "/v3/kv/put", {"key": key, "value": b64("intruder")})
            share_identity(a, c)
            c.start_standby()
            head = int(etcd_get(etcd, "head"))
            want = (f"the replicated log ends at seq {head} but holds no batch after this "
                    f"replica's store's seq 0")
            wait_for(lambda: want in c.log_all(), 15, "c names the gap")
            etcd.post(0, "/v3/kv/deleterange", {"key": key})
            wait_for(lambda: c.proc.poll() is not None, 15, "c is elected and refuses to lead")
            assert c.proc.returncode != 0 and not c.serving()
            print(f"no snapshot: empty replicas refuse to lead (log/ from seq {oldest}, "
                  f"then log/ empty below head {head})")
        finally:
            for r in (a, b, c):
                r.kill9()


BIG_TASKS = 300
# 300 tasks x 46 KiB: one batch of about 13.5 MiB of JSON, about 10 MiB once compressed (the
# text is seeded random letters and digits, and its copies lie farther apart than zlib's
# 32 KiB window), in more parts than a follower reads in one range (8), whose values together
# would exceed the client's 16 MiB answer in base64.
BIG_COMMAND = ["echo", "".join(random.Random(17).choices(string.ascii_letters + string.digits,
                                                          k=47104))]


def submit_big(d):
    return d.request("POST", "/v1/jobs",
                     {"spec": {"gpus": 8, "name": "big"}, "array": f"0-{BIG_TASKS - 1}",
                      "command": BIG_COMMAND}, d.admin_token, timeout=60)


def scenario_bigbatch(binary, tmp):
    with EtcdCluster(3, max_request_bytes=16 << 20) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), config(etcd, "a"))
        b = Replica(binary, os.path.join(tmp, "b"), config(etcd, "b"))
        c = Replica(binary, os.path.join(tmp, "c"), config(etcd, "c"))
        try:
            a.start()
            share_identity(a, b)
            share_identity(a, c)
            b.start_standby()
            setup_tiny(a)
            status, out = submit_big(a)
            assert status == 201, (status, str(out)[:500])
            log = keys(etcd, "log/", values=True)
            parts = [k for k, _ in log if k.count("/") == 2]
            assert parts, "no batch was split"
            header_key = parts[0].rsplit("/", 1)[0]
            header = json.loads(dict(log)[header_key])
            mine = [p for p in parts if p.startswith(header_key + "/")]
            assert header["parts"] == len(mine) > 8, (header, mine)
            assert header["bytes"] > 8 << 20, header
            value = b"".join(v for k, v in log if k in mine)
            assert len(value) == header["bytes"] and value.startswith(COMPRESSED_MARKER), header
            assert json.loads(json_text(value))["first_seq"] == header["first_seq"], header
            head = int(etcd_get(etcd, "head"))
            wait_for(lambda: store_seq(b) == head, 20, "b applies the split batch")
            # The store now holds megabytes: its snapshot in etcd takes several chunks,
            # and a replica started empty after the trim loads them all.
            wait_for(lambda: manifests(etcd) and max(manifests(etcd)) == head and
                     oldest_batch(etcd) > head, 20,
                     "a snapshot at head and log/ trimmed up to it")
            m = manifests(etcd)[head]
            assert m["chunks"] >= 2, m
            check_snapshot(etcd, head, m)
            c.start_standby()
            wait_for(lambda: f"loaded the snapshot at seq {head}" in c.log_all(), 20,
                     "c loads the snapshot")
            names = job_names(a)
            a.stop()
            wait_for(lambda: b.serving() or c.serving(), 15, "a successor takes over")
            new = b if b.serving() else c
            new.attach()
            assert job_names(new) == names and len(names) == BIG_TASKS, len(job_names(new))
            task = new.api("GET", f"/v1/jobs/{out['ids'][-1]}", expect=200)
            assert task.get("command") == BIG_COMMAND, str(task)[:300]
            print(f"big batch: {header['bytes']} bytes in {header['parts']} parts under "
                  f"{header_key}; snapshot of {m['bytes']} bytes in {m['chunks']} chunks "
                  f"loaded by an empty replica; {BIG_TASKS} tasks served after failover")
        finally:
            for r in (a, b, c):
                r.kill9()


def big_topology(nodes=20480, name_len=64):
    """One spine of 320 leaves of 64 nodes whose names are as long as a node name may be
    (64 bytes): about 1.4 MiB of JSON."""
    leaves = []
    for leaf in range(nodes // 64):
        names = [f"n{leaf * 64 + i:05d}-" + "x" * (name_len - 7) for i in range(64)]
        leaves.append({"name": f"leaf{leaf}", "nodes": names})
    return {"version": 1, "name": "big", "tiers": ["node", "leaf", "spine"], "hbd": "node",
            "gpus_per_node": 8, "gpu_model": "H100",
            "domains": [{"name": "spine0", "children": leaves}]}


def scenario_bigepoch(binary, tmp):
    conf = ""
    with EtcdCluster(3, max_request_bytes=8 << 20) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a") + conf)
        b = Replica(binary, os.path.join(tmp, "b"), ha_config(etcd, "b") + conf)
        try:
            a.start()
            share_identity(a, b)
            b.start_standby()
            content = json.dumps(big_topology())
            a.api("PUT", "/v1/topology", {"format": "json", "content": content}, expect=200)
            epochs = keys(etcd, "topology/", values=True)
            parts = [k for k, _ in epochs if k.count("/") == 2]
            assert len(parts) >= 2, [k for k, _ in epochs]
            header = json.loads(dict(epochs)[parts[0].rsplit("/", 1)[0]])
            assert header["parts"] == len(parts) and header["bytes"] > 1 << 20, header
            status, out = submit(a, "after-import")
            assert status == 201, (status, out)
            head = int(etcd_get(etcd, "head"))
            wait_for(lambda: store_seq(b) == head, 20, "b applies the split epoch and the batch")
            want = a.api("GET", "/v1/topology", expect=200)["content"]
            a.stop()
            wait_for(b.serving, 15, "b takes over")
            b.attach()
            assert b.api("GET", "/v1/topology", expect=200)["content"] == want
            assert job_names(b) == ["after-import"], job_names(b)
            print(f"big epoch: {header['bytes']} bytes in {header['parts']} parts; "
                  f"b serves the same topology")
        finally:
            for r in (a, b):
                r.kill9()


def scenario_toolarge(binary, tmp):
    """A batch above etcd's --max-request-bytes (here its 1.5 MiB default, which
    ha_etcd_max_request_bytes defaults to) goes to etcd as several appends: the
    submission is acknowledged, the log holds it in seq order with no gap, and the
    standby applies all of it (docs/ha.md, Size limits)."""
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"), ha_config(etcd, "a"))
        b = Replica(binary, os.path.join(tmp, "b"), ha_config(etcd, "b"))
        try:
            a.start()
            share_identity(a, b)
            b.start_standby()
            setup_tiny(a)
            before = int(etcd_get(etcd, "head"))
            batches_before = len(log_seqs(etcd))
            status, out = submit_big(a)
            assert status == 201, (status, str(out)[:300])
            head = int(etcd_get(etcd, "head"))
            seqs = [q for q in log_seqs(etcd) if q > before]
            # About 10 MiB compressed: several appends, none above the 1.5 MiB etcd takes.
            values = [v for k, v in keys(etcd, "log/", values=True)
                      if int(k.split("/")[1]) > before]
            assert all(len(v) <= 1536 * 1024 for v in values), max(len(v) for v in values)
            assert sum(len(v) for v in values) > 8 << 20, sum(len(v) for v in values)
            assert len(seqs) >= 6, f"the array went to etcd in {len(seqs)} appends"
            assert seqs[0] == before + 1 and seqs == sorted(seqs), seqs
            assert len(log_seqs(etcd)) - batches_before == len(seqs)
            wait_for(lambda: f"the store is at seq {head}" in b.log_all(), 30,
                     "b applies every part up to head")
            print(f"a {head - before}-event array in {len(seqs)} appends up to seq {head}, "
                  "followed by the standby")
        finally:
            for r in (a, b):
                r.kill9()


def scenario_overlimit(binary, tmp):
    """ha_etcd_max_request_bytes set above what the members allow: the batch is
    not replicated, the submission is not acknowledged, nothing reaches etcd, and
    the leader steps down with a message naming --max-request-bytes."""
    with EtcdCluster(3) as etcd:
        a = Replica(binary, os.path.join(tmp, "a"),
                    ha_config(etcd, "a") + "ha_etcd_max_request_bytes = 67108864\n")
        try:
            a.start()
            setup_tiny(a)
            head = etcd_get(etcd, "head")
            try:
                status, out = submit_big(a)
            except Exception as e:  # noqa: BLE001 - the daemon went away mid-request
                status, out = None, repr(e)
            assert status != 201, f"a batch above etcd's request limit was acknowledged: {out}"
            wait_for(lambda: a.proc.poll() is not None, 15, "a steps down")
            assert a.proc.returncode != 0
            assert "--max-request-bytes" in a.log_all(), a.log()
            assert etcd_get(etcd, "head") == head
            print(f"over the members' limit: answer {status}, the leader exits naming "
                  "--max-request-bytes")
        finally:
            a.kill9()


SCENARIOS = {"bounded": scenario_bounded, "restore": scenario_restore,
             "nosnap": scenario_nosnap, "bigbatch": scenario_bigbatch,
             "bigepoch": scenario_bigepoch, "toolarge": scenario_toolarge,
             "overlimit": scenario_overlimit}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in SCENARIOS:
        print(f"usage: {sys.argv[0]} TOPO_SCHEDULER {{{','.join(SCENARIOS)}}}")
        return 2
    binary, name = sys.argv[1], sys.argv[2]
    skip_without_etcd()
    return run_scenario("topo-hasnap-", f"ha snapshot {name}",
                        lambda tmp: SCENARIOS[name](binary, tmp))


if __name__ == "__main__":
    sys.exit(main())
