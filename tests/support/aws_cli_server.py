"""The aws CLI (awscli v1, the tools venv's), kept loaded for a test
process's many calls (tests/it/common/aws_cli.rs).

Each `aws` process imports awscli and botocore and loads its service's
model again: 0.2 to 0.7 s of CPU per call, 650 s of a `make test` run's CPU
for about 2,600 calls (docs/testing.md, "Where make test's CPU goes"). This
process imports them once and runs each call through awscli's own driver
(`awscli.clidriver.create_clidriver().main(args)`, as `aws` does), with a
fresh driver and session per call, so each call reads its environment
(credentials, endpoint, region) as a new `aws` process would; only the
parsed service models are shared (one botocore loader, whose files do not
change while the tests run).

Protocol: one JSON request per line on stdin, `{"args": [...], "env":
{...}}`; one JSON answer per line on stdout, `{"rc": N, "stdout": "<base64>",
"stderr": "<base64>"}`. The environment replaces this process's for the
call. End of input ends the process.

Not the same as a new process: nothing read from stdin (the Rust side runs
a real `aws` for a call that reads it), and module-level state of awscli or
botocore that a call changes would carry over to the next (none is known:
awscli's own functional tests run many commands on one driver).
"""
import base64
import io
import json
import os
import sys

from awscli.clidriver import create_clidriver
from botocore.loaders import create_loader

LOADER = None
# Set by awscli's import (awscli/__init__.py): where its own data (cli.json,
# the customizations' models) is; a new `aws` process sets it the same way.
AWS_DATA_PATH = os.environ.get("AWS_DATA_PATH")


def run(args, env):
    global LOADER
    os.environ.clear()
    if AWS_DATA_PATH is not None:
        os.environ["AWS_DATA_PATH"] = AWS_DATA_PATH
    os.environ.update(env)
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        driver = create_clidriver()
        if LOADER is None:
            LOADER = driver.session.get_component("data_loader")
        else:
            driver.session.register_component("data_loader", LOADER)
        try:
            rc = driver.main(args)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except Exception as e:  # what `aws` would print before its traceback
            err.write("aws_cli_server: %r\n" % (e,))
            rc = 255
    finally:
        sys.stdout, sys.stderr = saved
    out.flush()
    err.flush()
    return rc, out.buffer.getvalue(), err.buffer.getvalue()


def main():
    answers = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        rc, out, err = run(req["args"], req["env"])
        answers.write(
            json.dumps(
                {
                    "rc": rc,
                    "stdout": base64.b64encode(out).decode(),
                    "stderr": base64.b64encode(err).decode(),
                }
            )
            + "\n"
        )
        answers.flush()


if __name__ == "__main__":
    main()
