"""secrets: the shared reference rule (tests/fixtures/secret-refs.json), fills and blanking."""
import json
import os
import tempfile
import unittest

from helpers import REPO
from kube_aws_node import secrets

with open(os.path.join(REPO, "tests", "fixtures", "secret-refs.json")) as f:
    VECTORS = json.load(f)


class SharedVectors(unittest.TestCase):
    def test_found_as_the_renderer_finds_them(self):
        self.assertGreaterEqual(len(VECTORS["vectors"]), 10)
        for v in VECTORS["vectors"]:
            self.assertEqual(secrets.find_references(v["text"], VECTORS["known"]), set(v["found"]), v["name"])

    def test_filled_as_a_node_fills_text(self):
        pattern = secrets.reference_pattern(VECTORS["known"])
        for v in VECTORS["vectors"]:
            self.assertEqual(secrets.fill_text(v["text"], "text", pattern, VECTORS["values"], "t"), v["filled"],
                             v["name"])


class Fill(unittest.TestCase):
    HOSTILE = 'p@ss: "w\'o#rd" {x} $(id) \\ end'

    def test_json_stays_well_formed(self):
        plain = {"kube-aws-secret.a.b": self.HOSTILE}
        out = secrets.fill_text('{"pw": "kube-aws-secret.a.b", "n": 1}', "json",
                                secrets.reference_pattern(plain), plain, "f.json")
        self.assertEqual(json.loads(out), {"pw": self.HOSTILE, "n": 1})

    def test_a_file_keeps_its_mode_and_is_left_alone_without_references(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "env")
            with open(p, "w") as f:
                f.write("PW=kube-aws-secret.a.b\n")
            os.chmod(p, 0o640)
            plain = {"kube-aws-secret.a.b": "v"}
            secrets.fill_files(d, [{"path": "env", "format": "text"}], plain)
            with open(p) as f:
                self.assertEqual(f.read(), "PW=v\n")
            self.assertEqual(os.stat(p).st_mode & 0o777, 0o640)
            before = os.stat(p).st_mtime_ns
            secrets.fill_files(d, [{"path": "env", "format": "text"}], plain)
            self.assertEqual(os.stat(p).st_mtime_ns, before)

    def test_bad_json_is_an_error_naming_the_file(self):
        plain = {"kube-aws-secret.a.b": "v"}
        with self.assertRaises(Exception) as e:
            secrets.fill_text("{kube-aws-secret.a.b", "json", secrets.reference_pattern(plain), plain, "x.json")
        self.assertIn("x.json", str(e.exception))
        self.assertNotIn("v", str(e.exception).replace("x.json", "").replace("JSON", "").replace("Value", ""))


class Blank(unittest.TestCase):
    def test_every_stored_value_is_named_instead(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "kubeadm"))
            with open(os.path.join(d, "kubeadm", "bootstrap-token"), "w") as f:
                f.write("abcdef.0123456789abcdef\n")
            with open(os.path.join(d, "kube-aws-secret.a.b"), "w") as f:
                f.write("abcdef")
            with open(os.path.join(d, ".bundle.json"), "w") as f:
                f.write("hidden")
            out = secrets.blank("join --token abcdef.0123456789abcdef; pw abcdef; hidden", d)
            self.assertEqual(out, "join --token <secret kubeadm/bootstrap-token>; pw <secret kube-aws-secret.a.b>; "
                                  "hidden")

    def test_pki_paths_never_leave_the_directory(self):
        for bad in ("pki/../x", "pki/", "ca.key", "pki//a"):
            with self.assertRaises(secrets.SecretsError):
                secrets.pki_path("/etc/kubernetes/pki", bad)


if __name__ == "__main__":
    unittest.main()
