#!/usr/bin/python3
"""The storage floor on a real small filesystem (a tmpfs the test mounts):
below min_free_disk_mb every write is refused with 507 and the reason while
reads go on; on a completely full disk the daemon still starts and serves
reads; nothing acknowledged is lost; once space is freed, writes work again.

Needs root (mount -t tmpfs); exits 77 (skipped) where mounting is refused.

usage: test_disk.py TOPO_SCHEDULER_BIN
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness import Daemon, Failure, check, run, setup_tiny

MIB = 1 << 20


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path, leave):
    """Writes ballast files under path until at most `leave` bytes are free."""
    i = 0
    chunk = b"\0" * (256 << 10)
    while free_bytes(path) > leave:
        with open(os.path.join(path, "ballast-%d" % i), "wb") as f:
            try:
                while free_bytes(path) > leave:
                    f.write(chunk)
                    f.flush()
            except OSError:
                break
        i += 1
        if i > 10000:
            raise Failure("could not fill %s" % path)


def main():
    binary = sys.argv[1]
    work = tempfile.mkdtemp(prefix="topo-disk-")
    mnt = os.path.join(work, "state")
    os.makedirs(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", mnt],
                      capture_output=True).returncode != 0:
        print("skipped: cannot mount a tmpfs here (needs root)")
        shutil.rmtree(work, ignore_errors=True)
        sys.exit(77)
    d = Daemon(binary, state_dir=mnt, config="min_free_disk_mb = 8\n", log_dir=work,
               config_dir=work)
    try:
        d.start()
        setup_tiny(d)
        acked = [d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "before-%d" % i},
                                            "command": ["true"]},
                       expect=201)["id"] for i in range(5)]

        # Below the floor: writes refused with the reason, reads go on.
        fill(mnt, 4 * MIB)
        time.sleep(0.3)  # the daemon asks the filesystem at most every 200 ms
        status, body = d.request("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["true"]},
                              token=d.admin_token)
        check(status == 507, "a submission below the floor: %s %s" % (status, body))
        check(body["error"]["code"] == "insufficient_storage" and
              "min_free_disk_mb" in body["error"]["message"], str(body))
        for method, path, b in (("POST", "/v1/jobs/%d/cancel" % acked[0], {}),
                                ("PUT", "/v1/tenants/org/x", {"shares": 1}),
                                ("POST", "/v1/users", {"name": "eve", "tenant": "default",
                                                       "role": "user"})):
            status, body = d.request(method, path, b, token=d.admin_token)
            check(status == 507, "%s %s below the floor: %s %s" % (method, path, status, body))
        jobs = d.api("GET", "/v1/jobs?all=1", expect=200)["jobs"]
        check(sorted(j["id"] for j in jobs) == sorted(acked), "reads go on: %s" % jobs)
        d.api("GET", "/v1/events", expect=200)

        # A completely full disk: the daemon restarts and serves reads.
        d.stop()
        fill(mnt, 0)
        d.start()
        jobs = d.api("GET", "/v1/jobs?all=1", expect=200)["jobs"]
        check(sorted(j["id"] for j in jobs) == sorted(acked),
              "every acknowledged job after a restart on a full disk: %s" % jobs)
        status, _ = d.request("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["true"]},
                              token=d.admin_token)
        check(status == 507, "writes on a full disk: %s" % status)

        # Space again: writes work again, without a restart.
        for name in os.listdir(mnt):
            if name.startswith("ballast-"):
                os.unlink(os.path.join(mnt, name))
        time.sleep(0.3)
        d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "after"}, "command": ["true"]}, expect=201)
        print("ok: 507 below the floor with reads going on, a restart on a full disk serving "
              "reads, %d acknowledged jobs kept, writes back once space is freed" % len(acked))
    except Exception:
        print(d.log(), file=sys.stderr)
        raise
    finally:
        try:
            d.stop()
        except Exception as e:  # noqa: BLE001 - the unmount must happen
            print("stopping: %s" % e, file=sys.stderr)
        subprocess.run(["umount", mnt], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run(main)
