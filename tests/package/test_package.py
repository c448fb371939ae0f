#!/usr/bin/python3
"""The Debian packages (packaging/, `make package`) installed on this machine
and used the way an operator would, then purged:

  1. cpack in the build directory writes toposched-{scheduler,agent,client}
     (and toposched-slurm where the Slurm plugin is built); Depends comes
     from dpkg-shlibdeps, toposched-slurm's names the Slurm it was built for;
  2. `apt-get install` of all of them: the toposched system user, its 0700
     state directory, both units enabled and nothing started, the conffiles,
     topo(1); `systemd-analyze verify` passes on both installed units, and the
     installed topo-scheduler.conf names every key the daemon's parser knows;
  3. topo-scheduler runs from its unit's own ExecStart, User, Environment,
     limits, NoNewPrivileges and empty capability bounding set, and tells a
     stand-in for systemd READY=1 on $NOTIFY_SOCKET; the installed `topo`
     imports a topology, lists the nodes, submits and lists jobs with the
     credentials the daemon made on its first start;
  4. topo-agent runs from its unit's ExecStart (the environment file
     /etc/toposched/topo-agent.conf, the unit's capability bounding set and
     limits) with a certificate from the installed `topo-scheduler ca issue`:
     a job runs as an unprivileged account with no capabilities, survives a
     SIGTERM of the agent alone (what KillMode=process sends) and is adopted
     by the next agent;
  5. `apt-get remove` keeps the state, the settings and the user; `apt-get
     purge` leaves nothing: no package, file, directory, user or group.

systemd is not PID 1 here, so the test does what the units say itself; the
mount namespace settings (ProtectSystem, ProtectHome, PrivateTmp) are not
reproduced. It refuses (skips) a machine where toposched is installed or
its user exists, and skips without root or apt-get.

usage: test_package.py BUILD_DIR
Standard library only (/usr/bin/python3); run as root.
"""

import fcntl
import glob
import gzip
import json
import os
import pwd
import re
import resource
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "daemon"))
sys.path.insert(0, os.path.join(HERE, "..", "agent"))
from harness import Failure, check, run  # noqa: E402
from agents import (cgroup_mount, create_account, kill_cgroup_tree, remove_account,  # noqa: E402
                    wait_for)

SKIP = 77
UNITS = "/lib/systemd/system"
STATE = "/var/lib/toposched"
AGENT_STATE = "/var/lib/topo-agent"
ETC = "/etc/toposched"
USER = "toposched"
NODE = "gb000"  # the first node of packaging/demo-topology.json
APT_ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
# linux/capability.h, for the names topo-agent.service uses.
CAPABILITIES = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3,
                "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SYS_CHROOT": 18,
                "CAP_SYS_ADMIN": 21}


