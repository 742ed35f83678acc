"""`targets:` of pipeline.yaml: the device profiles to check against, and where each is
measured (here, with another Python, or on a device over SSH)."""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field, PositiveInt, field_validator, model_validator

from compress.stagebase import Strict


class TargetSpec(Strict):
    profile: str = Field(description="a profile name (`compress profiles`) or a YAML path")
    gate: bool = Field(True, description="whether this target's verdicts decide the exit code")
    name: Optional[str] = Field(
        None, pattern=r"^[A-Za-z0-9_.@-]+$",
        description="what the report calls this target (default: the profile's name); "
        "needed to list one profile twice, e.g. a board over SSH and the host")
    # A device reached over SSH: the benchmark runs there, with its own Python.
    ssh: Optional[Union[str, tuple[str, ...]]] = Field(
        None, description="run the benchmark on this host: user@host or user@host:port "
        "(system OpenSSH, key authentication only); a list of them is a fleet of boards "
        "of this profile: measurements are spread over them, one at a time per board")
    hosts_file: Optional[str] = Field(
        None, description="a fleet's devices from a file: one user@host[:port] a line, "
        "# starts a comment (instead of listing them in ssh:)")
    identity: Optional[str] = Field(None, description="private key file for ssh")
    known_hosts: Optional[str] = Field(
        None, description="known_hosts file holding the device's host key "
        "(default: ~/.ssh/known_hosts); an unknown or changed key is refused")
    accept_new_host_key: bool = Field(
        False, description="trust an unknown host key on first use and record it "
        "(a changed key is still refused)")
    python: Optional[str] = Field(
        None, description="the Python that runs the benchmark: on an SSH target the "
        "device's (default python3, e.g. a venv's /home/pi/edge/bin/python); on this "
        "machine another environment's (default: this one), e.g. one with "
        "onnxruntime-openvino, which cannot share an environment with onnxruntime")
    workdir: str = Field("/tmp", description="folder on the device for the temporary "
                         "directory (removed afterwards)")
    connect_timeout_s: float = Field(10.0, gt=0, le=300, description="seconds to wait for "
                                     "the SSH connection")
    threads: Optional[PositiveInt] = Field(
        None, description="measure with this many threads instead of the profile's "
        "runtime.threads (a search can try several: `targets.rpi5.threads: [2, 4]`)")
    engines: Optional[Union[Literal["auto"], tuple[str, ...]]] = Field(
        None, description="the engines to measure with instead of the profile's "
        "runtime.engines: a list in priority order, or auto")
    emulated: bool = Field(
        False, description="the host emulates the device (e.g. qemu-user): its timings are "
        "labelled as emulation and never pass a budget")

    def runtime_overrides(self) -> dict:
        """The profile's runtime settings this target replaces."""
        return {k: getattr(self, k) for k in ("threads", "engines") if getattr(self, k)}

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value):
        return {"profile": value} if isinstance(value, str) else value

    @field_validator("ssh")
    @classmethod
    def _valid_address(cls, value):
        from compress.measure.remote.ssh import parse_address
        addresses = (value,) if isinstance(value, str) else value or ()
        if value is not None and not addresses:
            raise ValueError("ssh: lists no device; give user@host[:port], or a list of them")
        for address in addresses:
            parse_address(address)  # ValueError names the expected form
        if len(set(addresses)) != len(addresses):
            raise ValueError("ssh: lists a device twice")
        return value

    @property
    def remote(self) -> bool:
        return bool(self.ssh or self.hosts_file)

    def devices(self, pipeline) -> list[str]:
        """The device addresses: `ssh:` (one or a list), or the lines of `hosts_file`."""
        if self.hosts_file is None:
            return [self.ssh] if isinstance(self.ssh, str) else list(self.ssh or ())
        return read_hosts_file(pipeline.resolve(self.hosts_file))

    @model_validator(mode="after")
    def _ssh_options_need_ssh(self):
        remote_only = [key for key in ("identity", "known_hosts") if getattr(self, key)]
        if self.accept_new_host_key:
            remote_only.append("accept_new_host_key")
        if remote_only and not self.remote:
            raise ValueError(f"{', '.join(remote_only)} only apply to a target with ssh: "
                             "user@host[:port]")
        if self.ssh and self.hosts_file:
            raise ValueError("give the devices in ssh: or in hosts_file:, not both")
        return self


def read_hosts_file(path) -> list[str]:
    """A fleet's addresses; a ValueError names the file and the line that is wrong."""
    from compress.measure.remote.ssh import parse_address
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"hosts_file {path}: {exc.strerror}") from None
    addresses = []
    for number, line in enumerate(lines, 1):
        address = line.split("#", 1)[0].strip()
        if not address:
            continue
        try:
            parse_address(address)
        except ValueError as exc:
            raise ValueError(f"hosts_file {path}, line {number}: {exc}") from None
        if address in addresses:
            raise ValueError(f"hosts_file {path}, line {number}: {address} is listed twice")
        addresses.append(address)
    if not addresses:
        raise ValueError(f"hosts_file {path} lists no device: one user@host[:port] a line")
    return addresses
