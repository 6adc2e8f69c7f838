"""The aws CLI (awscli v1, the tools venv's), loaded once for a test
process's many calls (tests/it/common/aws_cli.rs).

Each `aws` process imports awscli and botocore and loads its service's
model again: 0.3 to 0.7 s of CPU per call, 1,200 s of a `make test` run's
CPU for about 3,500 calls (docs/testing.md, "Where make test's CPU goes").
This process imports them once and parses the models the tests call, then
forks a child per call (a zygote): the child runs the call through awscli's
own driver (`awscli.clidriver.create_clidriver().main(args)`, as `aws`
does) with the call's environment as its whole environment, answers and
exits. So calls run side by side, and nothing one call changes reaches
another; only what was loaded before the fork is shared.

    python3 aws_cli_server.py DIR

listens on DIR/socket, writes the client DIR/bin/aws (a drop-in `aws` for
PATH: it sends its arguments and environment and prints the answer), prints
`ready` and serves until its stdin closes, then removes DIR.

Protocol, one connection per call: a JSON line `{"args": [...], "env":
{...}}`; the answer, a JSON line `{"rc": N, "stdout": "<base64>", "stderr":
"<base64>"}`.

Not the same as an `aws` process: a call that reads stdin (`-` among its
arguments) is run by the client as a real `aws` process instead, and the
process name in `ps` is python's.
"""
import base64
import json
import os
import shutil
import signal
import socket
import sys
import threading

from awscli.clidriver import create_clidriver

# Set by awscli's import (awscli/__init__.py): where its own data (cli.json,
# the customizations' models) is; a new `aws` process sets it the same way.
AWS_DATA_PATH = os.environ.get("AWS_DATA_PATH")
# The services the tests call: their models parsed before any fork.
WARM = ("s3", "s3api", "ec2", "autoscaling", "iam", "sts", "kms", "ssm", "cloudformation", "route53", "sqs")

CLIENT = r'''#!%(python)s -S
# The aws CLI through tests/support/aws_cli_server.py (written by it).
import base64, json, os, socket, sys
args = sys.argv[1:]
if "-" in args:
    os.execv(%(real)r, [%(real)r] + args)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(%(socket)r)
s.sendall((json.dumps({"args": args, "env": dict(os.environ)}) + "\n").encode())
f = s.makefile("rb")
a = json.loads(f.readline())
sys.stdout.buffer.write(base64.b64decode(a["stdout"]))
sys.stderr.buffer.write(base64.b64decode(a["stderr"]))
sys.stdout.flush()
sys.stderr.flush()
sys.exit(a["rc"])
'''


def warm():
    """One driver built and the tests' services' models loaded; returns the
    loader every call's session shares."""
    driver = create_clidriver()
    loader = driver.session.get_component("data_loader")
    for name in WARM:
        try:
            driver.session.get_service_model("s3" if name == "s3api" else name)
        except Exception:
            pass
    driver._get_command_table()
    return loader


def run(args, env, loader):
    import io

    os.environ.clear()
    if AWS_DATA_PATH is not None:
        os.environ["AWS_DATA_PATH"] = AWS_DATA_PATH
    os.environ.update(env)
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    sys.stdout, sys.stderr = out, err
    try:
        driver = create_clidriver()
        driver.session.register_component("data_loader", loader)
        rc = driver.main(args)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except Exception as e:  # what `aws` would print before its traceback
        err.write("aws_cli_server: %r\n" % (e,))
        rc = 255
    out.flush()
    err.flush()
    return rc, out.buffer.getvalue(), err.buffer.getvalue()


def handle(conn, loader):
    # No input, as `aws` run with its stdin closed (the client runs a real
    # `aws` for a call that reads stdin).
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    f = conn.makefile("rb")
    req = json.loads(f.readline())
    rc, out, err = run(req["args"], req["env"], loader)
    answer = {"rc": rc, "stdout": base64.b64encode(out).decode(), "stderr": base64.b64encode(err).decode()}
    conn.sendall((json.dumps(answer) + "\n").encode())
    conn.close()


def main():
    top = sys.argv[1]
    path = os.path.join(top, "socket")
    os.makedirs(os.path.join(top, "bin"), exist_ok=True)
    real = os.path.join(os.path.dirname(sys.executable), "aws")
    client = os.path.join(top, "bin", "aws")
    with open(client + ".part", "w") as c:
        c.write(CLIENT % {"python": sys.executable, "real": real, "socket": path})
    os.chmod(client + ".part", 0o755)
    os.rename(client + ".part", client)
    loader = warm()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):  # a killed run's, under a reused process id
        os.unlink(path)
    srv.bind(path)
    srv.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel

    def until_stdin_closes():
        sys.stdin.read()
        shutil.rmtree(top, ignore_errors=True)
        os._exit(0)

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        if os.fork() == 0:
            srv.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                handle(conn, loader)
            finally:
                os._exit(0)
        conn.close()


if __name__ == "__main__":
    main()
