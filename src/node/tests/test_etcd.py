"""Unit tests of kube_aws_node.etcd: the pure decisions, and the drivers
under recording fakes (aws, etcd, command runner, clock, IMDS). Nothing here
talks to AWS or etcd. Python 3.9, standard library only.

    python3 -m unittest discover src/node/tests -p 'test_etcd*.py'
"""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout, redirect_stderr

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kube_aws_node import etcd, etcd_backup, etcd_lifecycle, etcd_restore  # noqa: E402


def member(mid, ip, name=None, started=True):
    m = {"ID": mid, "name": name or "ip-%s" % ip.replace(".", "-"), "peerURLs": ["https://%s:2380" % ip]}
    if started:
        m["clientURLs"] = ["https://%s:2379" % ip]
    return m


START = etcd.parse_time("2026-12-01T03:00:00Z")


class FakeClock(object):
    def __init__(self, t=START):
        self.t = t
        self.slept = []

    def now(self):
        return self.t

    def sleep(self, s):
        self.slept.append(s)
        self.t += s


class FakeEtcd(object):
    """Members by endpoint reachability; records every call."""

    def __init__(self, members, down=(), remove_fails=0):
        self.members = list(members)
        self.down = set(down)
        self.remove_fails = remove_fails
        self.calls = []

    def _up(self, endpoints):
        up = [e for e in endpoints if e not in self.down]
        if not up:
            raise RuntimeError("no etcd endpoint answered")
        return up

    def member_list(self, endpoints):
        self.calls.append(("list", list(endpoints)))
        self._up(endpoints)
        return [dict(m) for m in self.members]

    def status(self, endpoint):
        self.calls.append(("status", endpoint))
        self._up([endpoint])
        return {"header": {"member_id": 0}}

    def member_remove(self, endpoints, mid):
        up = self._up(endpoints)
        self.calls.append(("remove", list(endpoints), mid))
        if self.remove_fails:
            self.remove_fails -= 1
            raise RuntimeError("etcdserver: request timed out")
        self.members = [m for m in self.members if etcd.as_id(m["ID"]) != etcd.as_id(mid)]
        return up[0]


class FakeAws(object):
    """Answers by the first two arguments; records every call."""

    def __init__(self, answers=None, failing=()):
        self.answers = answers or {}
        self.failing = dict(failing)  # (service, op) -> times it fails
        self.calls = []

    def __call__(self, args, attempts=None):
        self.calls.append(list(args))
        key = tuple(args[:2])
        if self.failing.get(key, 0):
            self.failing[key] -= 1
            raise RuntimeError("An error occurred (SlowDown) when calling %s" % args[1])
        a = self.answers.get(key)
        return a(args) if callable(a) else a

    def ops(self, service, op):
        return [c for c in self.calls if c[:2] == [service, op]]


SETTINGS = {"bucket": "b", "backupPrefix": "p/demo/etcd/", "intervalSeconds": 3600,
            "kmsKeyARN": "arn:aws:kms:us-west-2:111122223333:key/k", "controllerCount": 3,
            "lifecycleHook": "kube-aws-etcd-member", "lifecycleTimeoutSeconds": 300}
RUNTIME = {"cluster": "demo", "bucket": "b", "keyPrefix": "p/demo", "stackName": "demo-ControlPlane-1",
           "asgLogicalId": "ControllerGroup", "apiEndpoint": "api.example"}


def settings_answer(settings):
    return lambda args: {"Parameter": {"Value": json.dumps(settings)}}


def imds(ip="10.0.1.5", state="InService"):
    items = {"instance-id": "i-0abc", "local-hostname": "ip-10-0-1-5.ec2.internal", "local-ipv4": ip,
             "autoscaling/target-lifecycle-state": state}
    return lambda path: items.get(path)


def controllers(*ips):
    return lambda args: {"Reservations": [{"Instances": [{"PrivateIpAddress": ip} for ip in ips]}]}


def node(aws, ip="10.0.1.5", state="InService"):
    return etcd.Node(aws, imds(ip, state), runtime=dict(RUNTIME),
                     etcd_json={"settingsParameter": "/kube-aws/demo/etcd", "lifecycleHook": "kube-aws-etcd-member"})


