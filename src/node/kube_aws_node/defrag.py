"""etcd's day-2 care on the controllers: defragmentation one member at a
time, followers first and the leader last, when a member's free fraction is
large; its alarms (NOSPACE) found and reported; a NOSPACE alarm disarmed once
every member is back well under the quota. Python 3.9, standard library only.

Invariant: only the node whose own member leads acts (as `etcd-backup`), so
one controller sequences the whole cluster, and a member is defragmented only
while every other member answers (a defragmenting member blocks its reads and
writes: etcd docs, op-guide/maintenance.md "Defragmentation": "should be run
... one member at a time"). The decisions (`plan`, `disarmable`, `report`)
are pure, tested in src/node/tests/test_defrag.py; the real members in
src/node/tests/test_defrag_real.py.

`etcd-maintenance` (kube-aws-etcd-maintenance.timer) writes
status/etcd/maintenance.json: each member's database size and in-use size,
the quota, the alarms, and what it defragmented.
"""
import json
import sys

from . import etcd

STATUS = "status/etcd/maintenance.json"
# Defragment a member whose free space is at least this fraction of its
# database and at least this many bytes (a mostly-empty small database is
# not worth the blocked member). Settings may override both.
FREE_FRACTION = 0.5
MIN_FREE_BYTES = 100 * 1024 * 1024
# A NOSPACE alarm is disarmed when every member is under this share of the quota.
DISARM_BELOW = 0.8
DEFAULT_QUOTA = 8 * 1024 ** 3
# Defragmenting a large database takes a while; the member answers after.
DEFRAG_TIMEOUT = 600


def member_view(endpoint, status):
    """One member's status, as the report and the plan need it."""
    s = status or {}
    return {"endpoint": endpoint,
            "id": str(etcd.as_id(s.get("header", {}).get("member_id", 0))),
            "leader": etcd.is_leader(s),
            "dbSize": int(s.get("dbSize", 0) or 0),
            "dbSizeInUse": int(s.get("dbSizeInUse", 0) or 0)}


def wants_defrag(m, fraction=FREE_FRACTION, min_free=MIN_FREE_BYTES):
    free = m["dbSize"] - m["dbSizeInUse"]
    return m["dbSize"] > 0 and free >= min_free and free >= fraction * m["dbSize"]


def plan(members, fraction=FREE_FRACTION, min_free=MIN_FREE_BYTES):
    """The endpoints to defragment, in order: the followers that want it
    (the most free space first), then the leader if it does."""
    want = [m for m in members if wants_defrag(m, fraction, min_free)]
    followers = sorted((m for m in want if not m["leader"]), key=lambda m: m["dbSizeInUse"] - m["dbSize"])
    leader = [m for m in want if m["leader"]]
    return [m["endpoint"] for m in followers + leader]


def disarmable(members, alarms, quota):
    """The NOSPACE alarms to disarm: all of them once every member's
    database is under DISARM_BELOW of the quota; none before."""
    nospace = [a for a in alarms if a.get("alarm") == "NOSPACE"]
    if not nospace or any(m["dbSize"] >= DISARM_BELOW * quota for m in members):
        return []
    return nospace


def report(members, alarms, quota, defragmented, now, problems=()):
    """The status object."""
    return {"quotaBackendBytes": quota,
            "members": [{k: m[k] for k in ("endpoint", "id", "leader", "dbSize", "dbSizeInUse")} for m in members],
            "alarms": [{"memberID": str(etcd.as_id(a.get("memberID", 0))), "alarm": a.get("alarm", "")}
                       for a in alarms],
            "defragmented": list(defragmented),
            "problems": list(problems),
            "updatedAt": int(now)}


class Maintenance(object):
    """The calls, through etcd's v3 JSON gateway (etcd.EtcdGateway)."""

    def __init__(self, gateway):
        self.gw = gateway

    def status(self, endpoint):
        return self.gw.status(endpoint)

    def alarms(self, endpoints):
        return self.gw.call(endpoints, "/v3/maintenance/alarm", {"action": "GET"})[1].get("alarms") or []

    def disarm(self, endpoints, alarm):
        self.gw.call(endpoints, "/v3/maintenance/alarm",
                     {"action": "DEACTIVATE", "memberID": str(etcd.as_id(alarm.get("memberID", 0))),
                      "alarm": alarm.get("alarm", "NOSPACE")})

    def defragment(self, endpoint):
        self.gw.call([endpoint], "/v3/maintenance/defragment", {})


def members_of(m, endpoints):
    """Every member's view; a member that does not answer is left out and named."""
    views, problems = [], []
    for ep in endpoints:
        try:
            views.append(member_view(ep, m.status(ep)))
        except Exception as e:
            problems.append("%s does not answer: %s" % (ep, e))
    return views, problems


def maintain(m, endpoints, quota, clock, fraction=FREE_FRACTION, min_free=MIN_FREE_BYTES, leader_only=None):
    """One pass: defragment what `plan` says, one member at a time, each
    only while every member answers; then disarm NOSPACE when `disarmable`.
    `leader_only`: the local endpoint; nothing is done unless it leads.
    Returns the status object, or None when this member does not lead."""
    views, problems = members_of(m, endpoints)
    if leader_only is not None and not any(v["leader"] and v["endpoint"] == leader_only for v in views):
        return None
    done = []
    for ep in plan(views, fraction, min_free):
        views, problems = members_of(m, endpoints)
        if problems:
            problems.append("stopped before %s: not every member answers" % ep)
            break
        try:
            m.defragment(ep)
            done.append(ep)
        except Exception as e:
            problems.append("defragmenting %s: %s" % (ep, e))
            break
    views, more = members_of(m, endpoints)
    problems.extend(more)
    alarms = m.alarms(endpoints)
    for a in disarmable(views, alarms, quota):
        m.disarm(endpoints, a)
    if disarmable(views, alarms, quota):
        alarms = m.alarms(endpoints)
    return report(views, alarms, quota, done, clock.now(), problems)


def maintenance_main(argv, aws, imds=etcd.imds_get, gateway=None, clock=None):
    """`etcd-maintenance`: one pass on this controller (acts only where its
    member leads); writes the status object. Exit 1 when a member did not
    answer or a defragmentation failed, or an alarm is still raised."""
    clock = clock or etcd.Clock()
    node = etcd.Node(aws, imds)
    s = node.settings()
    gw = gateway or etcd.EtcdGateway(timeout=DEFRAG_TIMEOUT)
    local = etcd.local_endpoint(node.ip())
    members = gw.member_list([local])
    endpoints = [u for mem in members for u in (mem.get("clientURLs") or [])[:1]] or [local]
    out = maintain(Maintenance(gw), endpoints, int(s.get("quotaBackendBytes", DEFAULT_QUOTA)), clock,
                   float(s.get("defragFreeFraction", FREE_FRACTION)),
                   int(s.get("defragMinFreeBytes", MIN_FREE_BYTES)), leader_only=local)
    if out is None:
        return 0
    try:
        node.put_json(STATUS, out)
    except Exception as e:
        print("kube-aws: could not write %s: %s" % (STATUS, e), file=sys.stderr)
    print(json.dumps(out))
    return 1 if out["problems"] or out["alarms"] else 0
