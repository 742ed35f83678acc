"""Run commands on a target over the system's OpenSSH client.

The client is `ssh` itself, not a Python SSH library: it reads the user's own
configuration, agents and known_hosts the way they expect, and its failures are the
ones they already know. One master connection per target (ControlMaster) carries every
command, so the handshake is paid once. Host keys are always checked: an unknown key is
refused unless the target says `accept_new_host_key: true`, a changed key always is.
"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from compress.errors import RemoteError

_ADDRESS = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^:@\s\[\]]+)"
                      r"(?::(?P<port>\d{1,5}))?$")


@dataclass(frozen=True)
class Address:
    user: str | None
    host: str
    port: int

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def __str__(self) -> str:
        return f"{self.destination}:{self.port}"


def parse_address(text: str) -> Address:
    """`user@host:port`, `host`, `user@[::1]:2222` -> Address (port 22 by default)."""
    match = _ADDRESS.match(text.strip())
    port = int(match["port"]) if match and match["port"] else 22
    if not match or not 0 < port < 65536:
        raise ValueError(f"'{text}' is not an SSH address; write user@host or user@host:port")
    return Address(match["user"], match["host"].strip("[]"), port)


@dataclass(frozen=True)
class SshSettings:
    address: Address
    identity: Path | None = None
    known_hosts: Path | None = None        # None: the user's ~/.ssh/known_hosts
    accept_new_host_key: bool = False
    connect_timeout_s: float = 10.0


def _explain(stderr: str, settings: SshSettings) -> str:
    """One message naming what went wrong and how to fix it, from ssh's own words."""
    where = str(settings.address)
    known = settings.known_hosts or "~/.ssh/known_hosts"
    host_entry = (f"[{settings.address.host}]:{settings.address.port}"
                  if settings.address.port != 22 else settings.address.host)
    text = stderr.strip()
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "Host key for" in text and \
            "has changed" in text:
        return (f"the host key of {where} does not match the one in {known}. If the "
                f"device was reinstalled, check its new fingerprint and then remove the old "
                f"entry: ssh-keygen -R '{host_entry}' -f {known}")
    if "Host key verification failed" in text or "No " in text and "host key is known" in text:
        return (f"the host key of {where} is not in {known}, and unknown keys are refused. "
                f"Check the key's fingerprint and add it (ssh-keyscan -p "
                f"{settings.address.port} {settings.address.host} >> {known}), or set "
                f"accept_new_host_key: true on the target to trust it on first use")
    if "Permission denied" in text:
        key = settings.identity or "your default keys"
        return (f"{where} refused the key ({key}) for user "
                f"'{settings.address.user or 'the current user'}'. Put its public key in "
                f"that user's ~/.ssh/authorized_keys on the device (ssh-copy-id -i "
                f"{settings.identity or '~/.ssh/id_ed25519'} -p {settings.address.port} "
                f"{settings.address.destination})")
    if "Connection refused" in text:
        return (f"{where} refused the connection: nothing listens on port "
                f"{settings.address.port}. Check that sshd runs on the device and the port")
    if "timed out" in text:
        return (f"{where} did not answer within {settings.connect_timeout_s:g} s (connect "
                f"timeout). Check that the device is on and reachable from here")
    if "Could not resolve hostname" in text:
        return f"the host name '{settings.address.host}' does not resolve; check the address"
    if "No route to host" in text or "Network is unreachable" in text:
        return f"{where} is unreachable from here (no route); check the network and address"
    if "invalid format" in text or "Load key" in text:
        return f"the identity {settings.identity} is not a private key ssh can read"
    return f"ssh to {where} failed: {text[-500:] or 'no message'}"


class SshConnection:
    """`run()` and `upload()` over one master connection; `close()` ends it."""

    def __init__(self, settings: SshSettings):
        if not shutil.which("ssh"):
            raise RemoteError("remote targets need the OpenSSH client; install it "
                              "(apt-get install openssh-client)")
        if settings.identity is not None and not settings.identity.is_file():
            raise RemoteError(f"identity file {settings.identity} does not exist; point "
                              "`identity` at the private key the device accepts")
        if settings.known_hosts is not None and not settings.known_hosts.is_file() \
                and not settings.accept_new_host_key:
            raise RemoteError(f"known_hosts file {settings.known_hosts} does not exist; "
                              "create it with the device's host key (ssh-keyscan) or set "
                              "accept_new_host_key: true")
        self.settings = settings
        # A short socket path: unix sockets are limited to ~100 characters.
        self._control_dir = tempfile.mkdtemp(prefix="ec-ssh-")

    def base_command(self) -> list[str]:
        s = self.settings
        options = {
            "BatchMode": "yes",                   # never stop to ask for a password
            "ConnectTimeout": str(max(1, round(s.connect_timeout_s))),
            "StrictHostKeyChecking": "accept-new" if s.accept_new_host_key else "yes",
            "ControlMaster": "auto", "ControlPath": f"{self._control_dir}/%C",
            "ControlPersist": "120",
            # a device that vanishes mid-run is noticed within ~30 s
            "ServerAliveInterval": "10", "ServerAliveCountMax": "3",
            "LogLevel": "ERROR",
        }
        if s.known_hosts is not None:
            options["UserKnownHostsFile"] = str(s.known_hosts)
        if s.identity is not None:
            options["IdentityFile"] = str(s.identity)
            options["IdentitiesOnly"] = "yes"
        cmd = ["ssh", "-p", str(s.address.port)]
        for key, value in options.items():
            cmd += ["-o", f"{key}={value}"]
        return cmd + [s.address.destination]

    def command(self, remote: list[str] | str) -> list[str]:
        """The local argv that runs `remote` on the device: an argv (quoted here for the
        device's shell) or a shell command line as it is."""
        line = remote if isinstance(remote, str) else " ".join(shlex.quote(a) for a in remote)
        return self.base_command() + ["--", line]

    def run(self, remote_argv: list[str], *, stdin=None, timeout: float | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
        try:
            proc = subprocess.run(self.command(remote_argv), stdin=stdin,
                                  capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RemoteError(f"{self.settings.address} did not finish "
                              f"'{remote_argv[0]}' within {timeout:.0f} s") from None
        if check and proc.returncode == 255:
            raise RemoteError(_explain(proc.stderr.decode(errors="replace"), self.settings))
        return proc

    def close(self) -> None:
        subprocess.run(self.base_command()[:-1] + ["-O", "exit", self.settings.address.destination],
                       capture_output=True, timeout=15)
        shutil.rmtree(self._control_dir, ignore_errors=True)

    def explain(self, stderr: str) -> str:
        return _explain(stderr, self.settings)
