"""sdkcall: the argument lists the node answers in its own process
(`ssm get-parameter`, `s3 cp`, `kms decrypt`, and `s3api` get-object,
put-object with its conditions, delete-object, list-objects-v2, as the
locks, the lease and the installed record call them), against moto's in-memory AWS
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
