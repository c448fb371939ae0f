"""A real Slurm 22.05 cluster on loopback for the Slurm tests.

SlurmCluster(tmp) writes slurm.conf and topology.conf into a temp dir, starts
munged (socket in its own 0755 directory), slurmctld and one slurmd per real
node (Debian builds multiple-slurmd: `slurmd -N NAME`, ports from the
NodeName line), waits until every real node is idle, and stops everything by
the PIDs it started (never by name). ../shared/notes/slurm-on-loopback.md
holds the facts this relies on.

Topology (1,024 nodes, gpu0001..gpu1024): leaf switches of 4 nodes
(leaf001..leaf256), spine switches of 2 leaves (spine001..spine128), pod
switches of 16 spines (pod01..pod08) and one top switch. gpu0001..gpu0016
are real slurmd processes (leaf001..leaf004, spine001..spine002, pod01); the
rest are declared State=DOWN: present in the topology, never allocated.

Standard library only (run with /usr/bin/python3).
"""

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SLURM_PLUGIN_DIR = "/usr/lib/x86_64-linux-gnu/slurm-wlm"
REAL_NODES = 16
TOTAL_NODES = 1024
LEAF_NODES = 4
SPINE_LEAVES = 2
POD_SPINES = 16


SBIN_PATH = os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"


def have_slurm():
    """Slurm counts as installed when slurmctld is; then every other piece
    must be there too (missing ones fail the test, they do not skip it)."""
    return shutil.which("slurmctld", path=SBIN_PATH) is not None


def missing_tools():
    return [b for b in ("slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo", "munged", "mungekey")
            if shutil.which(b, path=SBIN_PATH) is None]


def node_name(i):
    return "gpu%04d" % i


