"""Unit tests of kube_aws_node.etcd: the pure decisions, and the drivers
under recording fakes (aws, etcd, command runner, clock, IMDS). Nothing here
talks to AWS or etcd. Python 3.9, standard library only.

    python3 -m unittest discover src/node/tests -p 'test_etcd*.py'
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kube_aws_node import etcd, etcd_lifecycle  # noqa: E402
from etcd_fakes import (  # noqa: E402,F401
    FakeAws,
    FakeClock,
    FakeEtcd,
    Quiet,
    SETTINGS,
    START,
    WithFiles,
    controllers,
    member,
    node,
    settings_answer,
)


class StaleMembers(unittest.TestCase):
    MEMBERS = [member(1, "10.0.1.5"), member(2, "10.0.2.6"), member("3", "10.0.3.7")]

    def test_members_on_no_controllers_address_are_stale(self):
        got = etcd.stale_candidates(self.MEMBERS, ["10.0.1.5", "10.0.2.6", "10.0.3.9"], "10.0.1.5")
        self.assertEqual([m["ID"] for m in got], ["3"])

    def test_an_untrustworthy_view_of_ec2_removes_nobody(self):
        self.assertEqual(etcd.stale_candidates(self.MEMBERS, [], "10.0.1.5"), [])
        # The list does not even hold this node: EC2 answered something else.
        self.assertEqual(etcd.stale_candidates(self.MEMBERS, ["10.9.9.9"], "10.0.1.5"), [])

    def test_a_member_added_but_not_started_is_judged_by_its_peer_url(self):
        joining = member(4, "10.0.3.9", name="", started=False)
        got = etcd.stale_candidates(self.MEMBERS + [joining], ["10.0.1.5", "10.0.2.6", "10.0.3.9"], "10.0.1.5")
        self.assertEqual([m["ID"] for m in got], ["3"])

    def test_only_members_stale_on_two_looks_go_and_never_a_majority(self):
        first = etcd.stale_candidates(self.MEMBERS, ["10.0.1.5", "10.0.2.6"], "10.0.1.5")
        second = etcd.stale_candidates(self.MEMBERS, ["10.0.1.5", "10.0.2.6"], "10.0.1.5")
        self.assertEqual([m["ID"] for m in etcd.confirmed_stale([], second)], [])
        self.assertEqual([m["ID"] for m in etcd.confirmed_stale(first, second)], ["3"])
        five = [member(i, "10.0.%d.5" % i) for i in range(1, 6)]
        stale = etcd.stale_candidates(five, ["10.0.1.5"], "10.0.1.5")
        self.assertEqual(len(stale), 4)
        self.assertEqual(len(etcd.removable(stale, five)), 2)
        self.assertEqual(etcd.removable(stale[:1], five[:1]), [])

    def test_prune_removes_on_the_second_look_through_the_local_member(self):
        fake = FakeEtcd(self.MEMBERS)
        aws = FakeAws({("ec2", "describe-instances"): controllers("10.0.1.5", "10.0.2.6")})
        n = node(aws)
        cands, removed = etcd_lifecycle.prune_once(n, fake, [])
        self.assertEqual((len(cands), removed), (1, []))
        cands, removed = etcd_lifecycle.prune_once(n, fake, cands)
        self.assertEqual([m["ID"] for m in removed], ["3"])
        self.assertEqual(fake.calls[-1], ("remove", ["https://10.0.1.5:2379"], "3"))
        self.assertEqual(sorted(etcd.as_id(m["ID"]) for m in fake.members), [1, 2])
        # The filter names the controllers of this cluster, pending or running.
        f = aws.ops("ec2", "describe-instances")[0]
        self.assertIn("Name=tag:Name,Values=demo-controller", f)
        self.assertIn("Name=instance-state-name,Values=pending,running", f)


class MemberRemoval(unittest.TestCase):
    def test_the_own_member_is_removed_through_a_peer(self):
        fake = FakeEtcd([member(11, "10.0.1.5"), member(12, "10.0.2.6"), member(13, "10.0.3.7")])
        ok, msg = etcd_lifecycle.remove_member_through_peer(fake, "10.0.1.5", ["https://10.0.1.5:2379"], FakeClock(), 0)
        self.assertTrue(ok, msg)
        remove = [c for c in fake.calls if c[0] == "remove"]
        self.assertEqual(len(remove), 1)
        self.assertEqual(remove[0][2], 11)
        self.assertNotIn("https://10.0.1.5:2379", remove[0][1])
        self.assertEqual(remove[0][1], ["https://10.0.2.6:2379", "https://10.0.3.7:2379"])

    def test_a_dead_local_member_is_found_through_the_other_controllers(self):
        fake = FakeEtcd([member(11, "10.0.1.5"), member(12, "10.0.2.6")], down={"https://10.0.1.5:2379"})
        ok, msg = etcd_lifecycle.remove_member_through_peer(
            fake, "10.0.1.5", ["https://10.0.1.5:2379", "https://10.0.2.6:2379"], FakeClock(), 0)
        self.assertTrue(ok, msg)
        self.assertEqual([etcd.as_id(m["ID"]) for m in fake.members], [12])

    def test_nothing_to_remove_and_the_last_member_stays(self):
        fake = FakeEtcd([member(12, "10.0.2.6")])
        ok, msg = etcd_lifecycle.remove_member_through_peer(fake, "10.0.1.5", ["x"], FakeClock(), 0)
        self.assertTrue(ok)
        self.assertIn("nothing to remove", msg)
        fake = FakeEtcd([member(11, "10.0.1.5")])
        ok, msg = etcd_lifecycle.remove_member_through_peer(fake, "10.0.1.5", ["x"], FakeClock(), 0)
        self.assertTrue(ok)
        self.assertIn("last etcd member stays", msg)
        self.assertFalse([c for c in fake.calls if c[0] == "remove"])

    def test_a_removal_failing_until_the_deadline_gives_up_with_the_reason(self):
        fake = FakeEtcd([member(11, "10.0.1.5"), member(12, "10.0.2.6")], remove_fails=1000)
        clock = FakeClock()
        ok, msg = etcd_lifecycle.remove_member_through_peer(fake, "10.0.1.5", ["e"], clock, clock.now() + 60)
        self.assertFalse(ok)
        self.assertIn("request timed out", msg)
        self.assertGreaterEqual(clock.t, START + 60)
        self.assertEqual(len([c for c in fake.calls if c[0] == "remove"]), 13)


class LeaveVerdict(unittest.TestCase):
    M = [member(11, "10.0.1.5"), member(12, "10.0.2.6"), member(13, "10.0.3.7")]

    def test_removes_while_the_others_keep_a_quorum(self):
        self.assertEqual(etcd_lifecycle.leave_verdict(self.M, "10.0.1.5", {12, 13})[0], "remove")
        five = self.M + [member(14, "10.0.1.8"), member(15, "10.0.2.9")]
        # Four left need three.
        self.assertEqual(etcd_lifecycle.leave_verdict(five, "10.0.1.5", {12, 13, 14})[0], "remove")
        self.assertEqual(etcd_lifecycle.leave_verdict(five, "10.0.1.5", {12, 13})[0], "hold")

    def test_holds_when_one_of_the_two_others_is_down(self):
        verdict, why = etcd_lifecycle.leave_verdict(self.M, "10.0.1.5", {12})
        self.assertEqual(verdict, "hold")
        self.assertIn("ip-10-0-3-7", why)
        self.assertIn("the 2 a quorum needs", why)

    def test_an_unstarted_member_does_not_count(self):
        m = [member(11, "10.0.1.5"), member(12, "10.0.2.6"), member(13, "10.0.3.7", started=False)]
        self.assertEqual(etcd_lifecycle.leave_verdict(m, "10.0.1.5", {12})[0], "hold")

    def test_nothing_or_the_last_member(self):
        self.assertEqual(etcd_lifecycle.leave_verdict(self.M[1:], "10.0.1.5", {12, 13})[0], "none")
        self.assertEqual(etcd_lifecycle.leave_verdict(self.M[:1], "10.0.1.5", set())[0], "none")


class Withdrawing(WithFiles):
    """A controller whose `kubeadm join --control-plane` failed takes back
    the member the join added (bootstrap.py withdraw_member)."""

    def aws(self):
        return FakeAws({("ec2", "describe-instances"): controllers("10.0.1.5", "10.0.2.6", "10.0.3.7", "10.0.1.8")})

    def test_the_added_member_is_removed_through_a_peer_and_its_manifest_moved_aside(self):
        self.etcd_running()
        fake = FakeEtcd([member(11, "10.0.2.6"), member(12, "10.0.3.7"), member(13, "10.0.1.8"),
                         member(14, "10.0.1.5", name="", started=False)])
        ok, msg = etcd_lifecycle.withdraw(node(self.aws()), fake, None, FakeClock(), START)
        self.assertTrue(ok, msg)
        self.assertEqual(sorted(etcd.as_id(m["ID"]) for m in fake.members), [11, 12, 13])
        remove = [c for c in fake.calls if c[0] == "remove"][0]
        self.assertNotIn("https://10.0.1.5:2379", remove[1])
        self.assertFalse(os.path.exists(etcd.host(etcd.ETCD_MANIFEST)))
        self.assertTrue(os.path.exists(etcd.host(etcd.WITHDRAWN_MANIFEST)))
        self.assertIn("took back the failed join's etcd member", msg)

    def test_a_join_that_added_no_member_changes_nothing(self):
        fake = FakeEtcd([member(11, "10.0.2.6"), member(12, "10.0.3.7"), member(13, "10.0.1.8")])
        ok, msg = etcd_lifecycle.withdraw(node(self.aws()), fake, None, FakeClock(), START)
        self.assertTrue(ok, msg)
        self.assertIn("no etcd member of this node", msg)
        self.assertFalse([c for c in fake.calls if c[0] == "remove"])

    def test_the_member_stays_when_the_others_have_no_quorum_without_it(self):
        self.etcd_running()
        # Two of the three others are down: removing the fourth would leave
        # one answering of three.
        fake = FakeEtcd([member(11, "10.0.2.6"), member(12, "10.0.3.7"), member(13, "10.0.1.8"),
                         member(14, "10.0.1.5")], down={"https://10.0.3.7:2379", "https://10.0.1.8:2379"})
        ok, msg = etcd_lifecycle.withdraw(node(self.aws()), fake, None, FakeClock(), START)
        self.assertFalse(ok)
        self.assertIn("the failed join's etcd member stays", msg)
        self.assertEqual(len(fake.members), 4)
        self.assertTrue(os.path.exists(etcd.host(etcd.ETCD_MANIFEST)), "the manifest stays with its member")

    def test_no_peer_answering_is_retried_until_the_deadline(self):
        fake = FakeEtcd([member(11, "10.0.2.6")], down={"https://10.0.2.6:2379", "https://10.0.3.7:2379",
                                                      "https://10.0.1.8:2379"})
        clock = FakeClock()
        ok, msg = etcd_lifecycle.withdraw(node(self.aws()), fake, None, clock, START + 12)
        self.assertFalse(ok)
        self.assertIn("could not take back", msg)
        self.assertEqual(clock.slept, [etcd.POLL_SECONDS] * 3)


class Leaving(WithFiles):
    def aws(self, **failing):
        return FakeAws({
            ("ssm", "get-parameter"): settings_answer(SETTINGS),
            ("ec2", "describe-instances"): controllers("10.0.1.5", "10.0.2.6", "10.0.3.7"),
            ("autoscaling", "describe-auto-scaling-instances"):
                {"AutoScalingInstances": [{"AutoScalingGroupName": "demo-ControllerGroup-XYZ"}]},
        }, failing)

    def test_terminated_removes_the_member_and_completes_the_action(self):
        self.etcd_running()
        aws = self.aws()
        fake = FakeEtcd([member(11, "10.0.1.5"), member(12, "10.0.2.6"), member(13, "10.0.3.7")])
        ran = []
        with Quiet():
            code = etcd_lifecycle.watch(node(aws, state="Terminated"), lambda: fake, ran.append, FakeClock(), max_ticks=3)
        self.assertEqual(code, 0)
        self.assertEqual(sorted(etcd.as_id(m["ID"]) for m in fake.members), [12, 13])
        done = aws.ops("autoscaling", "complete-lifecycle-action")
        self.assertEqual(len(done), 1)
        for pair in (["--lifecycle-hook-name", "kube-aws-etcd-member"],
                     ["--auto-scaling-group-name", "demo-ControllerGroup-XYZ"],
                     ["--lifecycle-action-result", "CONTINUE"], ["--instance-id", "i-0abc"]):
            i = done[0].index(pair[0])
            self.assertEqual(done[0][i:i + 2], pair)
        self.assertFalse(aws.ops("s3api", "put-object"), "no report when all went well")

    def test_a_failed_removal_holds_the_hook_until_it_can_no_longer_be_held(self):
        self.etcd_running()
        aws = self.aws()
        # The hook's global timeout: the third heartbeat is refused.
        beats = []

        def beat(args):
            beats.append(args)
            if len(beats) >= 3:
                raise RuntimeError("No active Lifecycle Action found with instance ID i-0abc")
        aws.answers[("autoscaling", "record-lifecycle-action-heartbeat")] = beat
        fake = FakeEtcd([member(11, "10.0.1.5"), member(12, "10.0.2.6"), member(13, "10.0.3.7")],
                        remove_fails=1000)
        clock = FakeClock()
        with Quiet():
            code, msg, problems = etcd_lifecycle.leave(node(aws), fake, lambda argv: "", clock)
        self.assertEqual(code, 1)
        self.assertEqual(len(beats), 3)
        # A heartbeat every third of the hook's 300 s.
        self.assertGreaterEqual(clock.t - START, 300)
        self.assertIn("although the others keep a quorum", msg)
        self.assertIn("can no longer be held", msg)
        self.assertEqual(len(aws.ops("autoscaling", "complete-lifecycle-action")), 1)
        self.assertEqual(sorted(etcd.as_id(m["ID"]) for m in fake.members), [11, 12, 13])
        put = [c for c in aws.ops("s3api", "put-object") if "p/demo/status/nodes/i-0abc.json" in c]
        self.assertGreaterEqual(len(put), 1)

    def test_a_removal_that_would_lose_quorum_holds_until_the_member_is_back(self):
        self.etcd_running()
        aws = self.aws()
        fake = FakeEtcd([member(11, "10.0.1.5"), member(12, "10.0.2.6"), member(13, "10.0.3.7")],
                        down={"https://10.0.3.7:2379"})

        class Clock(FakeClock):
            def sleep(self, s):
                FakeClock.sleep(self, s)
                if self.t - START >= 400:
                    fake.down.clear()  # the third controller is repaired
        clock = Clock()
        with Quiet() as q:
            code, msg, problems = etcd_lifecycle.leave(node(aws), fake, lambda argv: "", clock)
        self.assertEqual((code, problems), (0, []), msg)
        self.assertIn("removed etcd member", msg)
        self.assertEqual(sorted(etcd.as_id(m["ID"]) for m in fake.members), [12, 13])
        removes = [i for i, c in enumerate(fake.calls) if c[0] == "remove"]
        self.assertEqual(len(removes), 1, "nothing removed while the quorum was at stake")
        self.assertGreaterEqual(len(aws.ops("autoscaling", "record-lifecycle-action-heartbeat")), 3)
        hold = [c for c in aws.ops("s3api", "put-object") if "p/demo/status/nodes/i-0abc.json" in c]
        self.assertEqual(len(hold), 1, "the reason is reported once, not every 5 s")
        self.assertIn("would leave 2 members of which 1 answer (ip-10-0-3-7 do not)", q.out.getvalue())
        self.assertEqual(len(aws.ops("autoscaling", "complete-lifecycle-action")), 1)

    def test_an_unreadable_membership_is_tried_until_the_deadline_and_reported(self):
        self.etcd_running()
        aws = self.aws()
        fake = FakeEtcd([member(11, "10.0.1.5"), member(12, "10.0.2.6")],
                        down={"https://10.0.1.5:2379", "https://10.0.2.6:2379", "https://10.0.3.7:2379"})
        clock = FakeClock()
        with Quiet():
            code, msg, problems = etcd_lifecycle.leave(node(aws), fake, lambda argv: "", clock)
        self.assertEqual(code, 1)
        # Within the hook's heartbeat timeout (300 s), a minute left for the completion.
        self.assertLessEqual(clock.t - START, 245)
        self.assertEqual(len(aws.ops("autoscaling", "complete-lifecycle-action")), 1)
        self.assertFalse(aws.ops("autoscaling", "record-lifecycle-action-heartbeat"))
        put = aws.ops("s3api", "put-object")
        self.assertEqual(len(put), 1)
        self.assertIn("p/demo/status/nodes/i-0abc.json", put[0])
        self.assertIn("no etcd endpoint answered", problems[0])

    def test_the_only_controller_takes_a_last_snapshot_before_it_goes(self):
        self.etcd_running()
        single = dict(SETTINGS, controllerCount=1)
        snap = etcd.host(etcd.SNAPSHOT_PATH)
        os.makedirs(os.path.dirname(snap))
        aws = self.aws()
        aws.answers[("ssm", "get-parameter")] = settings_answer(single)
        aws.answers[("s3api", "list-objects-v2")] = {"Contents": []}
        ran = []

        def run(argv):
            ran.append(argv)
            if "ps" in argv:
                return "c0ffee\n"
            if "status" in argv:
                return json.dumps([{"Status": {"header": {"member_id": 11}, "leader": 11}}])
            if "save" in argv:
                with open(snap, "wb") as f:
                    f.write(b"s")
            return ""
        fake = FakeEtcd([member(11, "10.0.1.5")])
        code, msg, problems = etcd_lifecycle.leave(node(aws), fake, run, FakeClock())
        self.assertEqual((code, problems), (0, []))
        # The last snapshot, hourly, and (no daily one in the listing) daily too.
        self.assertEqual([c[4].split("/")[-2] for c in aws.ops("s3", "cp")], ["hourly", "daily"])
        self.assertIn("last etcd member stays", msg)
        put = [c for c in aws.ops("s3api", "put-object") if "p/demo/status/etcd/backup.json" in c]
        self.assertEqual(len(put), 1)
        self.assertEqual(len(aws.ops("autoscaling", "complete-lifecycle-action")), 1)

    def test_no_etcd_client_certificate_still_completes_the_action(self):
        self.etcd_running()
        aws = self.aws()

        def no_cert():
            raise FileNotFoundError("/etc/kubernetes/pki/etcd/healthcheck-client.crt")
        with Quiet():
            code = etcd_lifecycle.watch(node(aws, state="Terminated"), no_cert, lambda a: "", FakeClock(), max_ticks=1)
        self.assertEqual(code, 1)
        self.assertEqual(len(aws.ops("autoscaling", "complete-lifecycle-action")), 1)
        self.assertEqual(len(aws.ops("s3api", "put-object")), 1)

    def test_a_controller_not_terminating_only_watches(self):
        aws = self.aws()
        fake = FakeEtcd([member(11, "10.0.1.5")])
        with Quiet():
            etcd_lifecycle.watch(node(aws), lambda: fake, lambda a: "", FakeClock(), max_ticks=2)
        self.assertFalse(aws.ops("autoscaling", "complete-lifecycle-action"))
        self.assertFalse([c for c in fake.calls if c[0] == "remove"])


if __name__ == "__main__":
    unittest.main()
