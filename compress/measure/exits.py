"""What the runner's end says, one rule for every place (this Python, another local one,
a device over SSH): 3 the accelerator asked for is not there (Unavailable), 4 the engine
cannot open the model (EngineLeftOut), and a signal that ended it (RunnerDied).

A runner killed by a signal is a result about the variant on that target, not a fault of
the pipeline: on a small board the out-of-memory killer's SIGKILL is an ordinary event,
and a runtime that crashes (SIGSEGV) on one model may run the next. The benchmark records
it (RunnerDied.record(): the signal, the peak memory seen, the likely cause) as the
variant failed on that target: it did not fit there, so every budget of the target fails
for it ("did not run: ..."), exactly as a missed budget does (a gated target: exit 1),
and it is never recommended; the other variants are judged and a search goes on. Where
nothing records it (a preflight), it is a ModelError (exit 2), never a bug.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Optional

from compress.errors import ModelError
from profiles.check import DID_NOT_RUN


class Unavailable(Exception):
    """The runner's exit 3: the accelerator asked for is not on the measuring machine."""


class EngineLeftOut(Unavailable):
    """The runner's exit 4: the engine cannot open this model (an op its converter or
    kernels lack); recorded like an absent accelerator, with the engine's own words."""


class RunnerDied(Unavailable, ModelError):
    """The runner was ended by a signal: `signal` (its name), the peak memory it reached
    as the kernel counted it (None where unknown), and the likely cause in words."""

    def __init__(self, message: str, signal_name: str, peak_memory_mb: Optional[float],
                 cause: str):
        self.signal, self.peak_memory_mb, self.cause = signal_name, peak_memory_mb, cause
        super().__init__(message)

    def record(self) -> dict:
        """What the benchmark's record keeps of the death (`died`), beside its words."""
        return {"signal": self.signal, "peak_memory_mb": self.peak_memory_mb,
                "cause": self.cause}


def unmeasured(exc: Unavailable) -> tuple[str, dict]:
    """What a runner's end that gave no measurement makes of a benchmark job: (the word
    for it, what the job's record adds to its reason). A runner killed by a signal: the
    variant did not run there (`died`: failed on that target); an engine that cannot
    open the model: left out; an accelerator not here: unmeasured."""
    if isinstance(exc, RunnerDied):
        return DID_NOT_RUN, {"died": exc.record()}
    if isinstance(exc, EngineLeftOut):
        return "left out", {"left_out": True}
    return "unmeasured", {"left_out": False}


# what most likely ended a runner, after "the runner ", and a note (SIGKILL: runner_died)
CAUSES = {signal.SIGSEGV: ("crashed in the runtime", ""),
          signal.SIGBUS: ("crashed in the runtime", ""),
          signal.SIGABRT: ("aborted in the runtime", "a failed check in its native code"),
          signal.SIGILL: ("crashed in the runtime", "an instruction this CPU does not have"),
          signal.SIGTERM: ("was stopped from outside", "")}
OUT_OF_MEMORY = "most likely the out-of-memory killer"


def signal_of(returncode: int) -> Optional[signal.Signals]:
    """The signal that ended a process: a negative return code (a child of this one), or
    128 + N (a shell reporting its child's end, as a device's does), else None."""
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    try:
        return signal.Signals(number) if number else None
    except ValueError:
        return None


def runner_died(returncode: int, peak_memory_mb: Optional[float] = None,
                where: str = "", remote: bool = False) -> Optional[RunnerDied]:
    """The failure a runner's end makes when a signal ended it, else None. `where`
    prefixes the message (a device's name); `remote`: the device's own timeout may also
    have sent the SIGKILL, after its SIGTERM went unheeded."""
    sig = signal_of(returncode)
    if sig is None:
        return None
    seen = f"peak memory {peak_memory_mb:.0f} MB when it died" if peak_memory_mb else ""
    if sig == signal.SIGKILL:
        cause = OUT_OF_MEMORY
        check = "check `dmesg`" + (" on the device" if remote else "")
        last = ", else the benchmark timeout's last resort" if remote else ""
        said = f"was killed by SIGKILL: {cause} ({'; '.join(p for p in (seen, check) if p)}){last}"
    else:
        cause, note = CAUSES.get(sig, ("was ended by a signal", ""))
        named = f"{sig.name}: {note}" if note else sig.name
        said = f"{cause} ({'; '.join(p for p in (named, seen) if p)})"
    return RunnerDied(f"{where}the runner {said}", sig.name, peak_memory_mb, cause)


def reap(proc: subprocess.Popen, timeout: float) -> Optional[float]:
    """Wait for `proc` (subprocess.TimeoutExpired past `timeout` s) and return the peak
    memory it reached in MB, as the kernel counted it (wait4's ru_maxrss: the figure of
    the process itself, also when it was killed); None where the system cannot say."""
    if not hasattr(os, "wait4"):
        proc.wait(timeout=timeout)
        return None
    deadline, delay = time.monotonic() + timeout, 0.0005
    while True:   # Popen.wait polls the same way; this keeps the rusage it throws away
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:   # reaped elsewhere: only the status is left
            proc.wait(timeout=max(deadline - time.monotonic(), 0))
            return None
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
