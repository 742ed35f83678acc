"""Where MLflow keeps a pipeline's runs: `tracking.mlflow.uri` (and `artifact_location`)
read and resolved against the pipeline's folder, checked before any work starts: a sqlite
URI's file, where it exists, must be an SQLite database.

A URI quoted in a message shows no password: every message passes
runtimes.safe_text.mask_credentials (in the errors' constructor, the progress notes, the
CLI's lines), `http://user:***@host`."""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from compress.errors import ConfigError

URI_FIELD = "tracking.mlflow.uri"
LOCATION_FIELD = "tracking.mlflow.artifact_location"
_DATABASES = ("postgresql", "mysql", "mssql")    # SQLAlchemy's, with an optional +driver
_SERVERS = ("http", "https", "databricks")
_SQLITE_HEADER = b"SQLite format 3\x00"    # the first 16 bytes of every SQLite database
_KINDS = ("a server (http://host:5000), a database (sqlite:///mlflow.db, a path relative "
          "to the pipeline's folder; or postgresql://, mysql://, mssql://)")


@dataclass(frozen=True)
class Store:
    uri: str                  # as MLflow takes it: a local path made absolute
    kind: str                 # sqlite | database | folder | server
    folder: Path | None       # the local folder it writes into, made when missing


def _scheme(uri: str) -> str:
    scheme = uri.split(":", 1)[0].lower() if ":" in uri else ""
    return "" if len(scheme) == 1 else scheme  # C:\... is a Windows path, not a scheme


def _writable_folder(folder: Path, what: str, field: str) -> None:
    """`folder` exists or can be made: its nearest existing ancestor is a writable folder."""
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"{what}: {existing} is a file, so the folder {folder} cannot be "
                          "made; choose another path", field=field)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: {existing} is not writable by this user; choose another "
                          "path", field=field)


def _local_path(text: str, base_dir: Path) -> Path:
    path = Path(os.path.expanduser(text))
    return Path(os.path.abspath(path if path.is_absolute() else Path(base_dir) / path))


def _sqlite(uri: str, base_dir: Path) -> Store:
    rest = uri[len("sqlite:"):]
    name, _, query = rest[3:].partition("?")
    if not rest.startswith("///") or name in ("", ":memory:"):
        raise ConfigError(f"'{uri}' names no database file: write sqlite:///mlflow.db (three "
                          "slashes and a path relative to the pipeline's folder) or "
                          "sqlite:////abs/path/mlflow.db", field=URI_FIELD)
    path = _local_path(name, base_dir)
    if path.is_dir():
        raise ConfigError(f"'{uri}': {path} is a folder; name the database file inside it, "
                          f"e.g. sqlite:///{name.rstrip('/')}/mlflow.db", field=URI_FIELD)
    _writable_folder(path.parent, f"'{uri}'", URI_FIELD)
    if path.exists():
        _sqlite_file(uri, path)
    return Store("sqlite:///" + path.as_posix() + (f"?{query}" if query else ""), "sqlite",
                 path.parent)


def _sqlite_file(uri: str, path: Path) -> None:
    """An existing file behind a sqlite URI is an SQLite database this user can write
    (an empty file is one SQLite starts); else MLflow fails only at the end of the run."""
    fix = (f"name a new file (sqlite:///mlflow.db) or an existing MLflow database in "
           f"{URI_FIELD}")
    if not path.is_file():   # a FIFO, a device: opening one could wait forever
        raise ConfigError(f"'{uri}': {path} is not a regular file; {fix}", field=URI_FIELD)
    try:
        with open(path, "rb") as file:
            head = file.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise ConfigError(f"'{uri}': {path} cannot be opened ({exc.strerror}); {fix}",
                          field=URI_FIELD) from None
    if (head and head != _SQLITE_HEADER) or not _readable_database(path):
        raise ConfigError(f"'{uri}': {path} is not an SQLite database; {fix}",
                          field=URI_FIELD)
    if not os.access(path, os.W_OK):
        raise ConfigError(f"'{uri}': {path} is not writable by this user; {fix}",
                          field=URI_FIELD)


