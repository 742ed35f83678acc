"""Describe the machine a measurement ran on.

Verdicts need this to tell a real measurement on the profile's device from numbers taken
elsewhere (an rpi4 budget checked on an x86 laptop is "off-target", never a pass).
"""
from __future__ import annotations

import os
import platform
import socket

# CPU features that change which kernels onnxruntime and XNNPACK pick for int8 and fp16.
_INTERESTING_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "fma",
                      "asimd", "asimddp", "fphp", "i8mm", "sve")


def _read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode(errors="replace").replace("\x00", "").strip()
    except OSError:
        return ""


def _cpuinfo_fields(text: str) -> dict:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


_X86_VENDORS = ("GenuineIntel", "AuthenticAMD", "HygonGenuine")
_X86_ARCHES = ("x86_64", "i686", "i386", "amd64")


def emulation_of(arch: str, fields: dict) -> str | None:
    """The CPU /proc/cpuinfo describes is not of the architecture this process runs as:
    a user-mode emulator (qemu-user with binfmt) passes the host's cpuinfo through."""
    vendor = fields.get("vendor_id", "")
    if arch not in _X86_ARCHES and vendor in _X86_VENDORS:
        return f"{arch} emulated on an x86 CPU ({fields.get('model name') or vendor})"
    if arch in _X86_ARCHES and "CPU implementer" in fields:
        return f"{arch} emulated on an Arm CPU"
    return None


def describe_host(cpuinfo: str | None = None, device_model: str | None = None,
                  arch: str | None = None) -> dict:
    """Architecture, CPU model, relevant flags, cores, memory and board model (if any)."""
    fields = _cpuinfo_fields(_read("/proc/cpuinfo") if cpuinfo is None else cpuinfo)
    arch = arch or platform.machine()
    flags = (fields.get("flags") or fields.get("Features") or "").split()
    cpu_model = fields.get("model name") or fields.get("Model") or platform.processor()
    if device_model is None:
        device_model = _read("/proc/device-tree/model")
    try:
        memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError, AttributeError):
        memory_mb = None
    return {
        "hostname": socket.gethostname(),
        "arch": arch,
        "system": platform.system(),
        "cpu": cpu_model or "unknown",
        "cpu_flags": [f for f in _INTERESTING_FLAGS if f in flags],
        "cores": os.cpu_count(),
        "memory_mb": memory_mb,
        "device_model": device_model or None,
        "emulated": emulation_of(arch, fields),
    }
