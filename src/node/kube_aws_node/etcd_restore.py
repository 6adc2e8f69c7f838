"""etcd's restore: `kube-aws restore`'s request (one controller restores
the snapshot under the restore lock, the others join it), the restore of a
replaced single controller from its latest snapshot, the commands that put a
snapshot into etcd's data dir before `kubeadm init`, and the addon record
reset after it. Python 3.9, standard library only.

Invariant: the decisions are pure (`restore_decision`,
`requested_restore_decision`); a restore happens only before the first
controller initializes, and only one controller restores.
"""
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.request

from . import addon_record, locks
from .awscall import AwsError, listed_object
from .etcd import (ADMIN_CONF, DATA_DIR, FAIL, INIT, JOIN, NODE_JSON, PEER_PORT, RECONCILER_JSON, RESTORE,
                   RESTORE_PATH, Clock, Node, host, imds_get, read_json, run_command)
from .etcd_backup import snapshot_tier, snapshots


# `kube-aws restore` (src/aws/lifecycle/restore.rs) writes its request here, relative to
# the cluster's key prefix ({"id", "key"}), after deleting RESTORE_LOCK; the
# first replacement controller to take the lock restores the key, the others
# join it (kops's etcd-manager likewise restores on one member and lets the
# others join empty and sync: docs/backup-restore.md).
RESTORE_REQUEST = "bootstrap/etcd-restore.json"


RESTORE_LOCK = "bootstrap/etcd-restore-lock"


# What the restorer writes once the snapshot is in place ("request" names the
# request it served). A request it names is over: a controller that boots
# later (a rolling update, the single controller replaced again) decides as
# if there were none, instead of joining a restore that is long done.
RESTORE_STATUS = "status/etcd/restore.json"


def requested_restore_decision(request, took_restore_lock, prefix):
    """A pending `kube-aws restore` request decides before anything else: the
    controller that took the restore lock restores the requested key (one of
    this cluster's snapshots, else it fails), the others join it, whatever
    the API answers (the old controllers may still be leaving)."""
    key = str(request.get("key", ""))
    rid = str(request.get("id", ""))
    if not took_restore_lock:
        return {"action": JOIN, "request": rid,
                "reason": "kube-aws restore %s: another controller restores the snapshot; join it" % rid}
    if snapshot_tier(key, prefix) is None:
        return {"action": FAIL, "request": rid,
                "reason": "kube-aws restore %s asks for %r, which is not a snapshot under %s" % (rid, key, prefix)}
    return {"action": RESTORE, "key": key, "request": rid,
            "reason": "kube-aws restore %s: this controller took the restore lock and restores %s" % (rid, key)}


def read_restore_request(node):
    """The pending request of `kube-aws restore`, or None."""
    bucket = node.runtime["bucket"]
    key = "%s/%s" % (node.runtime["keyPrefix"], RESTORE_REQUEST)
    if listed_object(node.aws, bucket, key) is None:
        return None
    fd, path = tempfile.mkstemp(prefix="kube-aws-restore-")
    os.close(fd)
    try:
        node.aws(["s3api", "get-object", "--bucket", bucket, "--key", key, path])
        return read_json(path, {}) or None
    finally:
        os.unlink(path)


def restore_status(node):
    """The restorer's status object, or {} when it cannot be read (none yet,
    a refusal, a network error)."""
    fd, path = tempfile.mkstemp(prefix="kube-aws-restore-status-")
    os.close(fd)
    try:
        node.aws(["s3api", "get-object", "--bucket", node.runtime["bucket"],
                  "--key", "%s/%s" % (node.runtime["keyPrefix"], RESTORE_STATUS), path], attempts=1)
        doc = read_json(path, {}) or {}
        return doc if isinstance(doc, dict) else {}
    except (AwsError, OSError, ValueError, AttributeError):
        return {}
    finally:
        os.unlink(path)


def restore_served(node, rid):
    """Whether request `rid` was served: the restorer's status object names
    it. Unreadable is not served: the controller then joins the restore, as
    before the status existed."""
    return bool(rid) and str(restore_status(node).get("request", "")) == rid


# How long a controller joining a restore waits for the restorer's cleanup
# (finish_restore) before it joins anyway: the restore, `kubeadm init` on it
# and the cleanup take minutes on a busy instance.
RESTORE_CLEAN_WAIT = 1200


