"""Torch-free runtime layer: load a model, run it, measure it.

Imports only numpy and the runtime libraries, so it installs and runs on a Raspberry Pi
or a Jetson (`pip install "edge-compress[device]"`) without PyTorch.

Used by every package above this one too:

    safe_text.py     text from outside (op names, profile fields, messages, URIs) made safe
                     to print: control codes shown escaped, URL passwords masked
    suggest.py       'did you mean ...?' for a misspelt name (a stage type, a setting, a
                     profile, a scheme, a factory)
"""
from runtimes.errors import RuntimeInputError
from runtimes.loader import load
from runtimes.measure import Timing, measure
from runtimes.session import FunctionSession, Session, TensorSpec

__all__ = ["load", "measure", "Timing", "Session", "FunctionSession", "TensorSpec",
           "RuntimeInputError"]
