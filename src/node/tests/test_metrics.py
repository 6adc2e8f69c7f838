"""etcd's CloudWatch metrics from the leader's backup tick: the data, the
namespace the role may write, and a refused call that fails nothing."""
import json
import tempfile
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kube_aws_node import metrics  # noqa: E402
from kube_aws_node.awscall import AwsError  # noqa: E402


class Metrics(unittest.TestCase):
    def test_the_data_and_the_call(self):
        d = metrics.datums("demo", {"dbSize": 2048, "dbSizeInUse": 1024}, 1000.0, 1600.0)
        self.assertEqual([(x["MetricName"], x["Value"]) for x in d],
                         [("DbSizeBytes", 2048.0), ("DbSizeInUseBytes", 1024.0), ("BackupAgeSeconds", 600.0)])
        self.assertTrue(all(x["Dimensions"] == [{"Name": "ClusterName", "Value": "demo"}] for x in d))
        # No snapshot yet: no age (the alarm treats missing data as breaching).
        self.assertEqual(len(metrics.datums("demo", {}, None, 0)), 2)
        calls = []
        self.assertTrue(metrics.publish(lambda a: calls.append(a), d))
        self.assertEqual(calls[0][:4], ["cloudwatch", "put-metric-data", "--namespace", "kube-aws/etcd"])
        self.assertEqual(json.loads(calls[0][5]), d)

        def refuse(a):
            raise AwsError("An error occurred (AccessDenied)")
        self.assertFalse(metrics.publish(refuse, d))


if __name__ == "__main__":
    unittest.main()


class LeaderChanges(unittest.TestCase):
    def test_the_term_increase_since_a_fresh_record(self):
        self.assertEqual(metrics.leader_changes({"term": 4, "at": 1000}, 6, 1300), 2)
        self.assertEqual(metrics.leader_changes({"term": 6, "at": 1000}, 6, 1300), 0)
        # No record, a stale one (the node was off), a term that went back
        # (a restored cluster), a broken record: no baseline.
        self.assertIsNone(metrics.leader_changes(None, 6, 1300))
        self.assertIsNone(metrics.leader_changes({"term": 4, "at": 1000}, 6, 1000 + metrics.TERM_STALE_AFTER + 1))
        self.assertIsNone(metrics.leader_changes({"term": 9, "at": 1000}, 6, 1300))
        self.assertIsNone(metrics.leader_changes({"term": "x", "at": 1000}, 6, 1300))
        d = metrics.datums("demo", {}, None, 0, 3)
        self.assertEqual([(x["MetricName"], x["Value"], x["Unit"]) for x in d][-1], ("LeaderChanges", 3.0, "Count"))

    def test_every_node_records_the_term_and_a_new_leader_counts_its_election(self):
        with tempfile.TemporaryDirectory() as tmp:
            state = os.path.join(tmp, "var", "lib", "kube-aws", "etcd-term.json")
            calls = []
            # A follower records term 5 and publishes nothing.
            self.assertIsNone(metrics.tick(calls.append, "demo", {"raftTerm": 5}, False, None, 1000, state))
            self.assertEqual(calls, [])
            # It is elected (term 6): its next tick publishes one change.
            d = metrics.tick(calls.append, "demo", {"raftTerm": "6", "dbSize": 10}, True, 900.0, 1300, state)
            self.assertEqual({x["MetricName"]: x["Value"] for x in d},
                             {"DbSizeBytes": 10.0, "DbSizeInUseBytes": 0.0, "BackupAgeSeconds": 400.0,
                              "LeaderChanges": 1.0})
            self.assertEqual(len(calls), 1)
            with open(state) as f:
                self.assertEqual(json.load(f), {"term": 6, "at": 1300})