RESTORE_CLEAN_POLL = 5


def wait_restore_clean(node, rid, clock, say, limit=None):
    """A controller that joins restore `rid` waits until the restorer says
    the snapshot's old controllers are gone from the API (`clean` in its
    status object, finish_restore): until then the API lists their etcd
    static pods, and `kubeadm join` takes its etcd endpoints from those pods
    (kubeadm's etcdutil NewFromCluster, then Sync), none of which answers
    (the restored etcd has one member, the restorer's), and fails its
    check-etcd phase after etcdAPICall. Returns whether it was clean; after
    `limit` seconds it joins anyway, as before the cleanup existed."""
    limit = RESTORE_CLEAN_WAIT if limit is None else limit
    end = clock.now() + limit
    said = False
    while True:
        status = restore_status(node)
        if str(status.get("request", "")) == rid and status.get("clean"):
            return True
        if clock.now() >= end:
            say(json.dumps({"action": "warning", "reason": "kube-aws restore %s: the restorer did not say the old "
                            "controllers are gone from the API within %ds; joining anyway" % (rid, limit)}))
            return False
        if not said:
            say(json.dumps({"action": "wait", "reason": "kube-aws restore %s: waiting for the restorer to remove "
                            "the snapshot's old controllers from the API before joining" % rid}))
            said = True
        clock.sleep(RESTORE_CLEAN_POLL)


def stale_controllers(nodes_json, self_name):
    """The control-plane Nodes of `kubectl get nodes -o json` other than this
    one: after a restore, the snapshot's old controllers (a restore replaces
    every controller)."""
    out = []
    for n in (nodes_json or {}).get("items") or []:
        meta = n.get("metadata") or {}
        name = meta.get("name", "")
        if name and name != self_name and "node-role.kubernetes.io/control-plane" in (meta.get("labels") or {}):
            out.append(name)
    return sorted(out)


def finish_restore(node, plan, self_name, run=run_command, clock=None, say=print):
    """The restorer, once `kubeadm init` on the restored data answers:
    deletes the snapshot's old controllers from the API (each one's pods in
    kube-system, its etcd static pod among them, then its Node; kubelets of
    live nodes would post theirs again), then says `clean` in the restore
    status, which the joining controllers wait for (wait_restore_clean).
    A failure is said and the status still written: the joiners would
    otherwise wait out RESTORE_CLEAN_WAIT."""
    clock = clock or Clock()
    kubectl = ["kubectl", "--kubeconfig", ADMIN_CONF]
    gone, problem = [], ""
    try:
        stale = stale_controllers(json.loads(run(kubectl + ["get", "nodes", "-o", "json"]) or "{}"), self_name)
        for name in stale:
            run(kubectl + ["delete", "pods", "-n", "kube-system", "--field-selector", "spec.nodeName=" + name,
                           "--wait=false", "--ignore-not-found"])
            run(kubectl + ["delete", "node", name, "--wait=false", "--ignore-not-found"])
            gone.append(name)
    except (RuntimeError, OSError, ValueError) as e:
        problem = str(e)
        say(json.dumps({"action": "warning", "reason": "the snapshot's old controllers could not all be removed "
                        "from the API: %s" % problem}))
    status = restore_status(node)
    status.update({"key": plan.get("key", ""), "request": plan.get("request", status.get("request", "")),
                   "clean": True, "removedControllers": gone, "cleanedAt": int(clock.now())})
    if problem:
        status["cleanProblem"] = problem
    node.put_json(RESTORE_STATUS, status)
    say(json.dumps({"action": "cleaned", "removedControllers": gone}))
    return gone


def restore_decision(took_init_lock, api_answers, controller_count, snaps):
    """What a booting controller does with etcd:
    - it took the init lock: the cluster is new, `kubeadm init`;
    - an API answers: the cluster is alive, join it;
    - a single-controller cluster existed (the lock was taken before) and no
      API answers: its only controller was replaced and etcd went with its
      root volume: restore the newest snapshot, then `kubeadm init` on it;
      with no snapshot there is nothing to restore: fail, saying so;
    - several controllers and no API yet: the others may be booting too,
      join (kubeadm join waits for the API)."""
    if took_init_lock:
        return {"action": INIT, "reason": "this controller took the init lock: a new cluster"}
    if api_answers:
        return {"action": JOIN, "reason": "the API answers"}
    if controller_count == 1:
        if snaps:
            return {"action": RESTORE, "key": snaps[-1]["key"], "time": snaps[-1]["time"],
                    "reason": "the cluster existed, no API answers and it has one controller: "
                              "restoring its newest snapshot"}
        return {"action": FAIL,
                "reason": "the cluster existed and its only controller is gone, but there is no etcd "
                          "snapshot to restore; destroy and up the cluster again, or put a snapshot "
                          "in the backup prefix"}
    return {"action": JOIN, "reason": "no API answers yet; %d controllers: join and wait" % controller_count}


