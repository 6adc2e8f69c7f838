"""Drives the node program's etcd care against real etcd and moto, for
tests/it/etcd_status_moto.rs: three members of the test bed's etcd with
kubeadm's certificates (src/node/tests/test_etcd_real.py's EtcdMembers) at a
16 MiB `--quota-backend-bytes`, filled until etcd itself raises NOSPACE;
then, as on the leader's controller, `kube-aws-node etcd-maintenance`
(defrag.maintenance_main, writing status/etcd/maintenance.json through the
aws CLI to moto) and the backup tick's metrics (metrics.tick, PutMetricData
to moto).

KUBE_AWS_ROOT holds the controller's rendered /etc/kube-aws files (runtime,
etcd settings name); the moto environment comes from the caller. The
cluster's settings parameter gets the members' quota (16 MiB is under the
256 MiB cluster.yaml accepts). Prints one JSON line: what it saw and did.

    python3 etcd_nospace.py REPO
"""
import base64
import json
import os
import sys
import tempfile
import time


def main(repo):
    sys.path.insert(0, os.path.join(repo, "src", "node"))
    sys.path.insert(0, os.path.join(repo, "src", "node", "tests"))
    from kube_aws_node import awscall, defrag, etcd, metrics
    from test_etcd_real import EtcdMembers

    quota = 16 * 1024 * 1024

    class Members(EtcdMembers):
        EXTRA_ARGS = ["--quota-backend-bytes", str(quota)]
        BASE = 120

    Members.setUpClass()
    try:
        gw, endpoints = Members.client, Members.endpoints
        leader = [e for e in endpoints if etcd.is_leader(gw.status(e))][0]
        value = base64.b64encode(os.urandom(512 * 1024)).decode()
        refused, puts = None, 0
        for i in range(200):
            try:
                gw.call(endpoints, "/v3/kv/put", {"key": base64.b64encode(b"k/%06d" % i).decode(), "value": value})
                puts += 1
            except RuntimeError as e:
                refused = str(e)
                break
        raised = gw.call(endpoints, "/v3/maintenance/alarm", {"action": "GET"})[1].get("alarms") or []

        runtime = etcd.read_json(etcd.host(etcd.RUNTIME_JSON))
        aws = awscall.Aws(runtime["region"])
        name = etcd.read_json(etcd.host(etcd.ETCD_JSON))["settingsParameter"]
        settings = json.loads(aws(["ssm", "get-parameter", "--name", name])["Parameter"]["Value"])
        settings["quotaBackendBytes"] = quota
        aws(["ssm", "put-parameter", "--name", name, "--type", "String", "--overwrite",
             "--value", json.dumps(settings)])

        leader_ip = etcd.url_host(leader)
        imds = {"local-ipv4": leader_ip, "instance-id": "i-0123456789abcdef0",
                "local-hostname": "ip-10-0-1-5.us-west-2.compute.internal"}.get
        code = defrag.maintenance_main([], aws, imds=imds, gateway=gw)

        status = etcd.status_of(gw.status(leader))
        with tempfile.TemporaryDirectory() as tmp:
            published = metrics.tick(aws, runtime["cluster"], status, True, time.time() - 600, time.time(),
                                     os.path.join(tmp, "etcd-term.json"))
        print(json.dumps({"puts": puts, "refused": refused, "raised": raised, "leader": leader,
                          "dbSize": int(status.get("dbSize", 0)), "maintenanceExit": code,
                          "published": published}))
    finally:
        Members.tearDownClass()


if __name__ == "__main__":
    main(sys.argv[1])
