"""The `topo` CLI against a real daemon: one setting (TOPO_STATE_DIR or
--state-dir) for a local daemon in a non-default state directory, and TLS
session resumption across CLI processes (issue 14).

  - With only TOPO_STATE_DIR (or --state-dir) set, `topo` finds the daemon's
    endpoint, admin token and CA; a state directory without an endpoint is an
    error naming the setting; topo-scheduler started with TOPO_STATE_DIR and
    no --state-dir uses that directory.
  - The first `topo` process does a full handshake and saves the session in
    ~/.cache/topo (a 0700 directory, a 0600 file); the second resumes it
    (TOPO_DEBUG_TLS=1 prints "tls: resumed").
  - A first handshake against the system's CAs (SSL_CERT_FILE) verifies the
    daemon's chain, and refuses it against another CA.
  - A garbage, world-readable or foreign-owned cache file is ignored (full
    handshake, the command still works) and replaced by a good one; a session
    of another daemon, put under this daemon's file name, is not resumed: the
    server's certificate is verified in a full handshake.

Usage: test_cli_session.py TOPO_SCHEDULER TOPO
"""

import glob
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402


def topo_env(home, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TOPO_") and not k.startswith("XDG_")}
    env["HOME"] = home
    # Each process connects itself: this test is about the session cache
    # (test_relay.py covers the connection relay, which is on by default).
    env["TOPO_SHARE_CONNECTION"] = "0"
    env.update(extra)
    return env


run_topo = harness.run_topo


def cache_file(home, url, ca_path):
    """The cache file's name, as TlsSessionCache computes it."""
    with open(ca_path, "rb") as f:
        ca = f.read()
    digest = hashlib.sha256(url.encode() + b"\0" + ca).hexdigest()[:32]
    return os.path.join(home, ".cache", "topo", "tls-session-%s.pem" % digest)


def submit(topo, env, expect_tls):
    p = run_topo(topo, ["submit", "--gpus", "8", "--", "/bin/true"], env)
    check("Submitted job" in p.stdout, "no job submitted: %r" % p.stdout)
    check("tls: %s" % expect_tls in p.stderr,
          "wanted 'tls: %s' in stderr, got:\n%s" % (expect_tls, p.stderr))
    return p


def test_state_dir(topo, daemon, home):
    # Only TOPO_STATE_DIR: endpoint, admin token and CA all come from it.
    env = topo_env(home, TOPO_STATE_DIR=daemon.state_dir)
    p = run_topo(topo, ["whoami", "--json"], env)
    check('"role": "admin"' in p.stdout or '"admin"' in p.stdout, "not the admin: %s" % p.stdout)
    # The same with --state-dir.
    run_topo(topo, ["queue", "--state-dir", daemon.state_dir], topo_env(home))
    # A state directory without a daemon: an error that names the setting.
    empty = tempfile.mkdtemp(prefix="topo-empty-state-")
    try:
        p = run_topo(topo, ["queue"], topo_env(home, TOPO_STATE_DIR=empty), expect=1)
        check("TOPO_STATE_DIR" in p.stderr and "--state-dir" in p.stderr and empty in p.stderr,
              "the error should name TOPO_STATE_DIR, the directory and the fix: %s" % p.stderr)
        p = run_topo(topo, ["queue", "--state-dir", empty], topo_env(home), expect=1)
        check("from --state-dir" in p.stderr, "the error should name --state-dir: %s" % p.stderr)
    finally:
        shutil.rmtree(empty, ignore_errors=True)


def test_daemon_honours_state_dir(scheduler, topo, home):
    state = tempfile.mkdtemp(prefix="topo-env-state-")
    log = open(os.path.join(state, "daemon.log"), "wb")
    env = topo_env(home, TOPO_STATE_DIR=state)
    proc = subprocess.Popen([scheduler, "--listen", "127.0.0.1:0"], env=env, stdout=log, stderr=log)
    try:
        deadline = time.time() + 20
        while time.time() < deadline and not os.path.exists(os.path.join(state, "endpoint")):
            check(proc.poll() is None, "topo-scheduler exited %s" % proc.returncode)
            time.sleep(0.05)
        check(os.path.exists(os.path.join(state, "endpoint")),
              "topo-scheduler with TOPO_STATE_DIR wrote no endpoint in it")
        p = run_topo(topo, ["whoami"], env)
        check("admin" in p.stdout, "whoami through TOPO_STATE_DIR: %s" % p.stdout)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
        shutil.rmtree(state, ignore_errors=True)


def test_resumption(topo, daemon, other, home):
    env = topo_env(home, TOPO_STATE_DIR=daemon.state_dir, TOPO_DEBUG_TLS="1")
    ca = os.path.join(daemon.state_dir, "ca.pem")
    path = cache_file(home, daemon.url, ca)
    shutil.rmtree(os.path.join(home, ".cache"), ignore_errors=True)  # test_state_dir's

    submit(topo, env, "full handshake")
    check(os.path.exists(path), "no session cache file %s: %s" % (path, os.listdir(home)))
    check(stat.S_IMODE(os.stat(path).st_mode) == 0o600, "cache file mode %o" % os.stat(path).st_mode)
    check(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700, "cache dir not 0700")
    submit(topo, env, "resumed")
    submit(topo, env, "resumed")
    check(glob.glob(os.path.join(os.path.dirname(path), ".tls-session-*")) == [],
          "temporary files left behind")

    # Garbage: ignored, full handshake, replaced by a good session.
    with open(path, "w") as f:
        f.write("-----BEGIN SSL SESSION PARAMETERS-----\nnot base64 at all\n"
                "-----END SSL SESSION PARAMETERS-----\n")
    p = submit(topo, env, "full handshake")
    check("not a PEM TLS session" in p.stderr, "the garbage file was not reported: %s" % p.stderr)
    submit(topo, env, "resumed")

    # Readable by others: not trusted.
    os.chmod(path, 0o644)
    p = submit(topo, env, "full handshake")
    check("readable or writable by others" in p.stderr, "mode not reported: %s" % p.stderr)
    check(stat.S_IMODE(os.stat(path).st_mode) == 0o600, "the file was not replaced 0600")
    submit(topo, env, "resumed")

    # Owned by another user (root only can make one).
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
        p = submit(topo, env, "full handshake")
        check("owned by another user" in p.stderr, "owner not reported: %s" % p.stderr)
        check(os.stat(path).st_uid == 0, "the foreign file was not replaced")
        submit(topo, env, "resumed")

    # Another daemon's session under this daemon's name: its ticket means
    # nothing here, so a full handshake verifies this server's certificate.
    other_env = topo_env(home, TOPO_STATE_DIR=other.state_dir, TOPO_DEBUG_TLS="1")
    submit(topo, other_env, "full handshake")
    other_path = cache_file(home, other.url, os.path.join(other.state_dir, "ca.pem"))
    check(os.path.exists(other_path), "no cache file for the second daemon")
    shutil.copyfile(other_path, path)
    os.chmod(path, 0o600)
    submit(topo, env, "full handshake")
    submit(topo, env, "resumed")

    # The agents' mutual TLS is a separate context: an agent still registers
    # (covered by the agent tests); here, a client without a session cache
    # (no HOME) still works.
    bare = topo_env(home, TOPO_STATE_DIR=daemon.state_dir, TOPO_DEBUG_TLS="1")
    bare.pop("HOME")
    run_topo(topo, ["queue"], bare)

    # A new process's first (full) handshake against the system's CAs (no
    # --ca; OpenSSL's SSL_CERT_FILE stands in for the system store): the
    # chain is verified, signature digests included, with none of the
    # start-up tables a resumed session skips. And a CA that did not sign
    # the daemon's certificate is refused, naming what was checked.
    endpoint = open(os.path.join(daemon.state_dir, "endpoint")).read().split()[0]
    token_file = os.path.join(daemon.state_dir, "admin-token")
    system = topo_env(tempfile.mkdtemp(prefix="topo-cli-home-"),
                      SSL_CERT_FILE=os.path.join(daemon.state_dir, "ca.pem"), TOPO_DEBUG_TLS="1")
    p = run_topo(topo, ["whoami", "--server", endpoint, "--token-file", token_file], system)
    check("tls: full handshake" in p.stderr and "User:    admin" in p.stdout,
          "system-CA handshake: %s %s" % (p.stdout, p.stderr))
    system["SSL_CERT_FILE"] = os.path.join(other.state_dir, "ca.pem")
    shutil.rmtree(os.path.join(system["HOME"], ".cache"), ignore_errors=True)
    p = run_topo(topo, ["whoami", "--server", endpoint, "--token-file", token_file], system,
                 expect=7)
    check("TLS verification of %s failed: unable to get local issuer certificate" % endpoint
          in p.stderr, "wrong CA not refused by name: %s" % p.stderr)
    shutil.rmtree(system["HOME"], ignore_errors=True)


def main():
    scheduler, topo = sys.argv[1], sys.argv[2]
    home = tempfile.mkdtemp(prefix="topo-cli-home-")
    config = "rate_limit_per_second = 100000\n"
    daemon = harness.Daemon(scheduler, config=config)
    other = harness.Daemon(scheduler, config=config)
    daemon.start()
    with harness.serving(daemon, home):
        other.start()
        with harness.serving(other):
            harness.setup_tiny(daemon)
            harness.setup_tiny(other)
            test_state_dir(topo, daemon, home)
            test_resumption(topo, daemon, other, home)
            test_daemon_honours_state_dir(scheduler, topo, home)
    print("ok")


if __name__ == "__main__":
    harness.run(main)
