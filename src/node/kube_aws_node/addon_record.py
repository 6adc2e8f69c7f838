"""The addon reconciler's installed record (S3, `installedURI` of
/etc/kube-aws/addons/reconciler.json): which release is installed at which
wait condition, for which plan; what a run does with a plan given the record
(`outcome`); the record after a restore, and matched to the releases helm's
storage holds; and `RecordStore`, the reconciler's reading and conditional
writing of it.

Invariant: the functions are pure; the record is written only through
`RecordStore.record`, each write conditional on the ETag of the last one
read or written (lease.py says who may write).
"""
import collections
import datetime
import os

from . import jsonio, lease
from .awscall import AwsError, listed_object


DONE, LATER, INSTALL = "done", "later", "install"


class Fatal(Exception):
    """Nothing can be installed: every release is reported failed with this message."""


class Stop(Exception):
    """The run cannot go on (the record cannot be read or written, the lease
    was lost, the secrets or the bundle cannot be had): nothing more is done."""


# The installed record as read: its document and its ETag (None: there is none).
Record = collections.namedtuple("Record", "doc etag")


def recorded(doc):
    """{name: entry} of the record's releases."""
    return dict((r["name"], r) for r in doc.get("releases", []) if isinstance(r, dict) and r.get("name"))


def current(entry, r):
    """Whether a record entry is release `r` as the plan has it: at its wait
    condition, with the same secrets (the pointer's hash of the ciphertexts
    its values reference, src/render/cfn/release_secrets.rs): a rotated
    secret upgrades its release, and only that one."""
    return (entry or {}).get("waitCondition") == r["waitCondition"] and \
        (entry or {}).get("secrets", "") == r.get("secrets", "")


def after_restore(doc, snapshot):
    """The installed record once etcd was restored from `snapshot`: the
    releases in etcd are now the snapshot's (at its versions, or missing), so
    no entry is current any more. Every entry keeps its name and namespace
    (a release the plan has dropped since is still uninstalled) but loses its
    wait condition and secrets hash, and the plan and secrets versions are
    forgotten: the next run brings every release to the current plan with
    `helm upgrade --install`, which upgrades what the snapshot holds and
    installs what it lacks. Pure."""
    out = dict(doc)
    out["plan"] = None
    out["secretsVersions"] = []
    out.pop("retryAfter", None)
    out["restoredFrom"] = snapshot
    out["releases"] = [dict(r, waitCondition="", secrets="") for r in doc.get("releases", [])
                       if isinstance(r, dict) and r.get("name")]
    return out


def match_present(rec, present, major):
    """After a restore: the record's entries whose release etcd does not hold
    struck (`rec` is {name: entry}), so the record names only releases that
    are present. The plan installs a struck one again if it still has it; a
    dropped one has nothing to uninstall. Returns the struck names; pure but
    for `rec`."""
    def held(entry):
        return (entry["name"], entry.get("namespace") if major == 3 else None) in present
    struck = sorted(n for n, e in rec.items() if not held(e))
    for n in struck:
        del rec[n]
    return struck


def attach_secrets(releases, hashes):
    """Gives each release its secrets hash from the plan pointer (`secrets`: release → hash)."""
    hashes = hashes if isinstance(hashes, dict) else {}
    for r in releases:
        h = hashes.get(r["name"])
        if isinstance(h, str) and h:
            r["secrets"] = h


def outcome(doc, plan_sha, secrets_version, releases, now):
    """DONE, LATER (failed releases wait for retryAfter) or INSTALL: what this
    tick does with the plan, from the record alone (a pure function)."""
    if doc.get("plan") != plan_sha:
        return INSTALL
    rec = recorded(doc)
    names = set(r["name"] for r in releases)
    pending = [r["name"] for r in releases if not current(rec.get(r["name"]), r)]
    dropped = [n for n in rec if n not in names]
    if not pending and not dropped and secrets_version in doc.get("secretsVersions", []):
        return DONE
    retry_after = doc.get("retryAfter")
    if isinstance(retry_after, (int, float)) and now < retry_after:
        return LATER
    return INSTALL


