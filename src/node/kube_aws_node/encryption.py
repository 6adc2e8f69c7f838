"""`kube-aws-node encryption`: every Secret encrypted at rest under the key
that encrypts, run by kube-aws-encryption.timer on controllers.

The API server encrypts a Secret when it writes it, with the first key of
its EncryptionConfiguration (src/render/security.rs, placed from the secret
bundle at /etc/kubernetes/pki/encryption.json). A Secret written before
encryption was turned on stays in plaintext in etcd until it is written
again. Upstream's procedure ("Ensure all Secrets are encrypted",
https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/) is to
write every Secret again, `kubectl get secrets --all-namespaces -o json |
kubectl replace -f -`, once every API server runs with the configuration:
an API server without it would store what it writes in plaintext again.

Each run:
- reads the name of the key that encrypts (the configuration's first key);
- reads the record, ConfigMap kube-system/kube-aws-encryption
  (`data.rewrittenWith`: the key every Secret was last rewritten with);
- when the record names that key, does nothing;
- otherwise, only when every control-plane node runs a Ready kube-apiserver
  mirror pod with `--encryption-provider-config`, writes every Secret again
  and then records the key. A Secret changed in between fails with a
  conflict; the record is then left alone and the next run tries again
  (a rewrite is harmless: the API server writes the same object).

Invariant: `decide` is pure; the key and the Secrets' values are never
printed, logged or put in an argument (they pass from one kubectl to the
other through this process's memory); only the key's name is.
"""
import json
import subprocess

from . import jsonio, paths

CONFIG = "/etc/kubernetes/pki/encryption.json"
FLAG = "--encryption-provider-config"
RECORD_NAMESPACE = "kube-system"
RECORD_NAME = "kube-aws-encryption"
RECORD_KEY = "rewrittenWith"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


class EncryptionError(Exception):
    pass


def log(msg):
    print("kube-aws-encryption: " + msg, flush=True)


def current_key(config):
    """The name of the key that encrypts: the first provider's first key."""
    try:
        for res in config["resources"]:
            if "secrets" in res.get("resources", []):
                first = res["providers"][0]
                (kind, provider), = first.items()
                if kind == "identity":
                    return None
                return "%s:%s" % (kind, provider["keys"][0]["name"])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        pass
    raise EncryptionError("%s has no key for secrets" % CONFIG)


def pod_ready(pod):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions", []))


def has_flag(pod):
    for c in pod.get("spec", {}).get("containers", []):
        for arg in c.get("command", []) + c.get("args", []):
            if arg == FLAG or arg.startswith(FLAG + "="):
                return True
    return False


def decide(key, recorded, control_plane_nodes, apiserver_pods):
    """("done" | "wait" | "rewrite", why). Pure.

    `control_plane_nodes`: node names; `apiserver_pods`: the kube-apiserver
    mirror pods (kubectl's JSON items)."""
    if key is None:
        return "done", "the first provider is identity: nothing is encrypted"
    if recorded == key:
        return "done", "every Secret was rewritten with %s" % key
    if not control_plane_nodes:
        return "wait", "no control-plane node is registered yet"
    by_node = {}
    for p in apiserver_pods:
        by_node.setdefault(p.get("spec", {}).get("nodeName", ""), []).append(p)
    for node in sorted(control_plane_nodes):
        pods = by_node.get(node, [])
        if not pods:
            return "wait", "no kube-apiserver pod on %s yet" % node
        if not all(has_flag(p) for p in pods):
            return "wait", "the kube-apiserver on %s runs without %s" % (node, FLAG)
        if not all(pod_ready(p) for p in pods):
            return "wait", "the kube-apiserver on %s is not Ready" % node
    return "rewrite", "every kube-apiserver encrypts with %s" % key


class Kubectl(object):
    def __init__(self, kubeconfig):
        self.base = ["kubectl", "--kubeconfig", kubeconfig]

    def run(self, args, stdin=None):
        p = subprocess.run(self.base + args, input=stdin, capture_output=True)
        if p.returncode != 0:
            # kubectl's errors name objects, never their data.
            raise EncryptionError("kubectl %s failed: %s" % (args[0], p.stderr.decode("utf-8", "replace").strip()))
        return p.stdout

    def items(self, args):
        return jsonio.parse(self.run(args + ["-o", "json"]).decode("utf-8", "replace"),
                            "kubectl " + " ".join(args)).get("items", [])


def recorded_key(kubectl):
    out = kubectl.run(["get", "configmap", "-n", RECORD_NAMESPACE, RECORD_NAME, "-o", "json",
                       "--ignore-not-found"])
    if not out.strip():
        return None
    return jsonio.parse(out.decode("utf-8", "replace"), "the encryption record").get("data", {}).get(RECORD_KEY)


def record(kubectl, key):
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": RECORD_NAME, "namespace": RECORD_NAMESPACE,
                       "labels": {"app.kubernetes.io/managed-by": "kube-aws"}},
          "data": {RECORD_KEY: key}}
    kubectl.run(["apply", "-f", "-"], stdin=json.dumps(cm).encode("utf-8"))


def rewrite_all(kubectl):
    """Writes every Secret again (one list, read and written through memory);
    the number written."""
    listing = kubectl.run(["get", "secrets", "--all-namespaces", "-o", "json"])
    count = len(jsonio.parse(listing.decode("utf-8", "replace"), "the Secrets").get("items", []))
    kubectl.run(["replace", "-f", "-"], stdin=listing)
    return count


def ensure(kubectl, config):
    """One run (see the module header); returns what it did."""
    key = current_key(config)
    what, why = decide(key, recorded_key(kubectl), [
        n["metadata"]["name"] for n in kubectl.items(["get", "nodes", "-l", CONTROL_PLANE_LABEL])
    ], kubectl.items(["get", "pods", "-n", "kube-system", "-l", "component=kube-apiserver"]))
    if what != "rewrite":
        return what, why
    count = rewrite_all(kubectl)
    record(kubectl, key)
    return "rewritten", "%d Secrets written again with %s" % (count, key)


def main(argv):
    if argv:
        log("usage: kube-aws-node encryption")
        return 2
    try:
        config = jsonio.read(paths.path(CONFIG))
        what, why = ensure(Kubectl(paths.path(paths.ADMIN_CONF)), config)
    except (EncryptionError, jsonio.JsonError) as e:
        log(str(e))
        return 1
    log("%s: %s" % (what, why))
    return 0