def etcd_image(images_list):
    """The etcd image of `kubeadm config images list` output."""
    for line in images_list.splitlines():
        name = line.strip()
        if name.rsplit("/", 1)[-1].startswith("etcd:"):
            return name
    return None


def restore_commands(image, snapshot, node_name, ip, data_dir=DATA_DIR, present=False):
    """The commands that restore `snapshot` into `data_dir` as a new
    one-member cluster named like the member kubeadm's etcd manifest will
    start (`--name <node name>`, peer URL on the node's address). etcdutl
    (etcd >= 3.5; in the registry.k8s.io/etcd image) runs from the very image
    kubeadm will run, with /var/lib mounted; `kubeadm init` then needs
    `--ignore-preflight-errors=DirAvailable--var-lib-etcd` to keep the data.
    The image is pulled first unless it is `present` already (an AMI with
    the images baked in need not reach a registry: `ctr images pull`
    resolves the name at the registry even when the image is there)."""
    peer = "https://%s:%d" % (ip, PEER_PORT)
    pull = [] if present else [["ctr", "-n", "k8s.io", "images", "pull", image]]
    return pull + [
        ["ctr", "-n", "k8s.io", "run", "--rm",
         "--mount", "type=bind,src=/var/lib,dst=/var/lib,options=rbind:rw",
         image, "kube-aws-etcd-restore",
         "etcdutl", "snapshot", "restore", snapshot,
         "--data-dir", data_dir, "--name", node_name,
         "--initial-cluster", "%s=%s" % (node_name, peer),
         "--initial-advertise-peer-urls", peer],
    ]


def api_answers(endpoint, attempts=6, pause=10, clock=None, opener=None):
    """Whether anything answers HTTPS on the API endpoint (any HTTP status
    counts: an answer is an API server)."""
    clock = clock or Clock()
    ctx = None
    if opener is None:
        # Only whether something answers matters here (no data is sent): the
        # cluster CA when it is in place, else any certificate.
        ca = host("/etc/kubernetes/pki/ca.crt")
        ctx = ssl.create_default_context(cafile=ca) if os.path.exists(ca) else ssl._create_unverified_context()
    for i in range(attempts):
        try:
            req = urllib.request.Request("https://%s:6443/readyz" % endpoint)
            if opener is not None:
                opener(req)
            else:
                urllib.request.urlopen(req, timeout=5, context=ctx).close()
            return True
        except urllib.error.HTTPError:
            return True
        except Exception:
            if i + 1 < attempts:
                clock.sleep(pause)
    return False


def restore_if_needed(aws, took_init_lock=False, imds=imds_get, run=run_command, clock=None, answers=None,
                      say=print):
    """The restore decision, and on `restore` the restore itself, for the
    bootstrap of a controller (after the PKI, the packages and containerd,
    before kubeadm). Returns the final plan: {"action": "init" | "join" |
    "fail" | "restored", "reason" or "key"}. On "restored", bootstrap runs
    `kubeadm init` with `--ignore-preflight-errors=DirAvailable--var-lib-etcd`
    on the restored data; on "fail" it fails the boot with the reason."""
    clock = clock or Clock()
    node = Node(aws, imds)
    s = node.settings()
    bucket, prefix = s["bucket"], s["backupPrefix"]
    count = int(s.get("controllerCount", 1))
    request = None if took_init_lock else read_restore_request(node)
    took = request and locks.take(node.aws, node.runtime["bucket"],
                                  "%s/%s" % (node.runtime["keyPrefix"], RESTORE_LOCK),
                                  node.instance().get("instanceId", ""))
    if request and not took:
        # Joining a restore: not before the restorer has removed the
        # snapshot's old controllers from the API (wait_restore_clean).
        rid = str(request.get("id", ""))
        if wait_restore_clean(node, rid, clock, say) or restore_served(node, rid):
            request = None
    if request:
        plan = requested_restore_decision(request, took, prefix)
        say(json.dumps(plan))
        if plan["action"] != RESTORE:
            return plan
        return restore_snapshot(node, run, clock, plan, say)
    if not took_init_lock and count > 1:
        # Several controllers always join (restore_decision): no need to probe.
        plan = restore_decision(False, False, count, [])
        say(json.dumps(plan))
        return plan
    up = took_init_lock or (answers(node.runtime.get("apiEndpoint", "")) if answers else
                            api_answers(node.runtime.get("apiEndpoint", ""), clock=clock))
    snaps = [] if took_init_lock or up else snapshots(
        node.aws(["s3api", "list-objects-v2", "--bucket", bucket, "--prefix", prefix]) or {}, prefix)
    plan = restore_decision(took_init_lock, up, count, snaps)
    say(json.dumps(plan))
    if plan["action"] != RESTORE:
        return plan
    return restore_snapshot(node, run, clock, plan, say)


