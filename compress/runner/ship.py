"""`compress ship`: the file a run recommends for a target, copied with a manifest
(ship.json: how to feed it, what it was measured with and where, its hashes) into a
folder a deployment step picks up; the same for `ship: {to: DIR}` in a pipeline and for
Result.ship / Result.recommendation in Python.

The file is copied, not linked: a later run replaces its stage folders. It is hashed as
it is copied and checked against the sha256 the run recorded, so a run folder changed
since (a file edited, a stage redone by a later run) is refused, never shipped under the
old numbers. Every file lands under a temporary name in the folder first and is renamed
into place, ship.json last; nothing is written through a link planted there
(compress.core.safe_files).
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Callable, Optional

from compress.core.artifacts import artifact_files
from compress.core.bounded_read import NotRegular, open_regular_file, read_regular
from compress.core.safe_files import NEW_FILE, expect, install, make_dir, reraise, write_temp
from compress.errors import ConfigError
from compress.runner.recommendation import (SHIPPABLE, Recommendation, artifact_record,
                                            recommendation, typed_as)

MANIFEST = "ship.json"


def _g(value) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "?"


def _nothing_to_ship(rec: Recommendation, run_dir: Path) -> ConfigError:
    miss = rec.closest_miss or {}
    misses = "; ".join(f"{m.get('budget')} {_g(m.get('value'))} (limit {_g(m.get('limit'))})"
                       for m in miss.get("misses") or () if isinstance(m, dict))
    closest = (f"; the closest miss: {miss.get('artifact')} ({misses})"
               if miss.get("artifact") else "")
    return ConfigError(f"{rec.target}: nothing to ship from the run in {run_dir}: "
                       f"{rec.status} ({rec.why or 'no variant meets every budget'})"
                       f"{closest}; loosen the budget or change the stages, and run again")


def _changed(path: Path, why: str) -> ConfigError:
    return ConfigError(f"{path} {why}: the run folder changed since its run (a later run "
                       "or a hand replaced it); run the pipeline again, then ship")


def _present(path: Path) -> None:
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise _changed(path, "is not a file")
    except (FileNotFoundError, NotADirectoryError):
        raise _changed(path, "is gone") from None


def _parts(path: Path, fmt: Optional[str]) -> tuple[list[Path], list[Path]]:
    """(the files the run hashed as the artifact, further files an ONNX model names as
    its external data), each in the model's folder."""
    if path.is_dir():   # before _present: a folder is not gone, it is not shipped
        raise ConfigError(f"{path} is a folder (a language model's): copy the folder itself; "
                          "`compress ship` ships one model file (with its weights file)")
    _present(path)
    hashed = artifact_files(path)   # as sha256_artifact hashed them
    extra = []
    if fmt == "onnx":
        import onnx
        try:
            graph = onnx.load(str(path), load_external_data=False).graph
        except Exception as exc:  # noqa: BLE001 - the run loaded it: it was changed since
            raise _changed(path, f"is no ONNX model onnx can read ({type(exc).__name__})") \
                from None
        for tensor in graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location":
                    extra.append(_external(path, entry.value))
    return hashed, [p for p in dict.fromkeys(extra) if p not in hashed]


def _external(path: Path, location: str) -> Path:
    if Path(location).name != location or location in (".", ".."):
        raise ConfigError(f"{path} keeps its weights in '{location}', not beside it: save it "
                          "with its external data in one file beside the model, then ship")
    return path.parent / location


