"""A test fixture's setup calls to moto in one process (boto3, the library
under the aws CLI): each `aws` command costs a CLI start (about 1 s of CPU
on the 2-core CI machine, several under load), and the moto tests repeat
the same setup (a bucket, a KMS key; tests/it/node_bootstrap.rs encrypts a
bundle's entries). Used by MotoEnv::setup (tests/it/common/mod.rs).

stdin, every field optional:
  {"region": "us-west-2",
   "buckets": ["name", ...],            as `aws s3 mb s3://name`
   "createKey": true,                   as `aws kms create-key`
   "encrypt": {"keyId": ARN (default: the key just created), "cluster": NAME,
               "entries": [{"name": NAME, "plaintext": BASE64}, ...]}}
stdout: {"keyArn": ARN or null, "ciphertexts": [BASE64, ...]}; each
ciphertext bound to {kube-aws:cluster, kube-aws:secret}, as `aws kms encrypt
--encryption-context` binds it in MotoEnv::encrypt_entry. The endpoint and
the keys come from the environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_DEFAULT_REGION), as for the aws CLI.
"""
import base64
import json
import os
import sys

import boto3


def main():
    req = json.load(sys.stdin)
    region = req.get("region") or os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    out = {"keyArn": None, "ciphertexts": []}
    if req.get("buckets"):
        s3 = boto3.client("s3", region_name=region)
        for b in req["buckets"]:
            # As `aws s3 mb`: a location constraint outside us-east-1.
            if region == "us-east-1":
                s3.create_bucket(Bucket=b)
            else:
                s3.create_bucket(Bucket=b, CreateBucketConfiguration={"LocationConstraint": region})
    kms = boto3.client("kms", region_name=region)
    if req.get("createKey"):
        out["keyArn"] = kms.create_key()["KeyMetadata"]["Arn"]
    enc = req.get("encrypt")
    if enc:
        key = enc.get("keyId") or out["keyArn"]
        for e in enc["entries"]:
            r = kms.encrypt(
                KeyId=key,
                Plaintext=base64.b64decode(e["plaintext"]),
                EncryptionContext={"kube-aws:cluster": enc["cluster"], "kube-aws:secret": e["name"]},
            )
            out["ciphertexts"].append(base64.b64encode(r["CiphertextBlob"]).decode("ascii"))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
