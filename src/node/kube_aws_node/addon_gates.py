"""The addon reconciler's gates and plugin manifests: the API server's
/readyz, the Service route to it (kube-proxy's rules, or a CNI that replaces
them), a Ready node before the releases that need one, and the plugins'
manifests applied, pruned when a plan drops them, and their rollouts waited
for.

Invariant: a gate only reads the cluster; every command is an argument list
run through the Reconciler (reconcile.py) that `Gates` is mixed into.
"""
import os
import socket

from . import cfn, jsonio, paths
from .addon_record import gone_objects, manifest_objects
from .helm_release import tail
from .retry import poll


def reaches(host, port, timeout):
    """Whether a TCP connection to host:port opens within `timeout` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Gates(object):
    """The gates and manifests of the Reconciler (reconcile.py)."""

    def wait_until(self, seconds, probe):
        return bool(poll(probe, seconds, self.poll))

    def readyz(self):
        return self.run(["kubectl", "get", "--raw=/readyz"])[1].strip() == "ok"

    def service_route_gate(self):
        """Waits, bounded, until this host reaches the API server through the
        kubernetes Service's ClusterIP, when kube-proxy is the cluster's. A
        host-network addon started before kube-proxy has written the
        Service's rules (the cloud controller manager, the first release on
        a new cluster) dials an address nothing routes: client-go's dial
        hangs 30 s, the controller manager exits ("unable to load configmap
        based request-header-client-ca-file: ... i/o timeout") and starts
        again after the kubelet's back-off. On the real-node bed that held
        every other release about 31 s, because kube-proxy itself waited 30
        s for the Node's address; the kubelet's --node-ip (kubeadmcfg.py)
        removed that wait, and this gate stays for a kube-proxy that is
        slow for another reason (an image pull). docs/testing.md, "One
        cluster for the addons". Never fatal: without a kube-proxy DaemonSet
        (a CNI that replaces it), or past the bound, the installs go on as
        before. Returns what it saw, for the log."""
        code, name = self.run(["kubectl", "-n", "kube-system", "get", "daemonset", "kube-proxy", "-o", "name",
                               "--ignore-not-found"])
        if code != 0 or not name.strip():
            return "no kube-proxy DaemonSet"
        code, ip = self.run(["kubectl", "-n", "default", "get", "service", "kubernetes", "-o",
                             "jsonpath={.spec.clusterIP}"])
        ip = ip.strip()
        if code != 0 or not ip:
            return "no kubernetes Service address"
        limit = paths.knob("SERVICE_ROUTE_TIMEOUT", 120)
        if poll(lambda: self.connect(ip, 443, 2), limit, 1):
            return "the kubernetes Service (%s:443) answers" % ip
        return "the kubernetes Service (%s:443) did not answer within %ss; going on" % (ip, limit)

    def ready_node_gate(self):
        """Any Ready node; first, when a pool starts with a node and the root
        stack is still creating or updating (its pools start only after the
        control plane), a Ready worker, for at most the plan's
        workerReadyTimeoutSeconds: the releases that need one would
        otherwise time out before the pools exist."""
        worker_wait = self.plan.get("workerReadyTimeoutSeconds") or 0
        if worker_wait:
            self.wait_until(worker_wait,
                            lambda: self.a_worker_is_ready() or not cfn.stack_in_progress(self.aws, self.stack))
        return self.wait_until(self.plan["nodeReadyTimeoutSeconds"], self.a_node_is_ready)

    def a_worker_is_ready(self):
        code, text = self.run(["kubectl", "get", "nodes", "-l", "!node-role.kubernetes.io/control-plane", "-o",
                               'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}'])
        return code == 0 and "True" in text.split()

    def a_node_is_ready(self):
        code, text = self.run(["kubectl", "get", "nodes", "-o", 'jsonpath={range .items[*]}'
                               '{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}'])
        return code == 0 and "True" in text.split()

    def apply_manifests(self):
        if self.manifests_done:
            return
        self.manifests_done = True
        applied = True
        texts = []
        for m in self.plan.get("manifests", []):
            path = os.path.join(self.addons, m)
            try:
                with open(path, encoding="utf-8") as f:
                    texts.append(f.read())
                self.retried(["kubectl", "apply", "--server-side", "-f", path])
            except (RuntimeError, OSError):
                applied = False
                self.log("manifest %s could not be applied" % m)
        try:
            new = manifest_objects(texts)
        except Exception as e:  # noqa: BLE001 - a manifest kubectl took but PyYAML did not: prune nothing
            self.log("cannot list the manifests' objects (%s): nothing is pruned" % e.__class__.__name__)
            applied, new = False, []
        with self.record_lock:
            old = list(self.manifest_record)
        if not applied:
            # Prune only after a plan's manifests all went in: keep knowing both.
            keep = old + [o for o in new if o not in old]
        else:
            keep = new + self.prune_objects(gone_objects(old, new))
        with self.record_lock:
            self.manifest_record = keep

    def prune_objects(self, gone):
        """Deletes the objects a plan no longer holds (a disabled plugin's
        MutatingWebhookConfiguration with failurePolicy Fail would otherwise
        block every pod it matches, with nothing left to answer it). Returns
        those that could not be deleted, to try again next time."""
        left = []
        for i, (api, kind, ns, name) in enumerate(gone):
            doc = {"apiVersion": api, "kind": kind, "metadata": {"name": name}}
            if ns:
                doc["metadata"]["namespace"] = ns
            path = os.path.join(self.scratch or self.work, "prune-%d.json" % i)
            jsonio.write(path, doc)
            code, out = self.run(["kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", path])
            where = "%s/%s" % (ns, name) if ns else name
            if code == 0:
                self.log("pruned %s %s (no manifest of the plan holds it)" % (kind, where))
            else:
                left.append([api, kind, ns, name])
                self.log("cannot prune %s %s: %s" % (kind, where, tail(out, 3)))
        return left

    def wait_manifest_rollouts(self):
        """Waits for the plan's `manifestRollouts` (the pod identity webhook's
        Deployment): the releases that start next have pods the webhook must
        mutate, and its MutatingWebhookConfiguration fails closed for them.
        A rollout that does not finish is logged and the releases go on: the
        webhook's own failure policy still keeps their pods from starting
        without credentials, and their failures then name it. Returns the
        rollouts that did not finish."""
        late = []
        for w in self.plan.get("manifestRollouts") or []:
            ref = "%s/%s" % (w["kind"].lower(), w["name"])
            code, out = self.run(["kubectl", "-n", w["namespace"], "rollout", "status", ref,
                                  "--timeout=%ss" % int(w["timeoutSeconds"])])
            if code == 0:
                self.log("%s in %s rolled out (%s)" % (ref, w["namespace"], w["manifest"]))
            else:
                late.append(ref)
                self.log("%s in %s did not roll out within %ss: %s" % (ref, w["namespace"], w["timeoutSeconds"],
                                                                        tail(out, 3)))
        return late
