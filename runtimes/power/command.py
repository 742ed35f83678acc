"""An external meter: a shell command, given by the user, that prints watts.

The command runs once per sample through /bin/sh (so pipes and arguments work, e.g. a
USB power meter's reader or `ssh lab-pdu read outlet 3`); the last number on its stdout
is the power in watts. A non-zero exit or output without a number is an error. A command
that does not finish within TIMEOUT_S is abandoned: it runs in its own process group, and
the whole group (what the shell started too) is killed, so none of it is left running.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess

from runtimes.errors import RuntimeInputError
from runtimes.power.base import Meter, MeterAbsent, MeterError, end_group

# how long one reading may take before the command is abandoned (and killed)
TIMEOUT_S = 10.0
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

    def __init__(self, *, command: str | None = None, timeout: float | None = None, **kw):
        super().__init__(**kw)
        if not command or not command.strip():
            raise RuntimeInputError("meter 'command' needs the command that prints watts: "
                                    "give it with --meter-command (meter_command)")
        self.command, self.timeout = command, TIMEOUT_S if timeout is None else timeout
        self.label = command_name(command)
        self.detail = f"command `{self.label}` (last number on stdout, W)"
        try:
            self.read()
        except MeterError as exc:
            raise MeterAbsent(str(exc), "make the command print the power in watts as the "
                              "last number on stdout and exit 0") from None

    def read(self) -> float:
        code, out, err = _run(self.command, self.timeout, self.label)
        if code != 0:
            raise MeterError(f"the meter command `{self.label}` exited {code}"
                             f": {(err or out).strip()[-200:]}")
        watts = last_number(out)
        if watts is None:
            raise MeterError(f"the meter command `{self.label}` printed no number "
                             f"({out.strip()[-200:]!r})")
        return watts


def _run(command: str, timeout: float, label: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the command through /bin/sh. Past `timeout` its
    process group is killed: subprocess.run would kill the shell alone and then wait
    for the pipes, which a child it left running (`reader &`) holds open."""
    proc = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        end_group(proc)
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()
        raise MeterError(f"the meter command `{label}` took over {timeout:g} s (it was "
                         "stopped)") from None
    return proc.returncode, out, err
