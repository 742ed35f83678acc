"""Benchmark targets on other machines, reached over SSH (see host.py, ssh.py, and
scripts.py: what runs on the device itself)."""
from compress.measure.remote.host import RemoteHost, RemoteSpec
from compress.measure.remote.ssh import Address, SshSettings, parse_address

__all__ = ["RemoteHost", "RemoteSpec", "SshSettings", "Address", "parse_address"]