def _readable_database(path: Path) -> bool:
    """SQLite reads its schema (a file whose header is right and whose pages are not);
    a database another process holds locked counts as one."""
    import sqlite3
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True,
                                                timeout=1)) as db:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError as exc:
        return "locked" in str(exc) or "busy" in str(exc)
    except sqlite3.DatabaseError:
        return False
    return True


def _file_store_allowed() -> bool:
    return os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("true", "1")


def _folder(uri: str, base_dir: Path) -> Store:
    # MLflow 3 refuses its folder store unless told otherwise: say so before any work
    if not _file_store_allowed():
        raise ConfigError(f"'{uri}' is a folder store, which MLflow 3 keeps in maintenance "
                          "mode and refuses unless MLFLOW_ALLOW_FILE_STORE=true is set. Use "
                          "a database instead: uri: sqlite:///mlflow.db (a file beside "
                          "pipeline.yaml), or set that variable", field=URI_FIELD)
    parsed = urlparse(uri) if _scheme(uri) == "file" else None
    if parsed is not None and parsed.netloc not in ("", "localhost"):
        raise ConfigError(f"'{uri}' names another machine ({parsed.netloc}); a file: URI is "
                          "a folder here, e.g. file:./mlruns", field=URI_FIELD)
    path = _local_path(unquote(parsed.path) if parsed is not None else uri, base_dir)
    _writable_folder(path, f"'{uri}'", URI_FIELD)
    return Store(path.as_uri(), "folder", path)


def _remote(uri: str, scheme: str) -> Store:
    if scheme in ("http", "https") and not urlparse(uri).hostname:   # "user:pw@" is none
        raise ConfigError(f"'{uri}' names no host: write {scheme}://host:port",
                          field=URI_FIELD)
    return Store(uri, "server" if scheme in _SERVERS else "database", None)


def resolve_store(uri: str, base_dir: Path) -> Store:
    """The tracking URI as MLflow will take it, or a ConfigError saying what to write."""
    uri = uri.strip()
    scheme = _scheme(uri)
    base = scheme.split("+")[0]
    if scheme == "sqlite":
        return _sqlite(uri, base_dir)
    if scheme in ("", "file"):
        if not uri:
            raise ConfigError(f"the URI is empty: give {_KINDS}", field=URI_FIELD)
        return _folder(uri, base_dir)
    if scheme in _SERVERS or base in _DATABASES:
        return _remote(uri, scheme)
    raise ConfigError(f"'{uri}' is not a tracking URI MLflow takes (scheme '{scheme}'): give "
                      f"{_KINDS}", field=URI_FIELD)


def artifact_location(location: str | None, store: Store, base_dir: Path) -> str | None:
    """Where a newly created experiment keeps its files: the one given (a local path
    relative to the pipeline's folder), or for a sqlite store `mlruns` beside the
    database, since MLflow's own default is ./mlruns in whatever folder the run started."""
    if location:
        path = _location_path(location, base_dir)
        # s3://, gs://, mlflow-artifacts:/ ...: MLflow's to read
        return location if path is None else path.as_uri()
    if store.kind == "sqlite":
        return (store.folder / "mlruns").as_uri()
    return None


def check_location(location: str | None, base_dir: Path) -> None:
    """A local artifact_location must be a folder this user can make."""
    path = _location_path(location, base_dir) if location else None
    if path is not None:
        _writable_folder(path, f"'{location}'", LOCATION_FIELD)


def _location_path(location: str, base_dir: Path) -> Path | None:
    """A local artifact location as an absolute path; None for a remote one."""
    scheme = _scheme(location)
    if scheme not in ("", "file"):
        return None
    return _local_path(unquote(urlparse(location).path) if scheme else location, base_dir)