def manifest_objects(texts):
    """[apiVersion, kind, namespace, name] of every object in the plugin
    manifests' texts (YAML streams), sorted, without duplicates."""
    import yaml  # PyYAML: on AL2023 with cloud-init (see secrets.py)
    out = set()
    for text in texts:
        for d in yaml.safe_load_all(text):
            items = d.get("items") if isinstance(d, dict) and str(d.get("kind", "")).endswith("List") else [d]
            for o in items or []:
                meta = o.get("metadata") if isinstance(o, dict) else None
                if isinstance(meta, dict) and o.get("kind") and meta.get("name"):
                    out.add((str(o.get("apiVersion", "")), str(o["kind"]), str(meta.get("namespace") or ""),
                             str(meta["name"])))
    return [list(o) for o in sorted(out)]


def object_identity(o):
    """An object's identity across API versions: (group, kind, namespace,
    name). A manifest that moves a kind to a new version keeps its object."""
    api, kind, ns, name = o
    return (api.rsplit("/", 1)[0] if "/" in api else "", kind, ns, name)


def gone_objects(old, new):
    """The objects kube-aws applied before (`old`, the record's) that no
    manifest of this plan holds any more (a disabled plugin's, a removed
    file's): a pure function."""
    keep = set(object_identity(o) for o in new)
    return [o for o in old if object_identity(o) not in keep]


def due_signals(doc, releases):
    """[(name, wait condition)] of the plan's releases that the record shows
    at the plan's wait condition and not yet known to be signalled."""
    rec = recorded(doc)
    return [(r["name"], r["waitCondition"]) for r in releases
            if rec.get(r["name"], {}).get("waitCondition") == r["waitCondition"]
            and not rec[r["name"]].get("signalled")]


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class RecordStore(object):
    """The record's reading and writing, for the Reconciler (reconcile.py),
    whose state (`installed_*`, `rec`, `record_etag`, `lease`...) it uses."""

    def load_installed(self):
        """The installed record. Only a record that is not there is taken for
        "nothing installed" (awscall.listed_object tells "missing" from
        "denied"); any other answer raises Stop."""
        where = self.installed_uri
        try:
            listed = listed_object(self.aws, self.installed_bucket, self.installed_key)
        except AwsError as e:
            raise Stop("cannot read the installed record %s: %s" % (where, e))
        if listed is None:
            return Record({"releases": []}, None)
        path = os.path.join(self.work, "installed-read.json")
        try:
            meta = self.aws(["s3api", "get-object", "--bucket", self.installed_bucket, "--key", self.installed_key,
                             path])
            doc = jsonio.read(path)
        except (AwsError, jsonio.JsonError) as e:
            raise Stop("cannot read the installed record %s: %s" % (where, e))
        etag = (meta or {}).get("ETag")
        if not isinstance(doc, dict) or not isinstance(doc.get("releases", []), list) or not etag:
            raise Stop("the installed record %s is not one this program wrote" % where)
        return Record(doc, etag)

    def record(self, final=False):
        """Writes the record: this plan, the releases installed now, on the
        condition that it is still the one this run read or wrote last."""
        with self.record_lock:
            if self.lease is not None and self.lease.lost.is_set():
                raise Stop("the installer's lease was taken over: the new holder goes on from the record")
            doc = {"plan": self.plan_sha, "secretsVersions": self.record_versions,
                   "releases": sorted(self.rec.values(), key=lambda r: r["name"]),
                   "manifestObjects": self.manifest_record, "holder": self.holder, "updatedAt": now_iso()}
            if self.retry_after is not None:
                doc["retryAfter"] = self.retry_after
            path = os.path.join(self.work, "installed.json")
            jsonio.write(path, doc)
            cond = ["--if-match", self.record_etag] if self.record_etag else ["--if-none-match", "*"]
            try:
                out = self.aws(["s3api", "put-object", "--bucket", self.installed_bucket, "--key", self.installed_key,
                                "--body", path, "--content-type", "application/json"] + cond)
            except AwsError as e:
                if lease.lost(e):
                    raise Stop("the installed record %s was written by another controller: %s"
                               % (self.installed_uri, e))
                raise Stop("cannot record the installed releases in %s: %s" % (self.installed_uri, e))
            etag = (out or {}).get("ETag")
            if not etag:
                raise Stop("S3 gave no ETag for the installed record %s" % self.installed_uri)
            self.record_etag = etag
