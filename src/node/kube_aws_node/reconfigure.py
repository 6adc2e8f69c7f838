"""`kube-aws-node reconfigure`: a changed ClusterConfiguration or
KubeletConfiguration reaches the running nodes in place, run by
kube-aws-reconfigure.timer on every node.

kubeadm's reconfiguration path ("Reconfiguring a kubeadm cluster",
https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-reconfigure/):
change the ClusterConfiguration in kubeadm-config and the KubeletConfiguration
in kubelet-config, then on each control-plane node write the static pod
manifests again with `kubeadm init phase control-plane <component> --config`
("one node at a time to leave the cluster without downtime"), and on every
node `kubeadm upgrade node phase kubelet-config` (it downloads kubelet-config
into /var/lib/kubelet/config.yaml) and restart the kubelet.

Where the configuration comes from: kube-aws publishes the cluster-wide
documents (ClusterConfiguration, KubeletConfiguration) in the addon bundle
(KUBEADM_FILE), which the control-plane stack's plan pointer names, and not
in the controllers' user data (their kubeadm.json holds Init- and
JoinConfiguration): `update` with only such a change replaces no instance,
and every controller finds it here (a controller's boot reads them the same
way, bootstrap.py). A plugin's kubeadm.d file stays a node file: changing
one replaces the controllers.

A controller: the configuration it wants is the one its boot would use
(`desired`: the rendered and published documents, the plugin patches of
kubeadm.d, this node's kubeadm version, as bootstrap.py builds them), its
digest over the ClusterConfiguration and KubeletConfiguration only. The boot records the
digest it joined (or initialized) with; when they differ, this controller
takes the cluster's join lock (locks.JOIN_LOCK, the one joins, upgrades and
certificate renewals take: one controller at a time, never beside a joining
or renewing one) and, under it:
- (before the lock) leaves it alone when the API server flags name a node
  file this controller lacks (`flag_files`: an encryption configuration or
  audit policy that came with the update that replaces this controller);
- refuses to act when kubeadm-config's kubernetesVersion is not this node's
  (an upgrade is under way: this node is being replaced, and an upload at its
  version would take the cluster's version back), or when the status object
  (status/control-plane/reconfigure.json) says this same configuration
  already failed on a controller: the others keep theirs;
- uploads both (`kubeadm init phase upload-config all`, defaulted and
  validated by kubeadm as at init);
- writes each component's manifest again (kube-apiserver first), and when it
  changed waits for the new container (crictl) and its health endpoint on
  127.0.0.1 (the API server's /readyz) before the next;
- downloads the kubelet config (`kubeadm upgrade node phase kubelet-config`)
  and, when it changed, restarts the kubelet and waits for its /healthz;
- records the digest and the status object, and releases the lock.
A failure puts back every manifest and the kubelet config it changed and the
two ConfigMaps as they were read, records the failure in the status object
and the node status object (status/nodes/<instance-id>.json, the boot's
failure report's shape), and releases the lock: the next controller, seeing
the failed configuration, does not try it.

etcd's manifest is left alone: `kubeadm init phase etcd local` writes a
single-member manifest for a new cluster, not this member's; an etcd flag
(etcd.quotaBackendBytes) still takes a controller replacement.

A worker: the digest is the kubelet-config ConfigMap's, read with the
kubelet's own credentials (kubeadm's RBAC lets system:nodes read it, the
kubeadm:kubelet-config Role); when it differs from the recorded one,
`kubeadm upgrade node phase kubelet-config --kubeconfig kubelet.conf`, and a
kubelet restart when the file changed; the timer's RandomizedDelaySec spreads
the workers' restarts (a kubelet restart leaves its pods running).

Invariant: `digest`, `kubelet_digest` and `decide` are pure; every command is
an argument list; the configuration reaches kubeadm as a data file (0600);
a manifest or kubelet config this run changed is put back on any failure.
"""
import hashlib
import json
import os

