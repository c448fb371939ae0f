#!/usr/bin/python3
"""Bad input: malformed and hostile requests against a real daemon.

Each case must get the right 4xx with a message that says what is wrong, and
change nothing: jobs, tenants, users, tokens, nodes, the event log and the
audit log read the same before and after.

usage: test_bad_input.py TOPO_SCHEDULER_BIN
"""

import json
import socket
import sys

from api_schema import Api
from harness import Daemon, Failure, check, run, serving, setup_tiny

API = Api()


# What a tenant's view says of now rather than of its state: fairshare usage,
# projected to the time of the read, grows while its jobs run.
TENANT_CLOCK_FIELDS = ("fairshare_gpu_hours", "own_fairshare_gpu_hours")


def tenants_state(d):
    out = d.api("GET", "/v1/tenants", expect=200)
    for t in out["tenants"]:
        for k in TENANT_CLOCK_FIELDS:
            t.pop(k)
    return out


def snapshot(d):
    # The views follow the API's schema (schema/api.schema.json) as well.
    return {
        "jobs": API.check("job_list", d.api("GET", "/v1/jobs?all=1", expect=200)),
        "tenants": tenants_state(d),
        "users": d.api("GET", "/v1/users", expect=200),
        "tokens": d.api("GET", "/v1/tokens", expect=200),
        "nodes": API.check("node_list", d.api("GET", "/v1/nodes", expect=200)),
        "seq": d.api("GET", "/v1/cluster", expect=200)["last_seq"],
        "audit": d.api("GET", "/v1/audit", expect=200),
        "partitions": API.check("partition_list", d.api("GET", "/v1/partitions", expect=200)),
        "reservations": API.check("reservation_list",
                                  d.api("GET", "/v1/reservations", expect=200)),
    }


