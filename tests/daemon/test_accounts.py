#!/usr/bin/python3
"""Unix accounts (docs/api.md, "Unix accounts") against a real daemon, with
real Unix accounts and a group the test creates (useradd, groupadd; removed
after):

  grant      a tenant-admin of org/a maps users only to accounts a
             cluster-admin granted org/a (`topo quota set --unix-accounts`,
             `--unix-group`): another tenant's researcher's account, an
             ungranted one and the user's own name by default are refused
             (403); a granted account and a member of the granted group are
             taken; `topo quota show` lists the grant.
  one tenant an account that is a user's of org/b is refused for a user of
             org/a (409 naming org/b), on POST and on PATCH, even from a
             cluster-admin.
  floor      accounts with a uid below min_job_uid on the scheduler host
             (`daemon`, uid 1; a system account useradd --system made) are
             refused at mapping, and at submission when the account was
             made after the mapping; an account the scheduler host does not
             know passes (the agents' floor decides).

Needs root (useradd). usage: test_accounts.py TOPO_SCHEDULER_BIN TOPO_BIN
"""

import json
import os
import pwd
import subprocess
import sys
import tempfile

from harness import Cli, Daemon, Failure, check, run, serving, setup_tiny

PREFIX = "tacct%d" % (os.getpid() % 100000)


def useradd(name, *flags):
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin"] + list(flags) +
                   [name], check=True, capture_output=True)


def cleanup_accounts(names, groups):
    for name in names:
        subprocess.run(["userdel", name], capture_output=True)
    for group in groups:
        subprocess.run(["groupdel", group], capture_output=True)


def main():
    if os.geteuid() != 0:
        print("skipping: the test creates Unix accounts (run as root)")
        sys.exit(77)
    d = Daemon(sys.argv[1]).start()
    home = tempfile.mkdtemp(prefix="topo-accounts-home-")
    cli = Cli(d, sys.argv[2], home)
    ra, rb, rg, other, late = (PREFIX + s for s in ("a", "b", "g", "o", "late"))
    group = PREFIX + "grp"
    made, groups = [], []
    with serving(d, home):
        try:
            subprocess.run(["groupadd", group], check=True, capture_output=True)
            groups.append(group)
            for name in (ra, rb, other):
                useradd(name, "--user-group")
                made.append(name)
            useradd(rg, "--user-group", "-G", group)
            made.append(rg)
            for name in made:
                check(pwd.getpwnam(name).pw_uid >= 1000, "%s is an ordinary account" % name)
            run_checks(d, cli, ra, rb, rg, other, late, group, made)
        finally:
            cleanup_accounts(made, groups)


