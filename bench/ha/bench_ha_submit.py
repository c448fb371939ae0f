"""Durable submissions/s through topo-scheduler with HA off and on (docs/ha.md, issue 17).

    bench_ha_submit.py BENCH_API [--requests N] [--connections C] [--out bench/results/ha.json]

Runs bench/api's bench_api twice with the same load: once on the single daemon, once in HA
mode against three real TLS etcd members on loopback (tests/ha/etcd_cluster.py), where every
group commit is also appended to etcd in a fenced txn before its 201. Both runs share this
machine's cores and disk with the etcd members, so the ratio, not the absolute rate, is the
figure to read. Writes both runs' phases and the ratios to --out.

Failover time (failover_p99_s) is bench_ha_failover.py's, merged into the same file.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "ha"))
from etcd_cluster import EtcdCluster, skip_without_etcd  # noqa: E402


def run(bench_api, args, out, extra_config=None):
    cmd = [bench_api, "--scanners", "0", "--out", out] + args
    if extra_config:
        cmd += ["--extra-config", extra_config]
    subprocess.run(cmd, check=True)
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_api")
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--ttl", type=int, default=5)
    ap.add_argument("--out", default="bench/results/ha.json")
    a = ap.parse_args()
    skip_without_etcd()
    load = ["--requests", str(a.requests), "--connections", str(a.connections)]
    tmp = tempfile.mkdtemp(prefix="topo-bench-ha-")
    try:
        return measure(a, load, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(a, load, tmp):
    off = run(a.bench_api, load, os.path.join(tmp, "off.json"))
    with EtcdCluster(3) as etcd:
        conf = os.path.join(tmp, "ha.conf")
        with open(conf, "w") as f:
            f.write("ha_etcd_endpoints = %s\nha_etcd_ca = %s\nha_etcd_cert = %s\n"
                    "ha_etcd_key = %s\nha_lease_ttl_s = %d\nha_name = bench\nha_cluster = bench\n"
                    % (",".join(etcd.endpoints), etcd.ca, etcd.client_cert, etcd.client_key, a.ttl))
        on = run(a.bench_api, load, os.path.join(tmp, "on.json"), conf)
    rate = {r["phase"]: r["acknowledged_per_s"] for r in off["phases"]}
    rate_on = {r["phase"]: r["acknowledged_per_s"] for r in on["phases"]}
    result = {
        "benchmark": "ha",
        "commit": on.get("commit"),
        "host": on.get("host"),
        "nproc": on.get("nproc"),
        "etcd_members": 3,
        "requests_per_phase": a.requests,
        "connections": a.connections,
        "submissions_per_s_ha_off": rate,
        "submissions_per_s_ha_on": rate_on,
        "ha_on_over_off": {k: (rate_on[k] / rate[k] if rate.get(k) else None) for k in rate_on},
        "p99_ms_ha_off": {r["phase"]: r["p99_ms"] for r in off["phases"]},
        "p99_ms_ha_on": {r["phase"]: r["p99_ms"] for r in on["phases"]},
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    # Keep bench_ha_failover.py's figures in the same file.
    if os.path.exists(a.out):
        with open(a.out) as f:
            kept = json.load(f)
        for k in ("failover", "failover_p50_s", "failover_p99_s"):
            if k in kept:
                result[k] = kept[k]
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)
    print("\n| phase | HA off /s | HA on /s | on/off | p99 off ms | p99 on ms |")
    print("|---|---|---|---|---|---|")
    for k in rate_on:
        print("| %s | %.0f | %.0f | %.2f | %.2f | %.2f |" % (
            k, rate.get(k, 0), rate_on[k], result["ha_on_over_off"][k] or 0,
            result["p99_ms_ha_off"].get(k, 0), result["p99_ms_ha_on"][k]))
    print("results:", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
