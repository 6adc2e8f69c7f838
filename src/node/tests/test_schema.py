"""The files the render writes for the node program, against their JSON
Schemas (src/node/schema/*.schema.json, generated from the Rust types in
src/render/node_files.rs; tests/it/docs.rs keeps them current).

Every render golden's node-side files are validated (tests/it/snapshots):
node.json, reconciler.json and etcd.json in the cloud-configs, runtime.json
in the user-data stubs, and the addon plan. Each schema closes its objects
(no key its type lacks), so a key the render writes without its Rust type,
or a type that changed without its golden, fails here.

Needs `jsonschema` and `yaml` (PyYAML), which the test tools' environment
has (scripts/install-tools.sh; tests/it/node_program.rs runs these tests
with it and checks that this test ran). The node program itself stays
standard-library only.
"""
import glob
import json
import os
import unittest

import helpers

try:
    import jsonschema
    import yaml
except ImportError as e:  # pragma: no cover - outside the tools venv
    jsonschema = None
    MISSING = str(e)

SCHEMAS = os.path.join(helpers.HERE, "..", "schema")
SNAPSHOTS = os.path.join(helpers.REPO, "tests", "it", "snapshots")
# Node path -> schema file.
NODE_FILES = {
    "/etc/kube-aws/node.json": "node.schema.json",
    "/etc/kube-aws/addons/reconciler.json": "reconciler.schema.json",
    "/etc/kube-aws/etcd.json": "etcd.schema.json",
    "/etc/kube-aws/runtime.json": "runtime.schema.json",
}


def snapshot_body(path):
    """An insta snapshot's content: what follows its `---` header."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    parts = text.split("---\n", 2)
    return parts[2] if len(parts) == 3 and parts[0] == "" else text


def schema(name):
    with open(os.path.join(SCHEMAS, name), encoding="utf-8") as f:
        return json.load(f)


def node_files(cloud_config):
    """(path, parsed JSON) of each write_files entry NODE_FILES names."""
    doc = yaml.safe_load(cloud_config) or {}
    for entry in doc.get("write_files") or []:
        if entry.get("path") in NODE_FILES:
            yield entry["path"], json.loads(entry["content"])


@unittest.skipIf(jsonschema is None, "jsonschema or PyYAML missing (run it in the tools venv: make tools)")
class Goldens(unittest.TestCase):
    def check(self, value, schema_name, where):
        errors = sorted(jsonschema.Draft7Validator(schema(schema_name)).iter_errors(value), key=str)
        self.assertEqual([], ["%s: %s at %s" % (where, e.message, "/".join(map(str, e.path))) for e in errors])

    def test_every_golden_node_side_file_matches_its_schema(self):
        seen = {}
        for snap in sorted(glob.glob(os.path.join(SNAPSHOTS, "it__render__*__userdata__*.snap"))):
            for path, value in node_files(snapshot_body(snap)):
                self.check(value, NODE_FILES[path], "%s %s" % (os.path.basename(snap), path))
                seen[path] = seen.get(path, 0) + 1
        for snap in sorted(glob.glob(os.path.join(SNAPSHOTS, "it__render__*__addons__plan.json.snap"))):
            self.check(json.loads(snapshot_body(snap)), "plan.schema.json", os.path.basename(snap))
            seen["plan"] = seen.get("plan", 0) + 1
        # Each kind was found: a moved golden must not make this test vacuous.
        self.assertEqual(sorted(seen), sorted(list(NODE_FILES) + ["plan"]), seen)
        self.assertGreaterEqual(seen["/etc/kube-aws/node.json"], 5, seen)

    def test_a_key_the_types_lack_or_a_wrong_type_is_refused(self):
        node = {"role": "controller", "pool": None, "cluster": "c", "kubernetesMinor": "1.35",
                "kubernetesVersion": "1.35.8", "kubernetesPackages": [], "enableUnits": [],
                "bootstrapToken": {"parameter": "/p", "ttlSeconds": 1},
                "secrets": {"names": [], "files": []}}
        self.check(node, "node.schema.json", "a minimal node.json")
        v = jsonschema.Draft7Validator(schema("node.schema.json"))
        self.assertTrue(list(v.iter_errors(dict(node, extra=1))))
        self.assertTrue(list(v.iter_errors(dict(node, bootstrapToken={"parameter": "/p", "ttlSeconds": "1"}))))
        self.assertTrue(list(v.iter_errors(dict(node, secrets={"names": [], "files": [{"path": "/f",
                                                                                        "format": "toml"}]}))))


if __name__ == "__main__":
    unittest.main()
