"""A real OpenSSH server on 127.0.0.1 for the remote-target tests.

Debian's openssh-server, started with a throwaway host key and a throwaway client key
in a temporary folder; nothing on the machine's own ssh setup is read or changed.
`start_sshd()` returns None with the reason when sshd cannot run here (the tests skip
with that reason).
"""
from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_keypair(path: Path) -> Path:
    """An ed25519 key without a passphrase at `path` (and `path`.pub)."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True, capture_output=True)
    return path


def known_hosts_line(port: int, host_key_pub: Path, host: str = "127.0.0.1") -> str:
    key_type, key = host_key_pub.read_text().split()[:2]
    return f"[{host}]:{port} {key_type} {key}\n"


@dataclass
class SshServer:
    host: str
    port: int
    user: str
    identity: Path          # the client's private key
    known_hosts: Path       # holds this server's host key
    host_key: Path
    process: subprocess.Popen

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def start_sshd(folder: Path) -> SshServer | str:
    """Start sshd for the current user on a free loopback port; a reason string if not."""
    if not os.path.exists(SSHD):
        return "OpenSSH server not installed (apt-get install openssh-server)"
    if not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        return "OpenSSH client not installed (apt-get install openssh-client)"
    folder.mkdir(parents=True, exist_ok=True)
    host_key = make_keypair(folder / "host_ed25519")
    identity = make_keypair(folder / "client_ed25519")
    authorized = folder / "authorized_keys"
    shutil.copy(identity.with_suffix(".pub"), authorized)
    port = free_port()
    config = folder / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
        f"PidFile {folder / 'sshd.pid'}", f"AuthorizedKeysFile {authorized}",
        "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
        # the temporary folder's modes are the test runner's, not ~/.ssh's
        "StrictModes no", "UsePAM no", "MaxStartups 50", "MaxSessions 50",
        "Subsystem sftp internal-sftp", ""]))
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory
    log = open(folder / "sshd.log", "wb")
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    if not wait_for_port(port, process):
        process.kill()
        return f"sshd did not start: {(folder / 'sshd.log').read_text()[-500:]}"
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(known_hosts_line(port, host_key.with_suffix(".pub")))
    return SshServer("127.0.0.1", port, getpass.getuser(), identity, known_hosts, host_key,
                     process)


def start_fleet(folder: Path, count: int = 2) -> tuple[list[SshServer], Path] | str:
    """`count` sshd servers standing for boards of one fleet: every one accepts the first
    one's client key, and one known_hosts file holds all their host keys (a fleet target
    has one `identity` and one `known_hosts`). A reason string if sshd cannot run here."""
    servers = []
    for index in range(count):
        server = start_sshd(folder / f"board{index}")
        if isinstance(server, str):
            for started in servers:
                started.stop()
            return server
        servers.append(server)
    key = servers[0].identity.with_suffix(".pub").read_text()
    for server in servers[1:]:
        with open(server.identity.parent / "authorized_keys", "a") as keys:
            keys.write(key)
    known = folder / "fleet_known_hosts"
    known.write_text("".join(s.known_hosts.read_text() for s in servers))
    return servers, known


def runner_under(server: SshServer) -> bool:
    """Whether a benchmark runner is running in one of this sshd's sessions."""
    import psutil
    for proc in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if "runtimes" in proc.cmdline() and "bench" in proc.cmdline():
                return True
        except psutil.Error:
            continue
    return False


def pull_the_plug(server: SshServer) -> None:
    """The board goes dark: its sshd, every session and the runner in it, killed."""
    import psutil
    listener = psutil.Process(server.process.pid)
    for proc in [*listener.children(recursive=True), listener]:
        try:
            proc.kill()
        except psutil.Error:
            pass
    server.process.wait()
