#!/usr/bin/python3
"""bench/cli: `topo submit` against `sbatch --hold --wrap true`, one process
per submission, as people and scripts run them (issue 14).

It starts a real topo-scheduler in a temporary state directory (real SQLite
file, synchronous=FULL, real TLS on loopback; the demo cluster of
packaging/demo-topology.json, 288 nodes resumed), and, where Slurm 22.05 is
installed, a real Slurm cluster the way the Slurm tests do
(tests/slurm/slurm_cluster.py: munged, slurmctld and 16 slurmd in a temp
dir). Then, for each row, N submissions as separate processes, C at a time,
in R rounds where the rows take turns (their order rotating), so that load
from other work on a shared machine falls on every row alike:

  topo            `topo submit --gpus 8 -- /bin/true`, with TOPO_STATE_DIR the
                  one setting and a temporary HOME: the defaults, so each
                  command goes through the user's connection relay (`topo
                  relay`, started by one untimed `topo whoami`, as any user's
                  first command starts it); the relay's CPU counts as client
                  CPU
  topo-direct     the same with TOPO_SHARE_CONNECTION=0: each process
                  connects itself, resuming the TLS session cached in HOME
  topo-no-cache   without a cache directory (no HOME): no relay and a full
                  TLS handshake per process (what every submission cost
                  before issue 14)
  sbatch          `sbatch --hold --wrap true` against the real slurmctld

Each submission is timed from spawn to exit. Every topo submission counts
only when it exited 0 with "Submitted job N": the daemon answers 201 after
the job's group commit is on disk; at the end the bench checks that the
daemon lists every one of them. Prints a table (submissions/s, p50, p99, the
ratios to sbatch, and the CPU per submission of the submitting processes
(client) and of the daemons serving the row (server: topo-scheduler; slurmctld
and munged), measured over the row's own chunks) and writes JSON (default
bench/results/cli.json). It also runs the topo command with --dry-run (the
request built and printed, no connection) and prints that client CPU beside
the topo row's, so what connecting over TLS costs the client is measured in
the same run (client_floor_cpu_ms in the JSON).

  bench/cli/cli_bench.py --topo build/cli/topo --scheduler build/scheduler/topo-scheduler
                         [--submissions 400] [--concurrency 8] [--rounds 4]
                         [--no-slurm] [--smoke]

--smoke: 16 submissions per row and no Slurm (a few seconds; the `bench`
ctest label). Standard library only (run with /usr/bin/python3).
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "daemon"))
sys.path.insert(0, os.path.join(ROOT, "tests", "slurm"))
import harness  # noqa: E402
import slurm_cluster  # noqa: E402

DEMO_TOPOLOGY = os.path.join(ROOT, "packaging", "demo-topology.json")
DEMO_NODES = "gb[000-287]"


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[i]


def run_chunk(argv, env, count, concurrency, accept):
    """`count` runs of argv, `concurrency` at a time; accept(stdout) says
    whether a run counts. Returns (wall seconds, [(latency, ok, tail, stdout)])."""
    def one(_):
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        elapsed = time.perf_counter() - t0
        ok = p.returncode == 0 and accept(p.stdout)
        return elapsed, ok, (p.stdout + p.stderr)[-300:], p.stdout

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(one, range(count)))
    return time.perf_counter() - start, results


def process_cpu_s(pid):
    """User + system CPU seconds of a running process (0 when it is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_rows(rows, count, concurrency, rounds):
    """Runs every row's `count` submissions in `rounds` chunks, the rows
    taking turns (their order rotating each round), so that load from other
    work on the machine falls on every row alike. rows: [(name, argv, env,
    accept, server_pids, helper_pids)], server_pids the daemons that serve
    the row (their CPU during the row's chunks is the row's server CPU; the
    submitting processes' own CPU and that of helper_pids, the user's
    connection relay, is its client CPU). Returns {name: (row figures,
    accepted stdouts)}."""
    walls = {r[0]: 0.0 for r in rows}
    client_cpu = {r[0]: 0.0 for r in rows}
    server_cpu = {r[0]: 0.0 for r in rows}
    results = {r[0]: [] for r in rows}
    for k in range(rounds):
        n = count // rounds + (1 if k < count % rounds else 0)
        for i in range(len(rows)):
            name, argv, env, accept, servers, helpers = rows[(i + k) % len(rows)]
            c0, s0 = children_cpu_s(), sum(process_cpu_s(p) for p in servers)
            h0 = sum(process_cpu_s(p) for p in helpers)
            wall, res = run_chunk(argv, env, n, concurrency, accept)
            client_cpu[name] += children_cpu_s() - c0
            client_cpu[name] += sum(process_cpu_s(p) for p in helpers) - h0
            server_cpu[name] += sum(process_cpu_s(p) for p in servers) - s0
            walls[name] += wall
            results[name] += res
    out = {}
    for name, argv, _, _, _, _ in rows:
        res = results[name]
        latencies = sorted(r[0] for r in res)
        failures = [r[2] for r in res if not r[1]]
        row = {
            "name": name,
            "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv)),
            "submissions": len(res),
            "failed": len(failures),
            "concurrency": concurrency,
            "rounds": rounds,
            "wall_s": round(walls[name], 3),
            "per_second": round((len(res) - len(failures)) / walls[name], 1),
            "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
            "mean_ms": round(sum(latencies) / len(latencies) * 1000, 2),
            # CPU per submission: the submitting process (fork and exec
            # included) with the user's relay, and the daemons serving it.
            "client_cpu_ms": round(client_cpu[name] / len(res) * 1000, 2),
            "server_cpu_ms": round(server_cpu[name] / len(res) * 1000, 2),
        }
        if failures:
            row["first_failure"] = failures[0]
        out[name] = (row, [r[3] for r in res if r[1]])
    return out


def git_commit():
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "nproc": os.cpu_count(), "cpu_model": model,
            "load_avg_at_start": list(os.getloadavg()), "kernel": platform.release()}


