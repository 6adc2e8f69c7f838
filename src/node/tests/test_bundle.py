"""bundle.unpack: checked against the pointer's sha256, plain relative paths only, secrets filled."""
import hashlib
import json
import os
import shutil
import tempfile
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import bundle


class CopyAws(object):
    """`aws s3 cp SRC DST` from a dict of objects."""

    def __init__(self, objects):
        self.objects = objects

    def __call__(self, args, attempts=None):
        assert args[:2] == ["s3", "cp"], args
        with open(args[-1], "wb") as f:
            f.write(self.objects[args[-2]])


def doc(files, secret_files=()):
    return json.dumps({"apiVersion": "kube-aws/v1", "kind": "AddonBundle", "files": files,
                       "secretFiles": list(secret_files)}).encode()


class Unpack(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.store = os.path.join(self.dir, "secrets")
        os.makedirs(self.store)
        with open(os.path.join(self.store, "kube-aws-secret.dex.pw"), "w") as f:
            f.write('va"lue')
        self.out = os.path.join(self.dir, "plan")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def unpack(self, body, sha=None):
        aws = CopyAws({"s3://b/bundle.json": body})
        bundle.unpack(aws, "s3://b/bundle.json", sha or hashlib.sha256(body).hexdigest(), self.out, self.store)

    def test_files_are_written_private_and_secrets_filled(self):
        self.unpack(doc({"plan.json": "{}", "values/dex.json": '{"pw": "kube-aws-secret.dex.pw"}'},
                        [{"path": "values/dex.json", "format": "json"}]))
        with open(os.path.join(self.out, "values", "dex.json")) as f:
            self.assertEqual(json.load(f), {"pw": 'va"lue'})
        self.assertEqual(os.stat(os.path.join(self.out, "plan.json")).st_mode & 0o777, 0o600)

    def test_a_bundle_that_does_not_match_its_sha256_is_refused(self):
        with self.assertRaises(bundle.BundleError) as e:
            self.unpack(doc({"plan.json": "{}"}), sha="0" * 64)
        self.assertIn("does not match its sha256", str(e.exception))
        self.assertFalse(os.path.exists(os.path.join(self.out, "plan.json")))

    def test_paths_that_leave_the_directory_are_refused(self):
        for bad in ("../x", "/etc/passwd", "a//b", "a/./b"):
            with self.assertRaises(bundle.BundleError, msg=bad):
                self.unpack(doc({bad: "x"}))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "x")))

    def test_a_reference_without_a_value_fails_naming_it_and_unpacks_nothing(self):
        # After a reboot the store is empty until the secrets are decrypted again.
        os.unlink(os.path.join(self.store, "kube-aws-secret.dex.pw"))
        with self.assertRaises(bundle.BundleError) as e:
            self.unpack(doc({"plan.json": "{}", "values/dex.json": '{"pw": "kube-aws-secret.dex.pw"}'},
                            [{"path": "values/dex.json", "format": "json"}]))
        self.assertIn("kube-aws-secret.dex.pw", str(e.exception))
        self.assertIn("values/dex.json", str(e.exception))
        self.assertFalse(os.path.exists(os.path.join(self.out, "values", "dex.json")))

    def test_one_missing_reference_among_known_ones_is_named_and_no_value_is(self):
        with self.assertRaises(bundle.BundleError) as e:
            self.unpack(doc({"values/dex.yaml": "a: kube-aws-secret.dex.pw\nb: kube-aws-secret.dex.other.\n"},
                            [{"path": "values/dex.yaml", "format": "yaml"}]))
        msg = str(e.exception)
        self.assertIn("kube-aws-secret.dex.other ", msg)
        self.assertNotIn('va"lue', msg)
        self.assertNotIn("kube-aws-secret.dex.pw", msg)

    def test_the_unpacked_directory_is_private(self):
        self.unpack(doc({"plan.json": "{}"}))
        self.assertEqual(os.stat(self.out).st_mode & 0o777, 0o700)

    def test_the_plan_is_read_without_unpacking_and_a_matching_copy_is_not_fetched_again(self):
        body = doc({"plan.json": '{"releases": []}'})
        sha = hashlib.sha256(body).hexdigest()
        aws = CopyAws({"s3://b/bundle.json": body})
        path = os.path.join(self.dir, "cache", sha + ".json")
        self.assertEqual(bundle.plan(bundle.read(bundle.fetch(aws, "s3://b/bundle.json", sha, path))),
                         {"releases": []})
        aws.objects.clear()  # a second fetch would fail
        self.assertEqual(bundle.fetch(aws, "s3://b/bundle.json", sha, path), path)
        with self.assertRaises(bundle.BundleError):
            bundle.fetch(CopyAws({"s3://b/bundle.json": b"other"}), "s3://b/bundle.json", "0" * 64,
                         os.path.join(self.dir, "cache", "x.json"))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "cache", "x.json")))


if __name__ == "__main__":
    unittest.main()
