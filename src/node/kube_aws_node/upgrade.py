"""Kubernetes upgrades on the controllers, run by `kube-aws-node bootstrap`
when a controller of a newer version joins the control plane, and the gate
that keeps the addon reconciler from installing a new minor's addons before
the control plane runs that minor.

kube-aws replaces nodes rather than upgrading them in place: a new
`kubernetesVersion` gives the controllers new user data, and CloudFormation
replaces them one at a time under the join lock (bootstrap.py), then the pools
(root stack DependsOn), then the addons' wait conditions. What this module
adds to a controller's join, under that lock:

- The cluster's version is kubeadm-config's ClusterConfiguration
  `kubernetesVersion`, read with a short-lived admin kubeconfig this
  controller mints from the cluster CA it already holds (`kubeadm kubeconfig
  user`, group kubeadm:cluster-admins).
- First, whatever the version: this controller uploads its own
  ClusterConfiguration and KubeletConfiguration into kubeadm-config and
  kubelet-config (`kubeadm init phase upload-config all`, so kubeadm
  defaults and validates them as at init), then joins. That is kubeadm's
  reconfiguration path (change those objects, then each node's static pods
  and kubelet config: https://kubernetes.io/docs/tasks/administer-cluster/
  kubeadm/kubeadm-reconfigure/), and the join is what writes this node's
  static pods and kubelet config from them: a changed flag (a plugin's
  apiserver, controller-manager or scheduler flag, the issuer, Dex's OIDC
  flags) or KubeletConfiguration reaches every controller as the roll
  replaces it, and every worker, whose pool rolls after the control plane.
  Unchanged, the upload writes what is there already.
- This node is a newer patch or the next minor (`decide`): the upload
  carries its version, as Cluster API's KubeadmControlPlane sets the new
  version in kubeadm-config before it joins a machine of that version
  (kubernetes-sigs/cluster-api controlplane/kubeadm/internal/
  workload_cluster.go, UpdateKubernetesVersionInKubeadmConfigMap); its
  static pods are the new version from the start and its kubelet is never
  newer than its own API server: kubeadm's ControlPlaneKubeletLocalMode
  points a control-plane kubelet at its local API server, never at an older
  one behind the load balancer (cmd/kubeadm/app/cmd/phases/join/kubelet.go
  @v1.35.4, GetLocalAPIEndpoint). kube-aws does not set the gate: it is GA
  and locked on in 1.35 (cmd/kubeadm/app/features/features.go@v1.35.4) and
  goes away in 1.36 (the TODO in cmd/phases/join/controlplanejoin.go), when
  kubeadm would refuse it as an "unrecognized feature-gate key". Without the
  upload the join fails: join's preflight compares the kubelet's minor with
  kubeadm-config's kubernetesVersion (preflight/checks.go@v1.35.4,
  KubeletVersionCheck, addCommonChecks). Once it is Ready it runs `kubeadm
  upgrade apply vX.Y.Z --yes` (its version policy allows the API's
  discovery answering either version, phases/upgrade/policy.go
  EnforceVersionPolicies; its health check wants every control-plane Node
  Ready; static pods already at the new version are left alone): the RBAC
  rules, the config uploads, certificate renewal, the post-upgrade tasks,
  and kube-proxy and CoreDNS once no other control-plane instance runs an
  older kube-apiserver image (cmd/kubeadm/app/cmd/phases/upgrade/addons.go
  @v1.35.4 shouldUpgradeAddons). The join lock (S3, bootstrap.py) is the
  lease: one controller at a time uploads, joins and upgrades, and the next
  replacement waits for it (and for its signal: the group's rolling update).
- A later controller of the same roll joins at the new version; if
  kube-proxy is still at an older tag it runs `kubeadm upgrade node`, which
  upgrades kube-proxy and CoreDNS once every instance runs the new image (the
  last controller of the roll does it).
- This node is older than the cluster, or a minor was skipped: it refuses
  (StepFailed), so a rollback never runs an older control plane over etcd
  data a newer one wrote; `kube-aws update` refuses those moves before any
  node sees them (src/config/versions.rs).

A single controller takes the same path: its replacement (the group
terminates the old one first) restores etcd's snapshot and runs `kubeadm
init` over it at its own version (etcd.py, bootstrap.py); when the status
object says the control plane ran an older version, `after_init` then runs
`kubeadm upgrade apply` as above. The first `kubeadm init` of a cluster
records its version there.

A failure (the upload, the join, this node's Ready, `kubeadm upgrade apply`)
puts kubeadm-config and kubelet-config back as they were and fails the boot: no other node has
changed (the next controller waits for this one's signal, the pools for the
control-plane stack), and the roll back (CloudFormation's, on the FAILURE
signal) joins old controllers to a cluster at their version. Every step's phase
(upgrading, upgraded, failed with the step and the reason) is written to the
status object s3://<bucket>/<prefix>/status/control-plane/upgrade.json,
which also records the version the control plane last reached: the
replacement of a single controller, which restores etcd's snapshot and runs
`kubeadm init` on it (etcd.py), refuses to do so at an older version than
that record.

Invariant: the decisions (`decide`, `config_version`, `needs_addon_upgrade`,
`nodes_behind`, `restore_refusal`) are pure; every command is an
argument list; the minted kubeconfig holds a key and is written 0600 in the
node's work directory and removed after use.
"""
import json
import os
import re
import subprocess
import time

