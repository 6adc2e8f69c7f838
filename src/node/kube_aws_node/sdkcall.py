"""Some of the node program's AWS calls made in its own process, by the
botocore the node already has, instead of one aws CLI process per call.

The secrets step reads a parameter, copies the bundle from S3 and makes one
KMS Decrypt per secret; the aws CLI costs a Python start and a load of its
models each time (about half a second, several seconds under load: issue
37). Here the argument lists the node program uses for those calls
(`ssm get-parameter`, `s3 cp` of one object either way, `kms decrypt`) and
for its S3 objects (`s3api get-object`, `put-object` with or without a
condition, `delete-object`, `list-objects-v2`: the locks, the installer's
lease and record, the etcd backups and the status objects) and for the
CloudFormation signals (cfn.py: `describe-stacks`, `describe-stack-resource`
and `signal-resource`, three per addon wait condition) are answered by one
botocore session per process. The call sites stay the aws CLI's
argument lists (src/node/iam-calls.json lists them; the IAM grants are the
same operations), and awscall.Aws runs the CLI for everything else.

A conditional write or delete (`--if-none-match`, `--if-match`) is answered
here only when this botocore's S3 model has the parameter (PutObject's
IfNoneMatch came in 2024; an older botocore would refuse it as an unknown
parameter, which is not S3's answer): otherwise the CLI gets the call, as
before. `list-objects-v2` pages as the CLI does: every page, merged, unless
`--max-keys` is given (the CLI then turns its own paging off: a limit key
given by the user disables it).

Where botocore comes from: a standalone `botocore` package, or the one the
aws CLI carries (awscli 1.44+ and v2 vendor botocore and s3transfer as
`awscli.botocore` and alias them as top-level imports once `awscli` is
imported: awscli/__init__.py, TopLevelImportAliasFinder). Without either,
`load` returns None and every call stays the CLI's.

Invariant: `InProcess.answer(args)` returns (True, what the aws CLI would
print for `args`, parsed: blobs base64, dates ISO 8601, `--query` applied),
or (False, None) for an argument list it does not handle (the caller runs
the CLI); it raises AwsError carrying botocore's message, which is the
CLI's for the same answer ("An error occurred (Code) when calling the Op
operation: ..."). A download is written to a temporary file beside the
target and renamed, so a failed copy leaves no partial file.
"""
import base64
import datetime
import json
import os
import threading

from .awscall import AwsError, IMDS_ENV

# `aws s3 cp` options this module handles: value-taking and flags.
_CP_VALUES = {"--sse": "ServerSideEncryption", "--content-type": "ContentType"}
_CP_FLAGS = ("--only-show-errors",)
_CHUNK = 1 << 20
# `aws s3api` options this module handles, by call: the botocore parameter each names.
_OBJECT = {"--bucket": "Bucket", "--key": "Key"}
_PUT = dict(_OBJECT, **{"--body": "", "--content-type": "ContentType", "--server-side-encryption":
                         "ServerSideEncryption", "--if-none-match": "IfNoneMatch", "--if-match": "IfMatch"})
_DELETE = dict(_OBJECT, **{"--if-match": "IfMatch"})
_LIST = {"--bucket": "Bucket", "--prefix": "Prefix", "--max-keys": "MaxKeys"}
# `aws cloudformation` options this module handles, by call (cfn.py's).
_STACK = {"--stack-name": "StackName"}
_RESOURCE = dict(_STACK, **{"--logical-resource-id": "LogicalResourceId"})
_SIGNAL = dict(_RESOURCE, **{"--unique-id": "UniqueId", "--status": "Status"})


def load():
    """botocore's session module, or None when this python has none."""
    try:
        import botocore.session
        return botocore.session
    except ImportError:
        pass
    try:
        import awscli  # noqa: F401 - makes the CLI's vendored botocore importable as `botocore`
        import botocore.session
        return botocore.session
    except ImportError:
        return None


def jsonable(v):
    """A botocore answer as the CLI prints it in JSON."""
    if isinstance(v, dict):
        return dict((k, jsonable(x)) for k, x in v.items() if k != "ResponseMetadata")
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, datetime.datetime):
        return v.isoformat()
    return v


def options(args, values, flags):
    """({option: value}, [positional]) of an argument list, or None when it
    holds an option outside `values` and `flags`."""
    opts, pos = {}, []
    i = 0
    while i < len(args):
        a = args[i]
        if a in values:
            if i + 1 >= len(args):
                return None
            opts[a] = args[i + 1]
            i += 2
        elif a in flags:
            opts[a] = True
            i += 1
        elif a.startswith("--"):
            return None
        else:
            pos.append(a)
            i += 1
    return opts, pos


def s3_url(s):
    """(bucket, key) of s3://bucket/key, or None."""
    if not s.startswith("s3://"):
        return None
    bucket, _, key = s[len("s3://"):].partition("/")
    return (bucket, key) if bucket and key else None


