"""Clusters on one machine (tests, benchmarks): ports of 127.0.0.1 free for their tasks."""

import socket


def free_ports(count):
    """`count` distinct TCP ports free on 127.0.0.1 now (the kernel's choice: bound, then
    released for the tasks to take)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
