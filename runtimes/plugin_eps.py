"""Execution providers that come as onnxruntime plugin libraries.

Newer providers ship as their own pip package holding a shared library that onnxruntime
loads at run time (`register_execution_provider_library`), instead of being built into
onnxruntime: `onnxruntime-qnn` (Qualcomm QNN, with the HTP simulator on x86-64 Linux) is
one. Such a provider is absent from `get_available_providers()` until registered, and is
attached to a session through its devices (`add_provider_for_devices`), not by name.
"""
from __future__ import annotations

import importlib

# provider name -> the Python package whose get_library_path() gives its library
PLUGIN_PACKAGES = {"QNNExecutionProvider": "onnxruntime_qnn"}

_registered: set[str] = set()


def register_plugins(ort, names: list[str]) -> list[str]:
    """Register the plugin providers among `names` whose package is installed; returns
    those now usable through their devices."""
    usable = []
    for name in names:
        package = PLUGIN_PACKAGES.get(name)
        # Once registered it is listed as available, yet still attached through its devices.
        if package is None or name in ort.get_available_providers() and name not in _registered:
            continue
        try:
            module = importlib.import_module(package)
        except ImportError:
            continue
        if name not in _registered:
            ort.register_execution_provider_library(name, module.get_library_path())
            _registered.add(name)
        usable.append(name)
    return usable


def attach(ort, session_options, name: str, options: dict) -> None:
    """Give `session_options` every device of the registered plugin provider `name`."""
    devices = [d for d in ort.get_ep_devices() if d.ep_name == name]
    session_options.add_provider_for_devices(devices, options)
