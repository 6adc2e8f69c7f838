"""etcd membership as controllers come and go: the lifecycle service's
watch (a Terminated instance removes its own member, only while the others
keep quorum, heartbeating its hook meanwhile), the prune of stale members
before a join, and the withdrawal of a failed joiner. Python 3.9, standard
library only.

Invariant: a member is removed only when the rest stay a healthy majority
(`leave_verdict`, `removable`: pure); a hook is completed only after its
member is gone, or held with the reason.
"""
import os
import sys

from .etcd import (ADMIN_CONF, CLIENT_PORT, ETCD_MANIFEST, POLL_SECONDS, PRUNE_SECONDS, WITHDRAW_SECONDS,
                   WITHDRAWN_MANIFEST, Clock, EtcdGateway, LazyEtcd, Node, as_id, confirmed_stale, failure_report,
                   host, imds_get, local_endpoint, member_ips, own_member, peer_endpoints, removable, run_command,
                   stale_candidates)
from .etcd_backup import BACKUP_STATUS, backup_once


def remove_member_through_peer(etcd, self_ip, endpoints, clock, deadline):
    """Removes this node's member through another member, retrying until
    `deadline`. `endpoints` are where to read the member list (this node's,
    then the other controllers': the local member may be down already).
    Returns (ok, message)."""
    last = "no attempt"
    while True:
        try:
            members = etcd.member_list(endpoints)
            own = own_member(members, self_ip)
            if own is None:
                return True, "no etcd member on %s: nothing to remove" % self_ip
            peers = peer_endpoints(members, self_ip)
            if not peers:
                return True, "the last etcd member stays (a cluster cannot remove its only member)"
            # Through a peer: the leaving member is the one going away.
            via = etcd.member_remove(peers, own["ID"]) or peers[0]
            return True, "removed etcd member %s (%s) through %s" % (own.get("name", ""), own["ID"], via)
        except Exception as e:
            last = str(e)
        if clock.now() >= deadline:
            return False, "could not remove the etcd member on %s: %s" % (self_ip, last)
        clock.sleep(POLL_SECONDS)


def leave_verdict(members, self_ip, healthy):
    """("remove" | "hold" | "none", why) for the member on this node. Pure.

    `healthy`: the IDs (as_id) of the members whose endpoint answered a status
    just now. The member is removed only when the members left keep a quorum
    among those that answer: len(others) // 2 + 1 of them (etcd's majority of
    the membership after the removal; "Runtime reconfiguration", etcd docs:
    removing a member of a cluster with a failed minority can lose quorum).
    Otherwise the controller holds: its own member still votes, and going
    would leave a cluster that cannot elect a leader."""
    own = own_member(members, self_ip)
    if own is None:
        return "none", "no etcd member on %s: nothing to remove" % self_ip
    others = [m for m in members if as_id(m["ID"]) != as_id(own["ID"])]
    if not others:
        return "none", "the last etcd member stays (a cluster cannot remove its only member)"
    need = len(others) // 2 + 1
    up = [m for m in others if as_id(m["ID"]) in healthy]
    if len(up) >= need:
        return "remove", "%d of the %d other etcd members answer (a quorum is %d)" % (len(up), len(others), need)
    down = sorted(m.get("name") or ",".join(member_ips(m)) or str(as_id(m["ID"])) for m in others if m not in up)
    return "hold", ("removing the etcd member on %s would leave %d members of which %d answer (%s do not), fewer "
                    "than the %d a quorum needs: this controller stays until they are back (replace or repair "
                    "them; `kube-aws status` shows them)" % (self_ip, len(others), len(up), ", ".join(down), need))


def healthy_members(etcd, members):
    """The IDs of the members whose client endpoint answers a status now."""
    out = set()
    for m in members:
        for url in m.get("clientURLs") or []:
            try:
                etcd.status(url)
                out.add(as_id(m["ID"]))
                break
            except Exception:
                continue
    return out


def own_group(node, instance_id):
    groups = node.aws(["autoscaling", "describe-auto-scaling-instances", "--instance-ids", instance_id]) or {}
    found = groups.get("AutoScalingInstances") or []
    if not found:
        raise RuntimeError("instance %s is in no auto scaling group" % instance_id)
    return found[0]["AutoScalingGroupName"]