def sh(*args, check_rc=True, env=None, timeout=300):
    p = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=timeout)
    if check_rc and p.returncode != 0:
        raise Failure("%s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
    return p


def skip(why):
    print("SKIP: " + why)
    sys.exit(SKIP)


# ---- the units, read the way systemd reads them (what this test needs)

def read_unit(path):
    """{section: {key: [value, ...]}}; continuation lines joined."""
    sections, current, pending = {}, None, ""
    with open(path) as f:
        for raw in f:
            line = pending + raw.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                current = sections.setdefault(line.strip("[]"), {})
                continue
            key, _, value = line.partition("=")
            current.setdefault(key.strip(), []).append(value.strip())
    return sections


def specifiers(text):
    return re.sub(r"%([%H])", lambda m: "%" if m[1] == "%" else socket.gethostname(), text)


def unit_environment(service, user):
    """What systemd gives a service of `user`: its account's variables, then
    Environment=, then EnvironmentFile= (which wins)."""
    pw = pwd.getpwnam(user)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": pw.pw_dir, "USER": user, "LOGNAME": user, "SHELL": pw.pw_shell}
    for value in service.get("Environment", []):
        for assignment in shlex.split(specifiers(value)):
            k, _, v = assignment.partition("=")
            env[k] = v
    for value in service.get("EnvironmentFile", []):
        path = specifiers(value)
        optional = path.startswith("-")
        path = path.lstrip("-")
        if optional and not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line or line[0] in "#;" or "=" not in line:
                    continue
                k, _, v = line.partition("=")
                v = v.strip()
                if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
                    v = v[1:-1]
                env[k.strip()] = v
    return env


def exec_start(service, env):
    """ExecStart's argv: `$VAR` alone is split at whitespace, `${VAR}` is one
    word (or part of one), as systemd.service(5) says."""
    (line,) = service["ExecStart"]
    argv = []
    for word in shlex.split(specifiers(line)):
        whole = re.fullmatch(r"\$(\w+)", word)
        if whole:
            argv += env.get(whole[1], "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m[1], ""), word))
    return argv


def limit(value):
    return resource.RLIM_INFINITY if value == "infinity" else int(value)


def start_as_unit(service, env, log_path, extra_env=None):
    """Starts ExecStart as systemd would (User=, NoNewPrivileges=,
    CapabilityBoundingSet=, LimitNOFILE=/LimitMEMLOCK=, UMask 0022, cwd /)."""
    argv = exec_start(service, env)
    wrap = ["setpriv"]
    user = service.get("User", ["root"])[-1]
    if user != "root":
        wrap += ["--reuid", user, "--regid", service.get("Group", [user])[-1], "--init-groups"]
    if service.get("NoNewPrivileges", ["no"])[-1] == "yes":
        wrap.append("--no-new-privs")
    if "CapabilityBoundingSet" in service:
        caps = " ".join(service["CapabilityBoundingSet"]).split()
        wrap += ["--bounding-set",
                 ",".join(["-all"] + ["+" + c.lower().replace("cap_", "", 1) for c in caps])]
    limits = {}
    for res, key in ((resource.RLIMIT_NOFILE, "LimitNOFILE"),
                     (resource.RLIMIT_MEMLOCK, "LimitMEMLOCK")):
        if key in service:
            want, hard = limit(service[key][-1]), resource.getrlimit(res)[1]
            if hard != resource.RLIM_INFINITY and (want == resource.RLIM_INFINITY or want > hard):
                # Raising a hard limit takes CAP_SYS_RESOURCE, which some
                # containers do not give even to root; systemd has it.
                print("note: %s=%s cannot be set here (hard limit %d)" % (key, service[key][-1],
                                                                          hard))
                want = hard
            limits[res] = want

    def as_systemd():
        os.umask(0o022)
        for res, v in limits.items():
            resource.setrlimit(res, (v, v))

    log = open(log_path, "ab")
    proc = subprocess.Popen(wrap + ["--"] + argv, cwd="/", env=dict(env, **(extra_env or {})),
                            stdout=log, stderr=log, preexec_fn=as_systemd, start_new_session=True)
    return proc, argv


def tail(path, n=4000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


# ---- the steps

def build_packages(build):
    """cpack in the build directory; {component: .deb path}."""
    out = os.path.join(build, "packages")
    for old in glob.glob(os.path.join(out, "toposched-*.deb")):
        os.unlink(old)
    sh("cpack", "--config", os.path.join(build, "CPackConfig.cmake"), "-B", out, timeout=600)
    debs = {}
    for path in glob.glob(os.path.join(out, "toposched-*.deb")):
        debs[os.path.basename(path).split("_")[0][len("toposched-"):]] = path
    want = {"scheduler", "agent", "client"}
    if os.path.exists(os.path.join(build, "plugins", "slurm", "job_submit_topo.so")):
        want.add("slurm")
    check(set(debs) == want, "cpack wrote %s, expected toposched-%s" % (sorted(debs), sorted(want)))
    for comp, path in debs.items():
        depends = sh("dpkg-deb", "-f", path, "Depends").stdout
        check("libc6" in depends, "toposched-%s: Depends has no libc6 (dpkg-shlibdeps did not run):"
              " %r" % (comp, depends))
    if "slurm" in debs:
        depends = sh("dpkg-deb", "-f", debs["slurm"], "Depends").stdout
        have = sh("dpkg-query", "-W", "-f", "${Version}", "slurm-wlm-basic-plugins",
                  check_rc=False).stdout
        check(re.search(r"slurm-wlm-basic-plugins \(>= [0-9.]+\), slurm-wlm-basic-plugins "
                        r"\(<< [0-9.]+~\)", depends),
              "toposched-slurm depends on its Slurm release: %r" % depends)
        print("toposched-slurm: Depends %s (installed: %s)" % (depends.strip(), have))
    return debs


def check_installed(debs):
    """What the packages put in place, before anything runs."""
    for comp in debs:
        status = sh("dpkg-query", "-W", "-f", "${Status}", "toposched-" + comp).stdout
        check(status == "install ok installed", "toposched-%s: %s" % (comp, status))
    pw = pwd.getpwnam(USER)
    check(pw.pw_uid < 1000 and pw.pw_shell.endswith("nologin"),
          "%s is a system user without a shell: %s" % (USER, pw))
    st = os.stat(STATE)
    check(st.st_uid == pw.pw_uid and stat.S_IMODE(st.st_mode) == 0o700,
          "%s is %s's, 0700: uid %d mode %o" % (STATE, USER, st.st_uid, stat.S_IMODE(st.st_mode)))
    check(os.listdir(STATE) == [], "nothing ran yet, %s is empty: %s" % (STATE, os.listdir(STATE)))
    for unit in ("topo-scheduler.service", "topo-agent.service"):
        link = "/etc/systemd/system/multi-user.target.wants/" + unit
        check(os.path.islink(link) and os.readlink(link) == os.path.join(UNITS, unit),
              "%s is enabled (%s)" % (unit, link))
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            exe = os.readlink("/proc/%s/exe" % pid)
        except OSError:
            continue
        check(exe not in ("/usr/sbin/topo-scheduler", "/usr/sbin/topo-agent"),
              "the packages started nothing, but pid %s runs %s" % (pid, exe))
    for pkg, conf in (("scheduler", "topo-scheduler.conf"), ("agent", "topo-agent.conf")):
        listed = sh("dpkg-query", "-W", "-f", "${Conffiles}", "toposched-" + pkg).stdout
        check(os.path.join(ETC, conf) in listed, "%s is a conffile: %r" % (conf, listed))
    man_page = "/usr/share/man/man1/topo.1.gz"
    check(os.path.exists(man_page), "%s is installed (help2man, make deps)" % man_page)
    with gzip.open(man_page, "rt") as f:
        man = f.read()
    check(".TH TOPO" in man and "submit" in man, "topo(1) is help2man's page of topo --help")
    print("installed: %s" % ", ".join("toposched-" + c for c in sorted(debs)))


def check_units():
    for unit in ("topo-scheduler.service", "topo-agent.service"):
        p = sh("systemd-analyze", "verify", os.path.join(UNITS, unit), check_rc=False)
        check(p.returncode == 0 and unit not in p.stdout + p.stderr,
              "systemd-analyze verify %s: exit %d\n%s%s" % (unit, p.returncode, p.stdout, p.stderr))
    print("systemd-analyze verify: both units pass")


def check_conf_keys(work):
    """Every key the daemon's parser knows is in the installed file, commented."""
    probe = os.path.join(work, "probe.conf")
    with open(probe, "w") as f:
        f.write("no_such_key = 1\n")
    p = sh("/usr/sbin/topo-scheduler", "--config", probe, "--state-dir",
           os.path.join(work, "probe-state"), check_rc=False)
    m = re.search(r"known keys: (.*)", p.stderr)
    check(p.returncode != 0 and m, "an unknown key is refused with the known keys: %s" % p.stderr)
    known = {k.strip() for k in m[1].split(",")}
    with open(os.path.join(ETC, "topo-scheduler.conf")) as f:
        text = f.read()
    commented = set(re.findall(r"^# ?([a-z_]+) *=", text, re.M))
    check(not re.search(r"^[a-z_]+ *=", text, re.M),
          "every key of topo-scheduler.conf is commented out")
    check(known <= commented, "topo-scheduler.conf lacks keys: %s" % sorted(known - commented))
    check(commented <= known, "topo-scheduler.conf has keys the daemon refuses: %s"
          % sorted(commented - known))
    print("topo-scheduler.conf: all %d keys of the daemon's parser, commented out" % len(known))


def set_conf(path, line):
    """Uncomments (or adds) one `key = value` line, as an operator would."""
    key = line.split("=")[0].strip()
    with open(path) as f:
        text = f.read()
    text, n = re.subn(r"^# ?%s *=.*$" % key, line, text, count=1, flags=re.M)
    if n == 0:
        text += line + "\n"
    with open(path, "w") as f:
        f.write(text)


class Cli:
    """The installed topo, configured as docs/operations.md says."""

    def __init__(self, work, endpoint):
        home = os.path.join(work, "home")
        os.makedirs(os.path.join(home, ".config", "topo"), exist_ok=True)
        with open(os.path.join(home, ".config", "topo", "config"), "w") as f:
            f.write("server = %s\nca = %s/ca.pem\ntoken_file = %s/admin-token\n"
                    % (endpoint, STATE, STATE))
        self.env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": home}

    def __call__(self, *args, expect=0):
        p = subprocess.run(["/usr/bin/topo"] + list(args), env=self.env, capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == expect, "topo %s: exit %d\n%s%s" % (" ".join(args), p.returncode,
                                                                 p.stdout, p.stderr))
        return p.stdout

    def json(self, *args):
        """With --json, before any `--` that starts a job's command."""
        args = list(args)
        at = args.index("--") if "--" in args else len(args)
        return json.loads(self(*(args[:at] + ["--json"] + args[at:])))


def wait_ready(proc, notify, log_path, timeout=60):
    """The datagrams the daemon sends until READY=1."""
    deadline = time.time() + timeout
    got = []
    while time.time() < deadline:
        if proc.poll() is not None:
            raise Failure("topo-scheduler exited %d before READY=1:\n%s"
                          % (proc.returncode, tail(log_path)))
        try:
            got.append(notify.recv(4096).decode())
        except socket.timeout:
            continue
        if any("READY=1" in m.split("\n") for m in got):
            return got
    raise Failure("no READY=1 on NOTIFY_SOCKET in %ss (got %r):\n%s"
                  % (timeout, got, tail(log_path)))


def stop(proc, what, log_path, timeout=120):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise Failure("%s did not stop on SIGTERM:\n%s" % (what, tail(log_path)))
    check(proc.returncode == 0, "%s exited %d on SIGTERM:\n%s" % (what, proc.returncode,
                                                                  tail(log_path)))


def run_scheduler(work, cleanup):
    """topo-scheduler from its unit, as toposched; returns (proc, Cli)."""
    service = read_unit(os.path.join(UNITS, "topo-scheduler.service"))["Service"]
    check(service["Type"] == ["notify"], "topo-scheduler.service is Type=notify")
    check(service.get("CapabilityBoundingSet") == [""], "an empty capability bounding set")
    # systemd makes RuntimeDirectory= for the service's user.
    pw = pwd.getpwnam(USER)
    run_dir = "/run/toposched"
    os.makedirs(run_dir, mode=0o755, exist_ok=True)
    os.chown(run_dir, pw.pw_uid, pw.pw_gid)
    cleanup.append(lambda: shutil.rmtree(run_dir, ignore_errors=True))
    # A stand-in for systemd's notification socket.
    notify_dir = os.path.join(work, "notify")
    os.mkdir(notify_dir)
    os.chmod(notify_dir, 0o755)
    notify_path = os.path.join(notify_dir, "notify")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    os.chown(notify_path, pw.pw_uid, pw.pw_gid)
    notify.settimeout(0.2)
    env = unit_environment(service, USER)
    log_path = os.path.join(work, "topo-scheduler.log")
    proc, argv = start_as_unit(service, env, log_path, {
        "NOTIFY_SOCKET": notify_path, "STATE_DIRECTORY": STATE, "RUNTIME_DIRECTORY": run_dir})
    cleanup.append(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
    print("started as %s: %s" % (USER, " ".join(argv)))
    messages = wait_ready(proc, notify, log_path)
    with open(os.path.join(STATE, "endpoint")) as f:
        endpoint = f.read().strip()
    print("READY=1 (%r), serving %s" % (messages, endpoint))
    with open("/proc/%d/status" % proc.pid) as f:
        status = f.read()
    check(re.search(r"^CapBnd:\s*0+$", status, re.M)
          and re.search(r"^NoNewPrivs:\s*1$", status, re.M)
          and re.search(r"^Uid:\s*%d\b" % pw.pw_uid, status, re.M),
          "the daemon runs as %s, no capabilities, no new privileges:\n%s" % (USER, status))
    for name in os.listdir(STATE):
        st = os.lstat(os.path.join(STATE, name))
        check(st.st_uid == pw.pw_uid, "%s/%s belongs to %s" % (STATE, name, USER))
    check(stat.S_IMODE(os.stat(STATE).st_mode) == 0o700, "the state directory stays 0700")
    return proc, log_path, Cli(work, endpoint)


def smoke(cli):
    cli("topology", "import", os.path.join(SOURCE, "packaging", "demo-topology.json"))
    nodes = cli.json("nodes")["nodes"]
    check(len(nodes) == 288 and all(n["state"] == "down" for n in nodes),
          "288 nodes, down until their agents register: %s" % nodes[:2])
    jid = cli.json("submit", "--gpus", "64", "--tp", "4", "--time", "1h", "--name", "pkg-smoke",
                   "--", "/bin/true")["id"]
    queue = cli.json("queue")["jobs"]
    check([j["id"] for j in queue] == [jid] and queue[0]["state"] == "queued",
          "topo queue lists the job, queued (no nodes up): %s" % queue)
    cli("cancel", str(jid))
    print("topo: imported 288 nodes, submitted, listed and cancelled job %d" % jid)


def run_agent(work, cli, cleanup):
    """topo-agent from its unit and environment file, on node gb000."""
    certs = os.path.join(work, "certs")
    os.mkdir(certs)
    os.chown(certs, pwd.getpwnam(USER).pw_uid, -1)
    # As the daemon's user, so the CA's records stay its own (docs/operations.md).
    sh("runuser", "-u", USER, "--", "/usr/sbin/topo-scheduler", "--config",
       os.path.join(ETC, "topo-scheduler.conf"), "--state-dir", STATE, "ca", "issue", "--node",
       NODE, "--out", certs)
    agent_dir = os.path.join(ETC, "agent")
    check(stat.S_IMODE(os.stat(agent_dir).st_mode) == 0o700, "%s is root's 0700" % agent_dir)
    for path in (os.path.join(certs, NODE + ".pem"), os.path.join(certs, NODE + "-key.pem"),
                 os.path.join(STATE, "ca.pem")):
        shutil.copy(path, agent_dir)
    with open(os.path.join(STATE, "agent-endpoint")) as f:
        server = f.read().strip()
    mount = cgroup_mount()
    cgroup_root = os.path.join(mount, "topo-pkgtest-%d" % os.getpid()) if mount else "none"
    cleanup.append(lambda: kill_cgroup_tree(cgroup_root if mount else None))
    conf = os.path.join(ETC, "topo-agent.conf")
    set_conf(conf, "TOPO_AGENT_SERVER=" + server)
    set_conf(conf, "TOPO_AGENT_NODE=" + NODE)
    set_conf(conf, "TOPO_AGENT_OPTIONS=--gpu-backend simulated --gpus 4 --gpu-model GB200 "
             "--stop-grace-ms 1000 --cgroup-root " + cgroup_root)
    service = read_unit(os.path.join(UNITS, "topo-agent.service"))["Service"]
    check(service["KillMode"] == ["process"], "topo-agent.service is KillMode=process")
    env = unit_environment(service, "root")
    log_path = os.path.join(work, "topo-agent.log")

    def start():
        proc, argv = start_as_unit(service, env, log_path, {"STATE_DIRECTORY": AGENT_STATE})
        cleanup.append(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        return proc, argv

    def node_up():
        return [n["state"] for n in cli.json("nodes")["nodes"] if n["name"] == NODE] == ["up"]

    proc, argv = start()
    print("started as root with the unit's capabilities: %s" % " ".join(argv))
    wait_for(node_up, 30, "node %s up" % NODE)
    check(os.readlink("/proc/%d/exe" % proc.pid) == "/usr/sbin/topo-agent", "setpriv ran the agent")
    want = sum(1 << CAPABILITIES[c] for c in " ".join(service["CapabilityBoundingSet"]).split())
    with open("/proc/%d/status" % proc.pid) as f:
        bounding = int(re.search(r"^CapBnd:\s*([0-9a-f]+)", f.read(), re.M)[1], 16)
    check(bounding == want, "the agent's bounding set is the unit's: %x, not %x" % (want, bounding))

    # A job of an unprivileged account: what it is and what it may do.
    account = create_account("tpkg%d" % (os.getpid() % 100000))
    cleanup.append(lambda: remove_account(account))
    cli("users", "set", "admin", "--unix-user", account)
    jid = cli.json("submit", "--gpus", "4", "--time", "10m", "--wrap",
                   "id -un; grep CapEff /proc/self/status; echo started; sleep 600")["id"]

    def started():
        # A line of the rank's own output: the log's header quotes the
        # command, "echo started" included. Until the node has started the
        # rank there is no log to read (a loaded machine takes its time).
        p = subprocess.run(["/usr/bin/topo", "logs", str(jid)], env=cli.env,
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0 and "has not started on this node yet" in p.stderr:
            return False
        check(p.returncode == 0, "topo logs %d: exit %d\n%s%s" % (jid, p.returncode, p.stdout,
                                                                 p.stderr))
        return re.search(r"^started$", p.stdout, re.M) is not None

    wait_for(started, 60, "job %d's rank to start\n%s" % (jid, tail(log_path)))
    out = cli("logs", str(jid))
    check(account in out and re.search(r"CapEff:\s+0+\b", out),
          "the rank runs as %s with no capabilities: %s" % (account, out))
    # Every rank at its sleep (--gpus 4: a rank per GPU), so that the
    # account's processes are the ranks' and no short-lived `id` or `grep`.
    wait_for(lambda: [comm(p) for p in pids_of(account)].count("sleep") == 4, 30,
             "the 4 ranks to reach their sleep")
    ranks = pids_of(account)
    check(ranks, "the rank's processes run as %s" % account)

    # A stop of the unit signals the agent alone (KillMode=process): its ranks
    # stay and the next agent adopts them.
    stop(proc, "topo-agent", log_path)
    check(all(alive(p) for p in ranks), "the ranks outlive a SIGTERM of the agent")
    proc, _ = start()
    adopted = "adopted %d running rank(s)" % 4  # --gpus 4: a rank per GPU
    wait_for(lambda: adopted in tail(log_path, 100000), 30,
             "the new agent to adopt the rank\n%s" % tail(log_path))
    wait_for(node_up, 30, "node %s up again" % NODE)
    cli("cancel", str(jid))
    wait_for(lambda: not any(alive(p) for p in ranks), 30, "the cancelled job's rank to end")
    stop(proc, "topo-agent", log_path)
    print("topo-agent: job %d ran as %s without capabilities, outlived an agent stop, was "
          "adopted and cancelled" % (jid, account))


def pids_of(account):
    uid = pwd.getpwnam(account).pw_uid
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat("/proc/" + pid).st_uid == uid:
                out.append(int(pid))
        except OSError:
            pass
    return out


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def reinstall(debs):
    """An upgrade's maintainer script path (postinst configure OLD-VERSION):
    edited settings and the operator's disabled unit stay as they are."""
    sh("systemctl", "disable", "topo-agent.service")
    sh("apt-get", "install", "-y", "--reinstall", debs["scheduler"], debs["agent"], env=APT_ENV)
    with open(os.path.join(ETC, "topo-scheduler.conf")) as f:
        check(re.search(r"^listen = 127.0.0.1:0$", f.read(), re.M), "the settings are kept")
    check(not os.path.lexists("/etc/systemd/system/multi-user.target.wants/topo-agent.service"),
          "a unit the operator disabled stays disabled")
    check(os.path.islink("/etc/systemd/system/multi-user.target.wants/topo-scheduler.service"),
          "an enabled unit stays enabled")
    print("reinstall kept the settings and each unit's enabled state")


def remove_then_purge(debs, files):
    pkgs = ["toposched-" + c for c in sorted(debs)]
    sh("apt-get", "remove", "-y", *pkgs, env=APT_ENV)
    check(os.path.exists(os.path.join(STATE, "topo.db")), "remove keeps the state")
    check(os.path.exists(os.path.join(ETC, "topo-scheduler.conf")), "remove keeps the settings")
    check(os.path.exists(os.path.join(ETC, "agent", NODE + "-key.pem")),
          "remove keeps the node's certificates")
    pwd.getpwnam(USER)  # remove keeps the user
    check(not os.path.exists("/usr/sbin/topo-scheduler"), "remove takes the binaries")
    # What remove left behind ("rc": its conffiles); the others are gone.
    kept = [p for p in pkgs if sh("dpkg-query", "-W", "-f", "${db:Status-Abbrev}", p,
                                   check_rc=False).stdout.strip() == "rc"]
    check(set(kept) == {"toposched-scheduler", "toposched-agent"},
          "remove leaves the packages with conffiles: %s" % kept)
    sh("apt-get", "purge", "-y", *kept, env=APT_ENV)
    for pkg in pkgs:
        status = sh("dpkg-query", "-W", "-f", "${db:Status-Abbrev}", pkg, check_rc=False).stdout
        check(status.strip() in ("", "un"), "%s is purged (dpkg: %r)" % (pkg, status))
    for path in (STATE, AGENT_STATE, ETC):
        check(not os.path.exists(path), "purge removes %s" % path)
    for db, name in ((pwd.getpwnam, USER), (__import__("grp").getgrnam, USER)):
        try:
            db(name)
            raise Failure("purge removes the %s %s" % ("user" if db is pwd.getpwnam else "group",
                                                       name))
        except KeyError:
            pass
    left = [f for f in files if os.path.lexists(f) and not os.path.isdir(f)]
    check(not left, "purge removes every file the packages listed: %s" % left)
    for unit in ("topo-scheduler.service", "topo-agent.service"):
        check(not os.path.lexists("/etc/systemd/system/multi-user.target.wants/" + unit),
              "purge removes the enable link of %s" % unit)
    print("remove kept state, settings and user; purge left nothing")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    build = os.path.abspath(sys.argv[1])
    if os.geteuid() != 0:
        skip("installing packages needs root")
    for tool in ("apt-get", "dpkg-deb", "cpack", "setpriv", "runuser"):
        if shutil.which(tool) is None:
            skip("%s is not installed" % tool)
    if shutil.which("systemd-analyze") is None:
        raise Failure("systemd-analyze is missing: install the systemd package (make deps)")
    # One run at a time on a machine (two build trees, say): the second waits.
    lock = open("/run/lock/toposched-package-test.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    installed = sh("dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n", "toposched-*",
                   check_rc=False).stdout
    # Installed, or removed with its conffiles left ("rc"): either way dpkg
    # knows it, and a reinstall would not put back a conffile deleted since.
    if re.search(r"^toposched-\S+ [a-z][^n]", installed, re.M) or os.path.exists(ETC) or \
            os.path.exists(STATE) or subprocess.run(["getent", "passwd", USER],
                                                    capture_output=True).returncode == 0:
        skip("toposched is installed here (or its user, %s or %s exists): this test installs and "
             "purges the packages and will not touch that" % (ETC, STATE))

    debs = build_packages(build)
    work = tempfile.mkdtemp(prefix="topo-package-")
    os.chmod(work, 0o711)
    cleanup = []
    ok = False
    try:
        sh("apt-get", "install", "-y", "--no-install-recommends", *sorted(debs.values()),
           env=APT_ENV)
        files = []
        for comp in debs:
            files += sh("dpkg-query", "-L", "toposched-" + comp).stdout.split()
        check_installed(debs)
        check_units()
        check_conf_keys(work)
        # The one change an operator makes here: a free port, not 8443.
        set_conf(os.path.join(ETC, "topo-scheduler.conf"), "listen = 127.0.0.1:0")
        proc, log_path, cli = run_scheduler(work, cleanup)
        smoke(cli)
        run_agent(work, cli, cleanup)
        stop(proc, "topo-scheduler", log_path)
        print("topo-scheduler stopped on SIGTERM, exit 0")
        reinstall(debs)
        remove_then_purge(debs, files)
        ok = True
    finally:
        for undo in reversed(cleanup):
            try:
                undo()
            except Exception as e:  # keep cleaning up
                print("cleanup: %s" % e, file=sys.stderr)
        if not ok:
            for log in glob.glob(os.path.join(work, "*.log")):
                print("---- %s\n%s" % (log, tail(log)), file=sys.stderr)
            # dpkg, not apt-get: it purges whatever state each package is in.
            subprocess.run(["dpkg", "--purge"] + ["toposched-" + c for c in debs],
                           env=APT_ENV, capture_output=True)
            for path in (STATE, AGENT_STATE, ETC):
                shutil.rmtree(path, ignore_errors=True)
            subprocess.run(["deluser", "--system", USER], capture_output=True)
            subprocess.run(["delgroup", "--system", USER], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run(main)
