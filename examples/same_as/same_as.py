"""`make same-as REF=<commit>`: the proof that a change moved code without changing what it
makes. `make conformance` and `make anchors` run on a copy of REF and on a copy of this
working tree (the same machine, the same environments); every file each run writes is
compared by sha256 and every fidelity figure by value. Timings, which no two runs share,
are left out.

    python examples/same_as/same_as.py REF [--only NAME ...] [--rounds 1]

    python examples/same_as/same_as.py REF AT     (two commits, neither checked out)

    python examples/same_as/same_as.py REF --suite conformance   (one of the two)

REF runs whole (its documents hold the whole corpus); its fingerprint is kept in
runs/same-as/<commit>-<host>.json and reused on this kind of CPU only: INT8 kernels, and
so fidelity figures, differ between CPUs (VNNI or not, x86 or Arm). The working tree runs whole too, or only the
models --only names (a name part, as the two scripts take it), compared with REF's rows
of the same names. An ONNX file is compared by the sha256 of its model with the torch
exporter's per-node notes left out (`pkg.torch.onnx.*`, `namespace`: the source file,
line and Python module of each node, which move when code moves and never change what a
node computes); every other file byte for byte. Exit 0: the same files and figures; 1: something differs (listed);
2: bad input.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))   # the repository's packages, as the corpus scripts take them

from runtimes.digest import sha256_file  # noqa: E402

CACHE = REPO / "runs" / "same-as"
# what a run needs that git does not track: the environments and the corpus' GRU, trained
# here once (make conformance builds them)
UNTRACKED = (".venv", ".venv-nncf", "examples/conformance/stateful/gru_step.onnx",
             "examples/conformance/stateful/gru_mnist.pt",
             "examples/conformance/stateful/split.npz")
# keys that hold a time, a machine's state or a path of the run: not part of what is made
# (time_share: a float layer's share of the file's time in onnxruntime's profile)
TIMED = ("seconds", "_ms", "wall_s", "p50", "throughput", "memory", "path", "time_share")
# the torch exporter's per-node notes: where in the source each node came from
SOURCE_NOTES = ("pkg.torch.onnx.", "namespace")
# the two scripts compared (examples/<name>/run.py, docs/<name>.json)
SUITES = ("conformance", "anchors")


def content_sha256(path: Path, external_data: bool = True) -> str:
    """sha256 of the file; for ONNX, of the model (its weights in a data file included,
    wherever they lie; external_data=False: the graph alone, its data file compared as a
    file) without the exporter's source notes and the producer's version stamp."""
    if path.suffix != ".onnx":
        return sha256_file(path)
    import onnx
    # external data read in: weights count, layout not
    model = onnx.load(str(path), load_external_data=external_data)
    # onnxruntime-genai's builder stamps its version with `git rev-parse HEAD` run five
    # folders above its own module: inside a checkout, this repository's commit
    model.ClearField("producer_version")
    for graph in _graphs(model.graph):
        for tensor in graph.initializer:   # read-in data says "DEFAULT" where inline omits it
            tensor.ClearField("data_location")
        for node in graph.node:
            kept = [p for p in node.metadata_props if not p.key.startswith(SOURCE_NOTES)]
            del node.metadata_props[:]
            node.metadata_props.extend(kept)
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def _graphs(graph):
    """A graph and the graphs inside its nodes (If, Loop, Scan bodies), at any depth."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _graphs(attribute.g)
            for sub in attribute.graphs:
                yield from _graphs(sub)


def host_tag() -> str:
    """The CPU's kind (architecture, model, the flags INT8 kernels choose by): the
    figures depend on it."""
    from runtimes.hostinfo import describe_host
    host = describe_host()
    kind = [host["arch"], host["cpu"], *host["cpu_flags"]]
    return hashlib.sha256("\n".join(kind).encode()).hexdigest()[:10]