from . import bundle, certs, fsutil, jsonio, kubeadmcfg, locks, paths, secrets, upgrade
from .awscall import AwsError
from .console import Console

CLUSTER_KINDS = ("ClusterConfiguration", "KubeletConfiguration")
MANIFESTS = "/etc/kubernetes/manifests"
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
KUBELET_HEALTH = "http://127.0.0.1:10248/healthz"
APPLIED = "reconfigure-applied.json"
# The addon bundle's file with the cluster-wide kubeadm documents
# (src/render/cloudconfig.rs KUBEADM_BUNDLE_FILE).
KUBEADM_FILE = "kubeadm/cluster.json"
STATUS_KEY = "status/control-plane/reconfigure.json"
NODE_STATUS_KEY = "status/nodes/%s.json"
LOCK_KEY = locks.JOIN_LOCK
# (manifest, `kubeadm init phase control-plane` argument, health endpoint on 127.0.0.1)
COMPONENTS = (
    ("kube-apiserver", "apiserver", "https://127.0.0.1:6443/readyz"),
    ("kube-controller-manager", "controller-manager", "https://127.0.0.1:10257/healthz"),
    ("kube-scheduler", "scheduler", "https://127.0.0.1:10259/healthz"),
)


class ReconfigureError(Exception):
    def __init__(self, step, message):
        Exception.__init__(self, "%s: %s" % (step, message))
        self.step = step
        self.message = message


def digest(docs):
    """sha256 of the ClusterConfiguration and KubeletConfiguration of `docs`
    (canonical JSON): what kubeadm-config and kubelet-config receive."""
    kept = [d for d in docs if d.get("kind") in CLUSTER_KINDS]
    return hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def kubelet_digest(configmap):
    """sha256 of the kubelet-config ConfigMap's `kubelet` key, or None when it has none."""
    text = ((configmap or {}).get("data") or {}).get("kubelet")
    return hashlib.sha256(text.encode("utf-8")).hexdigest() if isinstance(text, str) else None


def decide(want, applied, cluster_version, mine, marker):
    """(action, reason) of a controller: "none" (its configuration is
    applied), "skip" with the reason, or "apply"."""
    if want == applied:
        return "none", ""
    c, m = upgrade.parse(cluster_version), upgrade.parse(mine)
    if c is None or m is None or c != m:
        return "skip", ("kubeadm-config names Kubernetes %s and this node is %s: an upgrade is under way, and the "
                        "controllers that replace this one join with the new configuration"
                        % (cluster_version, mine))
    marker = marker or {}
    if marker.get("phase") == "failed" and marker.get("sha256") == want:
        return "skip", ("this configuration (%s) failed on %s at %s: %s; the other controllers keep theirs until "
                        "another configuration is published" % (want[:12], marker.get("node", "?"),
                                                                 marker.get("step", "?"), marker.get("message", "")))
    return "apply", ""


def flag_files(docs):
    """The node files (absolute paths under /etc/) that the ClusterConfiguration's
    API server flags name, sorted. Pure."""
    out = set()
    for d in docs:
        if d.get("kind") != "ClusterConfiguration":
            continue
        args = (d.get("apiServer") or {}).get("extraArgs") or {}
        pairs = [(a.get("name"), a.get("value")) for a in args if isinstance(a, dict)] \
            if isinstance(args, list) else list(args.items())
        out.update(v for _, v in pairs if isinstance(v, str) and v.startswith("/etc/"))
    return sorted(out)


def missing_reason(missing):
    """Why a controller lacking `missing` (flag_files it does not have) leaves
    the configuration alone: an API server started without them would not
    start, and the update that added them replaces this controller (its user
    data or its secrets changed). Pure."""
    return ("the new configuration's API server flags name %s, which this controller does not have: it "
            "predates the update that added them and is replaced by it; the controllers that replace it boot "
            "with both" % ", ".join(missing))


def desired(node_name, version, docs, patches, runtime):
    """The init-mode documents a controller's boot would use (no bootstrap token)."""
    return kubeadmcfg.patch(kubeadmcfg.documents(docs, runtime, node_name, "init", None, version), patches, "init")


