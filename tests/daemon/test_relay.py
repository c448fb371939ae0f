"""Connection sharing (issue 14): the `topo relay` process that keeps TLS
connections to the daemon open for one user's commands, against a real
daemon, real processes, real Unix sockets and a real second Unix account.

  - The first command answers directly (a TLS handshake) and starts the
    relay; the next ones go through it (no handshake in their process), and
    what they submit is in the daemon's store. The socket is 0600 in a 0700
    directory.
  - The relay holds no token: two users' commands through one relay are
    each themselves, a bad token is refused (401, exit 5).
  - A kept connection the daemon closed (idle_timeout_s) is not reused: a
    submission after it still succeeds, once. The relay closes one it kept
    after 5 s unused.
  - Hostile clients of the socket (garbage, huge headers, a huge body, an
    unknown method, an absolute-form target, silence) get 400 or are
    dropped, and the relay goes on serving.
  - Another user's process is never served (SO_PEERCRED), and a command
    never uses a relay run by another user.
  - The relay exits after --idle-exit and when its socket is removed; with
    XDG_RUNTIME_DIR its socket is there, not in the cache directory.
  - TOPO_SHARE_CONNECTION=0 and `share_connection = no` start none; a bad
    value is an error naming the setting.
  - With the daemon gone, a command through the relay gets the same
    "cannot connect" error (exit 7) as without it.

Usage: test_relay.py TOPO_SCHEDULER TOPO
"""

import faulthandler
import glob
import json
import os
import pty
import pwd
import select
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402


