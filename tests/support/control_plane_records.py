"""Writes the control plane's two status objects to moto with the node
program's own code, for tests/it/control_plane_status_moto.rs:

- status/control-plane/upgrade.json: a controller's join that upgrades the
  cluster 1.35.4 -> 1.36.3 (upgrade.Upgrader.join, its steps and reports as on
  a node), against src/node/tests/test_upgrade.py's fake cluster (kubectl,
  kubeadm) and fake boot, whose `aws` is the node program's aws CLI wrapper
  (awscall.Aws) pointed at moto by the caller's environment. `failed` makes
  `kubeadm upgrade apply` fail, as test_upgrade does.
- status/control-plane/reconfigure.json: reconfigure.Controller.status with
  the fields Controller.apply passes it at the end of a run (applied) or on a
  failure at kube-apiserver (failed); the whole run is
  src/node/tests/test_reconfigure.py's (its lock and kubeadm phases need a
  node).

KUBE_AWS_ROOT is a scratch directory (the node's work directory).

    python3 control_plane_records.py REPO BUCKET KEY_PREFIX upgraded|failed
"""
import os
import sys


def main(repo, bucket, prefix, scenario):
    sys.path.insert(0, os.path.join(repo, "src", "node"))
    sys.path.insert(0, os.path.join(repo, "src", "node", "tests"))
    from kube_aws_node import awscall, paths, reconfigure, upgrade
    from test_upgrade import FakeBoot, FakeUpgrader

    work = paths.path(paths.WORK)
    os.makedirs(work, exist_ok=True)
    aws = awscall.Aws(os.environ.get("AWS_DEFAULT_REGION", "us-west-2"))
    rt = {"bucket": bucket, "keyPrefix": prefix, "role": "controller"}

    boot = FakeBoot(work)
    boot.rt = rt
    boot.aws = lambda args, attempts=None: aws(args, attempts=attempts)
    if scenario == "failed":
        boot.fail_on = ["kubeadm", "upgrade", "apply"]
    u = FakeUpgrader(boot, "1.36.3")
    try:
        u.join("/cfg", lambda: boot.sh(["kubeadm", "join", "--config", "x"]))
    except upgrade.UpgradeError as e:
        if scenario != "failed":
            raise
        print("the upgrade failed as asked: %s" % e)

    class Host(object):
        def clock(self):
            import time
            return time.time() - 300

    c = reconfigure.Controller(aws, Host(), rt, {"instanceId": "i-0ctl", "nodeName": "ip-10-0-1-6.ec2.internal"},
                               print)
    digest = "4f2a" * 16
    if scenario == "failed":
        c.status(phase="failed", sha256=digest, step="kube-apiserver",
                 message="kube-apiserver is not healthy (https://127.0.0.1:6443/readyz) after 300s; the manifests, "
                         "the kubelet config, kubeadm-config and kubelet-config are back as they were")
    else:
        c.status(phase="applied", sha256=digest, step="done", message="")


if __name__ == "__main__":
    main(*sys.argv[1:5])