def kubeadm_patches():
    """The documents of /etc/kube-aws/kubeadm.d/*.json (plugin files), in name order."""
    d = paths.etc("kubeadm.d")
    out = []
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if name.endswith(".json"):
            doc = jsonio.read(os.path.join(d, name))
            out.extend(doc if isinstance(doc, list) else [doc])
    return out


def with_published(docs, published):
    """The rendered documents, with the cluster-wide ones from the addon plan
    (`published()`) when the rendered ones have none: the controllers'
    kubeadm.json carries only what is theirs (Init- and JoinConfiguration),
    so a change of the cluster-wide ones changes no launch template."""
    if any(d.get("kind") in CLUSTER_KINDS for d in docs):
        return list(docs)
    extra = published()
    if not extra:
        raise ReconfigureError("kubeadm-config", "neither kubeadm.json nor the addon plan's bundle holds a "
                                                 "ClusterConfiguration")
    return list(docs) + [d for d in extra if d.get("kind") in CLUSTER_KINDS]


def published_documents(aws, runtime, node, work, store=None):
    """The ClusterConfiguration and KubeletConfiguration of the addon plan the
    control-plane stack's pointer names (its bundle's KUBEADM_FILE), secret
    references filled with the values this controller decrypts; None when
    the bundle has none."""
    store = store or secrets.store_dir()
    parameter = jsonio.read(paths.etc("addons", "reconciler.json"))["planParameter"]
    try:
        out = aws(["ssm", "get-parameter", "--name", parameter])
        pointer = jsonio.parse(out["Parameter"]["Value"], "the plan pointer %s" % parameter)
        raw = bundle.fetch(aws, pointer["uri"], pointer["sha256"], os.path.join(work, "kubeadm-bundle.json"))
        doc = bundle.read(raw)
    except (AwsError, bundle.BundleError, jsonio.JsonError, KeyError, TypeError) as e:
        raise ReconfigureError("addon-plan", "cannot read the published kubeadm configuration: %s" % e)
    text = doc.get("files", {}).get(KUBEADM_FILE)
    if text is None:
        return None
    filled = [f for f in doc.get("secretFiles", []) if f.get("path", "").lstrip("/") == KUBEADM_FILE]
    if filled:
        plain = secrets.stored_plugin_secrets(store)
        if bundle.missing_references(text, plain):
            # The store is tmpfs: empty again after a restart (as the reconciler does).
            try:
                secrets.decrypt_plugin_secrets(aws, runtime, node)
            except secrets.SecretsError as e:
                raise ReconfigureError("secrets", str(e))
            plain = secrets.stored_plugin_secrets(store)
        missing = bundle.missing_references(text, plain)
        if missing:
            raise ReconfigureError("secrets", "the secret reference %s in the kubeadm configuration has no value "
                                              "on this controller" % ", ".join(missing))
        text = secrets.fill_text(text, filled[0].get("format", "json"), secrets.reference_pattern(plain), plain,
                                 KUBEADM_FILE)
    try:
        return jsonio.parse(text, KUBEADM_FILE)["documents"]
    except (jsonio.JsonError, KeyError, TypeError) as e:
        raise ReconfigureError("addon-plan", "the bundle's %s: %s" % (KUBEADM_FILE, e))


def controller_documents(run, runtime, node_name, published):
    """(documents, version) this controller wants, from its data files, the
    addon plan (`published`, see with_published) and its kubeadm."""
    version = run(["kubeadm", "version", "-o", "short"]).strip()
    docs = with_published(jsonio.read(paths.etc("kubeadm.json"))["documents"], published)
    return desired(node_name, version, docs, kubeadm_patches(), runtime), version


def applied_path():
    return os.path.join(paths.path(paths.WORK), APPLIED)


def record(**fields):
    """Merges `fields` into the record of what this node applied."""
    doc = jsonio.read(applied_path(), {})
    doc.update(fields)
    jsonio.write(applied_path(), doc, mode=0o600)