def untimed(value):
    """`value` without the keys of TIMED, at any depth."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items()
                if not any(word in k for word in TIMED)}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def fingerprint(rows: dict[str, Path], tree: Path) -> dict:
    """Per model of each suite run: each file's content sha256 and size, the stage's record
    of what it made, and every fidelity figure (the pipeline's own metric per artifact,
    target and engine; the anchors' figure per tool)."""
    out = {}
    conformance, anchors = rows.get("conformance"), rows.get("anchors")
    for row in json.loads(conformance.read_text()) if conformance else []:
        metrics = {f"{b['artifact']}@{b['target']}@{b['engine']}": untimed(b.get("metric"))
                   for b in row.get("benchmarks", [])}
        artifacts = {a["id"]: {**a, "sha256": _made_file_sha256(tree, a)}
                     for a in row.get("artifacts", [])}
        out[f"conformance: {row['name']}"] = untimed(
            {"artifacts": artifacts, "fidelity": row.get("fidelity"), "metrics": metrics,
             "by_hand_identical": row.get("by_hand_identical")})
    for row in json.loads(anchors.read_text()) if anchors else []:
        tools = {name: {**tool, "sha256": content_sha256(tree / tool["path"])}
                 if tool.get("path") else tool for name, tool in row.get("tools", {}).items()}
        out[f"anchors: {row['name']}"] = untimed(tools)
    return out


def _made_file_sha256(tree: Path, artifact: dict) -> str:
    """The content sha256 of a conformance run's artifact (its run folder is the one
    holding a file of that path whose artifact sha256, data files included, is the
    recorded one)."""
    from compress.core.artifacts import sha256_artifact
    for path in (tree / "runs" / "conformance").glob(f"*/{artifact['path']}"):
        if sha256_artifact(path) == artifact["sha256"]:
            return content_sha256(path)
    sys.exit(f"same-as: no file of {artifact['id']} ({artifact['path']}) under "
             f"{tree / 'runs' / 'conformance'}")


def engines_apart(before: dict, after: dict) -> list[str]:
    """A benchmark's engine is the fastest as measured (host-cpu tries several), so two runs
    can pick apart where two are close: its metric is then of another engine's run and
    not comparable. Those metrics are taken out of both fingerprints and named here."""
    notes = []
    for row in sorted(before.keys() & after.keys()):
        was, now = (fp[row].get("metrics", {}) if row.startswith("conformance: ") else {}
                    for fp in (before, after))
        for where in sorted({key.rsplit("@", 1)[0] for key in set(was) ^ set(now)}):
            engines = [sorted(k.rsplit("@", 1)[1] for k in side if k.startswith(where + "@"))
                       for side in (was, now)]
            for side in (was, now):
                for key in [k for k in side if k.startswith(where + "@")]:
                    del side[key]
            notes.append(f"{row}/{where}: measured on {', '.join(engines[0]) or 'no engine'}"
                         f" in the reference, {', '.join(engines[1]) or 'no engine'} here")
    return notes


def differences(before, after, where="") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after), key=str):
            if key not in after:
                found.append(f"{where}/{key}: only in the reference")
            elif key not in before:
                found.append(f"{where}/{key}: only in this tree")
            else:
                found += differences(before[key], after[key], f"{where}/{key}")
        return found
    if before != after:
        return [f"{where}: {before!r} -> {after!r}"]
    return []


def copy_of(ref: str | None, into: Path) -> None:
    """REF's tracked files (None: this working tree's, uncommitted changes included), with
    the untracked things a run needs linked in."""
    into.mkdir(parents=True)
    if ref is None:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=REPO, capture_output=True,
                                check=True).stdout.decode().split("\0")
        for name in filter(None, listed):
            source = REPO / name
            if source.is_file():
                (into / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, into / name)
    else:
        archive = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for name in UNTRACKED:
        source = REPO / name
        if source.exists():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():     # the environments: linked
                (into / name).symlink_to(source)
            else:   # a model file is read from its own folder (a link out is refused)
                shutil.copy2(source, into / name)


