"""After `kubeadm init`: the version recorded, and on a restore, the
restored control plane takes over from the controllers it replaced (their
Node objects deleted, the leader leases they hold taken back) and, over an
older control plane's snapshot, upgrades it with `kubeadm upgrade apply`
once a Node can run kubeadm's health-check Job. Python 3.9, standard
library only.

Invariant: only what a replaced controller holds is deleted (`me` and this
host's leases never are); the decisions are pure.
"""
import socket
import time

from . import jsonio, paths
from .retry import poll
from .upgrade import UpgradeError, Upgrader, apply_args, apply_with_retries, fmt, parse


CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


def replaced_controllers(nodes, me):
    """The control-plane Nodes of `nodes` (`kubectl get nodes -o json`) other than `me`, sorted."""
    return sorted(n["metadata"]["name"] for n in (nodes or {}).get("items") or []
                  if CONTROL_PLANE_LABEL in ((n.get("metadata") or {}).get("labels") or {})
                  and n["metadata"].get("name") != me)


def forget_replaced_controllers(boot):
    """On a single controller's restore: deletes the Node objects of the
    controllers before it, which the snapshot holds and which are gone (one
    controller, and no API answered: etcd_restore.restore_decision). Their Nodes
    stay Ready in the restored data until the node lifecycle controller sees
    their heartbeats stop; meanwhile the scheduler may place pods there, and
    `kubeadm upgrade apply`'s health checks want every control-plane Node
    Ready and a Job's pod to complete within 15 s (cmd/kubeadm/app/phases/
    upgrade/health.go@v1.35.8 CheckClusterHealth, createJob): its pod went to
    the old Node on the real-node bed and the upgrade failed. The cloud
    controller manager would delete them too, later."""
    conf = paths.path(paths.ADMIN_CONF)
    out = boot.sh(["kubectl", "--kubeconfig", conf, "get", "nodes", "-l", CONTROL_PLANE_LABEL, "-o", "json"],
                  capture=True)
    for name in replaced_controllers(jsonio.parse(out, "the control-plane Nodes"), boot.node_name):
        boot.say("deleting the Node %s: a controller this restore replaced" % name)
        boot.sh(["kubectl", "--kubeconfig", conf, "delete", "node", name, "--wait=false"])


LEADER_LEASES = ("kube-controller-manager", "kube-scheduler")


# Deleted when a replaced controller holds it, not waited for: the cloud
# controller manager is an addon (k8s.io/cloud-provider's default lease name).
OTHER_LEASES = ("cloud-controller-manager",)


def stale_leases(leases, host):
    """The leader leases of `leases` (`kubectl get lease -o json`) that a
    process of another host holds: leader election names a holder
    `<hostname>_<uuid>` (client-go tools/leaderelection)."""
    return sorted(l["metadata"]["name"] for l in (leases or {}).get("items") or []
                  if not ((l.get("spec") or {}).get("holderIdentity") or "").startswith(host + "_"))


def take_over_leader_leases(boot, host=None, sleep=time.sleep, clock=time.time):
    """On a single controller's restore: the snapshot holds the leader leases
    of the replaced controller's kube-controller-manager and kube-scheduler,
    and the new ones wait a lease duration (15 s) from their start before they
    take them over (client-go leaderelection: a lease is expired by the time
    this process observed it unchanged, not by its renewTime); meanwhile no
    Job gets a pod and none is scheduled, and `kubeadm upgrade apply`'s
    CreateJob health check gives a Job 15 s (seen on the real-node bed: the
    leases taken 17-20 s after the static pods started, the check failed).
    The stale leases are deleted (the only controller is this one: no other
    holder is alive), then this waits until this host's processes hold both
    (KUBE_AWS_LEADER_WAIT seconds, default 180)."""
    host = host or socket.gethostname()
    conf = paths.path(paths.ADMIN_CONF)
    get = ["kubectl", "--kubeconfig", conf, "-n", "kube-system", "get", "lease"] + list(LEADER_LEASES + OTHER_LEASES) + [
        "--ignore-not-found", "-o", "json"]

    def leases():
        out = boot.sh(get, capture=True).strip()
        found = jsonio.parse(out, "the leader leases") if out else {}
        if found.get("kind") == "Lease":
            found = {"items": [found]}
        return found
    first = leases()
    for name in stale_leases(first, host):
        boot.say("deleting the %s leader lease: a replaced controller holds it" % name)
        boot.sh(["kubectl", "--kubeconfig", conf, "-n", "kube-system", "delete", "lease", name, "--ignore-not-found"])
    last = {}

    def taken():
        last["now"] = leases()
        mine = {"items": [l for l in last["now"].get("items") or [] if l["metadata"]["name"] in LEADER_LEASES]}
        held = [l["metadata"]["name"] for l in mine["items"]]
        return sorted(held) == sorted(LEADER_LEASES) and not stale_leases(mine, host)
    limit = paths.knob("LEADER_WAIT", 180)
    if not poll(taken, limit, 2, sleep=sleep, clock=clock):
        raise UpgradeError("kube-controller-manager and kube-scheduler did not take their leader leases within %d s "
                           "(holders: %s)" % (limit, ", ".join(
                               "%s=%s" % (l["metadata"]["name"], (l.get("spec") or {}).get("holderIdentity", ""))
                               for l in last["now"].get("items") or []) or "none"))


