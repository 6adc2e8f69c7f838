"""A TCP relay: accepts on LISTEN_HOST:LISTEN_PORT and copies each connection
to and from TO_HOST:TO_PORT. The real-node bed's nodes reach moto through it
(tests/it/real_node.rs): moto listens on 127.0.0.1 as in every other test,
where kube-aws on the host must call it `localhost` (moto's CloudFormation
reads a TemplateURL from its own S3 only when the URL says localhost), and
the relay listens on the bed's bridge address for the nodes.

    python3 tests/support/tcp_relay.py LISTEN_HOST LISTEN_PORT TO_HOST TO_PORT
"""
import socket
import sys
import threading


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main(argv):
    lhost, lport, thost, tport = argv[0], int(argv[1]), argv[2], int(argv[3])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((lhost, lport))
    srv.listen(64)
    while True:
        c, _ = srv.accept()
        try:
            u = socket.create_connection((thost, tport))
        except OSError:
            c.close()
            continue
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1:])