def print_table(rows, baseline):
    print("%-14s %8s %9s %9s %9s %7s %11s %11s  %s" % (
        "row", "subs/s", "p50 ms", "p99 ms", "vs sbatch", "failed", "client cpu", "server cpu",
        "command"))
    for r in rows:
        ratio = ""
        if baseline and r is not baseline and baseline["per_second"] > 0:
            ratio = "%.2fx" % (r["per_second"] / baseline["per_second"])
        print("%-14s %8.1f %9.1f %9.1f %9s %7d %8.2f ms %8.2f ms  %s" % (
            r["name"], r["per_second"], r["p50_ms"], r["p99_ms"], ratio, r["failed"],
            r["client_cpu_ms"], r["server_cpu_ms"], r["command"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topo", required=True, help="the topo binary")
    ap.add_argument("--scheduler", required=True, help="the topo-scheduler binary")
    ap.add_argument("--submissions", type=int, default=400, help="per row (default 400)")
    ap.add_argument("--concurrency", type=int, default=8, help="processes at a time (default 8)")
    ap.add_argument("--rounds", type=int, default=4,
                    help="chunks per row, the rows taking turns (default 4)")
    ap.add_argument("--no-slurm", action="store_true", help="measure topo only")
    ap.add_argument("--smoke", action="store_true", help="16 submissions per row, no Slurm")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "cli.json"),
                    help="JSON results ('' for none)")
    args = ap.parse_args()
    if args.submissions < 1 or args.submissions > 100000:
        ap.error("--submissions must be 1..100000")
    if args.concurrency < 1 or args.concurrency > 256:
        ap.error("--concurrency must be 1..256")
    if args.rounds < 1 or args.rounds > args.submissions:
        ap.error("--rounds must be 1..--submissions")
    if args.smoke:
        args.submissions, args.no_slurm, args.rounds = 16, True, 2

    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    home = tempfile.mkdtemp(prefix="topo-bench-cli-home-")
    daemon = harness.Daemon(args.scheduler, config="rate_limit_per_second = 100000000\n"
                                                   "max_unauthenticated_per_peer = 100000\n"
                                                   "max_connections_per_user = 100000\n")
    cluster = None
    slurm_note = "not measured (--no-slurm)" if args.no_slurm else ""
    rows = []
    try:
        daemon.start()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("TOPO_") and not k.startswith("XDG_")}
        env.update(HOME=home, TOPO_STATE_DIR=daemon.state_dir)
        subprocess.run([args.topo, "topology", "import", DEMO_TOPOLOGY], env=env, check=True,
                       capture_output=True, timeout=60)
        subprocess.run([args.topo, "resume", DEMO_NODES], env=env, check=True,
                       capture_output=True, timeout=60)
        subprocess.run([args.topo, "whoami"], env=env, check=True, capture_output=True, timeout=60)
        # That first command answered directly and started the user's relay.
        deadline = time.monotonic() + 10
        while not harness.relay_pids(home + "/") and time.monotonic() < deadline:
            time.sleep(0.05)
        relays = harness.relay_pids(home + "/")
        if len(relays) != 1:
            raise RuntimeError("expected one topo relay under %s, found %d" % (home, len(relays)))

        if not args.no_slurm:
            if not slurm_cluster.have_slurm():
                slurm_note = "unavailable: slurmctld is not installed"
            else:
                try:
                    cluster = slurm_cluster.SlurmCluster().start()
                    slurm_note = "Slurm %s" % subprocess.run(
                        ["sbatch", "--version"], env=cluster.env, capture_output=True,
                        text=True).stdout.strip()
                except Exception as e:  # noqa: BLE001 - the bench goes on without Slurm
                    slurm_note = "unavailable: %s" % str(e).splitlines()[0][:200]
                    cluster = None

        submit = [args.topo, "submit", "--gpus", "8", "--", "/bin/true"]
        accepted = re.compile(r"^Submitted job (\d+) ")
        topo_ok = lambda out: accepted.match(out) is not None  # noqa: E731
        direct_env = dict(env, TOPO_SHARE_CONNECTION="0")
        no_cache_env = dict(env)
        no_cache_env.pop("HOME")  # no cache directory: a full handshake each time
        daemons = [daemon.proc.pid]
        specs = [("topo", submit, env, topo_ok, daemons, relays),
                 ("topo-direct", submit, direct_env, topo_ok, daemons, []),
                 ("topo-no-cache", submit, no_cache_env, topo_ok, daemons, [])]
        if cluster is not None:
            cluster.run(["sbatch", "--hold", "--wrap", "true"])  # warm, like topo whoami
            # slurmctld and munged (which signs and checks each credential).
            slurm_daemons = [pid for name, pid in cluster.pids if name in ("slurmctld", "munged")]
            specs.append(("sbatch", ["sbatch", "--hold", "--wrap", "true"], cluster.env,
                          lambda out: out.startswith("Submitted batch job"), slurm_daemons, []))
        measured = run_rows(specs, args.submissions, args.concurrency, args.rounds)
        # The client's floor: the same command line with --dry-run builds and
        # prints the request and opens no connection, so the topo row's client
        # CPU less this is what connecting over TLS and the exchange cost.
        dry = submit[:2] + ["--dry-run"] + submit[2:]
        c0 = children_cpu_s()
        _, dry_res = run_chunk(dry, env, args.submissions // args.rounds or 1, args.concurrency,
                               lambda out: '"command"' in out)
        floor_ms = (children_cpu_s() - c0) / len(dry_res) * 1000
        if not all(r[1] for r in dry_res):
            raise RuntimeError("topo submit --dry-run failed: %s"
                               % next(r[2] for r in dry_res if not r[1]))
        if harness.relay_pids(home + "/") != relays:
            raise RuntimeError("the topo relay was restarted during the run, so its CPU is not "
                               "all counted: %s, then %s" % (relays, harness.relay_pids(home + "/")))
        topo_row, topo_out = measured["topo"]
        direct_row, direct_out = measured["topo-direct"]
        bare_row, bare_out = measured["topo-no-cache"]
        rows += [topo_row, direct_row, bare_row]
        sbatch_row = measured["sbatch"][0] if "sbatch" in measured else None
        if sbatch_row:
            rows.append(sbatch_row)

        # Every acknowledged topo submission is in the daemon's durable store.
        ids = {int(accepted.match(o).group(1)) for o in topo_out + direct_out + bare_out}
        listed = set()
        after = ""
        while True:
            page = daemon.api("GET", "/v1/jobs?all=1&limit=1000" + after, expect=200)
            listed.update(j["id"] for j in page["jobs"])
            if not page.get("next_after"):
                break
            after = "&after=%s" % page["next_after"]
        missing = sorted(ids - listed)

        print("bench/cli: %d submissions per row in %d rounds (rows taking turns), %d at a time, "
              "one process each; commit %s"
              % (args.submissions, args.rounds, args.concurrency, git_commit()))
        print("Slurm: %s" % (slurm_note or "measured"))
        print_table(rows, sbatch_row)
        print("topo's client CPU without a connection (the same command with --dry-run): "
              "%.2f ms; the exchange through the relay (relay included): %.2f ms of the topo "
              "row's %.2f ms; connecting over TLS and the exchange: %.2f ms of the topo-direct "
              "row's %.2f ms"
              % (floor_ms, topo_row["client_cpu_ms"] - floor_ms, topo_row["client_cpu_ms"],
                 direct_row["client_cpu_ms"] - floor_ms, direct_row["client_cpu_ms"]))
        if sbatch_row:
            print("goal: topo >= 1.0x sbatch's rate (%.2fx) and p50 <= sbatch's (%.1f vs %.1f ms)"
                  % (topo_row["per_second"] / max(sbatch_row["per_second"], 1e-9),
                     topo_row["p50_ms"], sbatch_row["p50_ms"]))
        print("durable: %d acknowledged topo submissions, %d missing from the daemon's store"
              % (len(ids), len(missing)))
        result = {
            "bench": "cli", "started_at": started, "commit": git_commit(), "machine": machine(),
            "submissions": args.submissions, "concurrency": args.concurrency, "rounds": args.rounds,
            "slurm": slurm_note or "measured", "rows": rows,
            "topo_vs_sbatch": (round(topo_row["per_second"] / sbatch_row["per_second"], 3)
                               if sbatch_row and sbatch_row["per_second"] > 0 else None),
            "client_floor_cpu_ms": round(floor_ms, 2),
            "acknowledged": len(ids), "missing_from_store": len(missing),
        }
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as f:
                json.dump(result, f, indent=2)
                f.write("\n")
        failed = any(r["failed"] for r in rows if r["name"] != "sbatch")
        return 1 if failed or missing else 0
    except Exception:
        print(daemon.log()[-4000:], file=sys.stderr)
        raise
    finally:
        if cluster is not None:
            cluster.cleanup()
        daemon.cleanup()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