def reset_installed_record(node, snapshot):
    """After a restore: the addon installer's record (reconciler.json
    installedURI) made to say that nothing is current
    (addon_record.after_restore), so the reconciler brings every release from
    the snapshot's versions to the current plan instead of trusting a record
    of releases etcd no longer holds. No other controller runs the installer
    now (a restore happens before the first one initializes). "reset",
    "none" (no record: nothing was installed) or the reason it failed."""
    uri = read_json(host(RECONCILER_JSON), {}).get("installedURI") or ""
    if not uri.startswith("s3://"):
        return "no installed record is configured (%s)" % RECONCILER_JSON
    bucket, _, key = uri[len("s3://"):].partition("/")
    try:
        if listed_object(node.aws, bucket, key) is None:
            return "none"
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "installed.json")
            node.aws(["s3api", "get-object", "--bucket", bucket, "--key", key, path])
            with open(path) as f:
                doc = json.load(f)
            with open(path, "w") as f:
                json.dump(addon_record.after_restore(doc, snapshot), f)
            node.aws(["s3api", "put-object", "--bucket", bucket, "--key", key, "--body", path,
                      "--content-type", "application/json"])
    except (AwsError, OSError, ValueError, RuntimeError) as e:
        return "the addon record %s could not be reset (the addons may stay at the snapshot's versions until " \
               "a plan changes): %s" % (uri, e)
    return "reset"


def restore_snapshot(node, run, clock, plan, say):
    """Restores plan["key"] into etcd's data dir as a one-member cluster;
    bootstrap then runs `kubeadm init` on it."""
    bucket = node.settings()["bucket"]
    version = read_json(host(NODE_JSON), {}).get("kubernetesVersion", "")
    image = etcd_image(run(["kubeadm", "config", "images", "list", "--kubernetes-version", version]))
    if not image:
        failed = {"action": FAIL, "reason": "kubeadm lists no etcd image for %s" % version}
        say(json.dumps(failed))
        return failed
    node.aws(["s3", "cp", "--only-show-errors", "s3://%s/%s" % (bucket, plan["key"]), host(RESTORE_PATH)])
    instance = node.instance()
    present = image in run(["ctr", "-n", "k8s.io", "images", "ls", "-q", "name==" + image]).split()
    for argv in restore_commands(image, RESTORE_PATH, instance["nodeName"], node.ip(), present=present):
        run(argv)
    os.unlink(host(RESTORE_PATH))
    addons = reset_installed_record(node, plan["key"])
    if addons not in ("reset", "none"):
        say(json.dumps({"action": "warning", "reason": addons}))
    node.put_json(RESTORE_STATUS, {"key": plan["key"], "instanceId": instance["instanceId"],
                                   "request": plan.get("request", ""), "addonRecord": addons,
                                   "restoredAt": int(clock.now())})
    done = {"action": "restored", "key": plan["key"]}
    say(json.dumps(done))
    return done


def etcd_restore_main(argv, aws, imds=imds_get, run=run_command, clock=None, answers=None):
    """`etcd-restore [--took-init-lock]`: prints the decision as JSON, then,
    after a restore, {"action": "restored", "key": ...}. Exit 1 on fail."""
    plan = restore_if_needed(aws, "--took-init-lock" in argv, imds, run, clock, answers)
    return 1 if plan["action"] == FAIL else 0
