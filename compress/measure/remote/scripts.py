"""What runs on the device with its own Python (host.py sends it as `python -c`): the
probe, which answers before any work whether the runner can run there, and the holder
of a run's folder lock. Stdlib only, as the device may have nothing else."""

# Runs on the device with its own Python, stdlib only (and syntax old Pythons parse, so
# they get the clear version message): facts, missing modules and tools, free disk, and
# (asked to, only when everything is there) the temporary directory, named by the caller
# so that it can be removed even if this answer never arrives.
PROBE = r"""
import importlib.util, json, os, platform, shutil, sys
ask = json.loads(sys.argv[1])
missing = [need for need, modules in ask["needs"].items()
           if not any(importlib.util.find_spec(m) for m in modules)]
tools = [t for t in ("tar", "timeout", "env", "setsid") if shutil.which(t) is None]
workdir = os.path.abspath(os.path.expanduser(ask["workdir"]))
try:
    free = shutil.disk_usage(workdir).free
except OSError:
    free = None
out = {"python": list(sys.version_info[:3]), "executable": sys.executable,
       "arch": platform.machine(), "cores": os.cpu_count(), "missing": missing,
       "missing_tools": tools, "workdir": workdir, "free_bytes": free, "dir": None}
def sweep(workdir):
    # folders of runs that were killed: their lock is free (its holder died with the run
    # that made it) and they are older than a minute (a new one is locked within seconds)
    import fcntl, glob, signal, time
    swept = []
    for folder in glob.glob(os.path.join(workdir, "edge-compress-*")):
        lock = os.path.join(folder, ".lock")
        if not os.path.isfile(lock) or time.time() - os.path.getmtime(folder) < ask["stale_s"]:
            continue
        try:
            with open(lock, "a") as held:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (OSError, IOError):
            continue
        try:
            os.killpg(int(open(os.path.join(folder, ".pid")).read()), signal.SIGTERM)
        except (OSError, IOError, ValueError):
            pass
        shutil.rmtree(folder, ignore_errors=True)
        swept.append(os.path.basename(folder))
    return swept
if ask["create"] and not missing and not tools and free is not None and free >= ask["bytes"]:
    out["swept"] = sweep(workdir)
    out["dir"] = os.path.join(workdir, ask["create"])
    os.mkdir(out["dir"], 0o700)
print(json.dumps(out))
"""

# Runs on the device for as long as the run that made the folder lives: holds the
# folder's lock until its stdin (this side's pipe) closes, also when this side is killed.
HOLD = ("import fcntl, sys\nheld = open(sys.argv[1] + '/.lock', 'a')\n"
        "fcntl.flock(held, fcntl.LOCK_EX)\nsys.stdin.read()\n")
