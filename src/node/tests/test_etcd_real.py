"""kube_aws_node.etcd against a real etcd: three members of the test bed's
etcd (3.6, the version kubeadm 1.35 runs) on three loopback addresses, with
certificates kubeadm itself makes (`kubeadm init phase certs etcd-ca`,
`etcd-server`, `etcd-peer`, `etcd-healthcheck-client`), client and peer
certificate authentication on, as in kubeadm's etcd manifest.

It checks the etcd v3 JSON gateway client with kubeadm's health-check client
certificate (member list, status: exactly one leader), a controller's member
removed through a peer, and the stale-member rules on real member lists.

Needs KUBE_AWS_TESTBED_BIN (the test bed's bin directory, with etcd and
kubeadm); skipped, saying so, without it.

    KUBE_AWS_TESTBED_BIN=.testbed/bin python3 -m unittest discover src/node/tests -p 'test_etcd*.py'
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kube_aws_node import etcd, etcd_lifecycle  # noqa: E402

BIN = os.environ.get("KUBE_AWS_TESTBED_BIN", "")
HAVE = bool(BIN) and all(os.path.exists(os.path.join(BIN, b)) for b in ("etcd", "kubeadm"))


class Clock(object):
    def now(self):
        return time.time()

    def sleep(self, s):
        time.sleep(min(s, 1))


class EtcdMembers(object):
    """Three real members for a test case's class; a subclass may give its
    own etcd flags and loopback range (test_defrag_real.py)."""
    EXTRA_ARGS = []
    BASE = 60

    @classmethod
    def setUpClass(cls):
        pid = os.getpid()
        # Addresses of this run only (any 127/8 address is loopback on Linux),
        # each octet in 1..254 whatever BASE and the pid (BASE 120 with a pid
        # whose remainder passed 134 made 127.256.x.y: one failed run in six).
        base = "127.%d.%d." % (1 + (cls.BASE + pid % 150) % 254, (pid // 150) % 250)
        cls.ips = [base + str(i) for i in (1, 2, 3)]
        cls.tmp = tempfile.mkdtemp(prefix="kube-aws-etcd-")
        pki = os.path.join(cls.tmp, "pki")
        cfg = os.path.join(cls.tmp, "kubeadm.yaml")
        sans = "[%s]" % ", ".join(cls.ips)
        with open(cfg, "w") as f:
            # kubeadm refuses a loopback advertise address on a machine with no
            # default route: a documentation address (RFC 5737) instead.
            f.write("apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n"
                    "localAPIEndpoint: {advertiseAddress: 192.0.2.1}\nnodeRegistration: {name: m1}\n---\n"
                    "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n"
                    "certificatesDir: %s\netcd: {local: {serverCertSANs: %s, peerCertSANs: %s}}\n" % (pki, sans, sans))
        for phase in ("etcd-ca", "etcd-server", "etcd-peer", "etcd-healthcheck-client"):
            subprocess.run([os.path.join(BIN, "kubeadm"), "init", "phase", "certs", phase, "--config", cfg],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.pki = os.path.join(pki, "etcd")
        p = lambda n: os.path.join(cls.pki, n)  # noqa: E731
        initial = ",".join("m%d=https://%s:2380" % (i + 1, ip) for i, ip in enumerate(cls.ips))
        cls.procs, cls.logs = [], []
        for i, ip in enumerate(cls.ips):
            log = open(os.path.join(cls.tmp, "etcd%d.log" % i), "w")
            cls.logs.append(log)
            cls.procs.append(subprocess.Popen([
                os.path.join(BIN, "etcd"), "--name", "m%d" % (i + 1),
                "--data-dir", os.path.join(cls.tmp, "data%d" % i),
                "--listen-client-urls", "https://%s:2379" % ip, "--advertise-client-urls", "https://%s:2379" % ip,
                "--listen-peer-urls", "https://%s:2380" % ip, "--initial-advertise-peer-urls", "https://%s:2380" % ip,
                "--listen-metrics-urls", "http://%s:2381" % ip,
                "--initial-cluster", initial, "--initial-cluster-state", "new",
                "--client-cert-auth", "--trusted-ca-file", p("ca.crt"),
                "--cert-file", p("server.crt"), "--key-file", p("server.key"),
                "--peer-client-cert-auth", "--peer-trusted-ca-file", p("ca.crt"),
                "--peer-cert-file", p("peer.crt"), "--peer-key-file", p("peer.key"),
            ] + cls.EXTRA_ARGS, stdout=log, stderr=log))
        cls.client = etcd.EtcdGateway(ca=p("ca.crt"), cert=p("healthcheck-client.crt"),
                                      key=p("healthcheck-client.key"))
        cls.endpoints = ["https://%s:2379" % ip for ip in cls.ips]
        deadline = time.time() + 120
        while True:
            try:
                if all(etcd.status_of(cls.client.status(e)).get("leader") not in (None, "0") for e in cls.endpoints):
                    break
            except RuntimeError:
                pass
            if time.time() > deadline:
                cls.tearDownClass()
                raise RuntimeError("the three etcd members did not elect a leader in 120 s")
            time.sleep(0.5)

    @classmethod
    def tearDownClass(cls):
        for proc in cls.procs:
            proc.kill()
            proc.wait()
        for log in cls.logs:
            log.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)


@unittest.skipUnless(HAVE, "KUBE_AWS_TESTBED_BIN with etcd and kubeadm is not set: real etcd tests skipped")
class RealEtcd(EtcdMembers, unittest.TestCase):
    def test_members_leader_removal_through_a_peer_and_stale_rules(self):
        members = self.client.member_list(self.endpoints)
        self.assertEqual(sorted(etcd.member_ips(m)[0] for m in members), sorted(self.ips))
        # Exactly one member leads, whichever endpoint is asked.
        leaders = [e for e in self.endpoints if etcd.is_leader(self.client.status(e))]
        self.assertEqual(len(leaders), 1, leaders)

        # Stale rules on the real list: the third controller's instance is gone.
        alive = self.ips[:2]
        first = etcd.stale_candidates(members, alive, self.ips[0])
        self.assertEqual([etcd.member_ips(m) for m in first], [[self.ips[2]]])
        second = etcd.stale_candidates(self.client.member_list(self.endpoints), alive, self.ips[0])
        gone = etcd.removable(etcd.confirmed_stale(first, second), members)
        self.assertEqual([etcd.member_ips(m) for m in gone], [[self.ips[2]]])

        # The third controller leaves: its member goes through a peer, which answers.
        ok, msg = etcd_lifecycle.remove_member_through_peer(
            self.client, self.ips[2], [self.endpoints[2]] + self.endpoints[:2], Clock(), time.time() + 60)
        self.assertTrue(ok, msg)
        via = msg.rsplit(" through ", 1)[1]
        self.assertIn(via, self.endpoints[:2], msg)
        left = self.client.member_list(self.endpoints[:2])
        self.assertEqual(sorted(etcd.member_ips(m)[0] for m in left), sorted(self.ips[:2]))
        # Asked again (a restarted lifecycle service), nothing is left to remove.
        ok, msg = etcd_lifecycle.remove_member_through_peer(self.client, self.ips[2], self.endpoints[:2], Clock(), 0)
        self.assertTrue(ok)
        self.assertIn("nothing to remove", msg)
        # Two members left: removing either would leave no majority, so stale
        # rules remove nobody even when EC2 lists only one controller.
        stale = etcd.stale_candidates(left, self.ips[:1], self.ips[0])
        self.assertEqual(len(stale), 1)
        self.assertEqual(etcd.removable(stale, left), [])


if __name__ == "__main__":
    unittest.main()