from . import etcd, fsutil, jsonio, paths
from .awscall import AwsError
from .retry import retry

VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
# kubeadm marshals ClusterConfiguration with `kubernetesVersion` at the top level.
VERSION_LINE = re.compile(r"(?m)^kubernetesVersion: *\"?(v?[0-9][^\s\"]*)\"? *$")
STATUS_KEY = "status/control-plane/upgrade.json"


class UpgradeError(Exception):
    pass


# What kubectl prints when no API server answered behind the cluster's
# endpoint, or one answered that cannot serve yet: the join token appears as
# soon as the first controller's API server serves, a few seconds before the
# load balancer's health checks (two, 10 s apart: src/render/cfn/network.rs)
# route to it alone; until then a Network Load Balancer whose targets are all
# unhealthy fails open and may route to a controller with no API server
# ("Health checks for Network Load Balancer target groups"). `kubeadm join`
# retries its own discovery; the reads before it retry these too. Seen in CI
# on the real-node bed: "The connection to the server <name>:6443 was
# refused" on the second of three controllers.
TRANSIENT = re.compile(r"was refused|Unable to connect to the server|i/o timeout|connection reset|TLS handshake "
                       r"timeout|EOF|ServiceUnavailable|InternalError|\(Timeout\)|the server is currently unable|"
                       r"etcdserver: (leader changed|request timed out)|no route to host")


def transient(message):
    """Whether a kubectl error says no API server could answer yet (retry), not what one answered."""
    return bool(TRANSIENT.search(message or ""))


def parse(version):
    """(major, minor, patch) of `v1.35.4` / `1.35.4`, or None."""
    m = VERSION.fullmatch(str(version or "").strip())
    return tuple(int(x) for x in m.groups()) if m else None


def decide(cluster, mine):
    """(action, reason) for a controller at `mine` joining a control plane
    at `cluster`: "join" (same version), "upgrade" (a newer patch or the next
    minor), or "refuse" with the reason (older, a skipped minor, unreadable)."""
    c, m = parse(cluster), parse(mine)
    if c is None or m is None:
        return "refuse", "cannot compare the cluster's version %r with this node's %r" % (cluster, mine)
    if m == c:
        return "join", ""
    if m < c:
        return "refuse", ("the control plane runs %s and this node is %s: an older control plane never "
                          "runs over etcd data a newer one wrote" % (fmt(c), fmt(m)))
    if m[0] != c[0] or m[1] > c[1] + 1:
        return "refuse", ("the control plane runs %s and this node is %s: kubeadm upgrades one minor at a "
                          "time" % (fmt(c), fmt(m)))
    return "upgrade", ""


def fmt(t):
    return "%d.%d.%d" % t


def config_version(cluster_configuration):
    """The `kubernetesVersion` of kubeadm-config's ClusterConfiguration text, or None."""
    found = VERSION_LINE.findall(cluster_configuration or "")
    return found[0] if len(found) == 1 else None


