"""retry.poll, the node program's deadline loop (take_over_leader_leases,
wait_schedulable, wait_node_ready), on a fake clock."""
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import retry



class Clock(object):
    def __init__(self):
        self.now = 1000.0
        self.slept = []

    def time(self):
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


class PollTest(unittest.TestCase):
    def test_returns_the_first_true_answer_without_sleeping_after_it(self):
        c = Clock()
        answers = iter([False, None, "ready"])
        got = retry.poll(lambda: next(answers), 60, 5, sleep=c.sleep, clock=c.time)
        self.assertEqual(got, "ready")
        self.assertEqual(c.slept, [5, 5])

    def test_gives_up_after_the_limit_with_one_check_past_the_deadline(self):
        c = Clock()
        calls = []

        def check():
            calls.append(c.now)
            return False
        self.assertIsNone(retry.poll(check, 12, 5, sleep=c.sleep, clock=c.time))
        # checks at 0, 5, 10 and 15 s: the last one after the 12 s deadline, none later
        self.assertEqual([t - 1000.0 for t in calls], [0, 5, 10, 15])

    def test_a_zero_limit_checks_once(self):
        c = Clock()
        calls = []
        self.assertIsNone(retry.poll(lambda: calls.append(1), 0, 5, sleep=c.sleep, clock=c.time))
        self.assertEqual((calls, c.slept), ([1], []))

    def test_an_error_in_the_check_is_raised_not_swallowed(self):
        c = Clock()

        def check():
            raise ValueError("bad answer")
        with self.assertRaises(ValueError):
            retry.poll(check, 60, 5, sleep=c.sleep, clock=c.time)


if __name__ == "__main__":
    unittest.main()
