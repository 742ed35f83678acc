"""An emulated Raspberry Pi for the remote-target tests: an arm64 Debian bookworm root
file system run under qemu-user, with its own arm64 OpenSSH server on 127.0.0.1.

Raspberry Pi OS 64-bit is Debian bookworm with Python 3.11 on Cortex-A72/A76 cores, so
the emulated Pi is a minimal bookworm arm64 rootfs (debootstrap) with a venv in
/opt/edge-compress holding this repository's wheel installed with its `device` extra
from PyPI, exactly as a Pi user installs it (`pip install "edge-compress[device]"`):
numpy, psutil, onnxruntime, onnxruntime-genai and ai-edge-litert come as aarch64 wheels
from the registry, and no torch.

    python -m tests.device.emulated_pi build     # cold: ~6 min on 2 cores; warm: ~1 s
    python -m tests.device.emulated_pi start     # its sshd until Ctrl-C (--check: probe, stop)
    python -m tests.device.emulated_pi status

The rootfs lives outside the repository, in ~/.cache/edge-compress/emulated-pi/rootfs
(env EDGE_COMPRESS_PI_ROOTFS). It is built in `rootfs.partial` and renamed when done, so
an interrupted build is found and redone; a stamp file inside marks a finished one. When
runtimes/ or pyproject.toml change, the next build() reinstalls only the wheel (~30 s).

Everything runs as root (debootstrap, chroot, mounts). Programs inside run through
binfmt_misc and qemu-aarch64-static with QEMU_CPU=cortex-a72. Each chroot gets a private
mount namespace (`unshare --mount`) holding /proc, /dev (bound from the host), a tmpfs
/tmp and a host folder at /run/emulated-pi; they vanish with the last process in it, so
nothing stays mounted after a crash. The host's /sys is deliberately not mounted:
onnxruntime's cpuinfo crashes on the host's x86 cache files there; a tmpfs /sys holds
only the CPU lists a Pi's kernel has.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from tests.sshd_server import SshServer, free_port, known_hosts_line, make_keypair, wait_for_port

REPO = Path(__file__).resolve().parents[2]
SUITE = "bookworm"                 # Raspberry Pi OS 64-bit (2023-) is bookworm, Python 3.11
ARCH = "arm64"
QEMU_CPU = "cortex-a72"            # the Raspberry Pi 4's core
# minbase + these (and their dependencies): python3-venv brings python3 and the pip wheel
# that `python3 -m venv` installs; Debian's pip reads the CA store of ca-certificates.
PACKAGES = ("python3", "python3-venv", "openssh-server", "ca-certificates")
VENV = "/opt/edge-compress"
REMOTE_PYTHON = f"{VENV}/bin/python"
MOUNTPOINT = "/run/emulated-pi"    # a host folder is bound here while a chroot runs
PACKAGE_DIRS = ("runtimes", "compress", "export", "profiles")   # what the wheel holds
STAMP = ".edge-compress-emulated-pi.json"       # written last: the rootfs is complete
MARKER = ".edge-compress-emulated-pi"           # written first: this folder is ours
BINFMT = Path("/proc/sys/fs/binfmt_misc")
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RECIPE = hashlib.sha256(json.dumps([SUITE, ARCH, PACKAGES, VENV, 1]).encode()).hexdigest()[:16]

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """The rootfs could not be built; the message ends with the last lines of the log."""


class StartError(RuntimeError):
    """The emulated sshd did not come up."""


def _say(message: str) -> None:
    print(f"[emulated-pi] {message}", file=sys.stderr, flush=True)


def default_rootfs() -> Path:
    override = os.environ.get("EDGE_COMPRESS_PI_ROOTFS")
    if override:
        return Path(override).expanduser().absolute()
    return Path.home() / ".cache" / "edge-compress" / "emulated-pi" / "rootfs"


def _resolve(rootfs: str | Path | None) -> Path:
    path = Path(rootfs).expanduser().absolute() if rootfs else default_rootfs()
    if not path.name or path == Path(path.anchor) or path == REPO or REPO in path.parents:
        raise BuildError(f"unusable rootfs path {path} (must be a folder outside the repository)")
    return path


# ---- the host: tools, binfmt, mirror ------------------------------------------------------

def _ensure_binfmt() -> str | None:
    """Mount binfmt_misc and enable qemu-aarch64 if needed; the reason if that fails."""
    if not (BINFMT / "status").exists():
        done = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)],
                              capture_output=True, text=True)
        if done.returncode:
            return f"cannot mount binfmt_misc: {done.stderr.strip()}"
    entry = BINFMT / "qemu-aarch64"
    if not entry.exists() or entry.read_text().splitlines()[0] != "enabled":
        if not shutil.which("update-binfmts"):
            return "binfmt-support not installed (apt-get install binfmt-support)"
        done = subprocess.run(["update-binfmts", "--enable", "qemu-aarch64"],
                              capture_output=True, text=True)
        if not entry.exists() or entry.read_text().splitlines()[0] != "enabled":
            return ("cannot enable the qemu-aarch64 binfmt entry (apt-get install "
                    f"qemu-user-static binfmt-support): {done.stderr.strip()}")
    flags = re.search(r"^flags:\s*(\S*)", entry.read_text(), re.M)
    if not flags or "F" not in flags.group(1):
        return ("the qemu-aarch64 binfmt entry lacks the F flag, so arm64 programs cannot "
                "start inside a chroot; use qemu-user-static's entry")
    return None


def prepare_host() -> str | None:
    """None when this machine can build and run the emulated Pi (binfmt is enabled on the
    way, idempotently); otherwise the reason, for a skip message."""
    if sys.platform != "linux":
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (debootstrap, chroot and mounts)"
    missing = {"qemu-aarch64-static": "qemu-user-static", "debootstrap": "debootstrap",
               "update-binfmts": "binfmt-support", "unshare": "util-linux",
               "chroot": "coreutils", "ssh": "openssh-client", "scp": "openssh-client",
               "ssh-keygen": "openssh-client"}
    search = os.environ.get("PATH", "") + ":" + CHROOT_PATH
    absent = sorted({pkg for tool, pkg in missing.items() if not shutil.which(tool, path=search)})
    if absent:
        return f"missing host packages: apt-get install -y {' '.join(absent)}"
    return _ensure_binfmt()


def apt_mirror() -> str:
    """The Debian mirror this machine's apt uses for bookworm main; env
    EDGE_COMPRESS_PI_MIRROR overrides (and is needed where apt names none)."""
    override = os.environ.get("EDGE_COMPRESS_PI_MIRROR")
    if override:
        return override
    apt = Path("/etc/apt")
    candidates: list[tuple[str, list[str], list[str], list[str]]] = []  # types, uris, ...
    for path in [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]:
        for line in path.read_text(errors="replace").splitlines() if path.is_file() else ():
            found = re.match(r"^\s*(deb)\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)$",
                             line.split("#", 1)[0])
            if found:
                candidates.append(([found[1]], [found[2]], [found[3]], found[4].split()))
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text(errors="replace")):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                key, sep, value = line.partition(":")
                if sep and not line.startswith(("#", " ", "\t")):
                    fields[key.strip().lower()] = value.strip()
            if fields.get("enabled", "yes").lower() == "no":
                continue
            candidates.append((fields.get("types", "").split(), fields.get("uris", "").split(),
                               fields.get("suites", "").split(),
                               fields.get("components", "").split()))
    for types, uris, suites, components in candidates:
        if "deb" in types and SUITE in suites and "main" in components:
            for uri in uris:
                if uri.startswith(("http://", "https://")):
                    return uri.rstrip("/")
    raise BuildError(f"apt's sources name no http(s) mirror for {SUITE} main; set "
                     "EDGE_COMPRESS_PI_MIRROR to a Debian mirror's URL")


def _ca_bundle() -> Path | None:
    """The host's CA bundle, for pip inside the chroot: where TLS is intercepted by a
    proxy the host trusts, the bookworm CA store alone cannot reach PyPI."""
    for name in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        value = os.environ.get(name)
        if value and Path(value).is_file():
            return Path(value)
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return default if default.is_file() else None


def _env() -> dict[str, str]:
    """A clean environment for what runs in the chroot (the host's pip settings stay out)."""
    env = {"PATH": CHROOT_PATH, "HOME": "/root", "LANG": "C.UTF-8", "QEMU_CPU": QEMU_CPU,
           "DEBIAN_FRONTEND": "noninteractive"}
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                 "NO_PROXY"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


# ---- running things inside the rootfs -----------------------------------------------------

# In a private mount namespace: /proc, /dev, a tmpfs /tmp, the host folder $2 at
# MOUNTPOINT; then chroot. All of it goes away with the last process in the namespace.
# /sys holds only the CPU lists a Pi's kernel gives (/sys/devices/system/cpu/possible,
# present, online: "0-3" on a Pi 4; here one per host core): without them cpuinfo cannot
# count the processors, XNNPACK does not start and LiteRT runs its built-in kernels, which
# a real Pi never does. The host's own /sys is not bound (see the docstring).
_NAMESPACE_SH = f"""set -e
R=$1; F=$2; shift 2
mount -t proc proc "$R/proc" 2>/dev/null || mount --rbind /proc "$R/proc"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
mount -t tmpfs -o mode=0755 tmpfs "$R/sys"
mkdir -p "$R/sys/devices/system/cpu"
for list in possible present online; do
    echo "0-$(($(nproc) - 1))" > "$R/sys/devices/system/cpu/$list"
done
mkdir -p "$R{MOUNTPOINT}" "$R/run/sshd"
mount --bind "$F" "$R{MOUNTPOINT}"
exec chroot "$R" "$@"
"""


def _in_child() -> None:
    """In the child before exec, after start_new_session's setsid: SIGKILL when the Python
    process that started it dies, so a killed test run leaves no debootstrap or sshd
    running (PR_SET_PDEATHSIG); and the caller's niceness kept. A new session is a new
    scheduler autogroup, which Linux weighs against the others by the group's own nice, not
    its processes': CI's `nice -n 10 make emulated-pi` took an equal share of the 2 cores
    from make test beside it (make test 7:19 in a fresh-clone .ci/run; 4:48 with the nice
    kept)."""
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    nice = os.nice(0)
    if nice > 0:
        with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as group:
            group.write(str(nice))


def _namespaced(rootfs: Path, folder: Path, argv: list[str]) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", _NAMESPACE_SH,
            "sh", str(rootfs), str(folder), *argv]


