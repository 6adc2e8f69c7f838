"""Some of the node program's AWS calls made in its own process, by the
botocore the node already has, instead of one aws CLI process per call.

The secrets step reads a parameter, copies the bundle from S3 and makes one
KMS Decrypt per secret; the aws CLI costs a Python start and a load of its
models each time (about half a second, several seconds under load: issue
37). Here the three argument lists the node program uses for those calls
(`ssm get-parameter`, `s3 cp` of one object either way, `kms decrypt`) are
answered by one botocore session per process. The call sites stay the aws
CLI's argument lists (src/node/iam-calls.json lists them; the IAM grants are
the same operations), and awscall.Aws runs the CLI for everything else.

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

from .awscall import AwsError, IMDS_ENV

# `aws s3 cp` options this module handles: value-taking and flags.
_CP_VALUES = {"--sse": "ServerSideEncryption", "--content-type": "ContentType"}
_CP_FLAGS = ("--only-show-errors",)
_CHUNK = 1 << 20


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
    def __init__(self, session_module, region, scrub=None):
        for k, v in IMDS_ENV.items():
            os.environ.setdefault(k, v)
        self.session = session_module.get_session()
        self.region = region
        self.scrub = scrub
        self.clients = {}
        import botocore  # imported by `load` already: its version, for the node's log
        self.version = getattr(botocore, "__version__", "?")

    def client(self, service):
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
        body = self.client("s3").get_object(Bucket=url[0], Key=url[1])["Body"]
        tmp = "%s.kube-aws-%d.tmp" % (dst, os.getpid())
        try:
            with open(tmp, "wb") as f:
                for chunk in iter(lambda: body.read(_CHUNK), b""):
                    f.write(chunk)
            os.replace(tmp, dst)
        finally:
            body.close()
            if os.path.exists(tmp):
                os.unlink(tmp)