class InProcess(object):
    # Keys per listing page (None: S3's own, 1,000); tests set it smaller.
    page_size = None

    def __init__(self, session_module, region, scrub=None):
        for k, v in IMDS_ENV.items():
            os.environ.setdefault(k, v)
        self.session = session_module.get_session()
        self.region = region
        self.scrub = scrub
        self.clients = {}
        self.lock = threading.Lock()
        import botocore  # imported by `load` already: its version, for the node's log
        self.version = getattr(botocore, "__version__", "?")

    def client(self, service):
        # A client is safe to share between threads once made; making one is
        # not (a Session is not thread safe: boto3's guide, "Multithreading or
        # multiprocessing with clients"; boto/boto3#1592, errors from
        # clients made at once), and the reconciler's releases call from
        # several threads at once: one at a time here.
        with self.lock:
            c = self.clients.get(service)
            if c is None:
                # The endpoint variables the CLI honours, passed on explicitly:
                # botocore reads them itself only from 1.31 on.
                endpoint = (os.environ.get("AWS_ENDPOINT_URL_" + service.upper())
                            or os.environ.get("AWS_ENDPOINT_URL") or None)
                c = self.session.create_client(service, region_name=self.region, endpoint_url=endpoint)
                self.clients[service] = c
            return c

    def answer(self, args):
        args = list(args)
        handler = {
            ("ssm", "get-parameter"): self.get_parameter,
            ("s3", "cp"): self.cp,
            ("kms", "decrypt"): self.decrypt,
            ("s3api", "get-object"): self.get_object,
            ("s3api", "put-object"): self.put_object,
            ("s3api", "delete-object"): self.delete_object,
            ("s3api", "list-objects-v2"): self.list_objects,
            ("cloudformation", "describe-stacks"): self.describe_stacks,
            ("cloudformation", "describe-stack-resource"): self.describe_stack_resource,
            ("cloudformation", "signal-resource"): self.signal_resource,
        }.get(tuple(args[:2]))
        if handler is None:
            return False, None
        rest = args[2:]
        query = None
        if "--query" in rest:
            i = rest.index("--query")
            if i + 1 >= len(rest):
                return False, None
            query = rest[i + 1]
            rest = rest[:i] + rest[i + 2:]
        try:
            handled, out = handler(rest)
        except AwsError:
            raise
        except OSError as e:
            raise AwsError(self.clean("%s: %s" % (e.__class__.__name__, e.strerror or e)))
        except Exception as e:  # noqa: BLE001 - botocore's errors, all of them answers
            raise self.error(e)
        if not handled:
            return False, None
        if query is not None and out is not None:
            import jmespath  # botocore's own dependency
            out = jmespath.search(query, out)
        return True, out

    def clean(self, text):
        text = " ".join(str(text).split())
        return (self.scrub(text) if self.scrub is not None else text)[:2000]

    def error(self, e):
        code = ""
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
        return AwsError(self.clean(str(e) or e.__class__.__name__), code)

    # --- the calls ------------------------------------------------------
    def get_parameter(self, rest):
        parsed = options(rest, {"--name": "Name"}, ("--with-decryption",))
        if parsed is None or parsed[1] or "--name" not in parsed[0]:
            return False, None
        opts = parsed[0]
        out = self.client("ssm").get_parameter(Name=opts["--name"],
                                               WithDecryption=bool(opts.get("--with-decryption")))
        return True, jsonable(out)

    def decrypt(self, rest):
        parsed = options(rest, {"--ciphertext-blob": "", "--encryption-context": ""}, ())
        if parsed is None or parsed[1]:
            return False, None
        opts = parsed[0]
        blob = opts.get("--ciphertext-blob", "")
        if not blob.startswith("fileb://"):
            return False, None
        with open(blob[len("fileb://"):], "rb") as f:
            kwargs = {"CiphertextBlob": f.read()}
        if "--encryption-context" in opts:
            try:
                kwargs["EncryptionContext"] = json.loads(opts["--encryption-context"])
            except ValueError:
                return False, None
        return True, jsonable(self.client("kms").decrypt(**kwargs))

    def cp(self, rest):
        parsed = options(rest, _CP_VALUES, _CP_FLAGS)
        if parsed is None or len(parsed[1]) != 2:
            return False, None
        opts, (src, dst) = parsed
        down, up = s3_url(src), s3_url(dst)
        extra = dict((_CP_VALUES[k], v) for k, v in opts.items() if k in _CP_VALUES)
        if down and not up and dst != "-":
            if extra:
                return False, None
            self.download(down, dst)
            return True, None
        if up and not down and src != "-":
            with open(src, "rb") as f:
                self.client("s3").put_object(Bucket=up[0], Key=up[1], Body=f, **extra)
            return True, None
        return False, None

    def download(self, url, dst):
        if os.path.isdir(dst) or dst.endswith("/"):
            dst = os.path.join(dst, os.path.basename(url[1]))
        self.write_body(self.client("s3").get_object(Bucket=url[0], Key=url[1])["Body"], dst)

    # --- S3 objects (s3api) ------------------------------------------------
    def has_params(self, operation, names):
        """True when this botocore's S3 model takes every one of `names`."""
        members = self.client("s3").meta.service_model.operation_model(operation).input_shape.members
        return all(n in members for n in names)

    def get_object(self, rest):
        parsed = options(rest, _OBJECT, ())
        if parsed is None or len(parsed[1]) != 1 or not {"--bucket", "--key"} <= set(parsed[0]):
            return False, None
        opts, (dst,) = parsed
        out = self.client("s3").get_object(Bucket=opts["--bucket"], Key=opts["--key"])
        self.write_body(out.pop("Body"), dst)
        return True, jsonable(out)

    def put_object(self, rest):
        parsed = options(rest, _PUT, ())
        if parsed is None or parsed[1] or not {"--bucket", "--key"} <= set(parsed[0]):
            return False, None
        opts = parsed[0]
        kwargs = dict((_PUT[k], v) for k, v in opts.items() if k != "--body")
        conditions = [_PUT[k] for k in ("--if-none-match", "--if-match") if k in opts]
        if conditions and not self.has_params("PutObject", conditions):
            return False, None
        if "--body" in opts:
            with open(opts["--body"], "rb") as f:
                out = self.client("s3").put_object(Body=f, **kwargs)
        else:
            out = self.client("s3").put_object(**kwargs)
        return True, jsonable(out)

    def delete_object(self, rest):
        parsed = options(rest, _DELETE, ())
        if parsed is None or parsed[1] or not {"--bucket", "--key"} <= set(parsed[0]):
            return False, None
        kwargs = dict((_DELETE[k], v) for k, v in parsed[0].items())
        if "--if-match" in parsed[0] and not self.has_params("DeleteObject", ["IfMatch"]):
            return False, None
        out = jsonable(self.client("s3").delete_object(**kwargs))
        return True, out or None

    def list_objects(self, rest):
        parsed = options(rest, _LIST, ())
        if parsed is None or parsed[1] or "--bucket" not in parsed[0]:
            return False, None
        opts = parsed[0]
        kwargs = dict((_LIST[k], v) for k, v in opts.items() if k != "--max-keys")
        s3 = self.client("s3")
        if "--max-keys" in opts:
            try:
                kwargs["MaxKeys"] = int(opts["--max-keys"])
            except ValueError:
                return False, None
            out = jsonable(s3.list_objects_v2(**kwargs))
            out.pop("ContinuationToken", None)
            return True, out
        merged = {}
        paging = {"PageSize": self.page_size} if self.page_size else {}
        for page in s3.get_paginator("list_objects_v2").paginate(PaginationConfig=paging, **kwargs):
            page = jsonable(page)
            for k in ("Contents", "CommonPrefixes"):
                if page.get(k):
                    merged.setdefault(k, []).extend(page[k])
            for k in ("Name", "Prefix", "Delimiter"):
                if k in page:
                    merged[k] = page[k]
        return True, merged

    # --- CloudFormation (cfn.py) ----------------------------------------------
    def stack_call(self, rest, names, required, operation):
        """One CloudFormation call whose options are all in `names` and
        include every one of `required`; (False, None) otherwise."""
        parsed = options(rest, names, ())
        if parsed is None or parsed[1] or not set(required) <= set(parsed[0]):
            return False, None
        kwargs = dict((names[k], v) for k, v in parsed[0].items())
        return True, jsonable(getattr(self.client("cloudformation"), operation)(**kwargs))

    def describe_stacks(self, rest):
        # One stack by name: a single page (the CLI pages only a listing of all stacks).
        return self.stack_call(rest, _STACK, _STACK, "describe_stacks")

    def describe_stack_resource(self, rest):
        return self.stack_call(rest, _RESOURCE, _RESOURCE, "describe_stack_resource")

    def signal_resource(self, rest):
        handled, out = self.stack_call(rest, _SIGNAL, _SIGNAL, "signal_resource")
        return handled, out or None  # the CLI prints nothing for an empty answer

    def write_body(self, body, dst):
        """Writes a streamed body to `dst` by a temporary file beside it, named
        for this process and thread (the reconciler's releases download at once)."""
        tmp = "%s.kube-aws-%d-%d.tmp" % (dst, os.getpid(), threading.get_ident())
        try:
            with open(tmp, "wb") as f:
                for chunk in iter(lambda: body.read(_CHUNK), b""):
                    f.write(chunk)
            os.replace(tmp, dst)
        finally:
            body.close()
            if os.path.exists(tmp):
                os.unlink(tmp)
