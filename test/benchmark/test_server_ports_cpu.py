"""Each server e2e.py starts gets a port of its own for its torch.distributed
store (--nccl-port), below the kernel's ephemeral range: left to sglang, the
store listens on a port the kernel handed out seconds before, which another
server's sockets may take meanwhile (EADDRINUSE, the server exits)."""

import os
import socket
import sys

from standin_sglang import E2E, port_block

sys.path.insert(0, os.path.dirname(E2E))
from server import NCCL_PORT_DELTA, server_command, server_ports  # noqa: E402


def ephemeral_low():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        return int(f.read().split()[0])


def test_the_store_port_follows_the_http_port_below_the_ephemeral_range():
    with port_block() as base:
        port, nccl = server_ports(base)
        # (another suite's servers may hold the block's first ports)
        assert base <= port < base + 200 and nccl == port + NCCL_PORT_DELTA
        assert nccl < ephemeral_low()
        for p in (port, nccl):  # both free
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))


def test_ports_in_use_or_taken_are_skipped():
    with port_block() as base:
        # the group's first server holds base and base + delta
        used = {base, base + NCCL_PORT_DELTA}
        port, nccl = server_ports(base, used)
        assert port not in used and nccl not in used
        assert nccl == port + NCCL_PORT_DELTA
        # a port another process listens on, as a store port, is skipped too
        with socket.socket() as s:
            start, taken = server_ports(base + 100)
            s.bind(("127.0.0.1", taken))
            port, nccl = server_ports(start)
            assert port > start and nccl != taken and nccl == port + NCCL_PORT_DELTA


def launch(**kw):
    return server_command("python3", "T", "D", 30010, "fa3", "EAGLE3", True, True, **kw)


def test_the_launch_names_the_store_port_only_when_given():
    with_port = launch(tp=2, nccl_port=30015)
    assert with_port[with_port.index("--nccl-port") + 1] == "30015"
    assert "--nccl-port" not in launch(tp=2)


def test_dp_replicas_keep_sglangs_own_store_ports():
    # without DP attention each replica is a world of its own, and sglang
    # binds each replica's store port in turn: one given port would be all
    # of theirs
    assert "--nccl-port" not in launch(nccl_port=30015, dp=2)
    # with DP attention the ranks share one world, and one store
    assert "--nccl-port" in launch(nccl_port=30015, dp=2, dp_attention=True)