def _copy_in(source: Path, final: Path, digests: list) -> Path:
    """`source`'s bytes in a new temporary file beside `final`, fed to each digest on the
    way."""
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        src = open_regular_file(source)   # a FIFO put there would block the copy
    except (FileNotFoundError, NotADirectoryError):   # removed since the run
        raise _changed(source, "is gone") from None
    except NotRegular:
        raise _changed(source, "is not a file") from None
    with src:
        try:
            fd = os.open(tmp, NEW_FILE, 0o644)
        except OSError as exc:
            reraise(exc, final.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                for block in iter(lambda: src.read(1 << 20), b""):
                    for digest in digests:
                        digest.update(block)
                    out.write(block)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                reraise(exc, final.parent)
            raise
    return tmp


def _copy_all(rec: Recommendation, parts: tuple, to: Path, recorded: Optional[str],
              temps: list) -> list[dict]:
    """Every file of the recommended model (`parts`: _parts) copied to a temporary name in
    `to` (added to `temps` as (temporary, final)), checked against the sha256 the run
    recorded; each file's record for ship.json."""
    hashed, extra = parts
    whole, files = hashlib.sha256(), []
    for part in [*hashed, *extra]:
        own = hashlib.sha256()
        final = to / part.name
        temps.append((_copy_in(part, final, [own] + ([whole] if part in hashed else [])),
                      final))
        files.append({"name": part.name, "sha256": own.hexdigest(),
                      "size_bytes": os.stat(temps[-1][0]).st_size})
    if recorded and whole.hexdigest() != recorded:
        raise _changed(rec.path, f"has sha256 {whole.hexdigest()[:12]}..., not the "
                       f"{recorded[:12]}... its run measured")
    return files


def _source_sha(report: dict) -> Optional[str]:
    manifest = report.get("manifest") if isinstance(report.get("manifest"), dict) else {}
    found = typed_as(manifest.get("source_model_sha256"), str)
    source = next((a for a in report.get("artifacts") or ()
                   if isinstance(a, dict) and a.get("stage") == "source"), {})
    return found or typed_as(source.get("sha256"), str)


def _manifest(rec: Recommendation, files: list[dict], recorded: Optional[str],
              report: dict, report_path: Path) -> dict:
    from compress.runner.manifest import product_version
    return {
        "target": rec.target, "status": rec.status, "file": files[0]["name"],
        "sha256": files[0]["sha256"], "files": files, "artifact": rec.artifact,
        "artifact_sha256": recorded, "format": rec.format, "precision": rec.precision,
        "feeding": rec.feeding, "engine": rec.engine, "threads": rec.threads,
        "latency_p90_ms": rec.latency_p90_ms, "model_size_mb": rec.model_size_mb,
        "peak_memory_mb": rec.peak_memory_mb, "metric": rec.metric, "drop": rec.drop,
        "measured_on_device": rec.measured_on_device,
        "off_target_reason": rec.off_target_reason,
        "source_model_sha256": _source_sha(report),
        "run_dir": str(report_path.parent.absolute()), "report": str(report_path.absolute()),
        "tool_version": product_version()}


def _shipped_before(to: Path) -> set[str]:
    """The names the last ship into `to` wrote (its ship.json), to drop the ones this one
    does not write again (a TFLite file shipped over an ONNX one)."""
    try:
        old = json.loads(read_regular(to / MANIFEST, 1 << 20, follow=False))
        return {f["name"] for f in old.get("files", ()) if Path(f["name"]).name == f["name"]}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):   # NotRegular too
        return set()


def _drop_stale(to: Path, names: set[str]) -> None:
    for name in names:
        try:
            if stat.S_ISREG(os.lstat(to / name).st_mode):
                (to / name).unlink()
        except OSError:
            pass   # a file of the old ship left beside: ship.json no longer names it


def _refuse_unshippable(rec: Recommendation, run_dir: Path, strict: bool,
                        warn: Callable[[str], None]) -> None:
    if rec.status not in SHIPPABLE or rec.path is None:
        raise _nothing_to_ship(rec, run_dir)
    if rec.status == "candidate":
        where = f" ({rec.off_target_reason})" if rec.off_target_reason else ""
        if strict:
            raise ConfigError(f"{rec.target}: {rec.artifact} is a candidate, measured off the "
                              f"device{where}; --strict ships only what was measured on it: "
                              "measure on the device (an ssh target), or leave out --strict")
        warn(f"warning: {rec.target}: shipping a candidate, measured off the device{where}; "
             "ship.json says status: candidate")