def run_checks(d, cli, ra, rb, rg, other, late, group, made):
    setup_tiny(d)
    for t in ("org/a", "org/b"):
        d.api("PUT", "/v1/tenants/" + t, {"guaranteed_gpus": 8}, expect=201)
    d.api("POST", "/v1/users", {"name": "carol", "tenant": "org/a", "role": "tenant-admin",
                                "unix_user": PREFIX + "carol"}, expect=201)
    carol = d.api("POST", "/v1/tokens", {"user": "carol"}, expect=201)["token"]
    # org/b's researcher, mapped by a cluster-admin to their own account.
    d.api("POST", "/v1/users", {"name": "bob", "tenant": "org/b", "role": "user",
                                "unix_user": rb}, expect=201)

    def create(token, name, account=None, tenant="org/a"):
        body = {"name": name, "tenant": tenant, "role": "user"}
        if account is not None:
            body["unix_user"] = account
        return d.request("POST", "/v1/users", body, token)

    def message(out):
        return out["error"]["message"] if isinstance(out, dict) and "error" in out else str(out)

    # ---- grant: nothing is granted by default.
    for name, account in (("mallory", rb), ("m2", ra), ("m3", "daemon2")):
        status, out = create(carol, name, account)
        check(status == 403 and "not granted to org/a" in message(out) and
              out["error"].get("field") == "unix_user",
              "carol maps %s to %s without a grant: %s %s" % (name, account, status, out))
    status, out = create(carol, PREFIX + "zed")
    check(status == 403 and "not granted" in message(out),
          "the default account (the user's name) is a mapping too: %s %s" % (status, out))
    # The cluster-admin grants org/a one account and a group.
    cli.run(["quota", "set", "org/a", "--unix-accounts", ra + ",shared", "--unix-group", group])
    shown = cli.run(["quota", "show", "org/a"]).stdout
    check("Unix accounts:" in shown and ra in shown and "group " + group in shown,
          "quota show lists the grant: %s" % shown)
    view = d.api("GET", "/v1/tenants/org/a", expect=200)
    check(view["unix_accounts"] == [ra, "shared"] and view["unix_group"] == group, str(view))
    status, out = create(carol, "alice", ra)
    check(status == 201 and out["unix_user"] == ra, "a granted account: %s %s" % (status, out))
    status, out = create(carol, "gina", rg)
    check(status == 201, "a member of the granted group: %s %s" % (status, out))
    status, out = create(carol, "oscar", other)
    check(status == 403 and "not granted" in message(out), "not a member: %s %s" % (status, out))
    status, out = create(carol, "mallory", rb)
    check(status == 403, "bob's account is still not org/a's: %s %s" % (status, out))
    # carol may not grant herself more.
    status, out = d.request("PUT", "/v1/tenants/org/a", {"unix_accounts": [rb]}, carol)
    check(status == 403, "a tenant-admin sets no grant: %s %s" % (status, out))

    # ---- one tenant per account, even for a cluster-admin.
    status, out = create(d.admin_token, "mallory", rb)
    check(status == 409 and "tenant org/b" in message(out) and
          out["error"].get("field") == "unix_user", "bob's account for org/a: %s %s" % (status, out))
    status, out = d.request("PATCH", "/v1/users/alice", {"unix_user": rb}, d.admin_token)
    check(status == 409 and "tenant org/b" in message(out), "PATCH onto it: %s %s" % (status, out))
    d.api("PUT", "/v1/tenants/org/a", {"unix_accounts": [ra, "shared", rb]}, expect=200)
    status, out = d.request("PATCH", "/v1/users/alice", {"unix_user": rb}, carol)
    check(status == 409 and "tenant org/b" in message(out),
          "granted, but another tenant's: %s %s" % (status, out))
    accounts = {u["name"]: u["unix_user"] for u in d.api("GET", "/v1/users", expect=200)["users"]}
    check(accounts["alice"] == ra and "mallory" not in accounts, "nothing changed: %s" % accounts)
    # Two users of one tenant may share an account.
    status, out = create(carol, "alice2", ra)
    check(status == 201, "a second user of org/a on %s: %s %s" % (ra, status, out))

    # ---- the uid floor (min_job_uid, default 1000) on the scheduler host.
    status, out = create(d.admin_token, "svc", "daemon")
    check(status == 403 and "uid 1" in message(out) and "min_job_uid" in message(out),
          "daemon (uid 1): %s %s" % (status, out))
    sysacct = PREFIX + "sys"
    useradd(sysacct, "--system")
    made.append(sysacct)
    status, out = create(d.admin_token, "svc", sysacct)
    check(status == 403 and "below min_job_uid (1000)" in message(out),
          "a system account: %s %s" % (status, out))
    status, out = d.request("PATCH", "/v1/users/alice", {"unix_user": "root"}, d.admin_token)
    check(status == 403 and "allow_root_jobs" in message(out), "root: %s %s" % (status, out))
    # An account this host does not know passes; made later below the floor,
    # the submission is refused.
    status, out = create(d.admin_token, "lara", late)
    check(status == 201, "an account the scheduler host does not know: %s %s" % (status, out))
    lara = d.api("POST", "/v1/tokens", {"user": "lara"}, expect=201)["token"]
    useradd(late, "--system")
    made.append(late)
    status, out = d.request("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["id"]}, lara)
    check(status == 403 and "below min_job_uid" in message(out) and late in message(out),
          "a submission as a system account: %s %s" % (status, out))
    alice = d.api("POST", "/v1/tokens", {"user": "alice"}, expect=201)["token"]
    status, out = d.request("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["id"]}, alice)
    check(status == 201, "alice submits as %s: %s %s" % (ra, status, out))

    # Every change is in the audit log; the grant's too.
    audit = d.api("GET", "/v1/audit", expect=200)
    rows = audit["audit"] if isinstance(audit, dict) else audit
    check(any(r.get("action") == "tenant.accounts" for r in rows), "the grant is audited")
    print("ok: grants, one tenant per account and the uid floor hold; %s" %
          json.dumps(sorted(accounts)))


if __name__ == "__main__":
    run(main)