def run_corpus(tree: Path, rounds: int, only: list[str] | None, suites) -> dict:
    """The suites' scripts in `tree`; the fingerprint of their rows (the documents they
    write for the whole corpus; the rows of a part, which only the working tree's scripts
    write)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    rows = {}
    for name in suites:
        script = f"examples/{name}/run.py"
        command = [sys.executable, script, "--rounds", str(rounds), "--runs", "10"]
        if only:
            rows[name] = tree / f"{name}-rows.json"
            command += ["--only", *only, "--rows", str(rows[name])]
        else:
            rows[name] = tree / "docs" / f"{name}.json"
        print(f"  {script}", flush=True)
        started = time.time()
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        written = rows[name].exists() and rows[name].stat().st_mtime >= started
        # 1: the pipeline less faithful somewhere, with its documents written; a crash
        # exits 1 too, and leaves the documents REF's checkout came with
        if done.returncode not in (0, 1) or not written:
            sys.exit(f"{script} failed in {tree} (exit {done.returncode}, "
                     f"{rows[name].name} {'written' if written else 'not written'}):\n"
                     f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    found = fingerprint(rows, tree)
    return portable(found)


SCRATCH = "same-as-"   # a copy's scratch folder: tempfile's prefix


def portable(found: dict) -> dict:
    """Messages that name a file (a load error) name it in a copy's scratch folder: "<tree>"
    instead, also in fingerprints kept before this was done."""
    return json.loads(re.sub(rf"/[^\s\"']*/{SCRATCH}[^/\s\"']+/tree", "<tree>",
                             json.dumps(found)))


def commit_of(ref: str) -> str:
    commit = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                            cwd=REPO, capture_output=True, text=True).stdout.strip()
    if not commit:
        print(f"same-as: {ref!r} is not a commit of this repository: give REF=<commit>",
              file=sys.stderr)
        sys.exit(2)
    return commit


def made_at(commit: str | None, rounds: int, only: list[str] | None = None,
            suites=SUITES) -> dict:
    """The fingerprint of a commit (whole, kept in CACHE per suite) or of the working tree
    (None)."""
    cached = {name: CACHE / f"{commit}-{host_tag()}-{name}.json" for name in suites}
    if commit and not only and all(path.exists() for path in cached.values()):
        kept = ", ".join(str(path.relative_to(REPO)) for path in cached.values())
        print(f"reference: {commit[:12]}, from {kept}")
        # untimed again: a fingerprint kept before a key joined TIMED still holds it
        return portable(untimed({k: v for path in cached.values()
                                 for k, v in json.loads(path.read_text()).items()}))
    print(f"{'reference: ' + commit[:12] if commit else 'this tree'}: "
          f"{' and '.join(f'make {name}' for name in suites)} on a copy", flush=True)
    with tempfile.TemporaryDirectory(prefix=SCRATCH) as scratch:
        tree = Path(scratch) / "tree"
        copy_of(commit, tree)
        found = run_corpus(tree, rounds, only, suites)
    if commit and not only:
        CACHE.mkdir(parents=True, exist_ok=True)
        for name, path in cached.items():
            part = {k: v for k, v in found.items() if k.startswith(f"{name}: ")}
            path.write_text(json.dumps(part, indent=1, sort_keys=True))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", help="the commit to compare this working tree with")
    parser.add_argument("at", nargs="?", help="a commit to compare instead of this working tree")
    parser.add_argument("--only", nargs="*", help="corpus models by name (default: all)")
    parser.add_argument("--rounds", type=int, default=1, help="timing rounds (not compared)")
    parser.add_argument("--suite", choices=SUITES, help="only this one (default: both)")
    args = parser.parse_args()
    suites = (args.suite,) if args.suite else SUITES
    before = made_at(commit_of(args.ref), args.rounds, suites=suites)
    after = made_at(commit_of(args.at) if args.at else None, args.rounds, args.only, suites)
    if args.only:   # REF's rows of the models run here
        before = {key: row for key, row in before.items() if key in after}
    apart = engines_apart(before, after)
    if apart:
        print(f"{len(apart)} benchmark(s) picked another engine as the fastest (a timing: "
              "their metrics are not compared):")
        print("\n".join(f"  {line}" for line in apart))
    found = differences(before, after)
    files = sum(len(v.get("artifacts", {})) if k.startswith("conformance") else len(v)
                for k, v in after.items())
    if found:
        print(f"DIFFERENT: {len(found)} difference(s)")
        print("\n".join(f"  {line}" for line in found))
        return 1
    print(f"SAME: {len(after)} corpus rows, {files} files (sha256, ONNX without the "
          f"exporter's source notes) and every fidelity figure as at {args.ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
