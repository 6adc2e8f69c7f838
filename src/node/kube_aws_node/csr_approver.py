"""`kube-aws-node csr-approver`: the kubelet serving-certificate approver, run
by kube-aws-csr-approver.timer on controllers. The cluster and region come
from /etc/kube-aws/runtime.json.

Kubelets run with `serverTLSBootstrap: true`, so each asks for a serving
certificate with a CertificateSigningRequest of signerName
kubernetes.io/kubelet-serving, which nothing in Kubernetes approves
(https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/#certificate-rotation:
"the built-in approver doesn't approve serving certificates ... for security
reasons"). This program approves a pending request only when
  - the requester is `system:node:<name>` (in group system:nodes), and the
    request's subject is the same node (CN system:node:<name>, O system:nodes);
  - <name> is the private DNS name of a running EC2 instance tagged
    kubernetes.io/cluster/<cluster> (ec2:DescribeInstances);
  - every subject alternative name is that instance's: its private DNS name
    or one of its private IPs (its public DNS name or IP when it has one: the
    kubelet lists every address the node reports);
  - its usages are a kubelet serving certificate's.
Anything else stays pending, and the reason is logged (journalctl -u
kube-aws-csr-approver). Only kubectl, openssl and the aws CLI (awscall.py)
are run, with argument lists.

Invariant: `decide` is pure; a request is approved only when every rule
above holds, and anything unreadable stays pending.
"""
import base64
import re
import subprocess

from . import jsonio, paths
from .awscall import Aws, AwsError
SIGNER = "kubernetes.io/kubelet-serving"
# What a kubelet asks for (kubelet certificate manager: server auth, digital
# signature, and key encipherment for RSA keys).
USAGES = {"digital signature", "key encipherment", "server auth"}


def log(msg):
    print("kube-aws-csr-approver: " + msg, flush=True)


def run(args, stdin=None):
    return subprocess.run(args, input=stdin, capture_output=True, check=True).stdout


def parse_request(pem):
    """(common name, organizations, DNS SANs, IP SANs) of a PEM certificate request, read with openssl."""
    text = run(["openssl", "req", "-noout", "-text", "-nameopt", "sep_multiline,utf8"], stdin=pem).decode(
        "utf-8", "replace"
    )
    cn, orgs, dns, ips = "", [], [], []
    lines = text.splitlines()
    in_subject = False
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("Subject:"):
            in_subject = True
            continue
        if in_subject:
            m = re.match(r"^(CN|O)=(.*)$", s)
            if m:
                if m.group(1) == "CN":
                    cn = m.group(2)
                else:
                    orgs.append(m.group(2))
                continue
            if re.match(r"^[A-Za-z]+=", s):
                continue
            in_subject = False
        if s.startswith("X509v3 Subject Alternative Name") and i + 1 < len(lines):
            for item in lines[i + 1].strip().split(", "):
                kind, _, value = item.partition(":")
                if kind == "DNS":
                    dns.append(value)
                elif kind == "IP Address":
                    ips.append(value)
                else:
                    # Email, URI, ...: never a kubelet's; kept so decide() refuses it.
                    dns.append(item)
    return cn, orgs, dns, ips