def schedulable_nodes(nodes):
    """The Nodes of `nodes` (`kubectl get nodes -o json`) where the pod of
    `kubeadm upgrade apply`'s health check Job can run: Ready, schedulable,
    and no NoSchedule or NoExecute taint but the control plane's, which it
    tolerates (cmd/kubeadm/app/phases/upgrade/health.go@v1.35.8 createJob).
    A node kubelet registers with `--cloud-provider=external` keeps
    node.cloudprovider.kubernetes.io/uninitialized until the cloud
    controller manager initialises it."""
    out = []
    for n in (nodes or {}).get("items") or []:
        spec, status = n.get("spec") or {}, n.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        taints = [t for t in spec.get("taints") or [] if t.get("effect") in SCHEDULING_TAINT_EFFECTS
                  and t.get("key") != CONTROL_PLANE_LABEL]
        if ready and not spec.get("unschedulable") and not taints:
            out.append(n["metadata"]["name"])
    return sorted(out)


SCHEDULING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")


def wait_schedulable(boot, sleep=time.sleep, clock=time.time):
    """Returns once a Node can run the health check Job's pod (a worker, or
    this controller once the cloud controller manager initialised it:
    without workers, the restored control plane's only node); UpgradeError
    after KUBE_AWS_SCHEDULABLE_WAIT seconds (default 300)."""
    conf = paths.path(paths.ADMIN_CONF)
    limit = paths.knob("SCHEDULABLE_WAIT", 300)
    checks = []

    def schedulable():
        out = boot.sh(["kubectl", "--kubeconfig", conf, "get", "nodes", "-o", "json"], capture=True)
        if schedulable_nodes(jsonio.parse(out, "the Nodes")):
            return True
        if not checks:
            boot.say("no Node can run a pod yet (this one waits for the cloud controller manager to initialise it)")
        checks.append(1)
        return False
    if not poll(schedulable, limit, 3, sleep=sleep, clock=clock):
        raise UpgradeError("no Node could run kubeadm's health check Job within %d s: is the cloud controller "
                           "manager running? (this Node keeps the node.cloudprovider.kubernetes.io/uninitialized "
                           "taint until it initialises it)" % limit)


def after_init(boot, version, recorded, restored):
    """After `kubeadm init` (admin.conf is there): records the version this
    control plane runs in the status object. On the restore of a single
    controller's snapshot written by an older control plane (`recorded`, the
    version the status object holds), the same upgrade as an HA control
    plane's first new controller: `kubeadm upgrade apply` to this node's
    version (its static pods, kubeadm-config and kubelet-config are already
    at it, written by the init; apply adds what an upgrade does beyond an
    init: the post-upgrade tasks, certificate renewal, the addon migrations,
    cmd/kubeadm/app/cmd/upgrade/apply.go@v1.35.4). Raises UpgradeError.

    Never the other way: bootstrap refuses to init over a snapshot of a newer
    control plane (`restore_refusal`). A failure records this node's version,
    not the older one: its API server has written to the restored data, so a
    roll back to the older version must refuse it too."""
    up = Upgrader(boot, version)
    if restored:
        try:
            forget_replaced_controllers(boot)
            take_over_leader_leases(boot)
        except UpgradeError:
            raise
        except Exception as e:  # noqa: BLE001 - StepFailed, a malformed answer: say which
            raise UpgradeError("cannot take over from the replaced controller: %s"
                               % (getattr(e, "message", "") or e))
    r, m = parse(recorded), parse(up.version)
    if not restored or r is None or m is None or m <= r:
        up.report(phase="running", version=up.version, step="kubeadm-init", message="")
        return "init"
    frm = fmt(r)
    boot.say("the restored snapshot is of Kubernetes %s; this node is %s: kubeadm upgrade apply" % (frm, up.version))
    up.report(phase="upgrading", version=up.version, step="node-ready", **{"from": frm, "to": up.version})
    try:
        # kubeadm upgrade apply's health check wants every control-plane Node
        # Ready, and a Job's pod to run somewhere.
        boot.wait_node_ready()
        wait_schedulable(boot)
        up.report(step="kubeadm-upgrade-apply")
        boot.step("kubeadm-upgrade-apply")
        code = apply_with_retries(up.boot_sh, apply_args(up.version, boot.upgrade_config(up.version)), boot.say)
        if code != 0:
            raise UpgradeError("kubeadm upgrade apply v%s exited %d (see the boot log)" % (up.version, code))
    except Exception as e:
        up.report(phase="failed", message="%s; the control plane ran %s over the restored data: an older one "
                                          "must not restore it" % (getattr(e, "message", "") or e, up.version))
        raise UpgradeError(str(getattr(e, "message", "") or e))
    up.report(phase="upgraded", step="done", message="")
    return "upgrade"
