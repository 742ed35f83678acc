"""Run history: each run's reports kept under `runs/<name>/history/<when>-<config>/`, the
runs listed (`compress runs`) and two compared (`compress compare A B`).

The latest run of a name stays at `runs/<name>/report.*`; every finished run also leaves
a copy of its reports in its history folder (hard links: the next run replaces the files
by rename, so the linked copies keep the older contents), so a re-run with other settings
never loses the last one's numbers.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from compress.errors import ConfigError

REPORT_FILES = ("report.json", "report.md", "report.html", "manifest.json")
HISTORY = "history"


def archive(run_dir: Path, report: dict) -> Path:
    """Keep this run's reports (already written in run_dir) in its history folder."""
    now = time.time()   # to the millisecond: the names sort in the order the runs ended
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{int(now * 1000) % 1000:03d}"
    name = f"{stamp}-{report['pipeline']['config_sha256'][:8]}"
    final = run_dir / HISTORY / name
    tmp = run_dir / HISTORY / f".{name}.tmp-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    for file in REPORT_FILES:
        if (run_dir / file).is_file():
            try:
                os.link(run_dir / file, tmp / file)
            except OSError:
                shutil.copy2(run_dir / file, tmp / file)
    shutil.rmtree(final, ignore_errors=True)   # the same second and config: the newer stands
    os.replace(tmp, final)
    return final


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
    """A run's report.json, or a ConfigError saying why it is not one."""
    try:
        report = json.loads(Path(path).read_text())
        # what `runs` and `compare` read without asking: a file without them is no report
        for keys in (("pipeline", "config_sha256"), ("manifest", "packages"), ("passed",)):
            part = report
            for key in keys:
                part = part[key]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, OSError) else exc.strerror
        raise ConfigError(f"{path} is not a report.json written by `compress run` ({why})") \
            from None
    return report


def _entry(name: str, folder: Path, latest: bool) -> Optional[RunEntry]:
    try:
        report = load_report(folder / "report.json")
    except ConfigError:
        return None   # a folder of something else, or a report being written
    return RunEntry(name, folder, report["manifest"].get("created", "?"), report["passed"],
                    report["pipeline"]["config_sha256"], tuple(report.get("gated_targets", ())),
                    tuple(r.get("summary", "") for r in report.get("recommendations", ())),
                    latest)


def list_runs(output: Path, with_history: bool = False) -> list[RunEntry]:
    """The runs under an output folder, newest first within each name."""
    found = []
    for folder in sorted(p for p in output.iterdir() if p.is_dir() and not p.name.startswith(".")):
        latest = _entry(folder.name, folder, True)
        if latest:
            found.append(latest)
        if with_history and (folder / HISTORY).is_dir():
            older = sorted((folder / HISTORY).iterdir(), reverse=True)
            found += [e for e in (_entry(f"{folder.name}~{i}", p, False)
                                  for i, p in enumerate(older) if not p.name.startswith("."))
                      if e]
    return found


def resolve(ref: str, output: Path) -> Path:
    """The report.json a reference names: a run folder or report.json path, a run name
    under `output` (its latest run), or `name~N` (its N-th newest in history, ~0 the
    latest run's own copy)."""
    path = Path(ref)
    if path.is_file():
        return path
    if (path / "report.json").is_file():
        return path / "report.json"
    name, _, back = ref.partition("~")
    if not back:
        if (output / name / "report.json").is_file():
            return output / name / "report.json"
    elif back.isdigit():
        older = sorted((p for p in (output / name / HISTORY).glob("*")
                        if not p.name.startswith(".")), reverse=True) \
            if (output / name / HISTORY).is_dir() else []
        if int(back) < len(older):
            return older[int(back)] / "report.json"
    known = ", ".join(e.name for e in list_runs(output)) if output.is_dir() else "none"
    raise ConfigError(f"no finished run '{ref}' (a run folder, its report.json, a run name "
                      f"under {output} or name~N for its history); runs there: {known}")


def config_record(pipeline) -> dict:
    """The pipeline's settings as JSON (Python objects given in place of names, such as a
    torch module, as their repr), for comparing runs."""
    from pydantic_core import to_jsonable_python
    return to_jsonable_python(pipeline.model_dump(exclude={"tracking", "executor"}),
                              fallback=repr)
