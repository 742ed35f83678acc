"""What does measuring over SSH cost? The quickstart pipeline with two targets of the
same profile: `local` (the runner in a subprocess here) and `loopback` (the same machine
reached through a real OpenSSH server on 127.0.0.1, started here with throwaway keys).
Both measure the same artifacts in the same run, so the difference in the runner's wall
time per measurement is the SSH round trip; connect and copy are paid once per target.

    python examples/device/ssh_loopback.py        (needs openssh-server; run as its user)
    python examples/device/ssh_loopback.py --emulated-pi

With --emulated-pi the remote target is the test suite's emulated Raspberry Pi (arm64
Debian under qemu-user with its own sshd, tests/device/emulated_pi.py; root, and minutes
to build the first time): its runner times are emulation, only the SSH costs compare.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import compress  # noqa: E402
from compress.config.pipeline import TargetSpec, load_pipeline  # noqa: E402
from tests.sshd_server import start_sshd  # noqa: E402  (the test suite's loopback sshd)


def require_quickstart_model() -> None:
    """Exit with what to run when the quickstart's trained model is not there yet."""
    if not (REPO / "examples" / "quickstart" / "digits_cnn.pt").exists():
        sys.exit("examples/quickstart/digits_cnn.pt is missing: run `make demo` first")


def start_emulated_pi(folder: Path):
    from tests.device import emulated_pi as pi
    reason = pi.prepare_host()
    if reason:
        sys.exit(f"no emulated Pi here: {reason}")
    return pi.start(pi.build(), folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--emulated-pi", action="store_true",
                        help="measure on the emulated Raspberry Pi instead of this machine")
    args = parser.parse_args()
    require_quickstart_model()
    with tempfile.TemporaryDirectory(prefix="ssh-loopback-") as tmp:
        server = (start_emulated_pi(Path(tmp)) if args.emulated_pi
                  else start_sshd(Path(tmp) / "sshd"))
        if isinstance(server, str):
            sys.exit(f"cannot start a loopback sshd: {server}")
        try:
            pipeline = load_pipeline(REPO / "examples" / "quickstart" / "pipeline.yaml")
            python = server.python if args.emulated_pi else sys.executable
            targets = (TargetSpec(profile="host-cpu", name="local"),
                       TargetSpec(profile="host-cpu", name="loopback", ssh=server.address,
                                  identity=str(server.identity), connect_timeout_s=60,
                                  known_hosts=str(server.known_hosts), python=python))
            pipeline = pipeline.model_copy(update={"name": "ssh-loopback", "targets": targets})
            result = compress.run(pipeline, quiet=False)
        finally:
            server.stop()
    walls = {}
    for bench in result.benchmarks:
        walls.setdefault(bench["target"], []).append(bench["runner_wall_s"])
    remote = next(b["remote"] for b in result.benchmarks if b["remote"])
    local_wall, ssh_wall = (statistics.median(walls[t]) for t in ("local", "loopback"))
    where = "the emulated Pi" if args.emulated_pi else "loopback"
    print(f"\nSSH to {where} ({remote['host']}), quickstart pipeline, "
          f"{len(walls['loopback'])} artifacts per target:")
    print("| step | seconds |\n|---|---:|")
    print(f"| connect + probe (once per target) | {remote['connect_s']:.3f} |")
    print(f"| copy runner + models + inputs, {remote['copied_bytes'] / 2**20:.2f} MiB "
          f"(once) | {remote['copy_s']:.3f} |")
    print(f"| runner wall per measurement, local subprocess (median) | {local_wall:.3f} |")
    print(f"| runner wall per measurement, over SSH (median) | {ssh_wall:.3f} |")
    extra = "SSH round trip" if not args.emulated_pi else "SSH round trip + emulated run"
    print(f"| {extra} per measurement (difference) | {ssh_wall - local_wall:.3f} |")
    print(f"| clean-up (once) | {remote['cleanup_s']:.3f} |")
    print(f"\nreport: {result.run_dir / 'report.md'}")


if __name__ == "__main__":
    main()
