"""`emulated_pi`: an arm64 Raspberry Pi stand-in reachable over real SSH (see
emulated_pi.py). The first run builds its rootfs (~6 min on 2 cores; cached outside the
repository), later runs start it in about a second.

It skips, with the reason, where it cannot run: not root, qemu-user-static, binfmt-support
or debootstrap missing, binfmt_misc not mountable, or the build failed (the reason ends
with the build log's last lines). With EDGE_COMPRESS_PI_REQUIRED=1 (CI, once the host
packages are installed) those are failures instead of skips.
"""
from __future__ import annotations

import contextlib
import os

import pytest

from tests.device import emulated_pi as pi


def _unavailable(reason: str) -> None:
    message = f"emulated Raspberry Pi unavailable: {reason}"
    if os.environ.get("EDGE_COMPRESS_PI_REQUIRED") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def emulated_pi(request, tmp_path_factory) -> pi.EmulatedPi:
    reason = pi.prepare_host()
    if reason:
        _unavailable(reason)
    # show the build's progress lines (minutes on a cold cache) even under output capture
    capture = request.config.pluginmanager.getplugin("capturemanager")
    visible = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with visible:
        try:
            rootfs = pi.build()
            server = pi.start(rootfs, tmp_path_factory.mktemp("emulated-pi"))
        except (pi.BuildError, pi.StartError) as error:
            _unavailable(str(error))
    yield server
    server.stop()