def main():
    d = Daemon(sys.argv[1]).start()
    with serving(d):
        setup_tiny(d)
        for t in ("org/a", "org/b"):
            d.api("PUT", "/v1/tenants/" + t, {"guaranteed_gpus": 16}, expect=201)
        # The good values the bad ones below are measured against.
        d.api("PUT", "/v1/tenants/org/b", {"placement_wait_s": 600}, expect=200)
        if d.api("GET", "/v1/tenants/org/b", expect=200).get("placement_wait_s") != 600:
            raise Failure("PUT placement_wait_s 600 does not read back from GET /v1/tenants/org/b")
        d.api("POST", "/v1/users", {"name": "alice", "tenant": "org/a", "role": "user"}, expect=201)
        d.api("POST", "/v1/users", {"name": "bob", "tenant": "org/b", "role": "user"}, expect=201)
        alice = d.api("POST", "/v1/tokens", {"user": "alice"}, expect=201)["token"]
        bob_tok = d.api("POST", "/v1/tokens", {"user": "bob"}, expect=201)
        bob = bob_tok["token"]
        revoked = d.api("POST", "/v1/tokens", {"user": "alice"}, expect=201)
        d.api("DELETE", "/v1/tokens/" + revoked["id"], expect=200)
        bob_job = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8, "name": "bobs"}, "command": ["true"]}, token=bob, expect=201)["id"]
        done_job = d.api("POST", "/v1/jobs", {"spec": {"gpus": 8}, "command": ["true"]}, expect=201)["id"]
        d.api("POST", "/v1/jobs/%d/cancel" % done_job, expect=200)
        admin = d.admin_token
        far = 4102444800000  # 2100-01-01: the node-set rows' reservation

        job = lambda **kw: {"spec": dict({"gpus": 8}, **kw), "command": ["true"]}
        part = lambda **kw: dict({"name": "p2", "nodes": "n[0-1]"}, **kw)
        resv = lambda **kw: dict({"name": "r2", "nodes": "n[0-1]", "start_ms": far + 10**9,
                                  "duration_s": 60}, **kw)
        many = "n[0-100000]"  # 100,001 names
        deep = "[" * 100 + "]" * 100
        # (name, method, path, token, body (dict/str/bytes), extra headers, status, text in message)
        cases = [
            ("bad JSON", "POST", "/v1/jobs", admin, b'{"spec":', None, 400, "not valid JSON"),
            ("array body", "POST", "/v1/jobs", admin, [1, 2], None, 400, "JSON object"),
            ("string body", "POST", "/v1/jobs", admin, "job", None, 400, "JSON object"),
            ("empty body", "POST", "/v1/jobs", admin, b"", None, 400, "JSON object body"),
            ("no spec", "POST", "/v1/jobs", admin, {}, None, 400, "spec: missing; give the job spec v1"),
            ("gpus as string", "POST", "/v1/jobs", admin, {"spec": {"gpus": "8"}}, None, 400, "gpus"),
            ("negative gpus", "POST", "/v1/jobs", admin, {"spec": {"gpus": -8}}, None, 400, "gpus"),
            ("zero gpus", "POST", "/v1/jobs", admin, {"spec": {"gpus": 0}}, None, 400, "gpus"),
            ("huge gpus", "POST", "/v1/jobs", admin, {"spec": {"gpus": 10**12}}, None, 400, "gpus"),
            ("more than the cluster", "POST", "/v1/jobs", admin, job(gpus=1024), None, 400,
             "more than the cluster"),
            ("float gpus", "POST", "/v1/jobs", admin, {"spec": {"gpus": 8.5}}, None, 400, "gpus"),
            ("pids_max: zero", "POST", "/v1/jobs", admin, job(pids_max=0), None, 400,
             '"pids_max" must be an integer 1..4194304'),
            ("pids_max: past PID_MAX_LIMIT", "POST", "/v1/jobs", admin, job(pids_max=4194305), None,
             400, '"pids_max" must be an integer 1..4194304'),
            ("pids_max: a string", "POST", "/v1/jobs", admin, job(pids_max="64"), None, 400,
             '"pids_max" must be an integer'),
            ("pids_max: a float", "POST", "/v1/jobs", admin, job(pids_max=64.5), None, 400,
             '"pids_max" must be an integer'),
            ("client_request_id: a number", "POST", "/v1/jobs", admin,
             dict(job(), client_request_id=7), None, 400, "client_request_id: must be a string"),
            ("client_request_id: empty", "POST", "/v1/jobs", admin,
             dict(job(), client_request_id=""), None, 400, "client_request_id: must not be empty"),
            ("client_request_id: 65 bytes", "POST", "/v1/jobs", admin,
             dict(job(), client_request_id="k" * 65), None, 400,
             "client_request_id: is 65 bytes; at most 64"),
            ("client_request_id: a newline", "POST", "/v1/jobs", admin,
             dict(job(), client_request_id="a\nb"), None, 400, "letters, digits"),
            ("client_request_id: an object", "POST", "/v1/jobs", admin,
             dict(job(), client_request_id={"k": 1}), None, 400, "client_request_id: must be a string"),
            ("unknown field", "POST", "/v1/jobs", admin, dict(job(), color="red"), None, 400,
             "color: unknown field; allowed: spec, tenant"),
            ("unknown spec field", "POST", "/v1/jobs", admin, {"spec": {"gpus": 8, "gpu": 8}}, None, 400,
             "gpu"),
            ("layout product", "POST", "/v1/jobs", admin, job(gpus=12, parallelism={"tp": 8}), None, 400,
             "tp"),
            ("tp larger than an HBD", "POST", "/v1/jobs", admin, job(gpus=16, parallelism={"tp": 16}), None,
             400, "never be placed"),
            ("bad order", "POST", "/v1/jobs", admin, job(parallelism={"tp": 8, "order": "tp-xx"}), None, 400,
             "order"),
            ("priority out of range", "POST", "/v1/jobs", admin, dict(job(), priority=1000), None, 400,
             "priority"),
            ("user raises priority", "POST", "/v1/jobs", alice, dict(job(), priority=50), None, 403,
             "priority"),
            ("negative time limit", "POST", "/v1/jobs", admin, dict(job(), time_limit_s=-5), None, 400,
             "time_limit_s"),
            ("time limit as text", "POST", "/v1/jobs", admin, dict(job(), time_limit_s="2h"), None, 400,
             "time_limit_s"),
            ("zero checkpoint interval", "POST", "/v1/jobs", admin, dict(job(), checkpoint_interval_s=0),
             None, 400, "checkpoint_interval_s"),
            ("placement wait below never", "POST", "/v1/jobs", admin, dict(job(), placement_wait_s=-2),
             None, 400, "placement_wait_s"),
            ("placement wait over a week", "POST", "/v1/jobs", admin,
             dict(job(), placement_wait_s=8 * 86400), None, 400, "placement_wait_s"),
            ("placement wait as text", "POST", "/v1/jobs", admin, dict(job(), placement_wait_s="1h"),
             None, 400, "placement_wait_s"),
            ("dependency as a number", "POST", "/v1/jobs", admin, dict(job(), dependency=12), None, 400,
             "dependency"),
            ("dependency of an unknown kind", "POST", "/v1/jobs", admin, dict(job(), dependency="after:1"),
             None, 400, "dependency"),
            ("dependency on job 0", "POST", "/v1/jobs", admin, dict(job(), dependency="afterok:0"), None,
             400, "dependency"),
            ("dependency any-of", "POST", "/v1/jobs", admin, dict(job(), dependency="afterok:1?afterok:2"),
             None, 400, "dependency"),
            ("dependency of 65 jobs", "POST", "/v1/jobs", admin,
             dict(job(), dependency="afterok:" + ":".join(str(i) for i in range(1, 66))), None, 400,
             "dependency"),
            ("dependency 100 KB", "POST", "/v1/jobs", admin, dict(job(), dependency="a" * 100000), None, 400,
             "dependency"),
            ("dependency on a missing job", "POST", "/v1/jobs", admin, dict(job(), dependency="afterok:999999"),
             None, 400, "dependency"),
            ("array as a number", "POST", "/v1/jobs", admin, dict(job(), array=5), None, 400, "array"),
            ("array backwards", "POST", "/v1/jobs", admin, dict(job(), array="9-1"), None, 400, "array"),
            ("array of 100001 tasks", "POST", "/v1/jobs", admin, dict(job(), array="0-100000"), None, 400,
             "array"),
            ("array throttle 0", "POST", "/v1/jobs", admin, dict(job(), array="0-3%0"), None, 400, "array"),
            ("array index overflow", "POST", "/v1/jobs", admin, dict(job(), array="0-99999999999999999999"),
             None, 400, "array"),
            ("submit to another tenant", "POST", "/v1/jobs", alice, dict(job(), tenant="org/b"), None, 403,
             "may not submit"),
            ("tenant path trick", "POST", "/v1/jobs", admin, dict(job(), tenant="../etc"), None, 400,
             "tenant: must be a tenant name"),
            ("unknown tenant", "POST", "/v1/jobs", admin, dict(job(), tenant="nope"), None, 400,
             "does not exist"),
            ("command not an argv array", "POST", "/v1/jobs", admin, dict(job(), command="ls -l"), None,
             400, "command"),
            # Nothing to run: refused with the ways to give a command.
            ("no command", "POST", "/v1/jobs", admin, {"spec": {"gpus": 8}}, None, 400,
             "command: missing; say what every rank runs"),
            ("empty command", "POST", "/v1/jobs", admin, dict(job(), command=[]), None, 400, "command"),
            # How the processes start (docs/jobs.md): launch, env, chdir, output, error.
            ("launch mode unknown", "POST", "/v1/jobs", admin, dict(job(), launch="gpu"), None, 400,
             "launch: must be one of rank, node"),
            ("launch mode a number", "POST", "/v1/jobs", admin, dict(job(), launch=1), None, 400,
             "launch"),
            ("env not an object", "POST", "/v1/jobs", admin, dict(job(), env=["A=1"]), None, 400,
             "env"),
            ("env value a number", "POST", "/v1/jobs", admin, dict(job(), env={"A": 1}), None, 400,
             "env.A"),
            ("env name not an identifier", "POST", "/v1/jobs", admin, dict(job(), env={"A-B": "1"}),
             None, 400, "env.A-B: must be a variable name"),
            ("env name reserved", "POST", "/v1/jobs", admin, dict(job(), env={"WORLD_SIZE": "1"}),
             None, 400, "reserved"),
            ("env name TOPO_", "POST", "/v1/jobs", admin, dict(job(), env={"TOPO_JOB_ID": "1"}),
             None, 400, "reserved"),
            ("env CUDA_DEVICE_ORDER another order", "POST", "/v1/jobs", admin,
             dict(job(), env={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}), None, 400,
             "env.CUDA_DEVICE_ORDER"),
            ("env value too long", "POST", "/v1/jobs", admin,
             dict(job(), env={"A": "x" * 131072}), None, 400, "at most 131071"),
            ("env too many", "POST", "/v1/jobs", admin,
             dict(job(), env={"V%d" % i: "" for i in range(1025)}), None, 400, "at most 1024"),
            ("chdir relative", "POST", "/v1/jobs", admin, dict(job(), chdir="run"), None, 400,
             "absolute"),
            ("chdir a list", "POST", "/v1/jobs", admin, dict(job(), chdir=["/"]), None, 400, "chdir"),
            ("chdir too long", "POST", "/v1/jobs", admin, dict(job(), chdir="/" + "d" * 4095), None,
             400, "chdir"),
            ("chdir a newline", "POST", "/v1/jobs", admin, dict(job(), chdir="/a\nb"), None, 400,
             "control character"),
            ("output pattern unknown", "POST", "/v1/jobs", admin, dict(job(), output="o-%N.log"), None,
             400, "%j (job id)"),
            ("output a directory", "POST", "/v1/jobs", admin, dict(job(), output="/tmp/"), None, 400,
             "directory"),
            ("output empty", "POST", "/v1/jobs", admin, dict(job(), output=""), None, 400, "output"),
            ("error a number", "POST", "/v1/jobs", admin, dict(job(), error=2), None, 400, "error"),
            ("error too long", "POST", "/v1/jobs", admin, dict(job(), error="e" * 4096), None, 400,
             "error"),
            ("command with a number", "POST", "/v1/jobs", admin, dict(job(), command=["ls", 3]), None, 400,
             "command[1]"),
            ("deep nesting", "POST", "/v1/jobs", admin, deep.encode(), None, 400, "nested"),
            ("invalid UTF-8", "POST", "/v1/jobs", admin, b'{"spec":{"gpus":8,"name":"\xff\xfe"}}', None, 400,
             "JSON"),
            ("oversized body", "POST", "/v1/jobs", admin,
             b'{"spec":{"gpus":8,"name":"' + b"x" * (2 << 20) + b'"}}', None, 413, "larger"),
            # Above max_body_bytes but within max_topology_bytes: read and checked, not 413.
            ("topology above max_body_bytes", "PUT", "/v1/topology", admin,
             {"format": "json", "content": "x" * (3 << 19)}, None, 400, "content: invalid JSON"),
            ("not JSON content type", "POST", "/v1/jobs", admin, b'{"spec":{"gpus":8}}',
             {"Content-Type": "text/plain"}, 415, "Content-Type"),
            ("no token", "POST", "/v1/jobs", None, job(), None, 401, "token"),
            ("forged token", "POST", "/v1/jobs", "topo_" + "0" * 64, job(), None, 401, "unknown or revoked"),
            ("revoked token", "GET", "/v1/jobs", revoked["token"], None, None, 401, "unknown or revoked"),
            ("basic auth", "GET", "/v1/jobs", None, None, {"Authorization": "Basic YWRtaW46YWRtaW4="}, 401,
             "Bearer"),
            ("another tenant's job", "GET", "/v1/jobs/%d" % bob_job, alice, None, None, 404, "no job"),
            ("cancel another tenant's job", "POST", "/v1/jobs/%d/cancel" % bob_job, alice, None, None, 404,
             "no job"),
            ("hold another tenant's job", "POST", "/v1/jobs/%d/hold" % bob_job, alice, None, None, 404,
             "no job"),
            ("another tenant's events", "GET", "/v1/events?job=%d" % bob_job, alice, None, None, 404, "no job"),
            ("job id not a number", "GET", "/v1/jobs/abc", admin, None, None, 404, "no job"),
            ("negative job id", "GET", "/v1/jobs/-1", admin, None, None, 404, "no job"),
            ("unknown job", "GET", "/v1/jobs/99999999", admin, None, None, 404, "no job"),
            ("dot-dot path", "GET", "/v1/../../etc/passwd", admin, None, None, 404, "no such route"),
            ("encoded dot-dot", "GET", "/v1/jobs/%2e%2e/%2e%2e/admin-token", admin, None, None, 404,
             "no such route"),
            ("unknown route", "GET", "/v1/secrets", admin, None, None, 404, "no such route"),
            ("wrong method", "DELETE", "/v1/jobs", admin, None, None, 405, "use GET"),
            ("user sets quota", "PUT", "/v1/tenants/org/a", alice, {"guaranteed_gpus": 64}, None, 403,
             "cluster-admin"),
            ("negative quota", "PUT", "/v1/tenants/org/a", admin, {"guaranteed_gpus": -1}, None, 400,
             "guaranteed_gpus"),
            ("shares not a number", "PUT", "/v1/tenants/org/a", admin, {"shares": "x"}, None, 400, "shares"),
            ("tenant placement wait as text", "PUT", "/v1/tenants/org/a", admin,
             {"placement_wait_s": "30m"}, None, 400, "placement_wait_s"),
            # Limits per partition (docs/api.md, Tenants and quotas).
            ("tenant partitions: a list", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": [{"gb": {"max_gpus": 8}}]}, None, 400, "partitions must be an object"),
            ("tenant partitions: a string", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": "gb:max_gpus=8"}, None, 400, "partitions must be an object"),
            ("tenant partitions: limits a number", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"gb": 8}}, None, 400, "partitions.gb is number"),
            ("tenant partitions: limits a list", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"gb": [8]}}, None, 400, "partitions.gb is array"),
            ("tenant partitions: a name with a slash", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"a/b": {"max_gpus": 8}}}, None, 400,
             "partitions: 'a/b' has a character outside A-Z a-z 0-9 . _ -"),
            ("tenant partitions: a name starting with -", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"-gb": {"max_gpus": 8}}}, None, 400, "may not start with '-' or '.'"),
            ("tenant partitions: a name with an ESC", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"g\x1b[2J": {"max_gpus": 8}}}, None, 400, "has a character outside"),
            ("tenant partitions: an empty name", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"": {"max_gpus": 8}}}, None, 400, "partitions: a name is 1 to 64"),
            ("tenant partitions: a name of 65 bytes", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"p" * 65: {"max_gpus": 8}}}, None, 400, "a name is 1 to 64"),
            ("tenant partitions: a name of 100 KB", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"p" * 100000: {"max_gpus": 8}}}, None, 400, "a name is 1 to 64"),
            ("tenant partitions: 1001 of them", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"p%d" % i: {"max_gpus": 1} for i in range(1001)}}, None, 413,
             "at most 1000 partitions"),
            ("tenant partitions: an unknown key", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"gb": {"max_nodes": 1}}}, None, 400,
             'unknown field "max_nodes" in partitions.gb; known fields: max_gpus'),
            ("tenant partitions: negative", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"gb": {"max_gpus": -1}}}, None, 400,
             "partitions.gb.max_gpus must be a whole number in 0..100000000"),
            ("tenant partitions: huge", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"gb": {"max_job_gpus": 2 ** 40}}}, None, 400,
             "partitions.gb.max_job_gpus must be a whole number"),
            ("tenant partitions: past 2^64", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"gb": {"max_job_gpus": 2 ** 70}}}, None, 400,
             "partitions.gb.max_job_gpus must be a whole number"),
            ("tenant partitions: text", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"gb": {"max_running_jobs": "4"}}}, None, 400,
             "partitions.gb.max_running_jobs must be a whole number"),
            ("tenant partitions: a fraction", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"gb": {"max_gpus": 8.5}}}, None, 400, "partitions.gb.max_gpus must be"),
            ("tenant partitions: a boolean", "PUT", "/v1/tenants/org/a", admin,
             {"partitions": {"gb": {"max_gpus": True}}}, None, 400, "partitions.gb.max_gpus must be"),
            ("tenant partitions: by a user", "PUT", "/v1/tenants/org/a", alice,
             {"partitions": {"gb": {"max_gpus": 8}}}, None, 403, "cluster-admin"),
            ("user sets the policy", "PUT", "/v1/config/backfill", alice, {"value": False}, None, 403,
             "cluster-admin"),
            ("policy value an object", "PUT", "/v1/config/backfill", admin, {"value": {}}, None, 400,
             "value"),
            ("policy value missing", "PUT", "/v1/config/backfill", admin, {}, None, 400, "value"),
            ("policy value too long", "PUT", "/v1/config/preempt_grace_s", admin, {"value": "9" * 100},
             None, 400, "64 bytes"),
            ("policy value with a newline", "PUT", "/v1/config/preempt_grace_s", admin,
             {"value": "5\nstack = fifo-firstfit"}, None, 400, "newline"),
            ("policy key unknown", "PUT", "/v1/config/colour", admin, {"value": 1}, None, 400,
             "not a policy key"),
            ("fairshare bound negative", "PUT", "/v1/config/fairshare_max_wait_s", admin, {"value": -1},
             None, 400, "fairshare_max_wait_s"),
            ("fairshare bound past 30 days", "PUT", "/v1/config/fairshare_max_wait_s", admin,
             {"value": 2592001}, None, 400, "out of range"),
            ("attribution window negative", "PUT", "/v1/config/attribution_window_ms", admin,
             {"value": -1}, None, 400, "attribution_window_ms"),
            ("attribution window past 10 min", "PUT", "/v1/config/attribution_window_ms", admin,
             {"value": 600001}, None, 400, "out of range"),
            ("backfill depth zero", "PUT", "/v1/config/backfill_depth", admin, {"value": 0}, None,
             400, "backfill_depth"),
            ("backfill depth past 100000", "PUT", "/v1/config/backfill_depth", admin,
             {"value": 100001}, None, 400, "out of range"),
            ("backfill depth not a number", "PUT", "/v1/config/backfill_depth", admin,
             {"value": "deep"}, None, 400, "backfill_depth"),
            ("policy key fixed", "PUT", "/v1/config/stack", admin, {"value": "fifo-firstfit"}, None, 400,
             "new state directory"),
            ("bad tenant name", "PUT", "/v1/tenants/Org!", admin, {"shares": 1}, None, 400,
             "not a tenant name"),
            ("unknown quota field", "PUT", "/v1/tenants/org/a", admin, {"gpus": 1}, None, 400,
             'unknown field "gpus"'),
            ("user creates a user", "POST", "/v1/users", alice, {"name": "eve", "tenant": "org/a",
                                                                  "role": "user"}, None, 403, "admin"),
            ("bad role", "POST", "/v1/users", admin, {"name": "eve", "tenant": "org/a", "role": "root"}, None,
             400, "role"),
            ("bad user name", "POST", "/v1/users", admin, {"name": "Eve Smith", "tenant": "org/a",
                                                            "role": "user"}, None, 400, "name"),
            ("user exists", "POST", "/v1/users", admin, {"name": "bob", "tenant": "org/b", "role": "user"},
             None, 409, "exists"),
            ("model preset unknown", "POST", "/v1/jobs", alice,
             {"spec": {"gpus": 8, "model": "llama-9000"}, "command": ["x"]}, None, 400, "model"),
            ("model preset a number", "POST", "/v1/jobs", alice,
             {"spec": {"gpus": 8, "model": {"preset": 7}}, "command": ["x"]}, None, 400, "model"),
            ("memory limit zero", "POST", "/v1/jobs", alice,
             dict(job(), memory_mb_per_node=0), None, 400, "memory_mb_per_node"),
            ("memory limit a string", "POST", "/v1/jobs", alice,
             dict(job(), memory_mb_per_node="64G"), None, 400, "memory_mb_per_node"),
            ("cpus a string", "POST", "/v1/jobs", alice,
             dict(job(), cpus_per_node="lots"), None, 400, "cpus_per_node"),
            ("cpus negative", "POST", "/v1/jobs", alice,
             dict(job(), cpus_per_node=-2), None, 400, "cpus_per_node"),
            ("unix_user not an account name", "POST", "/v1/users", admin,
             {"name": "eve", "tenant": "org/a", "role": "user", "unix_user": "-rf"}, None, 400, "unix_user"),
            ("unix_user a number", "POST", "/v1/users", admin,
             {"name": "eve", "tenant": "org/a", "role": "user", "unix_user": 0}, None, 400, "unix_user"),
            ("unix_user too long", "POST", "/v1/users", admin,
             {"name": "eve", "tenant": "org/a", "role": "user", "unix_user": "a" * 33}, None, 400,
             "unix_user"),
            ("user name no account name", "POST", "/v1/users", admin,
             {"name": "eve@example.com", "tenant": "org/a", "role": "user"}, None, 400, "unix_user"),
            # Unix accounts (docs/api.md): the floor, one tenant per account, grants.
            ("unix_user: another tenant's account", "POST", "/v1/users", admin,
             {"name": "eve", "tenant": "org/a", "role": "user", "unix_user": "bob"}, None, 409,
             "already the account of a user of tenant org/b"),
            ("unix_user: PATCH onto another tenant's account", "PATCH", "/v1/users/alice", admin,
             {"unix_user": "bob"}, None, 409, "tenant org/b"),
            ("unix_user: a system account (daemon, uid 1)", "POST", "/v1/users", admin,
             {"name": "eve", "tenant": "org/a", "role": "user", "unix_user": "daemon"}, None, 403,
             "below min_job_uid (1000)"),
            ("unix_user: root", "PATCH", "/v1/users/alice", admin, {"unix_user": "root"}, None, 403,
             "allow_root_jobs"),
            ("grant: unix_accounts a string", "PUT", "/v1/tenants/org/a", admin,
             {"unix_accounts": "ada,bob"}, None, 400, "unix_accounts must be a list"),
            ("grant: an account a number", "PUT", "/v1/tenants/org/a", admin,
             {"unix_accounts": [7]}, None, 400, "unix_accounts[0] must be"),
            ("grant: an account not a name", "PUT", "/v1/tenants/org/a", admin,
             {"unix_accounts": ["ada", "a b"]}, None, 400, "unix_accounts[1] must be"),
            ("grant: an account of 33 bytes", "PUT", "/v1/tenants/org/a", admin,
             {"unix_accounts": ["a" * 33]}, None, 400, "unix_accounts[0] must be"),
            ("grant: an account twice", "PUT", "/v1/tenants/org/a", admin,
             {"unix_accounts": ["ada", "ada"]}, None, 400, "listed twice"),
            ("grant: 1001 accounts", "PUT", "/v1/tenants/org/a", admin,
             {"unix_accounts": ["u%d" % i for i in range(1001)]}, None, 400, "at most 1000"),
            ("grant: unix_group a number", "PUT", "/v1/tenants/org/a", admin,
             {"unix_group": 5}, None, 400, "unix_group must be"),
            ("grant: unix_group a path", "PUT", "/v1/tenants/org/a", admin,
             {"unix_group": "../wheel"}, None, 400, "unix_group must be"),
            ("grant: unix_group with a newline", "PUT", "/v1/tenants/org/a", admin,
             {"unix_group": "g\nx"}, None, 400, "unix_group must be"),
            ("grant: by a user", "PUT", "/v1/tenants/org/a", alice, {"unix_accounts": ["alice"]},
             None, 403, "cluster-admin"),
            ("user changes a user", "PATCH", "/v1/users/bob", alice, {"unix_user": "x"}, None, 403,
             "admin"),
            ("set unix_user to junk", "PATCH", "/v1/users/bob", admin, {"unix_user": "a b"}, None, 400,
             "unix_user"),
            ("set an unknown field", "PATCH", "/v1/users/bob", admin, {"role": "cluster-admin"}, None,
             400, 'unknown field "role"'),
            ("token for another user", "POST", "/v1/tokens", alice, {"user": "bob"}, None, 403,
             "only for yourself"),
            ("revoke another's token", "DELETE", "/v1/tokens/" + bob_tok["id"], alice, None, None, 404,
             "no token"),
            ("drain unknown nodes", "POST", "/v1/nodes/drain", admin, {"nodes": "n[0-99]"}, None, 400,
             "no node named"),
            ("bad hostlist", "POST", "/v1/nodes/drain", admin, {"nodes": "n[3-1]"}, None, 400, "nodes"),
            ("user drains", "POST", "/v1/nodes/drain", alice, {"nodes": "n0"}, None, 403, "cluster-admin"),
            ("bad topology", "PUT", "/v1/topology", admin, {"format": "json", "content": "{\"version\": 9}"},
             None, 400, "content"),
            # Node names no agent could register and no filter could name
            # (docs/formats.md, Node names), in every format.
            ("topology: a node name with an ESC", "PUT", "/v1/topology", admin,
             {"format": "json", "content": json.dumps(
                 {"version": 1, "name": "x", "tiers": ["node"], "nodes": ["n0", "n\x1b[2J"]})},
             None, 400, 'content: nodes[1]: node "n\\x1b[2J" is not a node name'),
            ("topology: a node name with a newline", "PUT", "/v1/topology", admin,
             {"format": "json", "content": json.dumps(
                 {"version": 1, "name": "x", "tiers": ["node"],
                  "nodes": [{"name": "n0\nn1", "gpus": 8}]})},
             None, 400, "nodes[0].name: node \"n0\\x0an1\" is not a node name"),
            ("topology: a node name of 300 bytes", "PUT", "/v1/topology", admin,
             {"format": "slurm", "content": "SwitchName=s0 Nodes=" + "n" * 300 + "\n"}, None, 400,
             "line 1: Nodes=: node"),
            ("topology: a node name with a slash", "PUT", "/v1/topology", admin,
             {"format": "slurm", "content": "SwitchName=s0 Nodes=a/b\n"}, None, 400,
             "1-64 bytes of A-Z a-z 0-9 . _ -"),
            ("topology: a Crux ip with an ESC", "PUT", "/v1/topology", admin,
             {"format": "crux", "content": "ip,DSW,PSW,ASW\nh\x1b" "c,G1,P1,S1\n"}, None, 400,
             "line 2: ip: node \"h\\x1bc\" is not a node name"),
            ("topology while jobs live", "PUT", "/v1/topology", admin,
             {"format": "slurm", "content": "SwitchName=s1 Nodes=x[0-3]\n"}, None, 409, "drain those nodes first"),
            ("topology: dry_run not a boolean", "PUT", "/v1/topology", admin,
             {"format": "slurm", "content": "SwitchName=s1 Nodes=x[0-3]\n", "dry_run": "yes"}, None, 400,
             "dry_run must be true or false"),
            ("topology: drain not a boolean", "PUT", "/v1/topology", admin,
             {"format": "slurm", "content": "SwitchName=s1 Nodes=x[0-3]\n", "drain": 1}, None, 400,
             "drain must be true or false"),
            ("topology: drain with dry_run", "PUT", "/v1/topology", admin,
             {"format": "slurm", "content": "SwitchName=s1 Nodes=x[0-3]\n", "drain": True,
              "dry_run": True}, None, 400, "choose one"),
            ("user imports topology", "PUT", "/v1/topology", alice, {"content": "x"}, None, 403,
             "cluster-admin"),
            ("cancel a finished job", "POST", "/v1/jobs/%d/cancel" % done_job, admin, None, None, 409,
             "already cancelled"),
            ("release a running job", "POST", "/v1/jobs/%d/release" % bob_job, admin, None, None, 409,
             "not held"),
            ("logs: rank past the job", "GET", "/v1/jobs/%d/logs?rank=8" % bob_job, admin, None, None,
             400, "rank must be a rank of the job: 0..7"),
            ("logs: offset not a number", "GET", "/v1/jobs/%d/logs?offset=abc" % bob_job, admin, None,
             None, 400, "offset"),
            ("logs: max zero", "GET", "/v1/jobs/%d/logs?max=0" % bob_job, admin, None, None, 400,
             "max must be"),
            ("logs: another tenant's job", "GET", "/v1/jobs/%d/logs" % bob_job, alice, None, None, 404,
             "no job"),
            ("logs: POST", "POST", "/v1/jobs/%d/logs" % bob_job, admin, None, None, 405, "GET"),
            ("logs: node without an agent", "GET", "/v1/jobs/%d/logs" % bob_job, admin, None, None, 503,
             "not connected"),
            ("checkpoint a finished job", "POST", "/v1/jobs/%d/checkpoint" % done_job, admin, None, None,
             409, "already cancelled"),
            ("checkpoint another tenant's job", "POST", "/v1/jobs/%d/checkpoint" % bob_job, alice, None,
             None, 404, "no job"),
            ("drain with an unknown mode", "POST", "/v1/nodes/drain", admin,
             {"nodes": "n0", "reason": "x", "mode": "gently"}, None, 400, "mode must be"),
            ("resume with a mode", "POST", "/v1/nodes/resume", admin, {"nodes": "n0", "mode": "immediate"},
             None, 400, "drain only"),
            ("limit zero", "GET", "/v1/jobs?limit=0", admin, None, None, 400, "limit"),
            ("query: '%' without hex digits", "GET", "/v1/jobs?state=%zz", admin, None, None, 400,
             "two hex digits"),
            ("query: '%' at the end", "GET", "/v1/nodes?domain=n%4", admin, None, None, 400,
             "query parameter domain"),
            ("query: an encoded key", "GET", "/v1/jobs?%6Cimit=0", admin, None, None, 400, "limit"),
            # A key twice: which one a reader takes differs between readers.
            ("query: a key twice", "GET", "/v1/jobs?limit=1&limit=2", admin, None, None, 400,
             "query parameter limit is given twice"),
            ("query: a key twice, once encoded", "GET", "/v1/jobs?limit=1&%6Cimit=2", admin, None,
             None, 400, "limit is given twice"),
            ("query: a key twice, empty values", "GET", "/v1/nodes?domain=&domain=", admin, None,
             None, 400, "domain is given twice"),
            ("query: a key twice on an off-strand read", "GET", "/v1/events?last=1&last=2", admin,
             None, None, 400, "last is given twice"),
            ("query: a key twice on /metrics", "GET", "/metrics?x=1&x=2", admin, None, None, 400,
             "x is given twice"),
            ("query: a key twice before the token", "GET", "/v1/jobs?a=1&a=2", None, None, None,
             400, "a is given twice"),
            # A parameter a route does not take is refused, never ignored.
            ("query: unknown parameter of /v1/jobs", "GET", "/v1/jobs?colour=red", admin, None,
             None, 400, 'unknown parameter "colour" for GET /v1/jobs; use all, tenant'),
            ("query: a misspelt filter", "GET", "/v1/jobs?users=bob", admin, None, None, 400,
             'unknown parameter "users"'),
            ("query: a parameter of a route that takes none", "GET", "/v1/tenants?all=1", admin,
             None, None, 400, "which takes none"),
            ("query: a parameter on an off-strand read", "GET", "/v1/whoami?x=1", admin, None,
             None, 400, 'unknown parameter "x" for GET /v1/whoami'),
            ("query: a parameter on a write", "POST", "/v1/jobs/%d/cancel?force=1" % bob_job,
             admin, None, None, 400, 'unknown parameter "force"'),
            ("query: a key with no name", "GET", "/v1/jobs?=5", admin, None, None, 400,
             "has no name"),
            # The path and target.
            ("path: '%' without hex digits", "GET", "/v1/jobs/%zz", admin, None, None, 400,
             "a '%' must start an escape"),
            ("path: '%' at the end", "GET", "/v1/jobs/1%", admin, None, None, 400,
             "a '%' must start an escape"),
            ("target: a fragment", "GET", "/v1/jobs#all", admin, None, None, 400, "fragment"),
            ("target: a fragment after the query", "GET", "/v1/jobs?all=1#x", admin, None, None,
             400, "fragment"),
            # Malformed Authorization headers: 400 naming it (another scheme
            # is a credential this API does not take: 401).
            ("authorization: Bearer alone", "GET", "/v1/jobs", None, None,
             {"Authorization": "Bearer"}, 400, "Authorization header is malformed"),
            ("authorization: an empty token", "GET", "/v1/jobs", None, None,
             {"Authorization": "Bearer "}, 400, "Authorization header is malformed"),
            ("authorization: two spaces", "GET", "/v1/jobs", None, None,
             {"Authorization": "Bearer  " + admin}, 400, "with one space"),
            ("authorization: a second word", "GET", "/v1/jobs", None, None,
             {"Authorization": "Bearer %s extra" % admin}, 400, "Authorization header is malformed"),
            ("authorization: a tab", "GET", "/v1/jobs", None, None,
             {"Authorization": "Bearer\t" + admin}, 400, "Authorization header is malformed"),
            ("authorization: a token of 257 bytes", "GET", "/v1/jobs", None, None,
             {"Authorization": "Bearer " + "a" * 257}, 400, "1-256"),
            ("authorization: a quote in the token", "GET", "/v1/jobs", None, None,
             {"Authorization": 'Bearer "%s"' % admin}, 400, "Authorization header is malformed"),
            ("authorization: Digest", "GET", "/v1/jobs", None, None,
             {"Authorization": "Digest username=admin"}, 401, "bearer tokens only"),
            ("content type: application/jsonx", "POST", "/v1/tokens", admin, b"{}",
             {"Content-Type": "application/jsonx"}, 415, "Content-Type"),
            ("unknown state filter", "GET", "/v1/jobs?state=sleeping", admin, None, None, 400, "state"),
            ("audit for a user", "GET", "/v1/audit", alice, None, None, 403, "cluster-admin"),
            ("audit: last zero", "GET", "/v1/audit?last=0", admin, None, None, 400, "last must be"),
            ("audit: last and limit", "GET", "/v1/audit?last=5&limit=5", admin, None, None, 400,
             "not both"),
            ("audit: last for a user", "GET", "/v1/audit?last=5", alice, None, None, 403,
             "cluster-admin"),
            ("events: unknown type", "GET", "/v1/events?type=warp", admin, None, None, 400,
             "unknown event type"),
            ("events: empty type in a list", "GET", "/v1/events?type=job_submitted,,tick", admin,
             None, None, 400, "unknown event type"),
            ("events: a command's type", "GET", "/v1/events?type=start_job", admin, None, None, 400,
             "unknown event type"),
            ("events: node with a space", "GET", "/v1/events?node=a%20b", admin, None, None, 400,
             "node must be a node name"),
            ("events: node too long", "GET", "/v1/events?node=" + "n" * 300, admin, None, None, 400,
             "node must be a node name"),
            ("events: node of 65 bytes", "GET", "/v1/events?node=" + "n" * 65, admin, None, None,
             400, "1-64 bytes"),
            ("events: node with an ESC", "GET", "/v1/events?node=n%1Bc", admin, None, None, 400,
             "node must be a node name"),
            ("events: empty node", "GET", "/v1/events?node=", admin, None, None, 400,
             "node must be a node name"),
            ("events: last zero", "GET", "/v1/events?last=0", admin, None, None, 400, "last must be"),
            ("events: last past the cap", "GET", "/v1/events?last=10001", admin, None, None, 400,
             "last must be"),
            ("events: last not a number", "GET", "/v1/events?last=ten", admin, None, None, 400,
             "last must be"),
            ("events: last and limit", "GET", "/v1/events?last=5&limit=5", admin, None, None, 400,
             "not both"),
            ("events: another tenant's job, newest", "GET", "/v1/events?job=%d&last=5&node=n0" % bob_job,
             alice, None, None, 404, "no job"),
            ("history: limit zero", "GET", "/v1/history?limit=0", admin, None, None, 400, "limit"),
            ("history: limit past the cap", "GET", "/v1/history?limit=1001", admin, None, None, 400,
             "limit"),
            ("history: after not a number", "GET", "/v1/history?after=x", admin, None, None, 400,
             "after"),
            ("history: since not a number", "GET", "/v1/history?since=yesterday", admin, None, None,
             400, "since must be"),
            ("history: negative until", "GET", "/v1/history?until=-5", admin, None, None, 400,
             "until must be"),
            ("history: until past year 9999", "GET", "/v1/history?until=" + "9" * 20, admin, None,
             None, 400, "until must be"),
            ("history: since after until", "GET", "/v1/history?since=2000&until=1000", admin, None,
             None, 400, "since must not be after until"),
            ("history: unknown state", "GET", "/v1/history?state=done", admin, None, None, 400,
             "unknown job state"),
            ("history: empty state in a list", "GET", "/v1/history?state=failed,", admin, None,
             None, 400, "unknown job state"),
            ("history: tenant path trick", "GET", "/v1/history?tenant=../x", admin, None, None, 400,
             "not a tenant name"),
            ("history: user too long", "GET", "/v1/history?user=" + "u" * 65, admin, None, None, 400,
             "not a user name"),
            ("history: unknown parameter", "GET", "/v1/history?job=3", admin, None, None, 400,
             'unknown parameter "job"'),
            ("history: POST", "POST", "/v1/history", admin, None, None, 405, "GET"),
            ("usage: unknown by", "GET", "/v1/reports/usage?by=node", admin, None, None, 400,
             "use tenant or user"),
            ("usage: empty by", "GET", "/v1/reports/usage?by=", admin, None, None, 400,
             "use tenant or user"),
            ("usage: since not a number", "GET", "/v1/reports/usage?since=7d", admin, None, None, 400,
             "since must be"),
            ("usage: since after until", "GET", "/v1/reports/usage?since=5000&until=10", alice, None,
             None, 400, "since must not be after until"),
            ("usage: after not a tenant", "GET", "/v1/reports/usage?by=tenant&after=A%20B", admin,
             None, None, 400, "after"),
            ("usage: after not a user", "GET", "/v1/reports/usage?by=user&after=" + "x" * 70, admin,
             None, None, 400, "after"),
            ("usage: limit zero", "GET", "/v1/reports/usage?limit=0", admin, None, None, 400, "limit"),
            ("usage: unknown parameter", "GET", "/v1/reports/usage?tenant=org/a", alice, None, None,
             400, 'unknown parameter "tenant"'),
            ("usage: unknown report", "GET", "/v1/reports/cost", admin, None, None, 404,
             "no such route"),
            ("gpu clear by a user", "POST", "/v1/nodes/n0/gpus/0/clear", alice, None, None, 403,
             "cluster-admin"),
            ("gpu clear: unknown node", "POST", "/v1/nodes/n99/gpus/0/clear", admin, None, None, 404,
             "no node named"),
            ("gpu clear: a GPU past the node's", "POST", "/v1/nodes/n0/gpus/8/clear", admin, None,
             None, 404, "no GPU 8"),
            ("gpu clear: GPU not a number", "POST", "/v1/nodes/n0/gpus/x/clear", admin, None, None,
             400, "must be an index"),
            ("gpu clear: negative GPU", "POST", "/v1/nodes/n0/gpus/-1/clear", admin, None, None, 400,
             "must be an index"),
            ("gpu clear: huge GPU", "POST", "/v1/nodes/n0/gpus/99999999999/clear", admin, None, None,
             400, "must be an index"),
            ("gpu clear: a healthy GPU", "POST", "/v1/nodes/n0/gpus/0/clear", admin, None, None, 409,
             "is healthy"),
            ("gpu clear: unknown field", "POST", "/v1/nodes/n0/gpus/0/clear", admin, {"why": "x"},
             None, 400, 'unknown field "why"'),
            ("gpu clear: reason a number", "POST", "/v1/nodes/n0/gpus/0/clear", admin, {"reason": 5},
             None, 400, "reason must be"),
            ("gpu clear: reason too long", "POST", "/v1/nodes/n0/gpus/0/clear", admin,
             {"reason": "r" * 1001}, None, 400, "reason must be"),
            ("gpu clear: array body", "POST", "/v1/nodes/n0/gpus/0/clear", admin, [1], None, 400,
             "JSON object"),
            ("gpu clear: GET", "GET", "/v1/nodes/n0/gpus/0/clear", admin, None, None, 405, "POST"),
            ("jobs: user not a user name", "GET", "/v1/jobs?user=Bob%20X", admin, None, None, 400,
             "not a user name"),
            ("jobs: user too long", "GET", "/v1/jobs?user=" + "b" * 65, admin, None, None, 400,
             "not a user name"),
            ("cluster: by an unknown grouping", "GET", "/v1/cluster?by=tenant", admin, None, None, 400,
             "by=domain"),
            ("cluster: by empty", "GET", "/v1/cluster?by=", admin, None, None, 400, "by=domain"),
            ("cluster: by huge", "GET", "/v1/cluster?by=" + "d" * 3000, admin, None, None, 400,
             "by=domain"),
            ("cluster: unknown parameter", "GET", "/v1/cluster?group=domain", admin, None, None, 400,
             'unknown parameter "group"'),
            ("nodes: unknown domain", "GET", "/v1/nodes?domain=leaf9", alice, None, None, 404,
             "no domain named"),
            ("nodes: empty domain", "GET", "/v1/nodes?domain=", admin, None, None, 400, "domain must be"),
            ("nodes: empty gpu_type", "GET", "/v1/nodes?gpu_type=", admin, None, None, 400,
             "gpu_type must be"),
            ("nodes: gpu_type too long", "GET", "/v1/nodes?gpu_type=" + "h" * 65, alice, None, None,
             400, "gpu_type must be"),
            ("nodes: unknown gpu_type", "GET", "/v1/nodes?gpu_type=B300", alice, None, None, 404,
             "no node has GPU type"),
            ("nodes: gpu_type with an ESC", "GET", "/v1/nodes?gpu_type=h%1b100", alice, None, None,
             404, "no node has GPU type"),
            ("nodes: domain too long", "GET", "/v1/nodes?domain=" + "x" * 300, admin, None, None, 400,
             "domain must be"),
            ("nodes: unknown parameter", "GET", "/v1/nodes?pod=spine0", admin, None, None, 400,
             'unknown parameter "pod"'),
            ("huge header", "GET", "/v1/jobs", admin, None, {"X-Filler": "y" * 40000}, 431, "headers"),
        ]
        check(len(cases) >= 40, "the table must hold at least 40 cases")
        failures = []

        def run_cases(cases):
            """Each row's answer, and the state unchanged after it; the state after."""
            before = snapshot(d)
            for name, method, path, token, body, headers, status, text in cases:
                raw = None
                kw = {}
                if isinstance(body, bytes):
                    raw = body
                    headers = dict({"Content-Type": "application/json"}, **(headers or {}))
                elif body is not None:
                    kw["body"] = body
                try:
                    got, out = d.request(method, path, token=token, headers=headers, raw=raw, **kw)
                except Exception as e:  # noqa: BLE001
                    failures.append("%s: %s %s -> no answer (%s)" % (name, method, path[:60], e))
                    continue
                message = (out["error"]["message"] if isinstance(out, dict) and "error" in out
                           else str(out))
                if got != status or text.lower() not in message.lower():
                    failures.append("%s: %s %s -> %s %r (wanted %s with %r)" %
                                    (name, method, path[:60], got, message[:200], status, text))
                after = snapshot(d)
                if after != before:
                    changed = [k for k in before if before[k] != after[k]]
                    failures.append("%s changed %s" % (name, ", ".join(changed)))
                    before = after
            return before

        run_cases(cases)
        # Partitions and reservations (docs/api.md): a default partition of
        # every node (so submissions naming none go on as before), a bounded
        # one and a far reservation the rows are measured against.
        d.api("POST", "/v1/partitions", {"name": "all", "nodes": "n[0-7]", "default": True},
              expect=201)
        d.api("POST", "/v1/partitions", {"name": "debug", "nodes": "n[6-7]", "max_gpus": 8,
                                         "max_time_s": 600, "tenants": ["org/b"]}, expect=201)
        d.api("POST", "/v1/reservations", {"name": "far", "nodes": "n[4-5]", "start_ms": far,
                                           "duration_s": 3600}, expect=201)
        set_cases = [
            # Partitions and reservations (docs/api.md): every field by type and size, and what
            # the scheduler refuses before anything is logged.
            ("partition: not an admin", "POST", "/v1/partitions", alice, part(), None, 403,
             "cluster-admin"),
            ("partition: no name", "POST", "/v1/partitions", admin, {"nodes": "n1"}, None, 400,
             "name: missing"),
            ("partition: a name of 65 bytes", "POST", "/v1/partitions", admin, part(name="p" * 65),
             None, 400, "at most 64"),
            ("partition: a name with a slash", "POST", "/v1/partitions", admin, part(name="a/b"),
             None, 400, "partition or reservation name"),
            ("partition: a name with an ESC", "POST", "/v1/partitions", admin,
             part(name="p\x1b[2J"), None, 400, "partition or reservation name"),
            ("partition: nodes a number", "POST", "/v1/partitions", admin, part(nodes=5), None, 400,
             "must be a hostlist"),
            ("partition: nodes an object", "POST", "/v1/partitions", admin, part(nodes={"n1": 1}),
             None, 400, "must be a hostlist"),
            ("partition: nodes empty", "POST", "/v1/partitions", admin, part(nodes=""), None, 400,
             "at least one node"),
            ("partition: nodes an empty array", "POST", "/v1/partitions", admin, part(nodes=[]),
             None, 400, "at least one node"),
            ("partition: 100001 nodes", "POST", "/v1/partitions", admin, part(nodes=many), None,
             400, "nodes: "),
            ("partition: 100001 nodes in an array", "POST", "/v1/partitions", admin,
             part(nodes=["n1"] * 100001), None, 400, "at most 100000"),
            ("partition: a node name of 65 bytes", "POST", "/v1/partitions", admin,
             part(nodes=["n" * 65]), None, 400, "not a node name"),
            ("partition: a node twice", "POST", "/v1/partitions", admin, part(nodes="n1,n1"), None,
             400, "twice"),
            ("partition: an unknown node", "POST", "/v1/partitions", admin, part(nodes="n[0-9]"),
             None, 400, "n8"),
            ("partition: a negative max time", "POST", "/v1/partitions", admin,
             part(max_time_s=-1), None, 400, "max_time_s"),
            ("partition: a max time as text", "POST", "/v1/partitions", admin,
             part(max_time_s="2h"), None, 400, "max_time_s"),
            ("partition: a default past the max", "POST", "/v1/partitions", admin,
             part(default_time_s=7200, max_time_s=3600), None, 400, "more than max_time_s"),
            ("partition: a tier of 1001", "POST", "/v1/partitions", admin, part(priority_tier=1001),
             None, 400, "priority_tier"),
            ("partition: tenants a string", "POST", "/v1/partitions", admin, part(tenants="org"),
             None, 400, "tenants"),
            ("partition: a tenant not a name", "POST", "/v1/partitions", admin,
             part(tenants=["../etc"]), None, 400, "tenants[0]"),
            ("partition: 1001 tenants", "POST", "/v1/partitions", admin,
             part(tenants=["org"] * 1001), None, 400, "at most 1000"),
            ("partition: preemptible as text", "POST", "/v1/partitions", admin,
             part(preemptible="yes"), None, 400, "true or false"),
            ("partition: an unknown field", "POST", "/v1/partitions", admin, part(color="red"),
             None, 400, "unknown field"),
            ("partition: show an unknown one", "GET", "/v1/partitions/nope", alice, None, None,
             404, "no partition nope"),
            ("partition: show a bad name", "GET", "/v1/partitions/-x", alice, None, None, 400,
             "not a partition name"),
            ("partition: delete an unknown one", "DELETE", "/v1/partitions/nope", admin, None,
             None, 404, "no partition nope"),
            ("partition: delete as a user", "DELETE", "/v1/partitions/debug", alice, None, None,
             403, "cluster-admin"),
            ("partition: a query parameter", "GET", "/v1/partitions?all=1", alice, None, None,
             400, 'unknown parameter "all"'),
            ("reservation: neither nodes nor gpus", "POST", "/v1/reservations", admin,
             {"name": "r2", "duration_s": 60}, None, 400, "give the nodes"),
            ("reservation: nodes and gpus", "POST", "/v1/reservations", admin, resv(gpus=8), None,
             400, "not both"),
            ("reservation: no duration or end", "POST", "/v1/reservations", admin,
             {"name": "r2", "nodes": "n1"}, None, 400, "duration_s"),
            ("reservation: a negative start", "POST", "/v1/reservations", admin,
             resv(start_ms=-1), None, 400, "start_ms"),
            ("reservation: a negative duration", "POST", "/v1/reservations", admin,
             resv(duration_s=-60), None, 400, "duration_s"),
            ("reservation: an end before the start", "POST", "/v1/reservations", admin,
             {"name": "r2", "nodes": "n1", "start_ms": far, "end_ms": far - 1}, None, 400,
             "is not after start_ms"),
            ("reservation: an end as text", "POST", "/v1/reservations", admin,
             {"name": "r2", "nodes": "n1", "end_ms": "later"}, None, 400, "end_ms"),
            ("reservation: in the past", "POST", "/v1/reservations", admin,
             {"name": "r2", "nodes": "n1", "start_ms": 1000, "duration_s": 60}, None, 400,
             "ends in the past"),
            ("reservation: a duration past the year 9999", "POST", "/v1/reservations", admin,
             resv(start_ms=253402300799000, duration_s=3600), None, 400, "9999"),
            ("reservation: 100001 nodes", "POST", "/v1/reservations", admin, resv(nodes=many),
             None, 400, "nodes: "),
            ("reservation: an unknown node", "POST", "/v1/reservations", admin,
             resv(nodes="n[6-9]"), None, 400, "n8"),
            ("reservation: overlapping another", "POST", "/v1/reservations", admin,
             {"name": "r2", "nodes": "n5", "start_ms": far + 60000, "duration_s": 60}, None, 409,
             "far"),
            ("reservation: gpus 0", "POST", "/v1/reservations", admin,
             {"name": "r2", "gpus": 0, "duration_s": 60}, None, 400, "gpus"),
            ("reservation: more GPUs than free nodes", "POST", "/v1/reservations", admin,
             {"name": "r2", "gpus": 100000, "duration_s": 60}, None, 400, "1 to 64 GPUs"),
            ("reservation: a partition without gpus", "POST", "/v1/reservations", admin,
             resv(partition="debug"), None, 400, "only chooses"),
            ("reservation: an unknown partition", "POST", "/v1/reservations", admin,
             {"name": "r2", "gpus": 8, "partition": "nope", "duration_s": 60}, None, 404,
             "no partition nope"),
            ("reservation: maintenance as a number", "POST", "/v1/reservations", admin,
             resv(maintenance=1), None, 400, "true or false"),
            ("reservation: not an admin", "POST", "/v1/reservations", bob, resv(), None, 403,
             "cluster-admin"),
            ("reservation: show an unknown one", "GET", "/v1/reservations/nope", bob, None, None,
             404, "no reservation nope"),
            ("reservation: delete an unknown one", "DELETE", "/v1/reservations/nope", admin, None,
             None, 404, "no reservation nope"),
            ("submit: an unknown partition", "POST", "/v1/jobs", admin, dict(job(), partition="nope"),
             None, 404, "nope"),
            ("submit: an unknown reservation", "POST", "/v1/jobs", admin,
             dict(job(), reservation="nope"), None, 404, "nope"),
            ("submit: a partition name too long", "POST", "/v1/jobs", admin,
             dict(job(), partition="p" * 65), None, 400, "partition: is 65 bytes"),
            ("submit: a partition as a number", "POST", "/v1/jobs", admin, dict(job(), partition=5),
             None, 400, "partition: must be a string"),
            ("submit: a partition that does not admit the tenant", "POST", "/v1/jobs", alice,
             dict(job(), partition="debug"), None, 403, "may not run in partition 'debug'"),
            ("submit: past the partition's max_gpus", "POST", "/v1/jobs", bob,
             dict(job(gpus=16), partition="debug"), None, 400, "debug"),
            ("submit: past the partition's max_time", "POST", "/v1/jobs", bob,
             dict(job(), partition="debug", time_limit_s=3600), None, 400, "debug"),
            ("nodes: an unknown partition", "GET", "/v1/nodes?partition=nope", alice, None, None,
             404, "no partition nope"),
            ("nodes: a bad partition name", "GET", "/v1/nodes?partition=-x", alice, None, None,
             400, "partition must be"),
        ]
        check(len(set_cases) >= 50, "the node-set table must hold at least 50 cases")
        before = run_cases(set_cases)
        # Generated from the API's schema: every field of a submission with a
        # wrong type, just out of range, too long, outside its character
        # class, missing, unknown or given twice; each refused naming it.
        for j in before["jobs"]["jobs"]:
            API.check("job_view", d.api("GET", "/v1/jobs/%d" % j["id"], expect=200))
        API.check("job_list", d.api("GET", "/v1/history", expect=200))
        generated = API.hostile("submit_request", job())
        check(len(generated) >= 80, "the schema gives %d hostile submissions" % len(generated))
        for what, body, field in generated:
            raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            try:
                got, out = d.request("POST", "/v1/jobs", token=admin, raw=raw,
                                     headers={"Content-Type": "application/json"})
            except Exception as e:  # noqa: BLE001
                failures.append("generated %s: no answer (%s)" % (what, e))
                continue
            error = out.get("error", {}) if isinstance(out, dict) else {}
            if got != 400 or error.get("field") != field:
                failures.append("generated %s: %s %r (wanted 400 naming %s)" %
                                (what, got, str(out)[:200], field))
        if snapshot(d) != before:
            failures.append("a generated hostile submission changed state")
        # The same for the bodies of POST /v1/partitions and /v1/reservations.
        valid_bodies = [
            ("partition_request", "/v1/partitions",
             part(max_time_s=3600, default_time_s=600, max_gpus=8, tenants=["org/a"],
                  priority_tier=1, preemptible=False, default=False)),
            ("reservation_request", "/v1/reservations",
             resv(tenants=["org/a"], maintenance=False)),
        ]
        for name, path, valid in valid_bodies:
            rows = API.hostile(name, valid)
            check(len(rows) >= 30, "the schema gives %d hostile %s bodies" % (len(rows), name))
            generated += rows
            for what, body, field in rows:
                raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                got, out = d.request("POST", path, token=admin, raw=raw,
                                     headers={"Content-Type": "application/json"})
                error = out.get("error", {}) if isinstance(out, dict) else {}
                if got != 400 or error.get("field") != field:
                    failures.append("generated %s %s: %s %r (wanted 400 naming %s)" %
                                    (name, what, got, str(out)[:200], field))
        if snapshot(d) != before:
            failures.append("a generated hostile node-set body changed state")
        # Malformed HTTP on the wire: 400 naming the part at fault (the
        # field of the error body), and the daemon keeps serving.
        host = b"Host: 127.0.0.1\r\n"
        auth = b"Authorization: Bearer " + admin.encode() + b"\r\n"
        json_body = b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        wire = [
            ("malformed request line", b"GARBAGE / NOT-HTTP\r\n\r\n", None, "malformed"),
            ("HTTP/2.0 as text", b"GET /v1/jobs HTTP/2.0\r\n" + host + b"\r\n", "version",
             "HTTP/1.0 or HTTP/1.1"),
            ("no Host", b"GET /v1/jobs HTTP/1.1\r\n" + auth + b"\r\n", "Host", "exactly one Host"),
            ("Host twice", b"GET /v1/jobs HTTP/1.1\r\n" + host + host + auth + b"\r\n", "Host",
             "exactly one Host"),
            ("Authorization twice", b"GET /v1/jobs HTTP/1.1\r\n" + host + auth + auth + b"\r\n",
             "Authorization", "given twice"),
            ("Content-Type twice", b"POST /v1/tokens HTTP/1.1\r\n" + host + auth +
             b"Content-Type: text/plain\r\n" + json_body, "Content-Type", "given twice"),
            ("Transfer-Encoding gzip", b"POST /v1/tokens HTTP/1.1\r\n" + host + auth +
             b"Content-Type: application/json\r\nTransfer-Encoding: gzip\r\n\r\n{}",
             "Transfer-Encoding", "chunked"),
            ("Transfer-Encoding chunked, gzip", b"POST /v1/tokens HTTP/1.1\r\n" + host + auth +
             b"Content-Type: application/json\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"
             b"2\r\n{}\r\n0\r\n\r\n", "Transfer-Encoding", "chunked"),
            ("Content-Length twice", b"POST /v1/tokens HTTP/1.1\r\n" + host + auth +
             b"Content-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
             "Content-Length", "given once"),
            ("Content-Length negative", b"POST /v1/tokens HTTP/1.1\r\n" + host + auth +
             b"Content-Type: application/json\r\nContent-Length: -1\r\n\r\n{}",
             "Content-Length", "whole number"),
            ("a bad chunk", b"POST /v1/tokens HTTP/1.1\r\n" + host + auth +
             b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
             "body", "chunk"),
            ("a header without a colon", b"GET /v1/jobs HTTP/1.1\r\n" + host + b"Junk\r\n\r\n",
             "headers", "NAME: VALUE"),
            ("a NUL in a header", b"GET /v1/jobs HTTP/1.1\r\n" + host + b"X-A: a\x00b\r\n\r\n",
             "headers", "control byte"),
            ("a NUL in the target", b"GET /v1/j\x00bs HTTP/1.1\r\n" + host + b"\r\n", "target",
             "not a path"),
            ("a target not a path", b"GET https://h/v1/jobs HTTP/1.1\r\n" + host + b"\r\n",
             "target", "must be a path"),
        ]
        for name, raw_request, field, text in wire:
            answer = d.raw_exchange(raw_request)
            head, _, body = answer.partition(b"\r\n\r\n")
            try:
                error = json.loads(body.decode(errors="replace").split("\n")[0])["error"]
            except (ValueError, KeyError, TypeError):
                error = {}
            if (b" 400 " not in head.split(b"\r\n", 1)[0] or text not in error.get("message", "")
                    or (field is not None and error.get("field") != field)):
                failures.append("%s: got %r (wanted 400 naming %s with %r)" %
                                (name, answer[:300], field, text))
        # Plain HTTP to the HTTPS port: told so, in plain HTTP, not reset.
        with socket.create_connection(("127.0.0.1", d.port), timeout=10) as plain:
            plain.sendall(b"GET /v1/jobs HTTP/1.1\r\n" + host + b"\r\n")
            answer = b""
            while True:
                chunk = plain.recv(4096)
                if not chunk:
                    break
                answer += chunk
        if not answer.startswith(b"HTTP/1.1 400 ") or b"speaks HTTPS only" not in answer:
            failures.append("plain HTTP to the HTTPS port: got %r" % answer[:200])
        if snapshot(d) != before:
            failures.append("malformed requests on the wire changed state")
        if failures:
            raise Failure("\n".join(failures))
        print("ok: %d bad requests refused (%d of them generated from the API's schema), "
              "nothing changed" % (len(cases) + len(generated) + len(wire) + 1, len(generated)))


if __name__ == "__main__":
    run(main)