def free_port_base(count):
    """A base port with `count` free TCP ports after it (checked, not
    reserved), below the kernel's ephemeral range, which busy loopback tests
    can fill with TIME_WAIT sockets."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    high = max(12000, ephemeral_low) - count
    rng = random.Random(os.getpid() ^ int(time.time() * 1000))
    for _ in range(200):
        base = rng.randrange(10000, high)
        ok = True
        for p in range(base, base + count):
            with socket.socket() as t:
                try:
                    t.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no run of %d free ports on 127.0.0.1 in 10000..%d" % (count, high))


def topology_conf():
    lines = ["# 1,024 nodes: leaf = 4 nodes, spine = 2 leaves, pod = 16 spines, one top switch"]
    leaves = TOTAL_NODES // LEAF_NODES
    for l in range(leaves):
        first = l * LEAF_NODES + 1
        lines.append("SwitchName=leaf%03d Nodes=gpu[%04d-%04d]" % (l + 1, first, first + LEAF_NODES - 1))
    spines = leaves // SPINE_LEAVES
    for s in range(spines):
        first = s * SPINE_LEAVES + 1
        lines.append("SwitchName=spine%03d Switches=leaf[%03d-%03d]" % (s + 1, first, first + SPINE_LEAVES - 1))
    pods = spines // POD_SPINES
    for p in range(pods):
        first = p * POD_SPINES + 1
        lines.append("SwitchName=pod%02d Switches=spine[%03d-%03d]" % (p + 1, first, first + POD_SPINES - 1))
    lines.append("SwitchName=top Switches=pod[01-%02d]" % pods)
    return "\n".join(lines) + "\n"


class SlurmCluster:
    def __init__(self, plugin_dir=None, job_submit_plugins=None, extra_env=None, extra_conf=None,
                 gpu_gres=None, topology_header=None):
        missing = missing_tools()
        if missing:
            raise RuntimeError("slurmctld is installed but %s are not on PATH (apt-get install slurm-wlm munge)"
                               % ", ".join(missing))
        self.dir = tempfile.mkdtemp(prefix="topo-slurm-")
        os.chmod(self.dir, 0o755)
        self.plugin_dir = plugin_dir
        self.job_submit_plugins = job_submit_plugins
        self.extra_conf = list(extra_conf or [])  # more slurm.conf lines (TaskProlog=..., ...)
        # "h100:8": every node has 8 GPUs of type h100 as Slurm GRES (GresTypes=gpu, Gres=gpu:h100:8,
        # gres.conf File= empty files standing in for /dev/nvidia*), so --gres=gpu:h100:8 is a
        # request Slurm accepts and allocates.
        self.gpu_gres = gpu_gres
        # A first line of topology.conf for toposched only, e.g. "#toposched: model=H100" (Slurm
        # reads it as a comment).
        self.topology_header = topology_header
        self.host = socket.gethostname().split(".")[0]
        self.pids = []  # (name, pid) of every daemon we started
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.env = dict(os.environ)
        self.env["SLURM_CONF"] = self.conf
        self.env["PATH"] = SBIN_PATH
        self.env.pop("SLURM_JOB_ID", None)
        # Jobs inherit it: what topo-slurm-task writes for them (hostfiles) is
        # removed with the cluster instead of piling up in /tmp.
        tmp = os.path.join(self.dir, "tmp")
        os.makedirs(tmp)
        os.chmod(tmp, 0o1777)
        self.env["TMPDIR"] = tmp
        if extra_env:
            self.env.update(extra_env)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    # ---- munge
    def _start_munge(self):
        keydir = self.path("munge-key")
        os.makedirs(keydir, mode=0o700)
        key = os.path.join(keydir, "munge.key")
        subprocess.run(["mungekey", "--create", "--keyfile=" + key], check=True, capture_output=True, env=self.env)
        os.chmod(key, 0o400)
        sockdir = self.path("munge-sock")
        os.makedirs(sockdir)
        os.chmod(sockdir, 0o755)
        self.munge_socket = os.path.join(sockdir, "munge.socket.2")
        pidfile = self.path("munged.pid")
        subprocess.run(
            ["munged", "--key-file=" + key, "--socket=" + self.munge_socket, "--pid-file=" + pidfile,
             "--log-file=" + self.path("munged.log"), "--seed-file=" + self.path("munged.seed"), "--force"],
            check=True, capture_output=True, env=self.env)
        self._adopt("munged", pidfile)

    def _adopt(self, name, pidfile, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with open(pidfile) as f:
                    pid = int(f.read().strip())
                self.pids.append((name, pid))
                return pid
            except (OSError, ValueError):
                time.sleep(0.05)
        raise RuntimeError("%s wrote no pid file %s" % (name, pidfile))

    # ---- config
    def write_conf(self):
        os.makedirs(self.path("state"), exist_ok=True)
        os.makedirs(self.path("log"), exist_ok=True)
        ports = free_port_base(REAL_NODES + 2)
        self.ctld_port = ports
        plugin_dir = SLURM_PLUGIN_DIR + (":" + self.plugin_dir if self.plugin_dir else "")
        lines = [
            "ClusterName=topotest",
            "SlurmctldHost=%s(127.0.0.1)" % self.host,
            "SlurmctldPort=%d" % ports,
            "SlurmdPort=%d" % (ports + 1),
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "AuthInfo=socket=%s" % self.munge_socket,
            "SlurmUser=root",
            "SlurmdUser=root",
            "StateSaveLocation=%s" % self.path("state"),
            "SlurmdSpoolDir=%s" % self.path("spool", "%n"),
            "SlurmctldPidFile=%s" % self.path("slurmctld.pid"),
            "SlurmdPidFile=%s" % self.path("slurmd-%n.pid"),
            "SlurmctldLogFile=%s" % self.path("log", "slurmctld.log"),
            "SlurmdLogFile=%s" % self.path("log", "slurmd-%n.log"),
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "PluginDir=%s" % plugin_dir,
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "TopologyPlugin=topology/tree",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=1,bf_interval=1",
            "ReturnToService=2",
            "MpiDefault=none",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=300",
            "InactiveLimit=0",
            "MinJobAge=300",
            "KillWait=1",
            "Waittime=0",
            "SlurmctldParameters=enable_configless",
            "SlurmdParameters=config_overrides",
        ]
        if self.job_submit_plugins:
            lines.append("JobSubmitPlugins=%s" % self.job_submit_plugins)
        lines.extend(self.extra_conf)
        gres = ""
        if self.gpu_gres:
            gpu_type, count = self.gpu_gres.split(":")
            lines.append("GresTypes=gpu")
            gres = " Gres=gpu:%s:%s" % (gpu_type, count)
            dev = self.path("dev")
            os.makedirs(dev, exist_ok=True)
            for i in range(int(count)):
                open(os.path.join(dev, "nvidia%d" % i), "w").close()
            with open(self.path("gres.conf"), "w") as f:
                f.write("Name=gpu Type=%s File=%s/nvidia[0-%d]\n" % (gpu_type, dev, int(count) - 1))
        lines.append(
            "NodeName=gpu[0001-%04d] NodeHostname=%s NodeAddr=127.0.0.1 Port=%d-%d CPUs=1%s State=UNKNOWN"
            % (REAL_NODES, self.host, ports + 2, ports + 1 + REAL_NODES, gres))
        lines.append(
            "NodeName=gpu[%04d-%04d] NodeAddr=127.0.0.1 Port=%d CPUs=1%s State=DOWN"
            % (REAL_NODES + 1, TOTAL_NODES, ports + 1, gres))
        lines.append("PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE")
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(self.path("topology.conf"), "w") as f:
            f.write((self.topology_header + "\n" if self.topology_header else "") + topology_conf())

    # ---- lifecycle
    def start(self, timeout=60):
        try:
            self._start_munge()
            self.write_conf()
            subprocess.run(["slurmctld", "-f", self.conf, "-i"], check=True, env=self.env,
                           capture_output=True, timeout=30)
            self._adopt("slurmctld", self.path("slurmctld.pid"))
            for i in range(1, REAL_NODES + 1):
                n = node_name(i)
                os.makedirs(self.path("spool", n), exist_ok=True)
                subprocess.run(["slurmd", "-f", self.conf, "-N", n], check=True, env=self.env,
                               capture_output=True, timeout=30)
                self._adopt("slurmd " + n, self.path("slurmd-%s.pid" % n))
            self.wait_idle(REAL_NODES, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_idle(self, count, timeout=60):
        deadline = time.time() + timeout
        last = ""
        while time.time() < deadline:
            r = self.run(["sinfo", "-h", "-t", "idle", "-o", "%D"], check=False)
            last = r.stdout.strip() + r.stderr.strip()
            if r.returncode == 0 and sum(int(x) for x in r.stdout.split() or ["0"]) == count:
                return
            time.sleep(0.2)
        raise RuntimeError("the cluster did not get %d idle nodes in %ss (last: %r)\n%s"
                           % (count, timeout, last, self.log_tail()))

    def stop(self):
        # Jobs first: slurmstepd and the job's processes outlive slurmd.
        if self.pids:
            try:
                self.run(["scancel", "--user", str(os.getuid())], check=False, timeout=10)
                deadline = time.time() + 5
                while time.time() < deadline:
                    r = self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=10)
                    if r.returncode != 0 or not r.stdout.strip():
                        break
                    time.sleep(0.1)
            except (OSError, subprocess.SubprocessError):
                pass
        for name, pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        for name, pid in reversed(self.pids):
            while time.time() < deadline and _alive(pid):
                time.sleep(0.05)
            if _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.pids = []
        # Whatever is left of this cluster's jobs (slurmstepd, the job's
        # processes) carries SLURM_CONF=<our slurm.conf>: kill those PIDs.
        for pid in _pids_with_env("SLURM_CONF=" + self.conf):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def cleanup(self):
        self.stop()
        if os.environ.get("TOPO_KEEP_TMP"):
            print("kept", self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, name="slurmctld.log", chars=4000):
        try:
            with open(self.path("log", name), errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    # ---- commands
    def run(self, args, check=True, timeout=30, env=None):
        e = self.env if env is None else env
        r = subprocess.run(args, env=e, capture_output=True, text=True, timeout=timeout, cwd=self.dir)
        if check and r.returncode != 0:
            raise RuntimeError("%s failed (%d): %s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
        return r

    def show_job(self, job_id):
        r = self.run(["scontrol", "show", "job", "-o", str(job_id)])
        return parse_kv(r.stdout)

    def sbatch(self, *args, env=None):
        """Submits; returns (job id or None, completed process)."""
        r = self.run(["sbatch", "--parsable"] + list(args), check=False, env=env)
        job = None
        if r.returncode == 0:
            job = int(r.stdout.strip().split(";")[0].splitlines()[-1])
        return job, r

    def wait_job(self, job_id, states, timeout=30):
        deadline = time.time() + timeout
        info = {}
        while time.time() < deadline:
            info = self.show_job(job_id)
            if info.get("JobState") in states:
                return info
            time.sleep(0.1)
        raise RuntimeError("job %s did not reach %s in %ss: %s" % (job_id, states, timeout, info))

    def expand(self, hostlist):
        if not hostlist or hostlist == "(null)":
            return []
        r = self.run(["scontrol", "show", "hostnames", hostlist])
        return r.stdout.split()

    def cancel_all(self, timeout=30):
        self.run(["scancel", "--user", "root"], check=False)
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = self.run(["squeue", "-h", "-o", "%i"], check=False)
            if r.returncode == 0 and not r.stdout.strip():
                break
            time.sleep(0.1)
        self.wait_idle(REAL_NODES, timeout)


def _pids_with_env(entry):
    want = entry.encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if want in f.read().split(b"\0"):
                    out.append(int(d))
        except OSError:
            pass
    return out


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def parse_kv(text):
    """`scontrol show ... -o` one-liner -> dict. A token without '=' belongs
    to the previous value (values such as Reason may hold spaces)."""
    out = {}
    key = None
    for tok in text.strip().split(" "):
        if "=" in tok and not tok.startswith("="):
            key, _, val = tok.partition("=")
            out[key] = val
        elif key is not None:
            out[key] += " " + tok
    return out


def wait_socket(path, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline and not os.path.exists(path):
        time.sleep(0.05)
    if not os.path.exists(path):
        raise RuntimeError("topo-scheduler made no socket %s in %ss" % (path, timeout))


def ask(path, request, timeout=5):
    """One request line to topo-scheduler's Slurm socket, as job_submit/topo
    sends it; returns the answer line."""
    import json
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall((json.dumps(request) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.decode().strip()


def write_plugin_conf(cluster, sock, timeout_ms):
    """The job_submit/topo settings file (docs/slurm.md) in the cluster's
    directory. Tests that check toposched's placement give a generous
    timeout: a late answer makes the plugin fail open to Slurm's order."""
    with open(cluster.path("topo_plugin.conf"), "w") as f:
        f.write("# job_submit/topo settings (docs/slurm.md)\nsocket = %s\ntimeout_ms = %d\n"
                % (sock, timeout_ms))


def require(plugin):
    """Skips the test (exit 77) where Slurm is not installed; fails it where
    Slurm is but the job_submit plugin was not built."""
    if not have_slurm():
        print("SKIP: Slurm is not installed (apt-get install slurm-wlm munge)")
        sys.exit(77)
    if not os.path.exists(plugin):
        raise AssertionError("the plugin %s was not built: install libslurm-dev (slurm/slurm.h) "
                             "and configure again" % plugin)


@contextlib.contextmanager
def running(daemon, cluster):
    """The body of a Slurm test: prints the daemon's log and the Slurm
    daemons' log tails when it fails; stops topo-scheduler and the cluster
    (munged, slurmctld, slurmd) in any case."""
    try:
        yield
    except Exception:
        print(daemon.log(), file=sys.stderr)
        print(cluster.log_tail(), file=sys.stderr)
        raise
    finally:
        try:
            daemon.cleanup()
        finally:
            cluster.cleanup()
