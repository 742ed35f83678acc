"""Run history: each run's reports kept under `runs/<name>/history/<when>-<config>/`, the
runs listed (`compress runs`) and two compared (`compress compare A B`).

The latest run of a name stays at `runs/<name>/report.*`; every finished run also leaves
a copy of its reports in its history folder (hard links: the next run replaces the files
by rename, so the linked copies keep the older contents), so a re-run with other settings
never loses the last one's numbers.
"""
from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from compress.core.safe_files import make_dir, remove, reraise
from compress.errors import ConfigError
from compress.runner.report_schema import NotAReport, read_report

REPORT_FILES = ("report.json", "report.md", "report.html", "manifest.json")
HISTORY = "history"


def archive(run_dir: Path, report: dict) -> Path:
    """Keep this run's reports (already written in run_dir) in its history folder: made
    under a new temporary name and renamed, nothing in it through a link planted in the
    run folder (compress.core.safe_files), nothing half-made left on a full disk."""
    now = time.time()   # to the millisecond: the names sort in the order the runs ended
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{int(now * 1000) % 1000:03d}"
    name = f"{stamp}-{report['pipeline']['config_sha256'][:8]}"
    history = make_dir(run_dir / HISTORY)
    final = history / name
    tmp = make_dir(history / f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}", fresh=True)
    try:
        for file in REPORT_FILES:
            _keep(run_dir / file, tmp / file)
        remove(final)   # the same millisecond and config: the newer stands
        os.replace(tmp, final)
    except BaseException:
        remove(tmp)
        raise
    return final


def _keep(report: Path, copy: Path) -> None:
    """A hard link to one of the run's report files (a copy across file systems)."""
    try:
        if not stat.S_ISREG(os.lstat(report).st_mode):
            return
    except FileNotFoundError:
        return   # report.html where the page was not made
    try:
        os.link(report, copy, follow_symlinks=False)
    except OSError:
        try:
            shutil.copy2(report, copy, follow_symlinks=False)
        except OSError as exc:
            reraise(exc, copy.parent, os.lstat(report).st_size)


@dataclass(frozen=True)
class RunEntry:
    """One finished run: where its report is, and what it said."""
    name: str
    folder: Path
    created: str
    passed: bool
    config_sha256: str
    targets: tuple[str, ...]
    recommendations: tuple[str, ...]
    latest: bool


def load_report(path: Path) -> dict:
    """A run's report.json checked against what `runs` and `compare` read
    (report_schema.py), as a dict; a ConfigError naming the file and the field if not."""
    try:
        return read_report(path).model_dump()
    except (OSError, NotAReport) as exc:
        raise ConfigError(f"{path} is not a report.json written by `compress run` "
                          f"({_why(exc)}); give the report.json a run wrote, or run its "
                          "pipeline again") from None


def _why(exc: Exception) -> str:
    return (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)


def _entry(name: str, folder: Path, latest: bool, skipped: list) -> Optional[RunEntry]:
    path = folder / "report.json"
    try:
        report = read_report(path)
    except (FileNotFoundError, NotADirectoryError):
        return None   # a folder of something else, or a run that has not finished
    except (OSError, NotAReport) as exc:
        skipped.append((path, _why(exc)))
        return None
    return RunEntry(name, folder, report.manifest.created, report.passed,
                    report.pipeline.config_sha256, tuple(report.gated_targets),
                    tuple(r.summary for r in report.recommendations), latest)


def _maybe_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return True   # it cannot be looked at: reading its report says why


def _folders(parent: Path, newest_first: bool = False) -> list[Path]:
    """The folders in `parent` that are not hidden (a history copy being made), sorted by
    name (a history's names sort in the order its runs ended). Raises OSError."""
    names = sorted((n for n in os.listdir(parent) if not n.startswith(".")),
                   reverse=newest_first)
    return [parent / n for n in names if _maybe_dir(parent / n)]


def _runs_in(folder: Path, with_history: bool, skipped: list) -> list[RunEntry]:
    found = [e for e in (_entry(folder.name, folder, True, skipped),) if e]
    if not with_history:
        return found
    try:
        older = _folders(folder / HISTORY, newest_first=True)
    except (FileNotFoundError, NotADirectoryError):
        return found
    except OSError as exc:
        skipped.append((folder / HISTORY, _why(exc)))
        return found
    return found + [e for e in (_entry(f"{folder.name}~{i}", p, False, skipped)
                                for i, p in enumerate(older)) if e]


def list_runs(output: Path, with_history: bool = False,
              skipped: Optional[list] = None) -> list[RunEntry]:
    """The runs under an output folder, newest first within each name. A report.json
    that is not one a run wrote is left out, with (its path, why) added to `skipped`; an
    output folder that cannot be read is a ConfigError."""
    skipped = [] if skipped is None else skipped
    try:
        folders = _folders(output)
    except OSError as exc:
        raise ConfigError(f"cannot list the runs in {output}: {_why(exc)} (give the "
                          "pipeline's output folder with --output)") from None
    return [entry for folder in folders for entry in _runs_in(folder, with_history, skipped)]


def _something_at(path: Path) -> bool:
    """Whether a file (not a folder) is there; what it is, load_report checks."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:   # a run name, not a path
            return False
        raise


def _named(ref: str, output: Path) -> Optional[Path]:
    path = Path(ref)
    for candidate in (path, path / "report.json"):
        if _something_at(candidate):
            return candidate
    name, _, back = ref.partition("~")
    if not back:
        return output / name / "report.json" if _something_at(
            output / name / "report.json") else None
    if not re.fullmatch(r"[0-9]{1,9}", back):
        return None
    try:
        older = _folders(output / name / HISTORY, newest_first=True)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return older[int(back)] / "report.json" if int(back) < len(older) else None


def resolve(ref: str, output: Path) -> Path:
    """The report.json a reference names: a run folder or report.json path, a run name
    under `output` (its latest run), or `name~N` (its N-th newest in history, ~0 the
    latest run's own copy)."""
    try:
        found = _named(ref, output)
    except OSError as exc:
        raise ConfigError(f"cannot read '{ref}': {_why(exc)} ({exc.filename}); give a run "
                          "folder or a report.json you can read") from None
    if found is not None:
        return found
    try:
        known = ", ".join(e.name for e in list_runs(output)) or "none"
    except ConfigError:
        known = "none"
    raise ConfigError(f"no finished run '{ref}' (a run folder, its report.json, a run name "
                      f"under {output} or name~N for its history); runs there: {known}")


def config_record(pipeline) -> dict:
    """The pipeline's settings as JSON (Python objects given in place of names, such as a
    torch module, as their repr), for comparing runs."""
    from pydantic_core import to_jsonable_python
    return to_jsonable_python(pipeline.model_dump(exclude={"tracking", "executor"}),
                              fallback=repr)