class Quiet(object):
    def __enter__(self):
        self.out, self.err = io.StringIO(), io.StringIO()
        self._a, self._b = redirect_stdout(self.out), redirect_stderr(self.err)
        self._a.__enter__()
        self._b.__enter__()
        return self

    def __exit__(self, *exc):
        self._b.__exit__(*exc)
        self._a.__exit__(*exc)


class WithFiles(unittest.TestCase):
    """Points the module's node paths into a temporary root."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.saved_root = etcd.ROOT
        etcd.ROOT = self.root
        self.write(etcd.RUNTIME_JSON, json.dumps(RUNTIME))
        self.write(etcd.ETCD_JSON, json.dumps({"settingsParameter": "/kube-aws/demo/etcd",
                                               "lifecycleHook": "kube-aws-etcd-member"}))

    def tearDown(self):
        etcd.ROOT = self.saved_root
        self.tmp.cleanup()

    def write(self, path, text):
        full = etcd.host(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)

    def etcd_running(self):
        self.write(etcd.ETCD_MANIFEST, "kind: Pod\n")


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


class Leader(unittest.TestCase):
    def test_etcdctl_and_gateway_status_shapes(self):
        leader = [{"Endpoint": "https://127.0.0.1:2379",
                   "Status": {"header": {"cluster_id": 1, "member_id": 10276657743932975437},
                              "leader": 10276657743932975437, "version": "3.6.5"}}]
        follower = [{"Endpoint": "x", "Status": {"header": {"member_id": 5}, "leader": 7}}]
        gateway = {"header": {"member_id": "10276657743932975437"}, "leader": "10276657743932975437"}
        self.assertTrue(etcd.is_leader(leader))
        self.assertFalse(etcd.is_leader(follower))
        self.assertTrue(etcd.is_leader(gateway))
        # No leader (an election under way) and nonsense: nobody writes.
        self.assertFalse(etcd.is_leader({"header": {"member_id": "0"}, "leader": "0"}))
        self.assertFalse(etcd.is_leader([]))
        self.assertFalse(etcd.is_leader({"header": {}}))


def listing(*items):
    return {"Contents": [{"Key": k, "Size": s, "LastModified": t} for k, s, t in items]}


class Snapshots(unittest.TestCase):
    PREFIX = "p/demo/etcd/"

    def test_listing_both_tiers_and_due(self):
        got = etcd_backup.snapshots(listing(
            (self.PREFIX + "hourly/20261201T010000Z-a.db", 10, "2026-12-01T01:00:00+00:00"),
            (self.PREFIX + "hourly/20261201T000000Z-a.db", 9, "2026-12-01T00:00:00.000Z"),
            (self.PREFIX + "daily/20261130T000000Z-a.db", 8, "2026-11-30T00:00:00Z"),
            (self.PREFIX + "20261129T000000Z-a.db", 7, "2026-11-29T00:00:00Z"),
            (self.PREFIX + "notes.txt", 1, "2026-12-01T02:00:00Z"),
            (self.PREFIX + "old/x.db", 1, "2026-12-01T02:00:00Z"),
            (self.PREFIX + "hourly/deeper/x.db", 1, "2026-12-01T02:00:00Z"),
        ), self.PREFIX)
        self.assertEqual([(s["tier"], s["size"]) for s in got], [("", 7), ("daily/", 8), ("hourly/", 9), ("hourly/", 10)])
        hourly = [s for s in got if s["tier"] in ("hourly/", "")]
        newest = hourly[-1]["time"]
        self.assertFalse(etcd_backup.backup_due(hourly, newest + 1800, 3600))
        self.assertTrue(etcd_backup.backup_due(hourly, newest + 3590, 3600))
        self.assertTrue(etcd_backup.backup_due([], 0, 3600))
        self.assertEqual(etcd_backup.daily_key(self.PREFIX, self.PREFIX + "hourly/20261201T010000Z-a.db"),
                         self.PREFIX + "daily/20261201T010000Z-a.db")

    def test_keys_sort_by_time(self):
        a = etcd_backup.snapshot_key(self.PREFIX, 1764558000, "ip-10-0-1-5.ec2.internal")
        b = etcd_backup.snapshot_key(self.PREFIX, 1764561600, "ip-10-0-1-5.ec2.internal")
        self.assertTrue(a.startswith(self.PREFIX) and a.endswith(".db"))
        self.assertLess(a, b)
        self.assertNotIn("/", a[len(self.PREFIX):])


class Backup(WithFiles):
    def setUp(self):
        WithFiles.setUp(self)
        self.snap = os.path.join(self.root, "snapshot.db")

    def runner(self, leader=True):
        calls = []

        def run(argv):
            calls.append(list(argv))
            if argv[3:4] == ["ps"]:
                return "c0ffee\n"
            if "status" in argv:
                me = 7 if leader else 8
                return json.dumps([{"Endpoint": "e", "Status": {"header": {"member_id": me}, "leader": 7}}])
            if "save" in argv:
                with open(self.snap, "wb") as f:
                    f.write(b"x" * 123)
            return ""
        return run, calls

    def aws(self, existing, **failing):
        return FakeAws({("ssm", "get-parameter"): settings_answer(SETTINGS),
                        ("s3api", "list-objects-v2"): listing(*existing)}, failing)

    OLD = [("p/demo/etcd/2026110%dT000000Z-a.db" % i, 5, "2026-11-0%dT00:00:00Z" % i) for i in (1, 2, 3)]

    def test_only_the_leader_writes(self):
        run, calls = self.runner(leader=False)
        aws = self.aws(self.OLD)
        code, report = etcd_backup.backup_once(node(aws), run, FakeClock(), self.snap)
        self.assertEqual((code, report), (0, None))
        self.assertFalse([c for c in calls if "save" in c])
        self.assertFalse(aws.ops("s3", "cp"))
        # A follower publishes no metric (it records the raft term only).
        self.assertFalse(aws.ops("cloudwatch", "put-metric-data"))

    def test_the_leader_snapshots_encrypts_and_deletes_nothing(self):
        run, calls = self.runner()
        aws = self.aws(self.OLD)
        code, report = etcd_backup.backup_once(node(aws), run, FakeClock(), self.snap)
        self.assertEqual(code, 0)
        self.assertEqual((report["phase"], report["size"]), ("ok", 123))
        save = [c for c in calls if "save" in c][0]
        self.assertEqual(save[:5], ["crictl", "--runtime-endpoint", etcd.CRI, "exec", "c0ffee"])
        self.assertIn("/etc/kubernetes/pki/etcd/healthcheck-client.crt", save)
        # The hourly snapshot, and (no daily one yet) the same file to the daily tier.
        cps = aws.ops("s3", "cp")
        self.assertEqual(len(cps), 2, cps)
        self.assertTrue(cps[0][4].startswith("s3://b/p/demo/etcd/hourly/") and cps[0][4].endswith(".db"), cps)
        self.assertEqual(cps[1][4], "s3://b/" + etcd_backup.daily_key("p/demo/etcd/", cps[0][4][len("s3://b/"):]))
        self.assertEqual(report["daily"], cps[1][4][len("s3://b/"):])
        for cp in cps:
            self.assertEqual(cp[-4:], ["--sse", "aws:kms", "--sse-kms-key-id", SETTINGS["kmsKeyARN"]])
        # Retention is the bucket's lifecycle rules: no node deletes a snapshot.
        self.assertFalse(aws.ops("s3api", "delete-object"))
        self.assertFalse(os.path.exists(self.snap), "the local snapshot is left behind")
        # The leader's tick published etcd's metrics (metrics.py), in its namespace.
        put = aws.ops("cloudwatch", "put-metric-data")
        self.assertEqual([p[2:4] for p in put], [["--namespace", "kube-aws/etcd"]])

    def test_a_daily_snapshot_once_a_day(self):
        run, _ = self.runner()
        recent_daily = [("p/demo/etcd/daily/20261102T000000Z-a.db", 5, "2026-11-03T00:00:00Z")]
        clock = FakeClock(etcd.parse_time("2026-11-03T20:00:00Z"))
        aws = self.aws(self.OLD + recent_daily)
        code, report = etcd_backup.backup_once(node(aws), run, clock, self.snap)
        self.assertEqual(code, 0)
        self.assertEqual(len(aws.ops("s3", "cp")), 1, "a second daily snapshot within a day")
        self.assertNotIn("daily", report)

    def test_not_due_writes_nothing(self):
        run, calls = self.runner()
        clock = FakeClock(etcd.parse_time("2026-11-03T00:30:00Z"))
        code, report = etcd_backup.backup_once(node(self.aws(self.OLD)), run, clock, self.snap)
        self.assertEqual((code, report), (0, None))
        self.assertFalse([c for c in calls if "save" in c])

    def test_a_failed_upload_is_retried_then_reported(self):
        run, _ = self.runner()
        aws = self.aws(self.OLD)
        aws.failing = {("s3", "cp"): 3}
        clock = FakeClock()
        code, report = etcd_backup.backup_once(node(aws), run, clock, self.snap)
        self.assertEqual(code, 1)
        self.assertEqual(len(aws.ops("s3", "cp")), etcd.UPLOAD_ATTEMPTS)
        self.assertEqual(clock.slept, [10, 20])
        self.assertEqual(report["phase"], "failed")
        self.assertIn("SlowDown", report["message"])
        self.assertFalse(aws.ops("s3api", "delete-object"), "retention ran after a failed upload")
        # The main entry point writes the report where `kube-aws backups` reads it.
        aws2 = self.aws(self.OLD)
        aws2.failing = {("s3", "cp"): 3}
        saved = etcd_backup.backup_once
        try:
            etcd_backup.backup_once = lambda n, r, c, **kw: saved(n, r, c, self.snap, **kw)
            with Quiet():
                code = etcd_backup.etcd_backup_main([], aws2, imds=imds(), run=run, clock=FakeClock())
        finally:
            etcd_backup.backup_once = saved
        self.assertEqual(code, 1)
        put = aws2.ops("s3api", "put-object")
        self.assertEqual(len(put), 1)
        self.assertIn("p/demo/status/etcd/backup.json", put[0])

    def test_now_snapshots_on_a_follower_when_none_is_due_and_says_the_key(self):
        # `kube-aws-node etcd-backup --now`: the operator's snapshot before a
        # risky change. The timer's tick on the same follower, at the same
        # time, writes nothing (test_only_the_leader_writes, test_not_due_writes_nothing).
        run, calls = self.runner(leader=False)
        aws = self.aws(self.OLD)
        clock = FakeClock(etcd.parse_time("2026-11-03T00:30:00Z"))
        saved = etcd_backup.backup_once
        out = io.StringIO()
        try:
            etcd_backup.backup_once = lambda n, r, c, **kw: saved(n, r, c, self.snap, **kw)
            with redirect_stdout(out):
                code = etcd_backup.etcd_backup_main(["--now"], aws, imds=imds(), run=run, clock=clock)
        finally:
            etcd_backup.backup_once = saved
        self.assertEqual(code, 0)
        self.assertEqual(len([c for c in calls if "save" in c]), 1)
        # The follower first reads linearizably (it then has every committed write).
        barrier = [i for i, c in enumerate(calls) if "--consistency=l" in c]
        save = [i for i, c in enumerate(calls) if "save" in c]
        self.assertTrue(barrier and barrier[0] < save[0], calls)
        cps = aws.ops("s3", "cp")
        self.assertTrue(cps and cps[0][4].startswith("s3://b/p/demo/etcd/hourly/"), cps)
        self.assertIn("etcd backup ok: " + cps[0][4][len("s3://b/"):], out.getvalue())
        # A follower publishes no leader metric, --now or not.
        self.assertFalse(aws.ops("cloudwatch", "put-metric-data"))

    def test_a_bad_argument_is_refused_before_anything_runs(self):
        run, calls = self.runner()
        aws = self.aws(self.OLD)
        err = io.StringIO()
        with redirect_stderr(err):
            code = etcd_backup.etcd_backup_main(["--force"], aws, imds=imds(), run=run, clock=FakeClock())
        self.assertEqual(code, 2)
        self.assertIn("usage: kube-aws-node etcd-backup [--now]", err.getvalue())
        self.assertEqual((calls, aws.calls), ([], []))

    def test_a_retry_that_succeeds_is_not_a_failure(self):
        run, _ = self.runner()
        aws = self.aws(self.OLD)
        aws.failing = {("s3", "cp"): 1}
        code, report = etcd_backup.backup_once(node(aws), run, FakeClock(), self.snap)
        self.assertEqual((code, report["phase"]), (0, "ok"))


class Restore(WithFiles):
    SNAPS = [{"key": "p/demo/etcd/a.db", "size": 1, "time": 1.0}, {"key": "p/demo/etcd/b.db", "size": 1, "time": 2.0}]

    def test_decisions(self):
        d = etcd_restore.restore_decision
        self.assertEqual(d(True, False, 1, self.SNAPS)["action"], "init")
        self.assertEqual(d(False, True, 1, self.SNAPS)["action"], "join")
        r = d(False, False, 1, self.SNAPS)
        self.assertEqual((r["action"], r["key"]), ("restore", "p/demo/etcd/b.db"))
        self.assertEqual(d(False, False, 1, [])["action"], "fail")
        self.assertIn("no etcd snapshot", d(False, False, 1, [])["reason"])
        # Several controllers: never a one-member restore beside the others.
        self.assertEqual(d(False, False, 3, self.SNAPS)["action"], "join")

    def test_restore_commands_use_the_kubeadm_etcd_image_and_the_node_name(self):
        image = etcd_restore.etcd_image("registry.k8s.io/kube-apiserver:v1.35.4\nregistry.k8s.io/etcd:3.6.5-0\n"
                                "registry.k8s.io/coredns/coredns:v1.12.1\n")
        self.assertEqual(image, "registry.k8s.io/etcd:3.6.5-0")
        cmds = etcd_restore.restore_commands(image, "/var/lib/kube-aws/etcd-restore.db", "ip-10-0-1-5.ec2.internal",
                                     "10.0.1.5")
        self.assertEqual(cmds[0], ["ctr", "-n", "k8s.io", "images", "pull", image])
        # Already in containerd's store (a baked AMI): no pull, no registry.
        baked = etcd_restore.restore_commands(image, "/var/lib/kube-aws/etcd-restore.db", "ip-10-0-1-5.ec2.internal",
                                      "10.0.1.5", present=True)
        self.assertEqual(baked, cmds[1:])
        restore = cmds[1]
        i = restore.index("etcdutl")
        self.assertEqual(restore[i:i + 4], ["etcdutl", "snapshot", "restore", "/var/lib/kube-aws/etcd-restore.db"])
        self.assertIn("ip-10-0-1-5.ec2.internal=https://10.0.1.5:2380", restore)
        self.assertEqual(restore[restore.index("--data-dir") + 1], "/var/lib/etcd")

    def test_a_replaced_single_controller_restores_the_newest_snapshot(self):
        self.write(etcd.NODE_JSON, json.dumps({"kubernetesVersion": "1.35.4"}))
        os.makedirs(etcd.host("/var/lib/kube-aws"))
        single = dict(SETTINGS, controllerCount=1)

        def cp(args):
            with open(args[-1], "w") as f:
                f.write("snapshot")
        # The addon installer's record, as the reconciler left it before the loss.
        self.write(etcd.RECONCILER_JSON, json.dumps({"installedURI": "s3://b/p/demo/addons/installed.json"}))
        record = {"plan": "sha-now", "secretsVersions": ["v9"], "releases": [
            {"name": "dex", "namespace": "dex", "waitCondition": "wc-dex-2", "secrets": "h1"},
            {"name": "old-addon", "namespace": "kube-system", "waitCondition": "wc-old-1"}]}
        snaps = listing(("p/demo/etcd/20261201T000000Z-a.db", 5, "2026-12-01T00:00:00Z"),
                        ("p/demo/etcd/20261201T010000Z-a.db", 5, "2026-12-01T01:00:00Z"))
        put = {}

        def listed(args):
            prefix = args[args.index("--prefix") + 1]
            if prefix == "p/demo/addons/installed.json":
                return {"Contents": [{"Key": prefix, "ETag": '"e1"'}]}
            return snaps

        def get(args):
            with open(args[-1], "w") as f:
                json.dump(record, f)
            return {"ETag": '"e1"'}

        def put_object(args):
            with open(args[args.index("--body") + 1]) as f:
                put[args[args.index("--key") + 1]] = json.load(f)
            return {"ETag": '"e2"'}
        aws = FakeAws({("ssm", "get-parameter"): settings_answer(single),
                       ("s3api", "list-objects-v2"): listed, ("s3api", "get-object"): get,
                       ("s3api", "put-object"): put_object, ("s3", "cp"): cp})
        ran = []

        def run(argv):
            ran.append(argv)
            return "registry.k8s.io/etcd:3.6.5-0\n" if argv[:3] == ["kubeadm", "config", "images"] else ""
        with Quiet() as q:
            code = etcd_restore.etcd_restore_main([], aws, imds=imds(), run=run, clock=FakeClock(), answers=lambda e: False)
        self.assertEqual(code, 0)
        lines = [json.loads(l) for l in q.out.getvalue().splitlines()]
        self.assertEqual([l["action"] for l in lines], ["restore", "restored"])
        # The record says nothing is current: every release is brought to the plan again.
        reset = put["p/demo/addons/installed.json"]
        self.assertIsNone(reset["plan"])
        self.assertEqual(reset["restoredFrom"], "p/demo/etcd/20261201T010000Z-a.db")
        self.assertEqual([(r["name"], r["namespace"], r["waitCondition"]) for r in reset["releases"]],
                         [("dex", "dex", ""), ("old-addon", "kube-system", "")])
        self.assertEqual(put["p/demo/" + etcd_restore.RESTORE_STATUS]["addonRecord"], "reset")
        self.assertEqual(lines[1]["key"], "p/demo/etcd/20261201T010000Z-a.db")
        self.assertEqual(ran[0], ["kubeadm", "config", "images", "list", "--kubernetes-version", "1.35.4"])
        # Not in containerd's store yet (ls answers nothing): pulled, then run.
        self.assertEqual([a[:5] for a in ran[1:]], [["ctr", "-n", "k8s.io", "images", "ls"],
                                                    ["ctr", "-n", "k8s.io", "images", "pull"],
                                                    ["ctr", "-n", "k8s.io", "run", "--rm"]])
        self.assertIn("s3://b/p/demo/etcd/20261201T010000Z-a.db", aws.ops("s3", "cp")[0])
        self.assertIn("p/demo/status/etcd/restore.json", aws.ops("s3api", "put-object")[-1])

    def test_a_requested_restore_decides_first(self):
        d = etcd_restore.requested_restore_decision
        req = {"id": "r1", "key": "p/demo/etcd/hourly/20261201T000000Z-a.db"}
        r = d(req, True, "p/demo/etcd/")
        self.assertEqual((r["action"], r["key"], r["request"]), ("restore", req["key"], "r1"))
        self.assertEqual(d(req, False, "p/demo/etcd/")["action"], "join")
        # A key outside the cluster's snapshots is refused on the node too.
        self.assertEqual(d(dict(req, key="p/prod/etcd/hourly/x.db"), True, "p/demo/etcd/")["action"], "fail")

    def requested(self, lock_held, served=False, clean_after=0):
        """Three controllers, the API still answering, a request pending
        (served: the restorer's status object names it; from `clean_after`
        seconds on, or never when None, it says the old controllers are gone
        from the API). No addon was installed yet (no installed record)."""
        clock = FakeClock()
        self.write(etcd.NODE_JSON, json.dumps({"kubernetesVersion": "1.35.4"}))
        self.write(etcd.RECONCILER_JSON, json.dumps({"installedURI": "s3://b/p/demo/addons/installed.json"}))
        os.makedirs(etcd.host("/var/lib/kube-aws"))
        key = "p/demo/etcd/hourly/20261201T000000Z-a.db"

        def listed(args):
            prefix = args[args.index("--prefix") + 1]
            return listing((prefix, 5, "2026-12-01T00:00:00Z")) if prefix.endswith(etcd_restore.RESTORE_REQUEST) else {}

        def get(args):
            if args[args.index("--key") + 1].endswith(etcd_restore.RESTORE_STATUS):
                if not served:
                    raise etcd.AwsError("An error occurred (NoSuchKey) when calling the GetObject operation")
                clean = clean_after is not None and clock.now() >= START + clean_after
                with open(args[-1], "w") as f:
                    json.dump({"key": key, "request": "r1", "restoredAt": 1, "clean": clean}, f)
                return
            with open(args[-1], "w") as f:
                json.dump({"id": "r1", "key": key}, f)

        def put(args):
            if "--if-none-match" in args and lock_held:
                raise etcd_restore.locks.AwsError("An error occurred (PreconditionFailed) when calling the PutObject")

        def cp(args):
            with open(args[-1], "w") as f:
                f.write("snapshot")
        aws = FakeAws({("ssm", "get-parameter"): settings_answer(SETTINGS),
                       ("s3api", "list-objects-v2"): listed, ("s3api", "get-object"): get,
                       ("s3api", "put-object"): put, ("s3", "cp"): cp})
        run = lambda a: "registry.k8s.io/etcd:3.6.5-0\n" if a[:3] == ["kubeadm", "config", "images"] else ""  # noqa
        with Quiet() as q:
            code = etcd_restore.etcd_restore_main([], aws, imds=imds(), run=run, clock=clock, answers=lambda e: True)
        self.slept = sum(clock.slept)
        return code, [json.loads(l) for l in q.out.getvalue().splitlines()], aws, key

    def test_the_controller_that_takes_the_restore_lock_restores_the_requested_key(self):
        code, lines, aws, key = self.requested(lock_held=False)
        self.assertEqual(code, 0)
        self.assertEqual([l["action"] for l in lines], ["restore", "restored"])
        self.assertEqual(lines[1]["key"], key)
        lock = [c for c in aws.ops("s3api", "put-object") if "--if-none-match" in c][0]
        self.assertEqual(lock[lock.index("--key") + 1], "p/demo/" + etcd_restore.RESTORE_LOCK)
        self.assertIn("s3://b/" + key, aws.ops("s3", "cp")[0])

    def test_the_others_join_the_restored_one_once_its_old_controllers_are_gone(self):
        # The restorer serves the request and, 30 s later, says the
        # snapshot's old controllers are out of the API: the others wait for
        # that, then join.
        code, lines, aws, _ = self.requested(lock_held=True, served=True, clean_after=30)
        self.assertEqual(code, 0)
        self.assertEqual([l["action"] for l in lines], ["wait", "join"])
        self.assertEqual(self.slept, 30)
        self.assertFalse(aws.ops("s3", "cp"))

    def test_a_restorer_that_never_says_clean_is_waited_for_then_joined(self):
        code, lines, _, _ = self.requested(lock_held=True, served=False, clean_after=None)
        self.assertEqual(code, 0)
        self.assertEqual([l["action"] for l in lines], ["wait", "warning", "join"])
        self.assertEqual(self.slept, etcd_restore.RESTORE_CLEAN_WAIT)
        self.assertIn("did not say the old controllers are gone", lines[1]["reason"])

    def test_the_restorer_removes_the_old_controllers_then_says_clean(self):
        nodes = {"items": [
            {"metadata": {"name": "ip-10-0-1-5", "labels": {"node-role.kubernetes.io/control-plane": ""}}},
            {"metadata": {"name": "ip-10-0-1-9", "labels": {"node-role.kubernetes.io/control-plane": ""}}},
            {"metadata": {"name": "ip-10-0-2-7", "labels": {}}},
        ]}
        ran, written = [], []

        def run(argv):
            ran.append(argv)
            return json.dumps(nodes) if argv[3:5] == ["get", "nodes"] else ""

        def get(args):
            with open(args[-1], "w") as f:
                json.dump({"key": "k", "request": "r1", "restoredAt": 1}, f)

        def put(args):
            with open(args[args.index("--body") + 1]) as f:
                written.append(json.load(f))
        aws = FakeAws({("s3api", "get-object"): get, ("s3api", "put-object"): put})
        node = etcd.Node(aws, imds(), runtime=RUNTIME, etcd_json={})
        with Quiet():
            gone = etcd_restore.finish_restore(node, {"action": "restored", "key": "k"}, "ip-10-0-1-5", run=run,
                                       clock=FakeClock())
        # Only the other controller (not this one, not the worker), its pods first.
        self.assertEqual(gone, ["ip-10-0-1-9"])
        self.assertEqual([a[3:6] for a in ran[1:]], [["delete", "pods", "-n"], ["delete", "node", "ip-10-0-1-9"]])
        self.assertIn("spec.nodeName=ip-10-0-1-9", ran[1])
        self.assertEqual(written[-1]["request"], "r1")
        self.assertTrue(written[-1]["clean"])
        self.assertEqual(written[-1]["removedControllers"], ["ip-10-0-1-9"])

    def test_a_failed_cleanup_still_says_clean_so_no_joiner_waits_it_out(self):
        written = []

        def run(argv):
            raise RuntimeError("kubectl exited 1: the connection was refused")

        def put(args):
            with open(args[args.index("--body") + 1]) as f:
                written.append(json.load(f))
        aws = FakeAws({("s3api", "get-object"): None, ("s3api", "put-object"): put})
        node = etcd.Node(aws, imds(), runtime=RUNTIME, etcd_json={})
        with Quiet() as q:
            self.assertEqual(etcd_restore.finish_restore(node, {"action": "restored", "key": "k", "request": "r1"},
                                                 "ip-10-0-1-5", run=run, clock=FakeClock()), [])
        self.assertTrue(written[-1]["clean"])
        self.assertIn("connection was refused", written[-1]["cleanProblem"])
        self.assertIn("warning", q.out.getvalue())

    def test_a_served_request_is_over(self):
        # A controller booting after the restore (a rolling update) decides as
        # if no request were pending: three controllers join, and it neither
        # restores nor reads a snapshot.
        code, lines, aws, _ = self.requested(lock_held=True, served=True)
        self.assertEqual(code, 0)
        self.assertEqual([l["action"] for l in lines], ["join"])
        self.assertNotIn("request", lines[0])
        self.assertFalse(aws.ops("s3", "cp"))
        # Read once: clean, so served (nothing to wait for).
        status = [c for c in aws.ops("s3api", "get-object") if c[c.index("--key") + 1].endswith(etcd_restore.RESTORE_STATUS)]
        self.assertEqual(len(status), 1)

    def test_no_snapshot_fails_the_boot_with_the_reason(self):
        aws = FakeAws({("ssm", "get-parameter"): settings_answer(dict(SETTINGS, controllerCount=1)),
                       ("s3api", "list-objects-v2"): {}})
        with Quiet() as q:
            code = etcd_restore.etcd_restore_main([], aws, imds=imds(), run=lambda a: "", clock=FakeClock(),
                                          answers=lambda e: False)
        self.assertEqual(code, 1)
        lines = q.out.getvalue().splitlines()
        self.assertEqual(len(lines), 1)
        self.assertEqual(json.loads(lines[0])["action"], "fail")
        plan = etcd_restore.restore_if_needed(aws, False, imds(), lambda a: "", FakeClock(), lambda e: False,
                                      say=lambda line: None)
        self.assertIn("no etcd snapshot", plan["reason"])

    def test_an_answering_api_or_a_new_cluster_touches_no_snapshot(self):
        aws = FakeAws({("ssm", "get-parameter"): settings_answer(dict(SETTINGS, controllerCount=1))})
        for argv, answers, want in (([], lambda e: True, "join"), (["--took-init-lock"], lambda e: False, "init")):
            with Quiet() as q:
                code = etcd_restore.etcd_restore_main(argv, aws, imds=imds(), run=lambda a: "", clock=FakeClock(),
                                              answers=answers)
            self.assertEqual((code, json.loads(q.out.getvalue())["action"]), (0, want))
        # Only the restore request's exact key is listed (no request pending), no snapshot.
        self.assertEqual([c[c.index("--prefix") + 1] for c in aws.ops("s3api", "list-objects-v2")],
                         ["p/demo/" + etcd_restore.RESTORE_REQUEST])
        self.assertFalse(aws.ops("s3", "cp"))


if __name__ == "__main__":
    unittest.main()
