"""awscall.Aws: one retry policy, JSON out, errors without secrets."""
import os
import subprocess
import unittest

from helpers import FakeRunner
from kube_aws_node.awscall import Aws, AwsError


def aws(answers, **kw):
    r = FakeRunner(answers)
    return Aws("eu-west-1", delay=0, runner=r, sleep=lambda s: None, **kw), r


class AwsCall(unittest.TestCase):
    def test_json_out_and_argument_lists(self):
        a, r = aws([(0, '{"Parameter": {"Value": "x"}}\n', "")])
        self.assertEqual(a(["ssm", "get-parameter", "--name", "/a b"]), {"Parameter": {"Value": "x"}})
        self.assertEqual(r.calls[0], ["aws", "--region", "eu-west-1", "--output", "json", "ssm", "get-parameter",
                                      "--name", "/a b"])

    def test_no_output_is_none(self):
        a, _ = aws([(0, "", "")])
        self.assertIsNone(a(["s3", "cp", "a", "b"]))

    def test_a_transient_error_is_retried(self):
        a, r = aws([(255, "", "An error occurred (Throttling) when calling X"), (0, "{}", "")])
        self.assertEqual(a(["sts", "get-caller-identity"]), {})
        self.assertEqual(len(r.calls), 2)

    def test_a_final_answer_is_not_retried(self):
        for code in ("AccessDenied", "PreconditionFailed", "NoSuchBucket", "InvalidCiphertextException"):
            a, r = aws([(254, "", "An error occurred (%s) when calling PutObject: no" % code)] * 5)
            with self.assertRaises(AwsError) as e:
                a(["s3api", "put-object"])
            self.assertEqual(len(r.calls), 1, code)
            self.assertEqual(e.exception.code, code)

    def test_attempts_are_bounded(self):
        a, r = aws([(255, "", "Connection reset")] * 3, attempts=3)
        with self.assertRaises(AwsError):
            a(["s3", "ls"])
        self.assertEqual(len(r.calls), 3)

    def test_the_message_never_holds_stdout_or_an_argument(self):
        a, _ = aws([(254, '{"Plaintext": "c2VjcmV0"}', "some noise\nAn error occurred (AccessDenied) when calling "
                                                        "Decrypt: the role may not\n")])
        with self.assertRaises(AwsError) as e:
            a(["kms", "decrypt", "--ciphertext-blob", "fileb:///run/secret-blob"])
        msg = str(e.exception)
        self.assertIn("AccessDenied", msg)
        self.assertNotIn("c2VjcmV0", msg)
        self.assertNotIn("secret-blob", msg)

    def test_scrub_blanks_the_message(self):
        a, _ = aws([(254, "", "An error occurred (AccessDenied): value hunter2 refused")],
                   scrub=lambda t: t.replace("hunter2", "<secret x>"))
        with self.assertRaises(AwsError) as e:
            a(["x"])
        self.assertIn("<secret x>", str(e.exception))
        self.assertNotIn("hunter2", str(e.exception))


if __name__ == "__main__":
    unittest.main()


class ImdsSettings(unittest.TestCase):
    def test_the_cli_gets_a_wider_imds_timeout_unless_the_operator_set_one(self):
        seen = []

        def runner(args, **kw):
            seen.append(kw.get("env") or {})
            return subprocess.CompletedProcess(args, 0, "{}", "")

        os.environ.pop("AWS_METADATA_SERVICE_TIMEOUT", None)
        os.environ["AWS_METADATA_SERVICE_NUM_ATTEMPTS"] = "7"
        try:
            Aws("eu-west-1", delay=0, runner=runner, sleep=lambda s: None)(["sts", "get-caller-identity"])
        finally:
            os.environ.pop("AWS_METADATA_SERVICE_NUM_ATTEMPTS", None)
        self.assertEqual(seen[0]["AWS_METADATA_SERVICE_TIMEOUT"], "5")
        self.assertEqual(seen[0]["AWS_METADATA_SERVICE_NUM_ATTEMPTS"], "7")
