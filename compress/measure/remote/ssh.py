"""Run commands on a target over the system's OpenSSH client.

The client is `ssh` itself, not a Python SSH library: it reads the user's own
configuration, agents and known_hosts the way they expect, and its failures are the
ones they already know. One master connection per target (ControlMaster) carries every
command, so the handshake is paid once. Host keys are always checked: an unknown key is
refused unless the target says `accept_new_host_key: true`, a changed key always is.
"""
from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from compress.errors import RemoteError

_ADDRESS = re.compile(r"^(?:(?P<user>[^@\s-][^@\s]*)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^-:@\s\[\]][^:@\s\[\]]*)"
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
    if not text:   # a session cut without a word: the device or the link went away
        return (f"the connection to {where} was lost (ssh said nothing): the device went "
                "off, rebooted or dropped off the network")
    return f"ssh to {where} failed: {text[-500:]}"


def check_identity(path: Path) -> None:
    """The identity file is a private key: ssh would otherwise try it, fail, and the
    device would seem to refuse the key."""
    if not path.is_file():
        raise RemoteError(f"identity file {path} does not exist; point `identity` at the "
                          "private key the device accepts")
    try:
        head = path.read_bytes()[:4096]
    except OSError as exc:
        raise RemoteError(f"identity file {path} cannot be read: {exc.strerror}") from None
    if head.startswith((b"ssh-", b"ecdsa-", b"sk-")):
        raise RemoteError(f"identity file {path} is a public key; give the private key "
                          f"(usually the same name without .pub)")
    if b"-----BEGIN" not in head or b"PRIVATE KEY-----" not in head:
        raise RemoteError(f"identity file {path} is not a private key (no '-----BEGIN ... "
                          "PRIVATE KEY-----' block); point `identity` at the key file")


def _sweep_control_dirs(min_age_s: float = 120) -> None:
    """Remove control folders of runs that were killed (kill -9 skips close()): their
    master socket no longer answers, or was never made."""
    import glob
    import socket
    import time
    for folder in glob.glob("/tmp/ec-ssh-*"):
        try:
            if time.time() - os.path.getmtime(folder) < min_age_s:
                continue
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(os.path.join(folder, "master"))
        except (ConnectionRefusedError, FileNotFoundError):
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue


class SshConnection:
    """`open()` starts the master connection; `run()` and `command()` go through it;
    `close()` ends it."""

    def __init__(self, settings: SshSettings):
        if not shutil.which("ssh"):
            raise RemoteError("remote targets need the OpenSSH client; install it "
                              "(apt-get install openssh-client)")
        if settings.identity is not None:
            check_identity(settings.identity)
        if settings.known_hosts is not None and not settings.known_hosts.is_file() \
                and not settings.accept_new_host_key:
            raise RemoteError(f"known_hosts file {settings.known_hosts} does not exist; "
                              "create it with the device's host key (ssh-keyscan) or set "
                              "accept_new_host_key: true")
        self.settings = settings
        # In /tmp, not $TMPDIR: a unix socket path must stay under ~100 characters.
        _sweep_control_dirs()
        self._control_dir = tempfile.mkdtemp(prefix="ec-ssh-", dir="/tmp")
        self._control_path = f"{self._control_dir}/master"

    def _options(self, master: bool) -> list[str]:
        s = self.settings
        options = {
            "BatchMode": "yes",                   # never stop to ask for a password
            "ConnectTimeout": str(max(1, math.ceil(s.connect_timeout_s))),
            "StrictHostKeyChecking": "accept-new" if s.accept_new_host_key else "yes",
            "ControlPath": self._control_path,
            # The master is started on its own (open()); commands only use it. (An
            # automatic master keeps the first command's stderr open on older clients.)
            "ControlMaster": "yes" if master else "no",
            # a device that vanishes mid-run is noticed within ~30 s
            "ServerAliveInterval": "10", "ServerAliveCountMax": "3",
            # whatever the user's own ssh config says: no terminal, no forwarding, no
            # remote command of its own (each would corrupt or break the runner's output)
            "RequestTTY": "no", "RemoteCommand": "none", "ClearAllForwardings": "yes",
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
        return cmd

    def open(self) -> None:
        """Connect (host key check, authentication) and keep the connection for every
        later command. Its stderr goes to a file: a pipe would stay open as long as the
        backgrounded master lives. A master still alive is kept (a second one could not
        bind the socket and would live on, unreachable, as a plain connection)."""
        if self._master_alive():
            return
        with tempfile.TemporaryFile() as log:
            try:
                proc = subprocess.run(
                    # idle for a minute, it ends: a run killed with -9 cannot close it, and
                    # stage() opens it again after a long compression
                    self._options(master=True) + ["-N", "-f", "-o", "ControlPersist=60",
                                                  self.settings.address.destination],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                    timeout=self.settings.connect_timeout_s + 30)
            except subprocess.TimeoutExpired:
                raise RemoteError(_explain("timed out", self.settings)) from None
            log.seek(0)
            if proc.returncode != 0:
                raise RemoteError(_explain(log.read().decode(errors="replace"), self.settings))

    def _master_alive(self) -> bool:
        if not os.path.exists(self._control_path):
            return False
        check = subprocess.run(self._options(master=False) + [
            "-O", "check", self.settings.address.destination], stdin=subprocess.DEVNULL,
            capture_output=True, timeout=15)
        return check.returncode == 0

    def command(self, remote: list[str] | str) -> list[str]:
        """The local argv that runs `remote` on the device: an argv (quoted here for the
        device's shell) or a shell command line as it is."""
        line = remote if isinstance(remote, str) else " ".join(shlex.quote(a) for a in remote)
        return self._options(master=False) + ["-T", self.settings.address.destination, "--",
                                              line]

    def run(self, remote: list[str] | str, *, stdin: bytes | None = None,
            timeout: float | None = None, check: bool = True) -> subprocess.CompletedProcess:
        what = remote if isinstance(remote, str) else remote[0]
        try:
            proc = subprocess.run(self.command(remote), capture_output=True, timeout=timeout,
                                  **({"input": stdin} if stdin is not None
                                     else {"stdin": subprocess.DEVNULL}))
        except subprocess.TimeoutExpired:
            raise RemoteError(f"{self.settings.address} did not finish "
                              f"'{what[:60]}' within {timeout:.0f} s") from None
        if check and proc.returncode == 255:
            raise RemoteError(_explain(proc.stderr.decode(errors="replace"), self.settings))
        return proc

    def close(self) -> None:
        try:
            subprocess.run(self._options(master=False) + [
                "-O", "exit", self.settings.address.destination], stdin=subprocess.DEVNULL,
                capture_output=True, timeout=15)
        except subprocess.TimeoutExpired:
            pass  # the master dies with its socket folder's removal or its ControlPersist
        shutil.rmtree(self._control_dir, ignore_errors=True)

    def explain(self, stderr: str) -> str:
        return _explain(stderr, self.settings)
