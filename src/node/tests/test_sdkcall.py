"""sdkcall: the argument lists the node answers in its own process
(`ssm get-parameter`, `s3 cp`, `kms decrypt`, and `s3api` get-object,
put-object with its conditions, delete-object, list-objects-v2, as the
locks, the lease and the installed record call them; CloudFormation's
describe-stacks, describe-stack-resource and signal-resource, as cfn.py
calls them for a wait condition), against moto's in-memory AWS
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


def in_moto(test):
    """moto's in-memory AWS for `test`, with test credentials and the
    node's own endpoint and call-path variables cleared, undone at its end."""
    env = mock.patch.dict(os.environ, {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                                       "AWS_DEFAULT_REGION": REGION})
    env.start()
    test.addCleanup(env.stop)
    os.environ.pop("AWS_ENDPOINT_URL", None)
    os.environ.pop("KUBE_AWS_AWS_CALLS", None)
    test.mock = mock_aws()
    test.mock.start()
    test.addCleanup(test.mock.stop)


class InProcess(unittest.TestCase):
    def setUp(self):
        in_moto(self)
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
        self.runner.answers = [(0, '{"ETag": "x"}', ""), (0, "", ""), (0, "{}", "")]
        self.aws(["s3api", "head-object", "--bucket", "bed-bucket", "--key", "c/secrets/bundle.json"])
        self.aws(["s3", "cp", "--recursive", "s3://bed-bucket/c/", self.dir])
        self.aws(["s3api", "list-objects-v2", "--bucket", "bed-bucket", "--delimiter", "/"])
        self.assertEqual([c[5:7] for c in self.runner.calls],
                         [["s3api", "head-object"], ["s3", "cp"], ["s3api", "list-objects-v2"]])

    def test_a_lock_is_taken_once_and_released_only_at_its_etag(self):
        from kube_aws_node import locks
        etag = locks.put_lock(self.aws, "bed-bucket", "c/bootstrap/join-lock", holder="i-1")
        self.assertTrue(etag.startswith('"'), etag)  # as S3 and the CLI print it
        self.assertIsNone(locks.put_lock(self.aws, "bed-bucket", "c/bootstrap/join-lock", holder="i-2"))
        self.assertFalse(locks.delete_if(self.aws, "bed-bucket", "c/bootstrap/join-lock", '"not-its-etag"'))
        self.assertTrue(locks.delete_if(self.aws, "bed-bucket", "c/bootstrap/join-lock", etag))
        self.assertIsNone(awscall.listed_object(self.aws, "bed-bucket", "c/bootstrap/join-lock"))
        self.assertEqual(self.runner.calls, [])

    def test_a_conditional_write_reads_back_and_loses_to_a_newer_one(self):
        body = os.path.join(self.dir, "record.json")
        with open(body, "w") as f:
            f.write('{"releases": []}')
        put = ["s3api", "put-object", "--bucket", "bed-bucket", "--key", "c/addons/installed.json",
               "--body", body, "--content-type", "application/json"]
        first = self.aws(put + ["--if-none-match", "*"])["ETag"]
        dst = os.path.join(self.dir, "read.json")
        meta = self.aws(["s3api", "get-object", "--bucket", "bed-bucket", "--key", "c/addons/installed.json", dst])
        self.assertEqual(meta["ETag"], first)
        self.assertNotIn("Body", meta)
        self.assertIsInstance(meta["LastModified"], str)
        with open(dst) as f:
            self.assertEqual(f.read(), '{"releases": []}')
        with open(body, "w") as f:
            f.write('{"releases": [{"name": "dex"}]}')
        second = self.aws(put + ["--if-match", first])["ETag"]
        self.assertNotEqual(second, first)
        with self.assertRaises(AwsError) as e:
            self.aws(put + ["--if-match", first])
        self.assertIn("PreconditionFailed", e.exception.message)
        self.assertIn("when calling the PutObject operation", e.exception.message)
        head = self.s3.head_object(Bucket="bed-bucket", Key="c/addons/installed.json")
        self.assertEqual((head["ETag"], head["ContentType"]), (second, "application/json"))
        with self.assertRaises(AwsError) as e:
            self.aws(["s3api", "get-object", "--bucket", "bed-bucket", "--key", "c/addons/none.json",
                      os.path.join(self.dir, "none.json")])
        self.assertIn("NoSuchKey", e.exception.message)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "none.json")))
        self.assertEqual(self.runner.calls, [])

    def test_a_listing_pages_as_the_cli_does(self):
        for i in range(5):
            self.s3.put_object(Bucket="bed-bucket", Key="c/backups/%04d.db" % i, Body=b"")
        # Pages of two keys: five keys back means every page was asked for.
        with mock.patch.object(sdkcall.InProcess, "page_size", 2):
            out = self.aws(["s3api", "list-objects-v2", "--bucket", "bed-bucket", "--prefix", "c/backups/"])
        self.assertEqual([o["Key"] for o in out["Contents"]], ["c/backups/%04d.db" % i for i in range(5)])
        self.assertNotIn("NextContinuationToken", out)
        one = self.aws(["s3api", "list-objects-v2", "--bucket", "bed-bucket", "--prefix", "c/backups/",
                        "--max-keys", "1"])
        self.assertEqual([o["Key"] for o in one["Contents"]], ["c/backups/0000.db"])
        none = self.aws(["s3api", "list-objects-v2", "--bucket", "bed-bucket", "--prefix", "c/nothing/"])
        self.assertNotIn("Contents", none)
        self.assertEqual(self.runner.calls, [])

    def test_a_botocore_without_the_condition_leaves_the_call_to_the_cli(self):
        sdk = self.aws.sdk()
        self.runner.answers = [(0, '{"ETag": "\\"e\\""}', "")]
        with mock.patch.object(sdk, "has_params", return_value=False):
            out = self.aws(["s3api", "put-object", "--bucket", "bed-bucket", "--key", "c/l", "--body", self.blob,
                            "--if-none-match", "*"])
        self.assertEqual(out, {"ETag": '"e"'})
        self.assertEqual([c[5:7] for c in self.runner.calls], [["s3api", "put-object"]])