def decide(csr, request, instances):
    """(approve, reason) for one pending CSR.

    csr: the CertificateSigningRequest object (spec.username, spec.groups, spec.usages).
    request: (cn, orgs, dns, ips) of its decoded request.
    instances: private DNS name -> {"dns": set of names, "ips": set of addresses}
    of the cluster's running instances."""
    spec = csr.get("spec", {})
    user = spec.get("username", "")
    if not user.startswith("system:node:"):
        return False, "requested by %r, not a node" % user
    name = user[len("system:node:"):]
    if "system:nodes" not in spec.get("groups", []):
        return False, "requester %r is not in group system:nodes" % user
    cn, orgs, dns, ips = request
    if cn != user or orgs != ["system:nodes"]:
        return False, "subject CN=%r O=%r is not %r in system:nodes" % (cn, orgs, user)
    usages = set(spec.get("usages", []))
    if not usages or not usages <= USAGES or "server auth" not in usages:
        return False, "usages %s are not a kubelet serving certificate's" % sorted(usages)
    inst = instances.get(name)
    if inst is None:
        return False, "no running instance of this cluster has the private DNS name %r" % name
    if not dns and not ips:
        return False, "the request names no address"
    for d in dns:
        if d not in inst["dns"]:
            return False, "DNS name %r is not instance %s's" % (d, inst.get("id", "?"))
    for ip in ips:
        if ip not in inst["ips"]:
            return False, "IP address %r is not instance %s's" % (ip, inst.get("id", "?"))
    return True, "node %s is instance %s and every name in its request is the instance's" % (name, inst.get("id", "?"))


def instances_from(reservations):
    """The DescribeInstances answer (Reservations) as decide() wants it."""
    out = {}
    for r in reservations:
        for i in r.get("Instances", []):
            if i.get("State", {}).get("Name") != "running" or not i.get("PrivateDnsName"):
                continue
            dns = {i["PrivateDnsName"]}
            if i.get("PublicDnsName"):
                dns.add(i["PublicDnsName"])
            ips = set()
            if i.get("PrivateIpAddress"):
                ips.add(i["PrivateIpAddress"])
            if i.get("PublicIpAddress"):
                ips.add(i["PublicIpAddress"])
            for eni in i.get("NetworkInterfaces", []):
                for a in eni.get("PrivateIpAddresses", []):
                    if a.get("PrivateIpAddress"):
                        ips.add(a["PrivateIpAddress"])
                for a in eni.get("Ipv6Addresses", []):
                    if a.get("Ipv6Address"):
                        ips.add(a["Ipv6Address"])
            out[i["PrivateDnsName"]] = {"id": i.get("InstanceId", ""), "dns": dns, "ips": ips}
    return out


def pending(csrs):
    """Pending kubelet-serving requests: no Approved or Denied condition yet."""
    for c in csrs:
        if c.get("spec", {}).get("signerName") != SIGNER:
            continue
        if c.get("status", {}).get("conditions"):
            continue
        yield c


def approve_pending(aws, cluster):
    kubectl = ["kubectl", "--kubeconfig", paths.path(paths.ADMIN_CONF)]
    csrs = jsonio.parse(run(kubectl + ["get", "csr", "-o", "json"]).decode("utf-8", "replace"),
                        "kubectl get csr")["items"]
    todo = list(pending(csrs))
    if not todo:
        return
    answer = aws(["ec2", "describe-instances",
                  "--filters", "Name=tag-key,Values=kubernetes.io/cluster/" + cluster,
                  "Name=instance-state-name,Values=running"]) or {}
    instances = instances_from(answer.get("Reservations", []))
    for c in todo:
        name = c["metadata"]["name"]
        try:
            request = parse_request(base64.b64decode(c["spec"]["request"]))
        except (subprocess.CalledProcessError, ValueError, KeyError) as e:
            log("%s: left pending: its request cannot be read (%s)" % (name, e.__class__.__name__))
            continue
        ok, reason = decide(c, request, instances)
        if ok:
            run(kubectl + ["certificate", "approve", "--", name])
            log("%s: approved: %s" % (name, reason))
        else:
            log("%s: left pending: %s" % (name, reason))


def main(argv):
    if argv:
        log("usage: kube-aws-node csr-approver")
        return 2
    try:
        rt = jsonio.read(paths.etc("runtime.json"))
        approve_pending(Aws(rt["region"]), rt["cluster"])
    except subprocess.CalledProcessError as e:
        log("%s failed: %s" % (e.cmd[0], e.stderr.decode("utf-8", "replace").strip()))
        return 1
    except (AwsError, jsonio.JsonError) as e:
        log(str(e))
        return 1
    return 0