def _run_logged(argv: list[str], log: Path, show: Callable[[str], str | None],
                env: dict[str, str]) -> int:
    """Run, append all output to `log`, pass each line to `show` (which returns what to
    print, if anything)."""
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env, text=True,
                                   errors="replace", start_new_session=True,
                                   preexec_fn=_in_child)
        try:
            for line in process.stdout:
                out.write(line)
                out.flush()
                message = show(line.rstrip())
                if message:
                    _say(message)
            return process.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise


def _tail(log: Path, lines: int = 25) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _mounts_under(path: Path) -> list[str]:
    real = os.path.realpath(path)
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == real or point.startswith(real + "/"):
            found.append(point)
    return found


def _remove(path: Path) -> None:
    """Delete a rootfs folder this module made (never one without its marker), refusing
    when anything is mounted under it."""
    if not path.exists():
        return
    if not (path / MARKER).exists() and not (path / STAMP).exists():
        raise BuildError(f"refusing to delete {path}: not made by {__name__}")
    mounted = _mounts_under(path)
    if mounted:
        raise BuildError(f"refusing to delete {path}: mounted under it: {mounted}")
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)


@contextlib.contextmanager
def _lock(rootfs: Path, progress: Progress) -> Iterator[None]:
    with open(rootfs.with_name(rootfs.name + ".lock"), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another process is building the rootfs; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


# ---- build --------------------------------------------------------------------------------

def package_hash() -> str:
    """pyproject.toml and runtimes/, the one package the device runs: when they change,
    build() reinstalls the wheel (~30 s); edits elsewhere (compress/) do not cost that."""
    digest = hashlib.sha256()
    files = [REPO / "pyproject.toml"]
    files += sorted(p for p in (REPO / "runtimes").rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def read_stamp(rootfs: Path) -> dict | None:
    try:
        return json.loads((rootfs / STAMP).read_text())
    except (OSError, ValueError):
        return None


def _write_stamp(rootfs: Path, stamp: dict) -> None:
    tmp = rootfs / (STAMP + ".tmp")
    tmp.write_text(json.dumps(stamp, indent=2) + "\n")
    tmp.rename(rootfs / STAMP)


def _build_wheel(stage: Path, log: Path) -> Path:
    """This repository as a wheel (pure Python), built from a copy of its package files
    so nothing is written into the checkout."""
    source = stage / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for name in PACKAGE_DIRS:
        shutil.copytree(REPO / name, source / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    base = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(stage)]
    for extra in (["--no-build-isolation", "--no-index"], []):   # offline first
        if _run_logged([*base, *extra, str(source)], log, lambda line: None, dict(os.environ)) == 0:
            return next(stage.glob("edge_compress-*.whl"))
    raise BuildError(f"cannot build the repository's wheel:\n{_tail(log)}")


# Inside the chroot. $1: the wheel's file name in MOUNTPOINT; $2: fresh | refresh.
_INSTALL_SH = f"""set -e
W={MOUNTPOINT}/$1
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off
export PIP_DEFAULT_TIMEOUT=180
if [ -f {MOUNTPOINT}/ca.crt ]; then export PIP_CERT={MOUNTPOINT}/ca.crt; fi
if [ "$2" = fresh ]; then
  echo "@step venv: python3 -m venv {VENV}"
  python3 -m venv {VENV}
else
  echo "@step pip: reinstalling the wheel"
  {VENV}/bin/pip install --no-deps --force-reinstall "$W"
fi
echo "@step pip: pip install edge-compress[device] (from PyPI)"
{VENV}/bin/pip install "$W[device]"
echo "@step check: pip check, no torch, python -m runtimes bench --help"
cd /
{VENV}/bin/pip check
if {VENV}/bin/python -c "import torch" 2>/dev/null; then
  echo "torch is importable in the device venv" >&2; exit 1
fi
{VENV}/bin/python -m runtimes bench --help >/dev/null
{VENV}/bin/pip list --format json >{MOUNTPOINT}/pip-list.json
{VENV}/bin/python -c "import platform, sys; print(platform.machine(), sys.version.split()[0])" \\
  >{MOUNTPOINT}/platform.txt
echo "@step done"
"""


def _install(rootfs: Path, mode: str, log: Path, progress: Progress) -> dict:
    """Install (fresh) or reinstall (refresh) the repository's wheel with its device extra
    in the rootfs's venv; returns the timings and what is installed."""
    steps: dict[str, float] = {}
    state = {"step": None, "since": time.monotonic()}

    def show(line: str) -> str | None:
        if line.startswith("@step "):
            now = time.monotonic()
            if state["step"]:
                steps[state["step"]] = round(steps.get(state["step"], 0) + now - state["since"], 1)
            state["step"], state["since"] = line[6:].split(":")[0], now
            return None if line == "@step done" else line[6:]
        if line.startswith(("Collecting", "Downloading", "Installing", "Successfully",
                            "ERROR", "error", "WARNING")) or "Error" in line:
            return "  " + line
        return None

    with tempfile.TemporaryDirectory(prefix="emulated-pi-stage-") as tmp:
        stage = Path(tmp)
        os.chmod(stage, 0o755)
        wheel = _build_wheel(stage, log)
        progress(f"built {wheel.name} on the host")
        bundle = _ca_bundle()
        if bundle:
            shutil.copy(bundle, stage / "ca.crt")
        argv = _namespaced(rootfs, stage, ["/bin/sh", "-c", _INSTALL_SH, "sh", wheel.name, mode])
        if _run_logged(argv, log, show, _env()):
            raise BuildError(f"installing the device extra in the emulated venv failed "
                             f"(log: {log}):\n{_tail(log)}")
        listed = json.loads((stage / "pip-list.json").read_text())
        installed = {p["name"]: p["version"] for p in listed}
        machine, python = (stage / "platform.txt").read_text().split()
    steps.pop("done", None)
    return {"steps": steps, "pip": installed, "machine": machine, "python": python}


def _debootstrap_filter() -> Callable[[str], str | None]:
    """Phase lines, warnings and errors; of the per-package lines ("I: Retrieving bash
    5.2", "I: Unpacking bash...") the first of each kind and then one every 20 s."""
    state = {"seen": set(), "last": time.monotonic()}
    per_package = re.compile(r"^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) "
                             r"[a-z0-9][a-z0-9+.:~-]*(\.\.\.| \S+)$")

    def show(line: str) -> str | None:
        if not line.startswith("I: "):
            return line or None                       # W:, E: and anything unexpected
        match = per_package.match(line)
        now = time.monotonic()
        if (match and match[1] in state["seen"] and now - state["last"] < 20
                and not line.endswith(" packages...")):
            return None
        if match:
            state["seen"].add(match[1])
        state["last"] = now
        return line
    return show


def build(rootfs: str | Path | None = None, progress: Progress = _say) -> Path:
    """The rootfs, built if needed (minutes) or reused (seconds); raises BuildError."""
    rootfs = _resolve(rootfs)
    reason = prepare_host()
    if reason:
        raise BuildError(reason)
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    with _lock(rootfs, progress):
        stamp = read_stamp(rootfs)
        if stamp and stamp.get("recipe") == RECIPE:
            if stamp.get("package") == package_hash():
                progress(f"reusing {rootfs} (built {stamp.get('built_at')})")
            else:
                _refresh(rootfs, stamp, progress)
            return rootfs
        _cold_build(rootfs, progress)
    return rootfs


def _refresh(rootfs: Path, stamp: dict, progress: Progress) -> None:
    started = time.monotonic()
    progress("runtimes/ or pyproject.toml changed since the rootfs was built: reinstalling "
             "edge-compress in the emulated venv")
    log = rootfs.with_name(rootfs.name + ".build.log")
    stamp["package"] = None                 # an interrupted refresh is redone next time
    _write_stamp(rootfs, stamp)
    with open(log, "a") as out:
        out.write(f"\n==== refresh {datetime.datetime.now().isoformat(timespec='seconds')}\n")
    current = package_hash()
    result = _install(rootfs, "refresh", log, progress)
    stamp.update(package=current, pip=result["pip"],
                 refreshed_at=datetime.datetime.now().isoformat(timespec="seconds"))
    _write_stamp(rootfs, stamp)
    progress(f"reinstalled in {time.monotonic() - started:.0f} s")


def _cold_build(rootfs: Path, progress: Progress) -> None:
    started = time.monotonic()
    partial = rootfs.with_name(rootfs.name + ".partial")
    log = rootfs.with_name(rootfs.name + ".build.log")
    if partial.exists():
        progress(f"removing an interrupted build: {partial}")
        _remove(partial)
    partial.mkdir()
    (partial / MARKER).write_text("an emulated Raspberry Pi rootfs (tests/device/emulated_pi.py)\n")
    log.write_text(f"==== build {datetime.datetime.now().isoformat(timespec='seconds')}\n")
    mirror = apt_mirror()
    progress(f"debootstrap {SUITE} {ARCH} (minbase + {', '.join(PACKAGES)}) from {mirror} "
             f"into {partial}; log: {log}")
    # its own mount namespace too: the /proc and /sys debootstrap mounts cannot outlive it
    argv = ["unshare", "--mount", "--propagation", "private", "debootstrap", f"--arch={ARCH}",
            "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(partial), mirror]
    if _run_logged(argv, log, _debootstrap_filter(), _env()):
        raise BuildError(f"debootstrap failed (log: {log}):\n{_tail(log)}")
    debootstrap_s = round(time.monotonic() - started, 1)
    progress(f"debootstrap done in {debootstrap_s:.0f} s")
    subprocess.run(["sh", "-c", f'rm -f "{partial}"/var/cache/apt/archives/*.deb'], check=False)
    current = package_hash()
    result = _install(partial, "fresh", log, progress)
    total = round(time.monotonic() - started, 1)
    versions = {name: result["pip"].get(name) for name in
                ("edge-compress", "numpy", "psutil", "onnxruntime", "onnxruntime-genai",
                 "ai-edge-litert", "pip")}
    _write_stamp(partial, {
        "recipe": RECIPE, "package": current, "mirror": mirror, "packages": list(PACKAGES),
        "built_at": datetime.datetime.now().isoformat(timespec="seconds"),
        "build_seconds": {"debootstrap": debootstrap_s, **result["steps"], "total": total},
        "machine": result["machine"], "python": result["python"], "pip": result["pip"]})
    if rootfs.exists():
        old = rootfs.with_name(rootfs.name + ".old")
        _remove(old)
        rootfs.rename(old)
        partial.rename(rootfs)
        _remove(old)
    else:
        partial.rename(rootfs)
    progress(f"built {rootfs} in {total:.0f} s ({total / 60:.1f} min): python {result['python']} "
             f"on {result['machine']}; " + ", ".join(f"{k} {v}" for k, v in versions.items()))


# ---- start: the Pi's own sshd -------------------------------------------------------------

@dataclass
class EmulatedPi(SshServer):
    """An SshServer whose sshd is the rootfs's arm64 one; `python` runs the device runner."""
    python: str = REMOTE_PYTHON
    rootfs: Path | None = None
    mount_namespace: str = ""

    def ssh_options(self) -> list[str]:
        """Options for ssh and scp: this key only, strict checking against known_hosts."""
        return ["-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "GlobalKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
                "-o", "ConnectTimeout=120", "-i", str(self.identity)]

    def ssh(self, command: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", *self.ssh_options(), "-p", str(self.port),
                               f"{self.user}@{self.host}", command],
                              capture_output=True, text=True, timeout=timeout)

    def copy_to(self, paths: list[Path], remote_dir: str,
                timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(["scp", "-q", *self.ssh_options(), "-P", str(self.port),
                               *map(str, paths), f"{self.user}@{self.host}:{remote_dir}/"],
                              capture_output=True, text=True, timeout=timeout)

    def stop(self) -> None:
        """End every process in the sshd's mount namespace (sshd, its sessions and their
        children); the namespace's mounts go with them."""
        own = os.readlink("/proc/self/ns/mnt")
        if not self.mount_namespace or self.mount_namespace == own:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            super().stop()
            return
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            pids = _pids_in_namespace(self.mount_namespace)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while pids and time.monotonic() < deadline:
                self.process.poll()
                time.sleep(0.1)
                pids = _pids_in_namespace(self.mount_namespace)
            if not pids:
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


def _pids_in_namespace(namespace: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "mnt") == namespace:
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def start(rootfs: str | Path | None = None, folder: str | Path | None = None,
          timeout: float = 180.0) -> EmulatedPi:
    """Start the rootfs's own arm64 sshd on 127.0.0.1:<free port> for root, with a
    throwaway host key (in `folder`'s known_hosts) and client key; raises StartError."""
    rootfs = _resolve(rootfs)
    reason = prepare_host()
    if reason:
        raise StartError(reason)
    if not read_stamp(rootfs):
        raise StartError(f"no built rootfs at {rootfs} (python -m tests.device.emulated_pi build)")
    folder = Path(folder).absolute() if folder else Path(tempfile.mkdtemp(prefix="emulated-pi-"))
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("host_ed25519", "client_ed25519"):
        for path in (folder / name, folder / f"{name}.pub"):
            path.unlink(missing_ok=True)
    host_key = make_keypair(folder / "host_ed25519")
    identity = make_keypair(folder / "client_ed25519")
    shutil.copy(identity.with_suffix(".pub"), folder / "authorized_keys")
    port = free_port()
    # paths as the chrooted sshd sees them: `folder` is bound at MOUNTPOINT
    (folder / "sshd_config").write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {MOUNTPOINT}/host_ed25519",
        f"PidFile {MOUNTPOINT}/sshd.pid", f"AuthorizedKeysFile {MOUNTPOINT}/authorized_keys",
        "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
        "StrictModes no", "UsePAM no", "UseDNS no", "PrintMotd no", "PrintLastLog no",
        "MaxStartups 50", "MaxSessions 50", "Subsystem sftp internal-sftp",
        # sshd gives sessions a fresh environment; every arm64 program they start needs it
        f"SetEnv QEMU_CPU={QEMU_CPU}", ""]))
    log = open(folder / "sshd.log", "wb")
    process = subprocess.Popen(
        _namespaced(rootfs, folder,
                    ["/usr/sbin/sshd", "-D", "-e", "-f", f"{MOUNTPOINT}/sshd_config"]),
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=_env(), start_new_session=True,
        preexec_fn=_in_child)
    log.close()
    if not wait_for_port(port, process, timeout=timeout):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise StartError(f"the emulated sshd did not start:\n{_tail(folder / 'sshd.log')}")
    try:
        namespace = os.readlink(f"/proc/{process.pid}/ns/mnt")
    except OSError:
        namespace = ""
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(known_hosts_line(port, host_key.with_suffix(".pub")))
    return EmulatedPi("127.0.0.1", port, "root", identity, known_hosts, host_key, process,
                      rootfs=rootfs, mount_namespace=namespace)