def needs_addon_upgrade(kube_proxy_image, version):
    """Whether kube-proxy's image (`registry.k8s.io/kube-proxy:v1.35.4`) is at another tag than `version`."""
    tag = (kube_proxy_image or "").rpartition(":")[2]
    return parse(tag) != parse(version)


def nodes_behind(nodes, version):
    """Names of the Ready Nodes (`kubectl get nodes -o json`) whose kubelet
    runs an older minor than `version`, as (controllers, workers), each
    sorted. The reconciler installs a plan for that minor only once no
    controller is behind (the version skew policy: the cloud controller
    manager and cluster-autoscaler must not be newer than the API servers,
    and each controller's kubelet and API server move together), and, while
    the stack is being updated, no worker either: a version change rolls
    the control plane, then the pools, then the minor-pinned addons (issue
    38), so the new minor's autoscaler and cloud controller manager never
    run while the pools still roll. A plan without a version gates nothing.
    A Node that is not Ready (a controller or worker that is gone, until the
    cloud controller manager deletes it) does not count."""
    want = parse(version)
    if want is None:
        return [], []
    controllers, workers = [], []
    for n in (nodes or {}).get("items") or []:
        labels = (n.get("metadata") or {}).get("labels") or {}
        ready = [c for c in (n.get("status") or {}).get("conditions") or []
                 if c.get("type") == "Ready" and c.get("status") == "True"]
        if not ready:
            continue
        have = parse(((n.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion"))
        if have is None or have[:2] < want[:2]:
            name = (n.get("metadata") or {}).get("name", "?")
            (controllers if "node-role.kubernetes.io/control-plane" in labels else workers).append(name)
    return sorted(controllers), sorted(workers)


class Upgrader(object):
    """The upgrade steps of one controller's join; `boot` is bootstrap.Boot."""

    def __init__(self, boot, version, sleep=time.sleep):
        self.boot = boot
        self.version = version.lstrip("v")
        self.kubeconfig = os.path.join(boot.work, "upgrade-admin.conf")
        self.status = {}
        self.sleep = sleep

    # --- commands ---------------------------------------------------------
    def run(self, args):
        """(code, stdout, stderr) of a command."""
        try:
            p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, errors="replace")
        except OSError as e:
            return 127, "", "%s: %s" % (args[0], e.strerror)
        return p.returncode, p.stdout, p.stderr

    def kubectl(self, args):
        code, out, err = self.run(["kubectl", "--kubeconfig", self.kubeconfig] + args)
        if code != 0:
            raise UpgradeError("kubectl %s: %s" % (" ".join(args[:3]), (err.strip().splitlines() or ["exit %d" % code])[-1]))
        return out

    def mint(self, config_path):
        """An admin kubeconfig (one hour) from the cluster CA, before this node has admin.conf."""
        code, out, err = self.run(["kubeadm", "kubeconfig", "user", "--config", config_path, "--client-name",
                                   "kube-aws:upgrade", "--org", "kubeadm:cluster-admins", "--validity-period", "1h"])
        if code != 0:
            raise UpgradeError("kubeadm kubeconfig user: %s" % (err.strip().splitlines() or ["exit %d" % code])[-1])
        fsutil.write_atomic(self.kubeconfig, out.encode("utf-8"), mode=0o600)

    def controller_ips(self):
        """The cluster's pending or running controllers' addresses (EC2)."""
        return etcd.Node(self.boot.aws, etcd.imds_get).controller_ips()

    def forget_stale_etcd_pods(self):
        """Before `kubeadm join`: deletes the etcd Pods whose client URL is no
        running controller's. kubeadm join takes its etcd endpoints from these
        Pods' annotations and syncs with them before it adds its member
        (cmd/kubeadm/app/util/etcd/etcd.go NewFromCluster and
        getRawEtcdEndpointsFromPodAnnotation, v1.35.8). A restore's snapshot
        holds the Pods of every controller it replaced; until the pod garbage
        collector removes them (after their Nodes go), a join that lists them
        before the restorer's own Pod is there has no endpoint that answers:
        "error syncing endpoints with etcd: context deadline exceeded", seen
        on the real-node bed's HA restore. With them gone kubeadm waits for a
        Pod with an endpoint. A live controller's Pod deleted by mistake (an
        instance EC2 does not list yet) is made again by its kubelet: it is a
        mirror Pod. A failure here is said, and the join goes on."""
        try:
            ips = self.controller_ips()
            pods = jsonio.parse(self.kubectl(["get", "pods", "-n", "kube-system", "-l", etcd.ETCD_PODS, "-o", "json"]),
                                "the etcd Pods")
            for name in etcd.stale_etcd_pods(pods, ips):
                self.boot.say("deleting the etcd Pod %s: its client URL is no running controller's (kubeadm join "
                              "syncs with every etcd Pod's)" % name)
                self.kubectl(["delete", "pod", name, "-n", "kube-system", "--grace-period=0", "--force",
                              "--wait=false"])
        except Exception as e:  # noqa: BLE001 - the join goes on; kubeadm says what it finds
            self.boot.say("cannot look for stale etcd Pods (%s): joining anyway" % (getattr(e, "message", "") or e))

    def forget(self):
        try:
            os.unlink(self.kubeconfig)
        except OSError:
            pass

    # --- kubeadm-config and kubelet-config ----------------------------------------
    def get(self, name):
        """A ConfigMap of kube-system; a read no API server answered is
        retried (about 2 minutes by default: KUBE_AWS_API_RETRY_ATTEMPTS
        tries, the i-th wait KUBE_AWS_API_RETRY_DELAY * i seconds)."""
        args = ["get", "configmap", name, "-n", "kube-system", "-o", "json"]

        def said(i, e):
            self.boot.say("%s (try %d): retrying" % (e, i))
        out = retry(lambda: self.kubectl(args), paths.knob("API_RETRY_ATTEMPTS", 10),
                    paths.knob("API_RETRY_DELAY", 3), final=lambda e: not transient(str(e)),
                    sleep=self.sleep, on_retry=said)
        return jsonio.parse(out, name)

    def read_config(self):
        """The two ConfigMaps as they are (kubeadm-config, kubelet-config) and the cluster's version."""
        cm = self.get("kubeadm-config")
        version = config_version((cm.get("data") or {}).get("ClusterConfiguration", ""))
        if version is None:
            raise UpgradeError("kubeadm-config names no single kubernetesVersion")
        return [cm, self.get("kubelet-config")], version

    def upload(self, config_path):
        """This node's ClusterConfiguration and KubeletConfiguration into
        kubeadm-config and kubelet-config, by kubeadm itself (defaulted and
        validated as at init): kubeadm's reconfiguration path is to change
        these objects, then the nodes' static pods and kubelet config
        (https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-reconfigure/);
        a node that joins after this takes both from them."""
        code, _, err = self.run(["kubeadm", "init", "phase", "upload-config", "all", "--config", config_path,
                                 "--kubeconfig", self.kubeconfig])
        if code != 0:
            raise UpgradeError("kubeadm init phase upload-config: %s"
                               % (err.strip().splitlines() or ["exit %d" % code])[-1])
        self.boot.say("uploaded this node's ClusterConfiguration and KubeletConfiguration into kubeadm-config and "
                      "kubelet-config (kubeadm init phase upload-config all)")

    def restore(self, originals):
        """Puts each ConfigMap's data back as it was read (a replace of the
        current object, so its resourceVersion is the live one)."""
        for old in originals:
            name = old["metadata"]["name"]
            cur = self.get(name)
            cur["data"] = old.get("data") or {}
            path = os.path.join(self.boot.work, name + ".json")
            fsutil.write_atomic(path, json.dumps(cur).encode("utf-8"), mode=0o600)
            self.kubectl(["replace", "-f", path])

    # --- the status object ------------------------------------------------------
    def report(self, **fields):
        self.status.update(fields)
        self.status["updatedAt"] = int(time.time())
        self.status["node"] = self.boot.node_name
        rt = self.boot.rt
        path = os.path.join(self.boot.work, "upgrade-status.json")
        jsonio.write(path, self.status, mode=0o600)
        try:
            self.boot.aws(["s3", "cp", "--only-show-errors", "--sse", "AES256", "--content-type", "application/json",
                           path,
                           "s3://%s/%s/%s" % (rt["bucket"], rt["keyPrefix"], STATUS_KEY)])
        except AwsError as e:
            self.boot.say("cannot write the upgrade status: %s" % e)

    # --- the join ----------------------------------------------------------------
    def join(self, config_path, do_join):
        """Joins this controller (`do_join()` runs `kubeadm join`), upgrading
        the cluster first when this node is newer. Raises UpgradeError with
        what failed; the status object says it too."""
        self.mint(config_path)
        try:
            return self._join(config_path, do_join)
        finally:
            self.forget()

    def _join(self, config_path, do_join):
        say = self.boot.say
        originals, cluster = self.read_config()
        action, reason = decide(cluster, self.version)
        frm = cluster.lstrip("v")
        say("the control plane runs Kubernetes %s; this node is %s: %s" % (frm, self.version, action))
        if action == "refuse":
            self.report(phase="refused", version=frm, to=self.version, step="version-check", message=reason)
            raise UpgradeError(reason)
        if action == "upgrade":
            self.report(phase="upgrading", version=frm, **{"from": frm, "to": self.version, "step": "upload-config"})
        try:
            # This node's configuration first (for an upgrade, its version):
            # the join then writes its static pods and kubelet config from it.
            self.upload(config_path)
            if action == "upgrade":
                self.report(step="kubeadm-join")
            self.forget_stale_etcd_pods()
            do_join()
            if action == "upgrade":
                # kubeadm upgrade apply's health checks want every control-plane node Ready.
                self.report(step="node-ready")
                self.boot.wait_node_ready()
                self.report(step="kubeadm-upgrade-apply")
                self.boot.step("kubeadm-upgrade-apply")
                code = apply_with_retries(self.boot_sh, apply_args(self.version, self.boot.upgrade_config(self.version)),
                                          self.boot.say)
                if code != 0:
                    raise UpgradeError("kubeadm upgrade apply v%s exited %d (see the boot log)"
                                       % (self.version, code))
        except Exception as e:
            # The roll back replaces this node with one of the old version and
            # configuration, which joins only a cluster at its version: put
            # both ConfigMaps back. (The old API servers ran beside this one
            # all along, as in any HA upgrade.)
            try:
                self.restore(originals)
                put_back = "kubeadm-config and kubelet-config are back as they were (%s)" % frm
            except Exception as undo:  # noqa: BLE001 - say it, keep the first error
                put_back = "kubeadm-config and kubelet-config could not be put back: %s" % undo
            step = self.status.get("step") if action == "upgrade" else "kubeadm-join"
            self.report(phase="failed", version=frm, step=step,
                        message="%s; %s" % (getattr(e, "message", "") or e, put_back))
            raise
        if action == "join":
            self.after_join()
            return action
        self.report(phase="upgraded", version=self.version, step="done", message="")
        return action

    def boot_sh(self, args):
        try:
            self.boot.sh(args)
            return 0
        except Exception as e:  # bootstrap.StepFailed
            return getattr(e, "code", 1) or 1

    def after_join(self):
        """The same version: upgrade kube-proxy and CoreDNS when a roll left
        them behind (`kubeadm upgrade node` does, once every control-plane
        instance runs the new kube-apiserver image)."""
        try:
            image = self.kubectl(["get", "daemonset", "kube-proxy", "-n", "kube-system", "-o",
                                  "jsonpath={.spec.template.spec.containers[0].image}"]).strip()
        except UpgradeError as e:
            self.boot.say("cannot read kube-proxy's image (%s): no addon upgrade" % e)
            return
        if not image or not needs_addon_upgrade(image, self.version):
            return
        self.boot.say("kube-proxy is %s, not v%s: kubeadm upgrade node" % (image, self.version))
        self.boot.step("kubeadm-upgrade-node")
        code = apply_with_retries(self.boot_sh, ["kubeadm", "upgrade", "node", "--config",
                                                 self.boot.upgrade_config(self.version)], self.boot.say,
                                  attempts=NODE_ATTEMPTS)
        if code != 0:
            self.report(phase="failed", step="kubeadm-upgrade-node",
                        message="kubeadm upgrade node exited %d (see the boot log)" % code)
            raise UpgradeError("kubeadm upgrade node exited %d" % code)
        self.report(phase="upgraded", version=self.version, step="done", message="")


# `kubeadm upgrade apply` is run again when it fails: kubeadm documents it as
# idempotent ("Upgrading kubeadm clusters", "Recovering from a failure state":
# "you can run kubeadm upgrade again. This command is idempotent and
# eventually makes sure that the actual state is the desired state you
# declare"). Its preflight runs a Job and gives it a fixed 60 s
# (cmd/kubeadm/app/phases/upgrade/health.go createJob @v1.36.5), which a
# busy control plane (the kubelet starting the pod, the scheduler) missed on
# the real-node bed: a failed preflight has changed nothing. Five attempts
# since stop 51, whose second make test at load 41 saw all three miss it:
# a real failure is reported about 2.5 minutes later (two more 60 s checks
# and pauses), a busy minute is ridden out.
APPLY_ATTEMPTS = 5
APPLY_PAUSE = 10
# `kubeadm upgrade node` (a later controller of a roll, right after its
# join) first reads this node's API endpoint from its kube-apiserver mirror
# Pod's annotation, waiting up to one API-call timeout (a minute by
# default) for the kubelet to post the Pod: cmd/kubeadm/app/util/config/
# cluster.go getAPIEndpointFromPodAnnotation @v1.36.5, "static pods were not
# yet mirrored". On the real-node bed at load 20 the Pod came later than
# that once ("could not retrieve API endpoints for node ... using pod
# annotations: context deadline exceeded"), failing a join that had
# succeeded. The same command again, as for apply.
NODE_ATTEMPTS = 3


def apply_with_retries(sh, args, say, attempts=None, sleep=time.sleep):
    """Runs `args` (`kubeadm upgrade apply` or `node`) through `sh` (exit
    code back) up to `attempts` times while it fails; the last exit code."""
    attempts = attempts or APPLY_ATTEMPTS
    code = 1
    for i in range(attempts):
        code = sh(args)
        if code == 0 or i + 1 == attempts:
            return code
        say("%s exited %d; running it again (attempt %d of %d): kubeadm documents it as "
            "idempotent" % (" ".join(args[:3]), code, i + 2, attempts))
        sleep(paths.knob("RETRY_DELAY", APPLY_PAUSE))
    return code


def apply_args(version, config):
    """`kubeadm upgrade apply` to `version`, non-interactive, with the
    node's UpgradeConfiguration (`--yes` is one of the flags kubeadm lets
    go with `--config`: cmd/kubeadm/app/apis/kubeadm/validation/validation.go
    @v1.35.8 isAllowedFlag)."""
    return ["kubeadm", "upgrade", "apply", "v" + version, "--yes", "--config", config]


def recorded_version(aws, bucket, prefix, work):
    """The version the status object says the control plane last reached, or
    None when there is none or it cannot be read."""
    path = os.path.join(work, "upgrade-status-read.json")
    try:
        aws(["s3", "cp", "--only-show-errors", "s3://%s/%s/%s" % (bucket, prefix, STATUS_KEY), path], attempts=1)
        return jsonio.read(path).get("version")
    except (AwsError, OSError, jsonio.JsonError, AttributeError):
        return None


def restore_refusal(recorded, mine):
    """Why a single controller at `mine` must not `kubeadm init` over the
    restored snapshot of a control plane that reached `recorded`, or ""."""
    r, m = parse(recorded), parse(mine)
    if r is None or m is None or m >= r:
        return ""
    return ("the control plane reached Kubernetes %s and this node is %s: an older control plane never runs "
            "over etcd data a newer one wrote" % (fmt(r), fmt(m)))


def node_version():
    """This node's pinned version (node.json kubernetesVersion)."""
    return jsonio.read(paths.etc("node.json"))["kubernetesVersion"].lstrip("v")