def run_command(args):
    """A command's stdout; ReconfigureError with its last stderr line when it fails."""
    try:
        return certs.run_command(args)
    except certs.CertsError as e:
        raise ReconfigureError(e.step, e.message)


def read_file(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def put_back(path, data):
    if data is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    else:
        fsutil.write_atomic(path, data, mode=0o600)


class Node(object):
    """One run on one node; `host` is certs.Host (commands, health, clock)."""

    def __init__(self, aws, host, rt, instance, say, manifests=None, kubelet_config=None):
        self.aws, self.host, self.rt, self.say = aws, host, rt, say
        self.instance = instance
        self.manifests = manifests or paths.path(MANIFESTS)
        self.kubelet_config = kubelet_config or paths.path(KUBELET_CONFIG)
        self.work = paths.path(paths.WORK)

    def run(self, args):
        try:
            return self.host.run(args)
        except certs.CertsError as e:
            raise ReconfigureError(e.step, e.message)

    def wait(self, what, done, limit):
        try:
            certs.wait_for(self.host, what, done, limit)
        except certs.CertsError as e:
            raise ReconfigureError("wait", e.message)

    # --- the kubelet ----------------------------------------------------------------
    def kubelet_phase(self, kubeconfig):
        """`kubeadm upgrade node phase kubelet-config`; when the file changed,
        a kubelet restart and its /healthz. Returns the previous file (None:
        unchanged) for `undo_kubelet`; a failure puts the file back itself."""
        before = read_file(self.kubelet_config)
        try:
            self.run(["kubeadm", "upgrade", "node", "phase", "kubelet-config", "--kubeconfig", kubeconfig])
            if read_file(self.kubelet_config) == before:
                self.say("the kubelet config is unchanged")
                return None
            self.say("the kubelet config changed: restarting the kubelet")
            self.restart_kubelet()
        except ReconfigureError:
            if read_file(self.kubelet_config) != before:
                try:
                    self.undo_kubelet(before if before is not None else b"")
                except ReconfigureError as undo:
                    self.say("cannot put the kubelet config back: %s" % undo.message)
            raise
        return before if before is not None else b""

    def restart_kubelet(self):
        self.run(["systemctl", "restart", "kubelet"])
        self.wait("the kubelet is not healthy (%s)" % KUBELET_HEALTH, lambda: self.host.health(KUBELET_HEALTH),
                  paths.knob("RECONFIGURE_HEALTH_TIMEOUT", 300))

    def undo_kubelet(self, before):
        if before is None:
            return
        put_back(self.kubelet_config, before)
        self.run(["systemctl", "restart", "kubelet"])

    # --- status objects ---------------------------------------------------------------
    def node_failure(self, step, message):
        iid = self.instance.get("instanceId") or os.uname()[1]
        report = certs.failure_report(self.instance, self.rt, step, message, self.host.clock())
        report.update({"role": self.rt.get("role", ""), "step": "reconfigure-" + step,
                       "command": "kube-aws-node reconfigure"})
        self.put_json(NODE_STATUS_KEY % iid, report)

    def put_json(self, key, value):
        path = os.path.join(self.work, "reconfigure-put.json")
        jsonio.write(path, value, mode=0o600)
        try:
            self.aws(["s3api", "put-object", "--bucket", self.rt["bucket"], "--key",
                      "%s/%s" % (self.rt["keyPrefix"], key), "--body", path, "--server-side-encryption", "AES256",
                      "--content-type", "application/json"])
        except Exception as e:  # noqa: BLE001 - the journal keeps it
            self.say("cannot write s3 object %s: %s" % (key, e))


class Worker(Node):
    KUBECONFIG = paths.KUBELET_CONF

    def reconcile(self):
        kubeconfig = paths.path(self.KUBECONFIG)
        cm = jsonio.parse(self.run(["kubectl", "--kubeconfig", kubeconfig, "get", "configmap", "kubelet-config",
                                    "-n", "kube-system", "-o", "json"]), "kubelet-config")
        want = kubelet_digest(cm)
        if want is None:
            raise ReconfigureError("kubelet-config", "the kubelet-config ConfigMap has no `kubelet` key")
        if jsonio.read(applied_path(), {}).get("kubelet") == want:
            return "none"
        self.say("kubelet-config changed (%s): kubeadm upgrade node phase kubelet-config" % want[:12])
        self.kubelet_phase(kubeconfig)
        record(kubelet=want)
        return "applied"


class Controller(Node):
    def published(self):
        return published_documents(self.aws, self.rt, jsonio.read(paths.etc("node.json")), self.work)

    def kubectl(self, args):
        return self.run(["kubectl", "--kubeconfig", paths.path(paths.ADMIN_CONF)] + args)

    def configmap(self, name):
        return jsonio.parse(self.kubectl(["get", "configmap", name, "-n", "kube-system", "-o", "json"]), name)

    def marker(self):
        path = os.path.join(self.work, "reconfigure-status-read.json")
        try:
            self.aws(["s3", "cp", "--only-show-errors", "s3://%s/%s/%s" % (self.rt["bucket"], self.rt["keyPrefix"],
                                                                            STATUS_KEY), path], attempts=1)
            return jsonio.read(path)
        except Exception:  # noqa: BLE001 - none yet (a 403 or 404 without ListBucket) or unreadable
            return {}

    def status(self, **fields):
        fields.update({"node": self.instance.get("nodeName", ""), "instanceId": self.instance.get("instanceId", ""),
                       "updatedAt": int(self.host.clock())})
        self.put_json(STATUS_KEY, fields)

    def lock(self):
        return locks.Held(self.aws, self.rt, LOCK_KEY, self.instance.get("instanceId", ""), self.say,
                          lambda m: ReconfigureError("join-lock", m), "JOIN_LOCK", (1800, 1800, 10))

    def reconcile(self):
        docs, version = controller_documents(self.run, self.rt, self.instance.get("nodeName", ""), self.published)
        want = digest(docs)
        if jsonio.read(applied_path(), {}).get("controller") == want:
            return "none"
        missing = [f for f in flag_files(docs) if not os.path.exists(paths.path(f))]
        if missing:
            self.say(missing_reason(missing))
            return "skip"
        self.say("the configuration changed (%s): taking the join lock" % want[:12])
        with self.lock():
            cluster = upgrade.config_version(self.configmap("kubeadm-config").get("data", {})
                                             .get("ClusterConfiguration", ""))
            action, reason = decide(want, jsonio.read(applied_path(), {}).get("controller"), cluster, version,
                                    self.marker())
            if action != "apply":
                if reason:
                    self.say(reason)
                return action
            self.apply(docs, want)
        record(controller=want)
        return "applied"

    def apply(self, docs, want):
        config = os.path.join(self.work, "kubeadm-reconfigure.yaml")
        fsutil.write_atomic(config, kubeadmcfg.text(docs).encode("utf-8"), mode=0o600)
        originals = [self.configmap("kubeadm-config"), self.configmap("kubelet-config")]
        changed = {}
        step = "upload-config"
        self.status(phase="applying", sha256=want, step=step, message="")
        try:
            self.run(["kubeadm", "init", "phase", "upload-config", "all", "--config", config,
                      "--kubeconfig", paths.path(paths.ADMIN_CONF)])
            self.say("uploaded the ClusterConfiguration and KubeletConfiguration (kubeadm init phase upload-config all)")
            for name, phase, url in COMPONENTS:
                step = name
                path = os.path.join(self.manifests, name + ".yaml")
                before = read_file(path)
                running = certs.running_containers(self.run, name)
                changed[path] = before
                self.run(["kubeadm", "init", "phase", "control-plane", phase, "--config", config])
                if read_file(path) == before:
                    del changed[path]
                    self.say("%s: manifest unchanged" % name)
                    continue
                self.say("%s: manifest written again; waiting for the new container and %s" % (name, url))
                self.wait("%s has not started again" % name,
                          lambda: certs.running_containers(self.run, name) - running,
                          paths.knob("RECONFIGURE_START_TIMEOUT", 300))
                self.wait("%s is not healthy (%s)" % (name, url), lambda: self.host.health(url),
                          paths.knob("RECONFIGURE_HEALTH_TIMEOUT", 300))
            step = "kubelet-config"
            # Last: a failure here has put the kubelet config back itself.
            self.kubelet_phase(paths.path(paths.ADMIN_CONF))
        except ReconfigureError as e:
            self.undo(changed, originals)
            message = "%s; the manifests, the kubelet config, kubeadm-config and kubelet-config are back as they " \
                      "were" % e.message
            self.status(phase="failed", sha256=want, step=step, message=message)
            self.node_failure(step, message)
            raise ReconfigureError(step, message)
        self.status(phase="applied", sha256=want, step="done", message="")

    def undo(self, changed, originals):
        changed = dict((p, d) for p, d in changed.items() if read_file(p) != d)
        for path, data in sorted(changed.items()):
            self.say("putting back %s" % path)
            put_back(path, data)
        if changed:
            try:
                self.wait("the previous kube-apiserver is not ready", lambda: self.host.health(COMPONENTS[0][2]),
                          paths.knob("RECONFIGURE_HEALTH_TIMEOUT", 300))
            except ReconfigureError as e:
                self.say(e.message)
        try:
            self.restore(originals)
        except ReconfigureError as e:
            self.say("cannot put back kubeadm-config and kubelet-config: %s" % e.message)

    def restore(self, originals):
        """Each ConfigMap's data as it was read, over the live object."""
        for old in originals:
            name = old["metadata"]["name"]
            cur = self.configmap(name)
            cur["data"] = old.get("data") or {}
            path = os.path.join(self.work, "reconfigure-%s.json" % name)
            fsutil.write_atomic(path, json.dumps(cur).encode("utf-8"), mode=0o600)
            self.kubectl(["replace", "-f", path])


def record_boot(role, run, runtime, node_name, say, published=None):
    """After the boot's init or join: what this node runs with, so the timer
    acts only on a later change. Best effort: without a record the first run
    writes everything again (unchanged manifests restart nothing)."""
    try:
        if role == "controller":
            docs, _ = controller_documents(run, runtime, node_name, published)
            record(controller=digest(docs))
        else:
            cm = jsonio.parse(run(["kubectl", "--kubeconfig", paths.path(paths.KUBELET_CONF), "get", "configmap",
                                   "kubelet-config", "-n", "kube-system", "-o", "json"]), "kubelet-config")
            record(kubelet=kubelet_digest(cm))
    except Exception as e:  # noqa: BLE001 - see the docstring
        say("cannot record the applied configuration (%s): the reconfigure timer writes it again" % e)


def main(argv, aws, host=None, instance=None, say=None):
    say = say or Console("kube-aws-reconfigure")
    if argv:
        say("usage: kube-aws-node reconfigure")
        return 2
    host = host or certs.Host()
    rt = jsonio.read(paths.etc("runtime.json"))
    node = jsonio.read(paths.etc("node.json"))
    if instance is None:
        instance = jsonio.read(paths.path(paths.INSTANCE_JSON), {})
    cls = Controller if node.get("role") == "controller" else Worker
    n = cls(aws, host, rt, instance, say)
    try:
        result = n.reconcile()
    except ReconfigureError as e:
        say("reconfiguration failed at %s: %s" % (e.step, e.message))
        if cls is Worker:
            n.node_failure(e.step, e.message)
        return 1
    except Exception as e:  # noqa: BLE001 - reported, never a silent failure
        say("reconfiguration failed: %s: %s" % (e.__class__.__name__, e))
        n.node_failure("reconfigure", "%s: %s" % (e.__class__.__name__, e))
        return 1
    if result == "none":
        say("the configuration this node runs is the current one")
    return 0

