"""Unit tests of the kubelet serving-certificate approver's decision
(src/node/kube_aws_node/csr_approver.py). Requests are made by the real
openssl, as a kubelet's."""
import base64
import os
import subprocess
import tempfile
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import csr_approver as approver

NAME = "ip-10-0-1-23.eu-west-1.compute.internal"
OTHER = "ip-10-0-2-50.eu-west-1.compute.internal"


def request(subject, sans):
    """A PEM certificate request, as openssl makes it."""
    with tempfile.TemporaryDirectory() as d:
        args = ["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", os.path.join(d, "k"), "-subj", subject]
        if sans:
            args += ["-addext", "subjectAltName=" + sans]
        return subprocess.run(args, capture_output=True, check=True).stdout


def csr(pem, user="system:node:" + NAME, groups=("system:nodes", "system:authenticated"),
        usages=("digital signature", "server auth"), conditions=None, signer=approver.SIGNER):
    c = {"metadata": {"name": "csr-x"},
         "spec": {"signerName": signer, "username": user, "groups": list(groups), "usages": list(usages),
                  "request": base64.b64encode(pem).decode()},
         "status": {}}
    if conditions:
        c["status"]["conditions"] = conditions
    return c


# The DescribeInstances answer for two running instances and a stopped one.
RESERVATIONS = [{"Instances": [
    {"InstanceId": "i-1", "State": {"Name": "running"}, "PrivateDnsName": NAME, "PrivateIpAddress": "10.0.1.23",
     "PublicDnsName": "", "NetworkInterfaces": [
         {"PrivateIpAddresses": [{"PrivateIpAddress": "10.0.1.23"}, {"PrivateIpAddress": "10.0.1.99"}]}]},
    {"InstanceId": "i-2", "State": {"Name": "running"}, "PrivateDnsName": OTHER, "PrivateIpAddress": "10.0.2.50",
     "PublicDnsName": "ec2-3-4-5-6.eu-west-1.compute.amazonaws.com", "PublicIpAddress": "3.4.5.6"},
    {"InstanceId": "i-3", "State": {"Name": "stopped"}, "PrivateDnsName": "ip-10-0-3-3.eu-west-1.compute.internal",
     "PrivateIpAddress": "10.0.3.3"},
]}]
INSTANCES = approver.instances_from(RESERVATIONS)


def decide(c):
    return approver.decide(c, approver.parse_request(base64.b64decode(c["spec"]["request"])), INSTANCES)


GOOD_SUBJECT = "/O=system:nodes/CN=system:node:" + NAME


class Decide(unittest.TestCase):
    def test_a_nodes_own_names_are_approved(self):
        ok, why = decide(csr(request(GOOD_SUBJECT, "DNS:%s,IP:10.0.1.23,IP:10.0.1.99" % NAME)))
        self.assertTrue(ok, why)
        self.assertIn("i-1", why)

    def test_public_names_of_the_same_instance_are_its_own(self):
        c = csr(request("/O=system:nodes/CN=system:node:" + OTHER,
                        "DNS:%s,DNS:ec2-3-4-5-6.eu-west-1.compute.amazonaws.com,IP:3.4.5.6" % OTHER),
                user="system:node:" + OTHER)
        self.assertTrue(decide(c)[0])

    def test_another_instances_ip_is_refused(self):
        ok, why = decide(csr(request(GOOD_SUBJECT, "DNS:%s,IP:10.0.2.50" % NAME)))
        self.assertFalse(ok)
        self.assertIn("10.0.2.50", why)

    def test_a_foreign_dns_name_is_refused(self):
        ok, why = decide(csr(request(GOOD_SUBJECT, "DNS:%s,DNS:kubernetes.default.svc" % NAME)))
        self.assertFalse(ok)
        self.assertIn("kubernetes.default.svc", why)

    def test_a_name_of_no_running_instance_is_refused(self):
        stopped = "ip-10-0-3-3.eu-west-1.compute.internal"
        c = csr(request("/O=system:nodes/CN=system:node:" + stopped, "DNS:" + stopped), user="system:node:" + stopped)
        ok, why = decide(c)
        self.assertFalse(ok)
        self.assertIn("no running instance", why)

    def test_one_node_asking_for_another_is_refused(self):
        # Node OTHER asks with NAME's subject and names: the requester decides.
        c = csr(request(GOOD_SUBJECT, "DNS:" + NAME), user="system:node:" + OTHER)
        ok, why = decide(c)
        self.assertFalse(ok)
        self.assertIn("subject", why)

    def test_a_requester_that_is_not_a_node_is_refused(self):
        c = csr(request(GOOD_SUBJECT, "DNS:" + NAME), user="system:serviceaccount:default:x",
                groups=("system:serviceaccounts",))
        self.assertFalse(decide(c)[0])
        c = csr(request(GOOD_SUBJECT, "DNS:" + NAME), groups=("system:authenticated",))
        self.assertFalse(decide(c)[0])

    def test_wrong_organisation_usages_or_no_names_are_refused(self):
        self.assertFalse(decide(csr(request("/O=system:masters/CN=system:node:" + NAME, "DNS:" + NAME)))[0])
        self.assertFalse(decide(csr(request(GOOD_SUBJECT, "DNS:" + NAME), usages=("client auth",)))[0])
        self.assertFalse(decide(csr(request(GOOD_SUBJECT, "DNS:" + NAME),
                                    usages=("server auth", "client auth")))[0])
        self.assertFalse(decide(csr(request(GOOD_SUBJECT, "")))[0])

    def test_other_san_kinds_are_refused(self):
        ok, why = decide(csr(request(GOOD_SUBJECT, "DNS:%s,email:a@example.com" % NAME)))
        self.assertFalse(ok, why)
        ok, why = decide(csr(request(GOOD_SUBJECT, "DNS:%s,URI:spiffe://x" % NAME)))
        self.assertFalse(ok, why)


class Pending(unittest.TestCase):
    def test_only_undecided_kubelet_serving_requests(self):
        pem = request(GOOD_SUBJECT, "DNS:" + NAME)
        items = [csr(pem), csr(pem, signer="kubernetes.io/kube-apiserver-client-kubelet"),
                 csr(pem, conditions=[{"type": "Approved"}]), csr(pem, conditions=[{"type": "Denied"}])]
        self.assertEqual(list(approver.pending(items)), [items[0]])


if __name__ == "__main__":
    unittest.main()