# ---- status and the command line ----------------------------------------------------------

def status(rootfs: str | Path | None = None) -> dict:
    rootfs = _resolve(rootfs)
    stamp = read_stamp(rootfs)
    partial = rootfs.with_name(rootfs.name + ".partial")
    return {"rootfs": str(rootfs), "built": bool(stamp and stamp.get("recipe") == RECIPE),
            "stale_recipe": bool(stamp and stamp.get("recipe") != RECIPE),
            "package_current": bool(stamp and stamp.get("package") == package_hash()),
            "interrupted_build_left": partial.exists(),
            "host_problem": prepare_host(), "mirror": apt_mirror(),
            "stamp": stamp}


def probe(pi: EmulatedPi, rounds: int = 5) -> dict:
    """uname -m over ssh and the round trip of `ssh ... true`."""
    uname = pi.ssh("uname -m")
    times = []
    for _ in range(rounds):
        began = time.monotonic()
        done = pi.ssh("true")
        times.append(time.monotonic() - began)
        if done.returncode:
            raise StartError(f"ssh true failed: {done.stderr}")
    return {"uname_m": uname.stdout.strip(), "ssh_true_s": [round(t, 2) for t in times],
            "ssh_true_median_s": round(statistics.median(times), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.device.emulated_pi",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("build", "start", "status"):
        sub = commands.add_parser(name)
        sub.add_argument("--rootfs",
                         help=f"default {default_rootfs()} (env EDGE_COMPRESS_PI_ROOTFS)")
        if name == "start":
            sub.add_argument("--folder", help="for keys, known_hosts, sshd_config and log")
            sub.add_argument("--check", action="store_true",
                             help="probe uname -m and the ssh round trip, then stop")
    args = parser.parse_args(argv)
    try:
        if args.command == "status":
            print(json.dumps(status(args.rootfs), indent=2))
            return 0
        if args.command == "build":
            began = time.monotonic()
            try:
                build(args.rootfs)
            except KeyboardInterrupt:
                _say("interrupted; the next build starts over")
                return 130
            _say(f"build() returned after {time.monotonic() - began:.1f} s")
            return 0
        with contextlib.ExitStack() as stack:
            folder = args.folder or stack.enter_context(
                tempfile.TemporaryDirectory(prefix="emulated-pi-"))
            began = time.monotonic()
            pi = start(args.rootfs, folder)
            return _serve(pi, began, args.check)
    except (BuildError, StartError) as error:
        _say(f"error: {error}")
        return 1


def _serve(pi: EmulatedPi, began: float, check: bool) -> int:
    try:
        _say(f"sshd up in {time.monotonic() - began:.1f} s: {pi.address}, python {pi.python}")
        _say("ssh " + " ".join(pi.ssh_options()) + f" -p {pi.port} root@127.0.0.1")
        if check:
            print(json.dumps(probe(pi), indent=2))
        else:
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            _say("Ctrl-C stops it")
            pi.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        pi.stop()
    return 0

if __name__ == "__main__":
    sys.exit(main())