_SIGNALS = []


def moto_signals():
    """The bed's CloudFormation signals for moto (tests/support/moto_signals.py,
    which the bed's moto server applies), applied to this process's moto once."""
    if not _SIGNALS:
        import sys
        sys.path.insert(0, os.path.join(helpers.HERE, "..", "..", "..", "tests", "support"))
        import moto_signals as m
        m.apply()
        _SIGNALS.append(m)


class Signals(unittest.TestCase):
    """cfn.py's three calls for an addon's wait condition, in this process."""

    def setUp(self):
        moto_signals()
        in_moto(self)
        template = {"Resources": {"DexReady": {
            "Type": "AWS::CloudFormation::WaitCondition",
            "CreationPolicy": {"ResourceSignal": {"Count": 1, "Timeout": "PT30M"}}}}}
        session = sdkcall.load().get_session()
        session.create_client("cloudformation", region_name=REGION).create_stack(
            StackName="bed", TemplateBody=json.dumps(template))
        self.runner = helpers.FakeRunner([])
        self.aws = Aws(REGION, attempts=1, delay=0)
        self.aws.runner = self.runner  # a call that reaches the CLI fails: no answers

    def test_a_waiting_condition_is_signalled_once_and_then_left_alone(self):
        from kube_aws_node import cfn
        self.assertTrue(cfn.stack_in_progress(self.aws, "bed"))
        self.assertEqual(cfn.resource_state(self.aws, "bed", "DexReady"), "CREATE_IN_PROGRESS")
        self.assertTrue(cfn.signal(self.aws, "bed", "DexReady", "dex", "SUCCESS"))
        self.assertEqual(cfn.resource_state(self.aws, "bed", "DexReady"), "CREATE_COMPLETE")
        self.assertFalse(cfn.stack_in_progress(self.aws, "bed"))
        # A second signal is refused (not waiting): signal says so, never raises.
        self.assertFalse(cfn.signal(self.aws, "bed", "DexReady", "dex", "SUCCESS"))
        self.assertEqual(cfn.resource_state(self.aws, "bed", "Nothing"), "missing")
        self.assertEqual(self.runner.calls, [])

    def test_a_failure_signal_fails_the_condition_and_the_stack(self):
        from kube_aws_node import cfn
        self.assertTrue(cfn.signal(self.aws, "bed", "DexReady", "dex", "FAILURE"))
        self.assertEqual(cfn.resource_state(self.aws, "bed", "DexReady"), "CREATE_FAILED")
        self.assertFalse(cfn.stack_in_progress(self.aws, "bed"))
        with self.assertRaises(AwsError) as e:
            self.aws(["cloudformation", "describe-stacks", "--stack-name", "other"])
        self.assertIn("when calling the DescribeStacks operation", e.exception.message)
        self.assertEqual(self.runner.calls, [])


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
