#!/usr/bin/env python3
"""Writes an OCI image archive (an OCI image layout in a tar) without a registry.

    oci_image.py OUT.tar NAME:TAG [--entrypoint PATH] [--file SRC=DEST[:MODE]]...

One uncompressed layer holds the given files (and the directories above them,
plus /tmp); the config names linux/amd64, PATH, and the entrypoint if given.
The index carries both annotations containerd's `ctr images import` reads
(io.containerd.image.name, the full reference, and
org.opencontainers.image.ref.name, the tag), so the image is imported under
exactly NAME:TAG. Everything is deterministic: mtime 0, uid/gid 0, sorted.
Used by scripts/install-nodebed.sh; see docs/testing.md, "The real-node bed".
"""
import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def blob(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar(files):
    buf = io.BytesIO()
    dirs = {"tmp"}
    for _, dest, _ in files:
        parts = dest.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for d in sorted(dirs):
            ti = tarfile.TarInfo(d)
            ti.type = tarfile.DIRTYPE
            ti.mode = 0o1777 if d == "tmp" else 0o755
            t.addfile(ti)
        for src, dest, mode in sorted(files, key=lambda f: f[1]):
            with open(src, "rb") as f:
                data = f.read()
            ti = tarfile.TarInfo(dest.strip("/"))
            ti.size = len(data)
            ti.mode = mode
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("ref")
    p.add_argument("--entrypoint")
    p.add_argument("--file", action="append", default=[])
    a = p.parse_args()
    if ":" not in a.ref.rsplit("/", 1)[-1]:
        sys.exit(f"oci_image.py: {a.ref} has no tag")
    tag = a.ref.rsplit(":", 1)[1]
    files = []
    for spec in a.file:
        src, dest = spec.split("=", 1)
        mode = 0o755
        if ":" in dest:
            dest, m = dest.rsplit(":", 1)
            mode = int(m, 8)
        if not os.path.isfile(src):
            sys.exit(f"oci_image.py: {src} (for {a.ref}) is missing")
        files.append((src, dest, mode))
    layer = layer_tar(files)
    cfg = {"Env": ["PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"]}
    if a.entrypoint:
        cfg["Entrypoint"] = [a.entrypoint]
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": [blob(layer)]},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "scripts/nodebed/oci_image.py"}],
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blob(config), "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": blob(layer), "size": len(layer)}],
        },
        sort_keys=True,
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": blob(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {"io.containerd.image.name": a.ref, "org.opencontainers.image.ref.name": tag},
                }
            ],
        },
        sort_keys=True,
    ).encode()
    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as t:
        def add(name, data):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            t.addfile(ti, io.BytesIO(data))

        for d in ("blobs", "blobs/sha256"):
            ti = tarfile.TarInfo(d)
            ti.type = tarfile.DIRTYPE
            ti.mode = 0o755
            t.addfile(ti)
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", index)
        for data in (config, layer, manifest):
            add("blobs/sha256/" + blob(data)[7:], data)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
