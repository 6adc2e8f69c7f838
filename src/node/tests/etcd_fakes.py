"""The recording fakes the etcd tests share (test_etcd.py,
test_etcd_backup.py): a clock, etcd's gateway, the aws CLI, IMDS, and a
temporary node root. Not a test module itself."""
import io
import json
import os
import tempfile
import unittest
from contextlib import redirect_stdout, redirect_stderr

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import etcd


def member(mid, ip, name=None, started=True):
    m = {"ID": mid, "name": name or "ip-%s" % ip.replace(".", "-"), "peerURLs": ["https://%s:2380" % ip]}
    if started:
        m["clientURLs"] = ["https://%s:2379" % ip]
    return m


START = etcd.parse_time("2026-12-01T03:00:00Z")


class FakeClock(object):
    def __init__(self, t=START):
        self.t = t
        self.slept = []

    def now(self):
        return self.t

    def sleep(self, s):
        self.slept.append(s)
        self.t += s


class FakeEtcd(object):
    """Members by endpoint reachability; records every call."""

    def __init__(self, members, down=(), remove_fails=0):
        self.members = list(members)
        self.down = set(down)
        self.remove_fails = remove_fails
        self.calls = []

    def _up(self, endpoints):
        up = [e for e in endpoints if e not in self.down]
        if not up:
            raise RuntimeError("no etcd endpoint answered")
        return up

    def member_list(self, endpoints):
        self.calls.append(("list", list(endpoints)))
        self._up(endpoints)
        return [dict(m) for m in self.members]

    def status(self, endpoint):
        self.calls.append(("status", endpoint))
        self._up([endpoint])
        return {"header": {"member_id": 0}}

    def member_remove(self, endpoints, mid):
        up = self._up(endpoints)
        self.calls.append(("remove", list(endpoints), mid))
        if self.remove_fails:
            self.remove_fails -= 1
            raise RuntimeError("etcdserver: request timed out")
        self.members = [m for m in self.members if etcd.as_id(m["ID"]) != etcd.as_id(mid)]
        return up[0]


class FakeAws(object):
    """Answers by the first two arguments; records every call."""

    def __init__(self, answers=None, failing=()):
        self.answers = answers or {}
        self.failing = dict(failing)  # (service, op) -> times it fails
        self.calls = []

    def __call__(self, args, attempts=None):
        self.calls.append(list(args))
        key = tuple(args[:2])
        if self.failing.get(key, 0):
            self.failing[key] -= 1
            raise RuntimeError("An error occurred (SlowDown) when calling %s" % args[1])
        a = self.answers.get(key)
        return a(args) if callable(a) else a

    def ops(self, service, op):
        return [c for c in self.calls if c[:2] == [service, op]]


SETTINGS = {"bucket": "b", "backupPrefix": "p/demo/etcd/", "intervalSeconds": 3600,
            "kmsKeyARN": "arn:aws:kms:us-west-2:111122223333:key/k", "controllerCount": 3,
            "lifecycleHook": "kube-aws-etcd-member", "lifecycleTimeoutSeconds": 300}
RUNTIME = {"cluster": "demo", "bucket": "b", "keyPrefix": "p/demo", "stackName": "demo-ControlPlane-1",
           "asgLogicalId": "ControllerGroup", "apiEndpoint": "api.example"}


def settings_answer(settings):
    return lambda args: {"Parameter": {"Value": json.dumps(settings)}}


def imds(ip="10.0.1.5", state="InService"):
    items = {"instance-id": "i-0abc", "local-hostname": "ip-10-0-1-5.ec2.internal", "local-ipv4": ip,
             "autoscaling/target-lifecycle-state": state}
    return lambda path: items.get(path)


def controllers(*ips):
    return lambda args: {"Reservations": [{"Instances": [{"PrivateIpAddress": ip} for ip in ips]}]}


def node(aws, ip="10.0.1.5", state="InService"):
    return etcd.Node(aws, imds(ip, state), runtime=dict(RUNTIME),
                     etcd_json={"settingsParameter": "/kube-aws/demo/etcd", "lifecycleHook": "kube-aws-etcd-member"})


class Quiet(object):
    def __enter__(self):
        self.out, self.err = io.StringIO(), io.StringIO()
        self._a, self._b = redirect_stdout(self.out), redirect_stderr(self.err)
        self._a.__enter__()
        self._b.__enter__()
        return self

    def __exit__(self, *exc):
        self._b.__exit__(*exc)
        self._a.__exit__(*exc)


class WithFiles(unittest.TestCase):
    """Points the module's node paths into a temporary root."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.saved_root = etcd.ROOT
        etcd.ROOT = self.root
        self.write(etcd.RUNTIME_JSON, json.dumps(RUNTIME))
        self.write(etcd.ETCD_JSON, json.dumps({"settingsParameter": "/kube-aws/demo/etcd",
                                               "lifecycleHook": "kube-aws-etcd-member"}))

    def tearDown(self):
        etcd.ROOT = self.saved_root
        self.tmp.cleanup()

    def write(self, path, text):
        full = etcd.host(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)

    def etcd_running(self):
        self.write(etcd.ETCD_MANIFEST, "kind: Pod\n")


def listing(*items):
    return {"Contents": [{"Key": k, "Size": s, "LastModified": t} for k, s, t in items]}
