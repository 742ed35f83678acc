"""An external meter: a shell command, given by the user, that prints watts.

The command runs once per sample through /bin/sh (so pipes and arguments work, e.g. a
USB power meter's reader or `ssh lab-pdu read outlet 3`); the last number on its stdout
is the power in watts. A non-zero exit or output without a number is an error.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess

from runtimes.errors import RuntimeInputError
from runtimes.power.base import Meter, MeterAbsent, MeterError

NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def command_name(command: str) -> str:
    """The program a command runs, without its arguments: those may carry a token, and the
    name goes into reports and messages."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return os.path.basename(words[0]) if words else "?"


def last_number(text: str) -> float | None:
    found = NUMBER.findall(text)
    return float(found[-1]) if found else None


class CommandMeter(Meter):
    name = "command"
    default_interval_ms = 200.0

    def __init__(self, *, command: str | None = None, timeout: float = 10.0, **kw):
        super().__init__(**kw)
        if not command or not command.strip():
            raise RuntimeInputError("meter 'command' needs the command that prints watts: "
                                    "give it with --meter-command (meter_command)")
        self.command, self.timeout = command, timeout
        self.label = command_name(command)
        self.detail = f"command `{self.label}` (last number on stdout, W)"
        try:
            self.read()
        except MeterError as exc:
            raise MeterAbsent(str(exc), "make the command print the power in watts as the "
                              "last number on stdout and exit 0") from None

    def read(self) -> float:
        try:
            done = subprocess.run(self.command, shell=True, capture_output=True, text=True,
                                  timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise MeterError(f"the meter command `{self.label}` took over "
                             f"{self.timeout:g} s") from None
        if done.returncode != 0:
            raise MeterError(f"the meter command `{self.label}` exited {done.returncode}"
                             f": {(done.stderr or done.stdout).strip()[-200:]}")
        watts = last_number(done.stdout)
        if watts is None:
            raise MeterError(f"the meter command `{self.label}` printed no number "
                             f"({done.stdout.strip()[-200:]!r})")
        return watts