def env_for(daemon, home, token=None, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TOPO_") and not k.startswith("XDG_")}
    env.update(HOME=home, TOPO_SERVER=daemon.url, TOPO_CA=os.path.join(daemon.state_dir, "ca.pem"),
               TOPO_TOKEN=token or daemon.admin_token)
    env.update(extra)
    return env


run_topo = harness.run_topo
relay_pids = harness.relay_pids


def relay_socket(home, wait_s=10):
    """The relay socket under `home`'s cache, waiting for it to appear."""
    deadline = time.monotonic() + wait_s
    while True:
        found = glob.glob(os.path.join(home, ".cache", "topo", "relay-*.sock"))
        if found or time.monotonic() > deadline:
            return found[0] if found else None
        time.sleep(0.05)


def read_terminal(fd, wait_s=10):
    """What arrived on a pty within wait_s ("" when nothing did)."""
    ready, _, _ = select.select([fd], [], [], wait_s)
    return os.read(fd, 4096).decode() if ready else ""


def wait_gone(pids, wait_s=10):
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not any(os.path.exists("/proc/%d" % p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def raw(sock_path, data, timeout=10):
    """Sends `data` on the relay socket; returns everything it answers."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock_path)
    try:
        if data:
            s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the relay may close before it has read everything
    chunks = []
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            chunks.append(c)
    except OSError:
        pass
    s.close()
    return b"".join(chunks)


def test_shared(topo, daemon, home):
    env = env_for(daemon, home, TOPO_DEBUG_TLS="1")
    first = run_topo(topo, ["whoami"], env)
    check("tls: full handshake" in first.stderr, "the first command did not connect itself:\n%s"
          % first.stderr)
    sock = relay_socket(home)
    check(sock is not None, "no relay socket appeared in %s/.cache/topo" % home)
    check(stat.S_IMODE(os.stat(sock).st_mode) == 0o600, "the socket is not 0600")
    check(stat.S_IMODE(os.stat(os.path.dirname(sock)).st_mode) == 0o700,
          "the socket's directory is not 0700")
    pids = relay_pids(home)
    check(len(pids) == 1, "wanted one relay process, found %s" % pids)
    ids = []
    for _ in range(3):
        p = run_topo(topo, ["submit", "--gpus", "8", "--", "/bin/true"], env)
        check(p.stdout.startswith("Submitted job"), "no job: %r" % p.stdout)
        check("tls:" not in p.stderr,
              "a command with a relay running did TLS itself:\n%s" % p.stderr)
        ids.append(int(p.stdout.split()[2]))
    listed = {j["id"] for j in daemon.api("GET", "/v1/jobs?all=1", expect=200)["jobs"]}
    check(set(ids) <= listed, "relayed submissions %s missing from the store %s" % (ids, listed))
    check(relay_pids(home) == pids, "the relay was restarted")
    return sock, pids


def test_tokens(topo, daemon, home):
    daemon.api("POST", "/v1/users", {"name": "alice", "tenant": "default", "role": "user"},
               expect=201)
    alice = daemon.api("POST", "/v1/tokens", {"user": "alice"}, expect=201)["token"]
    me = json.loads(run_topo(topo, ["whoami", "--json"], env_for(daemon, home, alice)).stdout)
    check(me.get("user") == "alice", "alice through the relay is %s" % me)
    me = json.loads(run_topo(topo, ["whoami", "--json"], env_for(daemon, home)).stdout)
    check(me.get("user") == "admin", "the admin through the relay is %s" % me)
    p = run_topo(topo, ["queue"], env_for(daemon, home, "topo_" + "x" * 40), expect=5)
    check("401" in p.stderr or "token" in p.stderr.lower(), "a bad token: %s" % p.stderr)
    # alice cannot see the admin's jobs' commands through it either.
    jobs = json.loads(run_topo(topo, ["queue", "--all", "--json"],
                               env_for(daemon, home, alice)).stdout)
    for j in jobs.get("jobs", []):
        check(j.get("user") == "alice" or "command" not in j,
              "alice reads another user's command through the relay: %s" % j)


def test_stale_connection(topo, daemon, home, pids):
    # idle_timeout_s = 1: the daemon has closed the relay's kept connection.
    time.sleep(2.5)
    env = env_for(daemon, home, TOPO_DEBUG_TLS="1")
    p = run_topo(topo, ["submit", "--gpus", "8", "--", "/bin/true"], env)
    check(p.stdout.startswith("Submitted job") and "tls:" not in p.stderr,
          "after the daemon closed the kept connection: %r %r" % (p.stdout, p.stderr))
    job = int(p.stdout.split()[2])
    same = [j for j in daemon.api("GET", "/v1/jobs?all=1", expect=200)["jobs"]
            if j["id"] >= job]
    check(len(same) == 1, "the submission went in %d times" % len(same))
    check(relay_pids(home) == pids, "the relay was restarted")


def test_hostile(topo, daemon, home, sock, pids):
    rows = [
        ("garbage", b"\x00\x01\x02 not http\r\n\r\n", b"400"),
        ("huge header", b"GET /v1/whoami HTTP/1.1\r\nX: " + b"a" * 40000 + b"\r\n\r\n", b"400"),
        ("huge body", b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 1099511627776\r\n\r\n", b"400"),
        ("unknown method", b"BREW /v1/whoami HTTP/1.1\r\n\r\n", b"400"),
        ("absolute target", b"GET https://evil.example/v1/whoami HTTP/1.1\r\n\r\n", b"400"),
        ("bad timeout header", b"GET /v1/whoami HTTP/1.1\r\nTopo-Relay-Timeout-Ms: -5\r\n\r\n",
         b"401"),  # ignored; the daemon answers (no token: 401)
        ("silence", b"", b""),
        ("cut off", b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 100\r\n\r\n{", b""),
    ]
    for name, data, want in rows:
        answer = raw(sock, data)
        status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/1.1 ") else b""
        check(status == want, "%s: wanted %r, got %r" % (name, want, answer[:300]))
        if want == b"400":
            check(b"Topo-Relay: failed" in answer, "%s: no Topo-Relay header: %r"
                  % (name, answer[:300]))
    check(relay_pids(home) == pids, "a hostile client ended the relay")
    me = json.loads(run_topo(topo, ["whoami", "--json"], env_for(daemon, home)).stdout)
    check(me.get("user") == "admin", "after the hostile rows: %s" % me)


def test_other_user(topo, daemon, home):
    if os.geteuid() != 0:
        print("skipping the other-user checks: not root")
        return
    name = "toporelay%d" % (os.getpid() % 100000)
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    base = tempfile.mkdtemp(prefix="topo-relay-other-")
    try:
        pw = pwd.getpwnam(name)
        os.chmod(base, 0o755)
        cache = os.path.join(base, "cache")
        os.mkdir(cache, 0o700)
        os.chown(cache, pw.pw_uid, pw.pw_gid)
        ca = os.path.join(base, "ca.pem")
        shutil.copy(os.path.join(daemon.state_dir, "ca.pem"), ca)
        os.chmod(ca, 0o644)
        env = {"PATH": "/usr/bin:/bin", "HOME": base, "XDG_CACHE_HOME": cache}
        other = subprocess.Popen(
            [shutil.which("runuser") or "/usr/sbin/runuser", "-u", name, "--", os.path.abspath(topo), "relay", "--server", daemon.url, "--ca", ca,
             "--idle-exit", "60"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 10
            sock = None
            while sock is None and time.monotonic() < deadline:
                found = glob.glob(os.path.join(cache, "topo", "relay-*.sock"))
                sock = found[0] if found else None
                time.sleep(0.05)
            check(sock is not None, "the other user's relay made no socket: %s"
                  % (other.stderr.read1(4096) if other.poll() is not None else ""))
            # Root may reach the socket, but is not that user: closed unanswered.
            answer = raw(sock, b"GET /v1/whoami HTTP/1.1\r\n\r\n")
            check(answer == b"", "the other user's relay answered root: %r" % answer[:200])
            # A command of root's, pointed at that socket, does not use it.
            renv = env_for(daemon, home, XDG_CACHE_HOME=cache, TOPO_CA=ca, TOPO_DEBUG_TLS="1")
            p = run_topo(topo, ["whoami"], renv)
            check("served by another user" in p.stderr and "tls: " in p.stderr,
                  "root's command and the other user's relay:\n%s" % p.stderr)
        finally:
            other.terminate()
            other.wait(timeout=10)
    finally:
        subprocess.run(["userdel", name], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_lifetime(topo, daemon):
    home = tempfile.mkdtemp(prefix="topo-relay-life-")
    try:
        env = env_for(daemon, home)
        relay = subprocess.Popen([topo, "relay", "--idle-exit", "1"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        sock = relay_socket(home)
        check(sock is not None, "`topo relay` made no socket")
        run_topo(topo, ["queue"], env)
        try:
            relay.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise harness.Failure("the relay did not exit after --idle-exit 1")
        check(relay.returncode == 0, "the relay exited %d: %s"
              % (relay.returncode, relay.stderr.read()))
        check(not os.path.exists(sock), "the relay left its socket behind")
        # Its socket removed: it exits (a HOME deleted under it).
        relay = subprocess.Popen([topo, "relay", "--idle-exit", "600"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        sock = relay_socket(home)
        check(sock is not None, "`topo relay` made no socket")
        os.unlink(sock)
        try:
            relay.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise harness.Failure("the relay did not exit when its socket was removed")
        # A second relay for the same server leaves at once (one per socket);
        # on a terminal, each says what it does.
        controller, terminal = pty.openpty()
        first = subprocess.Popen([topo, "relay", "--idle-exit", "600"], env=env, stderr=terminal)
        check(relay_socket(home) is not None, "no socket")
        said = read_terminal(controller)
        check(said.startswith("topo relay: serving %s for %s; exits after 600 s"
                              % (relay_socket(home), daemon.url)), "on a terminal: %r" % said)
        second = subprocess.run([topo, "relay", "--idle-exit", "600"], env=env, timeout=10,
                                stderr=terminal)
        said = read_terminal(controller)
        check(second.returncode == 0 and first.poll() is None,
              "a second relay: exit %d, first %s" % (second.returncode, first.poll()))
        check("another relay already serves" in said, "the second relay said %r" % said)
        os.close(controller)
        os.close(terminal)
        first.terminate()
        first.wait(timeout=10)
        # Started for a socket these settings do not serve: refused, nothing made.
        wrong = os.path.join(home, "elsewhere.sock")
        p = run_topo(topo, ["relay", "--socket", wrong], env, expect=1)
        check("not " + wrong in p.stderr and not os.path.exists(wrong),
              "--socket of another server: %s" % p.stderr)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_runtime_dir(topo, daemon):
    """With XDG_RUNTIME_DIR (a login session's /run/user/UID), the socket is
    there, not in the (possibly NFS-shared) cache directory."""
    home = tempfile.mkdtemp(prefix="topo-relay-rt-home-")
    runtime = tempfile.mkdtemp(prefix="topo-relay-rt-")
    try:
        env = env_for(daemon, home, XDG_RUNTIME_DIR=runtime, TOPO_DEBUG_TLS="1")
        run_topo(topo, ["whoami"], env)
        deadline = time.monotonic() + 10
        while not glob.glob(os.path.join(runtime, "topo", "relay-*.sock")):
            check(time.monotonic() < deadline, "no relay socket in XDG_RUNTIME_DIR/topo")
            time.sleep(0.05)
        check(not glob.glob(os.path.join(home, ".cache", "topo", "relay-*")),
              "a relay socket or lock in the cache directory")
        p = run_topo(topo, ["queue"], env)
        check("tls:" not in p.stderr, "not through the relay: %s" % p.stderr)
        pids = relay_pids(runtime)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
    check(pids and wait_gone(pids), "the relay outlived its runtime directory")


def api_connections(daemon):
    """The daemon's open API connections, this request's own included."""
    status, text = daemon.request("GET", "/metrics", token=daemon.admin_token)
    check(status == 200, "GET /metrics: %s" % status)
    for line in text.splitlines():
        if line.startswith("topo_api_connections "):
            return int(float(line.split()[1]))
    raise harness.Failure("no topo_api_connections in /metrics")


def test_kept_connections(topo, scheduler):
    """A connection the relay keeps is closed after 5 s unused (a login
    node's relays count against the daemon's max_connections_per_user), while
    the relay itself stays; the next command opens one again."""
    daemon = harness.Daemon(scheduler)  # idle_timeout_s 120: the daemon closes nothing
    home = tempfile.mkdtemp(prefix="topo-relay-kept-")
    with harness.serving(daemon, home):
        daemon.start()
        env = env_for(daemon, home)
        run_topo(topo, ["whoami"], env)  # directly; starts the relay
        check(relay_socket(home) is not None, "no relay socket")
        run_topo(topo, ["queue"], env)  # through the relay, which keeps its connection
        pids = relay_pids(home)
        check(api_connections(daemon) == 2, "wanted the relay's connection and this one")
        time.sleep(6.5)
        check(api_connections(daemon) == 1, "the relay still holds a connection after 6.5 s")
        check(relay_pids(home) == pids, "the relay exited with its connection")
        run_topo(topo, ["queue"], env)
        check(api_connections(daemon) == 2, "no connection kept after the next command")


def test_disabled(topo, daemon):
    home = tempfile.mkdtemp(prefix="topo-relay-off-")
    try:
        run_topo(topo, ["queue"], env_for(daemon, home, TOPO_SHARE_CONNECTION="0"))
        time.sleep(0.5)
        check(relay_socket(home, wait_s=0) is None and not relay_pids(home),
              "TOPO_SHARE_CONNECTION=0 started a relay")
        conf = os.path.join(home, ".config", "topo")
        os.makedirs(conf)
        with open(os.path.join(conf, "config"), "w") as f:
            f.write("share_connection = no\n")
        run_topo(topo, ["queue"], env_for(daemon, home))
        time.sleep(0.5)
        check(relay_socket(home, wait_s=0) is None and not relay_pids(home),
              "share_connection = no started a relay")
        p = run_topo(topo, ["queue"], env_for(daemon, home, TOPO_SHARE_CONNECTION="maybe"),
                     expect=1)
        check("TOPO_SHARE_CONNECTION" in p.stderr, "a bad value: %s" % p.stderr)
        with open(os.path.join(conf, "config"), "w") as f:
            f.write("share_connection = sometimes\n")
        p = run_topo(topo, ["queue"], env_for(daemon, home), expect=1)
        check("share_connection" in p.stderr and "config:1" in p.stderr, "a bad line: %s"
              % p.stderr)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_daemon_gone(topo, daemon, home, pids):
    url = daemon.url
    daemon.kill9()
    p = run_topo(topo, ["queue"], env_for(daemon, home), expect=7)
    check("cannot connect to %s" % url in p.stderr and "is topo-scheduler running" in p.stderr,
          "through the relay, the daemon gone: %s" % p.stderr)
    # Removing the cache (the user's HOME going away) ends the relay.
    shutil.rmtree(os.path.join(home, ".cache"))
    check(wait_gone(pids), "the relay outlived its socket")


def step(name, fn, *args):
    """Runs one part, saying so (a hang then shows where it is)."""
    print("relay: %s" % name, flush=True)
    return fn(*args)


def main():
    # Well inside ctest's 300 s: a hang prints every thread's stack first.
    faulthandler.dump_traceback_later(240, exit=True)
    scheduler, topo = sys.argv[1], sys.argv[2]
    daemon = harness.Daemon(scheduler, config="idle_timeout_s = 1\n")
    home = tempfile.mkdtemp(prefix="topo-relay-home-")
    with harness.serving(daemon, home):
        daemon.start()
        harness.setup_tiny(daemon)
        sock, pids = step("shared", test_shared, topo, daemon, home)
        step("tokens", test_tokens, topo, daemon, home)
        step("stale connection", test_stale_connection, topo, daemon, home, pids)
        step("hostile clients", test_hostile, topo, daemon, home, sock, pids)
        step("another user", test_other_user, topo, daemon, home)
        step("lifetime", test_lifetime, topo, daemon)
        step("runtime dir", test_runtime_dir, topo, daemon)
        step("kept connections", test_kept_connections, topo, scheduler)
        step("disabled", test_disabled, topo, daemon)
        step("daemon gone", test_daemon_gone, topo, daemon, home, pids)
    print("ok: relay")


if __name__ == "__main__":
    harness.run(main)
