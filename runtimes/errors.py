"""Errors of the torch-free runtime layer.

`runtimes` must not import `compress` (it runs alone on a device), so it has its own
small error type. The pipeline turns it into a ModelError or DataError.
"""
from runtimes.safe_text import safe_text


class RuntimeInputError(Exception):
    """A model or input file the runtime cannot use; the message says how to fix it."""

    exit_code = 2

    def __init__(self, *args):
        # the message names the user's files and what a library said of them: printed,
        # it must not drive the terminal (runtimes/safe_text.py)
        super().__init__(*(safe_text(a) if isinstance(a, str) else a for a in args))


class ProviderUnavailable(RuntimeInputError):
    """The accelerator a measurement asks for is not on this machine. Nothing can be
    measured for it here: the pipeline records 'unmeasured' with this message, never a
    run on the CPU in its place."""

    exit_code = 3


class EngineCannotOpen(RuntimeInputError):
    """This engine cannot open this model (its converter or kernels lack an op the model
    uses), where another engine may: the pipeline leaves the engine out for the model,
    with this message as the reason, and measures the model on the engines that open it."""

    exit_code = 4
