"""kube_aws_node.defrag's decisions and its pass over fake members: the
order (followers first, the leader last), the thresholds, stopping when a
member does not answer, NOSPACE disarmed only once every member is well
under the quota, and nothing done where this member does not lead."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kube_aws_node import defrag  # noqa: E402

MiB = 1024 * 1024


def view(ep, leader, size, in_use):
    return {"endpoint": ep, "id": ep[-1], "leader": leader, "dbSize": size, "dbSizeInUse": in_use}


class Clock(object):
    def now(self):
        return 1000


class Plan(unittest.TestCase):
    def test_followers_first_leader_last_only_those_with_room(self):
        members = [view("e1", True, 1000 * MiB, 100 * MiB),
                   view("e2", False, 800 * MiB, 300 * MiB),
                   view("e3", False, 1000 * MiB, 200 * MiB),
                   view("e4", False, 1000 * MiB, 900 * MiB)]
        self.assertEqual(defrag.plan(members), ["e3", "e2", "e1"])
        # Small databases are not worth a blocked member.
        self.assertEqual(defrag.plan([view("e1", True, 50 * MiB, 1 * MiB)]), [])
        self.assertEqual(defrag.plan([view("e1", True, 50 * MiB, 1 * MiB)], 0.5, 1 * MiB), ["e1"])

    def test_nospace_is_disarmed_only_under_the_mark(self):
        alarms = [{"memberID": "1", "alarm": "NOSPACE"}, {"memberID": "2", "alarm": "CORRUPT"}]
        full = [view("e1", True, 90, 10), view("e2", False, 50, 10)]
        self.assertEqual(defrag.disarmable(full, alarms, 100), [])
        ok = [view("e1", True, 70, 10), view("e2", False, 50, 10)]
        self.assertEqual(defrag.disarmable(ok, alarms, 100), [alarms[0]])


class FakeMembers(object):
    def __init__(self, views, alarms=(), down=()):
        self.views = {v["endpoint"]: dict(v) for v in views}
        self.raised = list(alarms)
        self.down = set(down)
        self.calls = []

    def status(self, ep):
        if ep in self.down:
            raise RuntimeError("connection refused")
        v = self.views[ep]
        return {"header": {"member_id": v["id"]}, "leader": self.leader_id(),
                "dbSize": v["dbSize"], "dbSizeInUse": v["dbSizeInUse"]}

    def leader_id(self):
        return next(v["id"] for v in self.views.values() if v["leader"])

    def alarms(self, endpoints):
        return list(self.raised)

    def disarm(self, endpoints, alarm):
        self.calls.append(("disarm", alarm["memberID"]))
        self.raised = [a for a in self.raised if a is not alarm and a != alarm]

    def defragment(self, ep):
        self.calls.append(("defrag", ep))
        self.views[ep]["dbSize"] = self.views[ep]["dbSizeInUse"]


class Pass(unittest.TestCase):
    def members(self, **kw):
        return FakeMembers([view("e1", True, 1000 * MiB, 100 * MiB), view("e2", False, 900 * MiB, 100 * MiB),
                            view("e3", False, 1000 * MiB, 990 * MiB)], **kw)

    def test_one_member_at_a_time_then_nospace_disarmed(self):
        m = self.members(alarms=[{"memberID": "3", "alarm": "NOSPACE"}])
        out = defrag.maintain(m, ["e1", "e2", "e3"], 2000 * MiB, Clock(), leader_only="e1")
        self.assertEqual([c for c in m.calls if c[0] == "defrag"], [("defrag", "e2"), ("defrag", "e1")])
        self.assertEqual(out["defragmented"], ["e2", "e1"])
        self.assertIn(("disarm", "3"), m.calls)
        self.assertEqual(out["alarms"], [])
        self.assertEqual([x["dbSize"] for x in out["members"]], [100 * MiB, 100 * MiB, 1000 * MiB])

    def test_not_the_leader_does_nothing(self):
        m = self.members()
        self.assertIsNone(defrag.maintain(m, ["e1", "e2", "e3"], 2000 * MiB, Clock(), leader_only="e2"))
        self.assertEqual(m.calls, [])

    def test_a_member_down_stops_defragmentation_and_is_reported(self):
        m = self.members(down=["e3"])
        out = defrag.maintain(m, ["e1", "e2", "e3"], 2000 * MiB, Clock(), leader_only="e1")
        self.assertEqual(m.calls, [])
        self.assertTrue(any("stopped before e2" in p for p in out["problems"]), out["problems"])

    def test_nospace_stays_while_a_member_is_near_the_quota(self):
        m = self.members(alarms=[{"memberID": "3", "alarm": "NOSPACE"}])
        out = defrag.maintain(m, ["e1", "e2", "e3"], 1100 * MiB, Clock(), leader_only="e1")
        self.assertEqual(out["alarms"], [{"memberID": "3", "alarm": "NOSPACE"}])
        self.assertNotIn(("disarm", "3"), m.calls)


if __name__ == "__main__":
    unittest.main()