def heartbeat(node, instance_id, settings):
    """Holds the termination hook for another HeartbeatTimeout."""
    node.aws(["autoscaling", "record-lifecycle-action-heartbeat",
              "--lifecycle-hook-name", settings.get("lifecycleHook", "kube-aws-etcd-member"),
              "--auto-scaling-group-name", own_group(node, instance_id), "--instance-id", instance_id])


def remove_when_safe(node, etcd, self_ip, endpoints, clock, deadline, settings, instance):
    """Removes this node's member once the others keep a quorum without it
    (leave_verdict), holding the termination hook (heartbeats) while they
    would not, or while the removal fails although they would: the roll
    stops here, with the reason in this node's status object, instead of
    taking etcd's quorum. A membership no endpoint answers for cannot be
    judged: then the removal is tried until `deadline` as before (a
    controller that never joined must not hold its replacement back).
    Returns (ok, message)."""
    timeout = int(settings.get("lifecycleTimeoutSeconds", 300))
    beat_every = max(10, timeout // 3)
    last_beat, said = clock.now(), None
    while True:
        try:
            members = etcd.member_list(endpoints)
        except Exception as e:
            members, why = None, "could not read the etcd membership: %s" % e
            if said is None:
                # Never judged: tried until the deadline, then the group goes on.
                if clock.now() >= deadline:
                    return False, why
                clock.sleep(POLL_SECONDS)
                continue
        if members is not None:
            verdict, why = leave_verdict(members, self_ip, healthy_members(etcd, members))
            if verdict == "none":
                return True, why
            if verdict == "remove":
                ok, message = remove_member_through_peer(etcd, self_ip, endpoints, clock, clock.now())
                if ok:
                    return True, message + " (%s)" % why
                why = "%s, although the others keep a quorum: this controller stays until it succeeds" % message
        if why != said:
            said = why
            print("kube-aws: holding the termination: %s" % why, flush=True)
            try:
                node.put_json("status/nodes/%s.json" % instance["instanceId"],
                              failure_report(instance, node.runtime, "etcd-quorum-hold", why, clock.now(),
                                             "kube-aws-node lifecycle leave"))
            except Exception as e:
                print("kube-aws: could not write the status object: %s" % e, file=sys.stderr, flush=True)
        if clock.now() - last_beat >= beat_every:
            try:
                heartbeat(node, instance["instanceId"], settings)
                last_beat = clock.now()
            except Exception as e:
                # No lifecycle action left to hold (the hook's global timeout,
                # or someone completed it): the group goes on anyway.
                return False, "%s; the termination hook can no longer be held: %s" % (why, e)
        clock.sleep(POLL_SECONDS)


def prune_once(node, etcd, previous):
    """One look at stale members: removes those seen stale on the previous
    look too (a minority at most). Returns (candidates now, removed)."""
    self_ip = node.ip()
    endpoints = [local_endpoint(self_ip)]
    members = etcd.member_list(endpoints)
    current = stale_candidates(members, node.controller_ips(), self_ip)
    gone = removable(confirmed_stale(previous, current), members)
    removed = []
    for m in gone:
        etcd.member_remove(endpoints, m["ID"])
        removed.append(m)
    return current, removed


def leave(node, etcd, run, clock):
    """On Terminated: drain and delete this Node, remove the etcd member
    through a peer once the others keep a quorum without it (holding the
    hook while they would not: remove_when_safe), then complete the
    lifecycle action (CONTINUE); a failure is reported in the node status
    object."""
    settings = node.settings()
    instance = node.instance()
    self_ip = node.ip()
    start = clock.now()
    # Leave a minute of the hook's heartbeat timeout for the completion itself.
    deadline = start + max(30, int(settings.get("lifecycleTimeoutSeconds", 300)) - 60)
    problems = []
    name = instance.get("nodeName", "")
    if name and os.path.exists(host(ADMIN_CONF)):
        for argv in (["kubectl", "--kubeconfig", ADMIN_CONF, "drain", name, "--ignore-daemonsets",
                      "--delete-emptydir-data", "--force", "--timeout=90s"],
                     ["kubectl", "--kubeconfig", ADMIN_CONF, "delete", "node", name, "--ignore-not-found"]):
            try:
                run(argv)
            except Exception as e:
                problems.append(str(e))
    ok, message = True, "no etcd on this node"
    if os.path.exists(host(ETCD_MANIFEST)) and int(settings.get("controllerCount", 1)) == 1:
        # The only controller is going (an AMI refresh, a node-file change):
        # a last snapshot now makes its replacement's restore lose nothing.
        try:
            code, report = backup_once(node, run, clock, force=True)
            if report is not None:
                node.put_json(BACKUP_STATUS, report)
            if code != 0:
                problems.append("last snapshot: %s" % (report or {}).get("message", "failed"))
        except Exception as e:
            problems.append("last snapshot: %s" % e)
    if os.path.exists(host(ETCD_MANIFEST)):
        endpoints = [local_endpoint(self_ip)]
        try:
            endpoints += ["https://%s:%d" % (ip, CLIENT_PORT) for ip in node.controller_ips() if ip != self_ip]
        except Exception as e:
            problems.append("listing the other controllers: %s" % e)
        ok, message = remove_when_safe(node, etcd, self_ip, endpoints, clock, deadline, settings, instance)
    if not ok:
        problems.append(message)
    if problems:
        try:
            node.put_json("status/nodes/%s.json" % instance["instanceId"],
                          failure_report(instance, node.runtime, "etcd-member-remove", "\n".join(problems),
                                         clock.now(), "kube-aws-node lifecycle leave"))
        except Exception as e:
            problems.append("could not write the status object: %s" % e)
    try:
        complete_lifecycle_action(node, instance["instanceId"], settings)
    except Exception as e:
        # The group went on without us (the hook's timeout, or the instance
        # is gone): nothing left to complete; said, not a crash loop.
        problems.append("completing the lifecycle action: %s" % e)
        return 1, message, problems
    return 0 if ok else 1, message, problems


def complete_lifecycle_action(node, instance_id, settings):
    node.aws(["autoscaling", "complete-lifecycle-action",
              "--lifecycle-hook-name", settings.get("lifecycleHook", "kube-aws-etcd-member"),
              "--auto-scaling-group-name", own_group(node, instance_id),
              "--lifecycle-action-result", "CONTINUE", "--instance-id", instance_id])


def watch(node, etcd_factory, run, clock, max_ticks=None):
    """The lifecycle service's loop: every 5 s the IMDS target lifecycle
    state; every minute, on a controller running etcd, a look at stale members."""
    previous, last_prune, ticks = [], None, 0
    while max_ticks is None or ticks < max_ticks:
        ticks += 1
        state = None
        try:
            state = node.imds("autoscaling/target-lifecycle-state")
        except Exception as e:
            print("kube-aws: IMDS: %s" % e, file=sys.stderr)
        if state == "Terminated":
            code, message, problems = leave(node, LazyEtcd(etcd_factory), run, clock)
            print("kube-aws: leaving: %s%s" % (message, "; " + "; ".join(problems) if problems else ""), flush=True)
            return code
        now = clock.now()
        if os.path.exists(host(ETCD_MANIFEST)) and (last_prune is None or now - last_prune >= PRUNE_SECONDS):
            last_prune = now
            try:
                previous, removed = prune_once(node, etcd_factory(), previous)
                for m in removed:
                    # flush: stdout is a pipe to the journal, block-buffered; the
                    # real-node bed found this line missing (tests/it/real_node.rs)
                    print("kube-aws: removed stale etcd member %s (%s)" % (m.get("name", ""), member_ips(m)),
                          flush=True)
            except Exception as e:
                print("kube-aws: stale member check: %s" % e, file=sys.stderr)
        clock.sleep(POLL_SECONDS)
    return 0


def withdraw(node, etcd, run, clock, deadline):
    """After this controller's `kubeadm join --control-plane` failed, under
    the join lock it holds: takes back the etcd member the join may have
    added, so that a failed joiner is not a dead vote (a cluster of three
    with a failed fourth needs three of four for a quorum: one more loss
    and it has none). kubeadm's own cleanup does the same (`kubeadm reset`
    removes the local stacked etcd member, its `remove-etcd-member` phase:
    https://kubernetes.io/docs/reference/setup-tools/kubeadm/kubeadm-reset/),
    but needs admin.conf, which a join that failed early has not written;
    here the member list is read through the other controllers' members.

    The removal follows leave's rule (leave_verdict): only while the others
    keep a quorum among those that answer; otherwise the member stays and
    the failure report says so. Then the local etcd's static pod manifest is
    moved aside, so that the kubelet stops a member the cluster no longer
    knows (it would crash-loop on its removed ID) and nothing restarts it.
    Returns (ok, message)."""
    self_ip = node.ip()
    peers = ["https://%s:%d" % (ip, CLIENT_PORT) for ip in node.controller_ips() if ip != self_ip]
    if not peers:
        return True, "no other controller: no member to take back"
    last = "no attempt"
    while True:
        try:
            members = etcd.member_list(peers)
            verdict, why = leave_verdict(members, self_ip, healthy_members(etcd, members))
            if verdict == "none":
                return True, "no etcd member of this node: %s" % why
            if verdict == "hold":
                return False, "the failed join's etcd member stays: %s" % why
            own = own_member(members, self_ip)
            via = etcd.member_remove(peer_endpoints(members, self_ip) or peers, own["ID"]) or peers[0]
            break
        except Exception as e:
            last = str(e)
        if clock.now() >= deadline:
            return False, "could not take back the failed join's etcd member on %s: %s" % (self_ip, last)
        clock.sleep(POLL_SECONDS)
    message = "took back the failed join's etcd member %s (%s) through %s" % (own.get("name", ""), own["ID"], via)
    if os.path.exists(host(ETCD_MANIFEST)):
        try:
            os.replace(host(ETCD_MANIFEST), host(WITHDRAWN_MANIFEST))
            message += "; its static pod manifest moved to %s" % WITHDRAWN_MANIFEST
        except OSError as e:
            message += "; cannot move its static pod manifest aside: %s" % e.strerror
    return True, message


def lifecycle_main(argv, aws, imds=imds_get, etcd_factory=EtcdGateway, run=run_command, clock=None):
    clock = clock or Clock()
    what = argv[0] if argv else "watch"
    node = Node(aws, imds)
    if what == "watch":
        return watch(node, etcd_factory, run, clock)
    if what == "leave":
        code, message, problems = leave(node, LazyEtcd(etcd_factory), run, clock)
        print(message)
        for p in problems:
            print("kube-aws: %s" % p, file=sys.stderr)
        return code
    if what == "prune":
        # Before a joining controller's `kubeadm join`: its client certificate
        # comes from the etcd CA already in /etc/kubernetes/pki.
        run(["kubeadm", "init", "phase", "certs", "etcd-healthcheck-client"])
        etcd = etcd_factory()
        self_ip = node.ip()
        peers = ["https://%s:%d" % (ip, CLIENT_PORT) for ip in node.controller_ips() if ip != self_ip]
        if not peers:
            print("no other controller: nothing to prune")
            return 0
        members = etcd.member_list(peers)
        first = stale_candidates(members, node.controller_ips(), self_ip)
        if not first:
            print("no stale etcd member")
            return 0
        clock.sleep(PRUNE_SECONDS)
        members = etcd.member_list(peers)
        gone = removable(confirmed_stale(first, stale_candidates(members, node.controller_ips(), self_ip)), members)
        for m in gone:
            etcd.member_remove(peers, m["ID"])
            print("removed stale etcd member %s (%s)" % (m.get("name", ""), ", ".join(member_ips(m))))
        if not gone:
            # Another controller's watch may have removed them in the minute
            # between the looks (seen on the real-node bed): say so.
            print("no stale etcd member left on the second look (%s)" % ", ".join(
                ip for m in first for ip in member_ips(m)))
        return 0
    if what == "withdraw":
        run(["kubeadm", "init", "phase", "certs", "etcd-healthcheck-client"])
        ok, message = withdraw(node, LazyEtcd(etcd_factory), run, clock, clock.now() + WITHDRAW_SECONDS)
        print(message)
        return 0 if ok else 1
    print("usage: kube-aws-node lifecycle [watch|leave|prune|withdraw]", file=sys.stderr)
    return 2
