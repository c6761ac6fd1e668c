"""A network namespace joined to this host by a veth pair, whose traffic to the host a test can drop.

A process started inside it (`argv()`) reaches the host's Postgres over TCP at `host_ip`; `cut()`
drops its packets with iptables inside the namespace, so only that process is partitioned.
Everything is removed on `close()`, the namespace's rules with it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess


def unavailable() -> str | None:
    """Why a namespace cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and iptables)"
    missing = [tool for tool in ("ip", "iptables") if shutil.which(tool) is None]
    if missing:
        return f"needs {' and '.join(missing)} on PATH"
    probe = f"qwprobe{secrets.token_hex(3)}"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, "iptables", "-S")
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"network namespaces or iptables unusable here: {exc}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=10)


class Netns:
    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.name = f"qwns{tag}"
        self._veth = f"qwh{tag}"
        octet = int(tag[:2], 16) % 250 + 1
        self.host_ip, self.ns_ip = f"10.231.{octet}.1", f"10.231.{octet}.2"
        try:
            _run("ip", "netns", "add", self.name)
            _run("ip", "link", "add", self._veth, "type", "veth", "peer", "name", f"qwn{tag}")
            _run("ip", "link", "set", f"qwn{tag}", "netns", self.name)
            _run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self._veth)
            _run("ip", "link", "set", self._veth, "up")
            self.exec("ip", "addr", "add", f"{self.ns_ip}/30", "dev", f"qwn{tag}")
            self.exec("ip", "link", "set", f"qwn{tag}", "up")
            self.exec("ip", "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def argv(self, *command: str) -> list[str]:
        """`command` run inside the namespace (`ip netns exec` execs it: the pid is the command's own)."""
        return ["ip", "netns", "exec", self.name, *command]

    def exec(self, *command: str) -> None:
        _run(*self.argv(*command))

    def cut(self, direction: str) -> None:
        """Drop the namespace's traffic to the host: 'out' (its packets), 'in' (the replies) or 'both'."""
        if direction in ("out", "both"):
            self.exec("iptables", "-A", "OUTPUT", "-d", self.host_ip, "-j", "DROP")
        if direction in ("in", "both"):
            self.exec("iptables", "-A", "INPUT", "-s", self.host_ip, "-j", "DROP")

    def heal(self) -> None:
        self.exec("iptables", "-F")

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "link", "del", self._veth], capture_output=True)  # gone with the namespace, unless it lingers
