"""Encrypts secret bundle entries with moto's KMS in one process (boto3, the
library under the aws CLI), for fixtures that need many: one `aws kms
encrypt` per entry costs a CLI start each (about 1 s on the 2-core CI
machine), and tests/it/node_bootstrap.rs encrypts a dozen per cluster.

stdin: {"region", "keyId", "cluster", "entries": [{"name", "plaintext" (base64)}]};
stdout: the base64 ciphertexts, one a line, in the entries' order. Each is
bound to {kube-aws:cluster, kube-aws:secret}, as `aws kms encrypt
--encryption-context` binds it in MotoEnv::encrypt_entry
(tests/it/common/mod.rs). The endpoint and the keys come from the
environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...), as for the aws CLI.
"""
import base64
import json
import sys

import boto3


def main():
    req = json.load(sys.stdin)
    kms = boto3.client("kms", region_name=req["region"])
    for e in req["entries"]:
        r = kms.encrypt(
            KeyId=req["keyId"],
            Plaintext=base64.b64decode(e["plaintext"]),
            EncryptionContext={"kube-aws:cluster": req["cluster"], "kube-aws:secret": e["name"]},
        )
        print(base64.b64encode(r["CiphertextBlob"]).decode("ascii"))


if __name__ == "__main__":
    main()
