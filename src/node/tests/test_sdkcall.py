"""sdkcall: the three argument lists the node answers in its own process
(`ssm get-parameter`, `s3 cp`, `kms decrypt`), against moto's in-memory AWS
(the tools venv's moto, `mock_aws`), through awscall.Aws as the node program
calls it; what it does not handle goes to the CLI.

Not covered here: IAM (moto's in-memory mode does not enforce it; the
real-node bed's secrets step runs these calls under the node's role with
moto's IAM enforced), and AL2023's own botocore package (not installable
here; the bed's node has the aws CLI's vendored botocore).
"""
import base64
import json
import os
import subprocess
import tempfile
import unittest
from unittest import mock

import helpers
from kube_aws_node import awscall, sdkcall
from kube_aws_node.awscall import Aws, AwsError

from moto import mock_aws

REGION = "us-west-2"
CONTEXT = {"kube-aws:cluster": "bed", "kube-aws:secret": "pki/ca.key"}


class InProcess(unittest.TestCase):
    def setUp(self):
        env = mock.patch.dict(os.environ, {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                                           "AWS_DEFAULT_REGION": REGION})
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("AWS_ENDPOINT_URL", None)
        os.environ.pop("KUBE_AWS_AWS_CALLS", None)
        self.mock = mock_aws()
        self.mock.start()
        self.addCleanup(self.mock.stop)
        self.dir = tempfile.mkdtemp()
        session = sdkcall.load().get_session()
        self.s3 = session.create_client("s3", region_name=REGION)
        self.s3.create_bucket(Bucket="bed-bucket", CreateBucketConfiguration={"LocationConstraint": REGION})
        self.s3.put_object(Bucket="bed-bucket", Key="c/secrets/bundle.json", Body=b'{"secrets": {}}')
        session.create_client("ssm", region_name=REGION).put_parameter(
            Name="/kube-aws/bed/pointer", Value="secrets/abc/bundle.json", Type="String")
        kms = session.create_client("kms", region_name=REGION)
        key = kms.create_key()["KeyMetadata"]["KeyId"]
        self.blob = os.path.join(self.dir, "ct")
        with open(self.blob, "wb") as f:
            f.write(kms.encrypt(KeyId=key, Plaintext=b"the-ca-key", EncryptionContext=CONTEXT)["CiphertextBlob"])
        self.runner = helpers.FakeRunner([])
        self.aws = Aws(REGION, attempts=1, delay=0)
        # Anything the CLI would be asked is a test failure: FakeRunner has no answers.
        self.aws.runner = self.runner

    def test_the_secrets_steps_calls_are_answered_in_this_process(self):
        self.assertTrue(self.aws.backend().startswith("this process (botocore "), self.aws.backend())
        out = self.aws(["ssm", "get-parameter", "--name", "/kube-aws/bed/pointer"])
        self.assertEqual(out["Parameter"]["Value"], "secrets/abc/bundle.json")
        self.assertIsInstance(out["Parameter"]["LastModifiedDate"], str)  # ISO 8601, as the CLI prints it
        dst = os.path.join(self.dir, "bundle.json")
        self.assertIsNone(self.aws(["s3", "cp", "--only-show-errors", "s3://bed-bucket/c/secrets/bundle.json", dst]))
        with open(dst, "rb") as f:
            self.assertEqual(f.read(), b'{"secrets": {}}')
        plain = self.aws(["kms", "decrypt", "--ciphertext-blob", "fileb://" + self.blob,
                          "--encryption-context", json.dumps(CONTEXT), "--query", "Plaintext"])
        self.assertEqual(base64.b64decode(plain), b"the-ca-key")  # base64, as the CLI prints a blob
        self.assertEqual(self.runner.calls, [])

    def test_an_upload_keeps_its_encryption_and_content_type(self):
        src = os.path.join(self.dir, "status.json")
        with open(src, "w") as f:
            f.write('{"phase": "ready"}')
        self.aws(["s3", "cp", "--only-show-errors", "--sse", "AES256", "--content-type", "application/json",
                  src, "s3://bed-bucket/c/status/x.json"])
        head = self.s3.head_object(Bucket="bed-bucket", Key="c/status/x.json")
        self.assertEqual(head["ServerSideEncryption"], "AES256")
        self.assertEqual(head["ContentType"], "application/json")
        self.assertEqual(self.runner.calls, [])

    def test_a_wrong_context_is_refused_and_final(self):
        with self.assertRaises(AwsError) as e:
            self.aws(["kms", "decrypt", "--ciphertext-blob", "fileb://" + self.blob,
                      "--encryption-context", json.dumps({"kube-aws:cluster": "other"}), "--query", "Plaintext"])
        self.assertIn("when calling the Decrypt operation", e.exception.message)
        self.assertTrue(e.exception.final(), e.exception.message)
        self.assertNotIn("the-ca-key", e.exception.message)

    def test_a_missing_object_is_final_and_leaves_no_file(self):
        dst = os.path.join(self.dir, "missing.json")
        with self.assertRaises(AwsError) as e:
            self.aws(["s3", "cp", "--only-show-errors", "s3://bed-bucket/c/nothing.json", dst])
        self.assertEqual(e.exception.code, "NoSuchKey")
        self.assertTrue(e.exception.final())
        self.assertEqual(os.listdir(self.dir), ["ct"])

    def test_what_it_does_not_handle_goes_to_the_cli(self):
        self.runner.answers = [(0, '{"Contents": []}', ""), (0, "", "")]
        self.aws(["s3api", "list-objects-v2", "--bucket", "bed-bucket", "--prefix", "c/"])
        self.aws(["s3", "cp", "--recursive", "s3://bed-bucket/c/", self.dir])
        self.assertEqual([c[5:7] for c in self.runner.calls], [["s3api", "list-objects-v2"], ["s3", "cp"]])


class Choice(unittest.TestCase):
    def test_an_injected_runner_or_the_knob_keeps_every_call_on_the_cli(self):
        self.assertFalse(Aws(REGION, runner=helpers.FakeRunner([])).sdk())
        with mock.patch.dict(os.environ, {"KUBE_AWS_AWS_CALLS": "cli"}):
            self.assertFalse(awscall.in_process_wanted(subprocess.run))
            self.assertEqual(Aws(REGION).backend(), "the aws CLI")
        with mock.patch.dict(os.environ, {"KUBE_AWS_AWS_CALLS": ""}):
            self.assertTrue(awscall.in_process_wanted(subprocess.run))


if __name__ == "__main__":
    unittest.main()