def ship(report: dict, report_path: Path, to, target: Optional[str] = None,
         strict: bool = False, warn: Optional[Callable[[str], None]] = None) -> Path:
    """Copy the file the run (its report at `report_path`) recommends for `target` into
    the folder `to` (made if missing), with ship.json; the shipped file's path. A target
    the run does not have, nothing to ship, a file changed since the run, a candidate
    under `strict` or a link where a file goes: ConfigError, nothing written."""
    run_dir = Path(report_path).parent
    rec = recommendation(report, run_dir, target)
    _refuse_unshippable(rec, run_dir, strict, warn or (lambda line: None))
    parts = _parts(rec.path, rec.format)
    to = _made(Path(to))
    for name in [MANIFEST, *(p.name for p in [*parts[0], *parts[1]])]:
        expect(to / name)   # checked before anything is copied: nothing half-shipped
    before, temps = _shipped_before(to), []
    recorded = typed_as(artifact_record(report, rec.artifact).get("sha256"), str)
    try:
        files = _copy_all(rec, parts, to, recorded, temps)
        data = json.dumps(_manifest(rec, files, recorded, report, Path(report_path)),
                          indent=2)
        temps.append((write_temp(to / MANIFEST, data + "\n"), to / MANIFEST))
        while temps:   # ship.json last: a reader of it finds the files it names
            install(*temps[0])
            temps.pop(0)
    finally:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
    _drop_stale(to, before - {f["name"] for f in files} - {MANIFEST})
    return to / files[0]["name"]


def ship_run(ref: str, output: Path, to, target: Optional[str] = None,
             strict: bool = False, warn: Optional[Callable[[str], None]] = None) -> Path:
    """`compress ship RUN`: RUN as `compress compare` takes it (history.resolve)."""
    from compress.runner.history import load_report, resolve
    report_path = resolve(ref, Path(output))
    return ship(load_report(report_path), report_path, to, target, strict, warn)


def ship_all(report: dict, report_path: Path, to: Path, strict: bool,
             note: Callable[[str], None]) -> dict[str, Path]:
    """`ship: {to: DIR}`: every gated target's recommendation into DIR/<target>/, each
    said; a target with nothing to ship is said too, and skipped."""
    shipped = {}
    for target in report.get("gated_targets") or ():
        rec = recommendation(report, Path(report_path).parent, target)
        if rec.status not in SHIPPABLE or rec.path is None:
            note(f"ship: {target}: nothing to ship ({rec.status})")
            continue
        if strict and rec.status == "candidate":
            note(f"ship: {target}: a candidate only (measured off the device): not shipped "
                 "under --strict")
            continue
        folder = make_dir(_made(Path(to)) / target)
        shipped[target] = ship(report, report_path, folder, target, strict, note)
        note(f"ship: {target}: {rec.artifact} ({rec.status}) -> {shipped[target]} "
             f"(manifest {folder / MANIFEST})")
    return shipped


def _made(folder: Path) -> Path:
    """The folder to ship into, made if missing (it may be reached through a link, as
    `output:` may; what is written inside it never is)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"{folder} is not a folder: ship into a folder (--to, "
                          "`ship: {to: DIR}`)") from None
    except OSError as exc:
        reraise(exc, folder.parent)
    return folder


def add_parser(sub) -> None:
    """`compress ship`'s arguments (compress/cli.py keeps only the dispatch)."""
    cmd = sub.add_parser("ship", help="copy the file a run recommends for a target, with "
                         "ship.json (how to feed it, its numbers, its hashes), to a folder")
    cmd.add_argument("run", help="a run name under --output (its latest run), name~N, a run "
                     "folder or a report.json")
    cmd.add_argument("--target", help="the target whose file to ship (needed when the run "
                     "has several)")
    cmd.add_argument("--to", required=True, help="the folder to ship into (made if missing)")
    cmd.add_argument("--output", default="runs", help="the output folder (default: runs)")
    cmd.add_argument("--strict", action="store_true",
                     help="refuse a candidate (a file measured off the device)")


def command(args, say: Callable[[str], None]) -> int:
    """`compress ship`: the file and ship.json written, said in one line; exit 0."""
    import sys
    from runtimes.safe_text import safe_text

    def warn(line: str) -> None:
        print(safe_text(line, multiline=False), file=sys.stderr)
    shipped = ship_run(args.run, Path(args.output), args.to, args.target, args.strict, warn)
    say(f"shipped {shipped} (how to feed it, its numbers and hashes: "
        f"{shipped.parent / MANIFEST})")
    return 0
