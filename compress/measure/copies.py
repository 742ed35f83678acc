"""Which files each board of a remote target holds, copied when the board first needs
them (compress.stages.benchmark)."""
from __future__ import annotations

from pathlib import Path, PurePosixPath

from compress.core.artifacts import artifact_files
from compress.measure.dispatch import board_for
from compress.measure.client import needed_engines


class Copies:
    """What each board of a remote target holds. A board gets its files when it first
    measures: the models of the jobs it is expected to measure (all of the target's for
    a single board, its share of a fleet's rotation), the inputs and the runner; a model
    it measures besides (a board that dropped out left it work) follows when needed."""

    def __init__(self, jobs: list, ctx, files: tuple, rounds: int):
        """`files`: (timed inputs, evaluation data, ...); `rounds`: the benchmark's."""
        self.jobs, self.ctx, self.rounds = jobs, ctx, rounds
        inputs, evaluation = files[:2]
        # one folder per artifact, with its weights file where it has one (names kept:
        # an ONNX model refers to its external data by name); a folder artifact (a
        # language model's) is that folder, its layout kept
        self.models = [_model_files(ctx.path(job.artifact), job.artifact.id) for job in jobs]
        self.inputs = {path: f"inputs/{path.name}" for path in (inputs, evaluation) if path}
        self.held: dict[tuple, dict] = {}   # (target, board) -> {local path: path there}

    def _share(self, target: str, place, mine: list[int]) -> list[int]:
        """The jobs of `target` (`mine`) the rotation gives `place` in some round."""
        boards = self.ctx.fleets[target].places
        at = boards.index(place) if place in boards else 0
        return [i for k, i in enumerate(mine) if any(
            board_for(k, r, len(boards)) == at for r in range(self.rounds))]

    def paths(self, index: int, place) -> dict:
        """{local path: path there} on `place` with job `index`'s model among them."""
        job = self.jobs[index]
        if not place.remote:
            return {}
        key = (job.target, place.label)
        if key not in self.held:
            mine = [i for i, other in enumerate(self.jobs) if other.target == job.target]
            share = self._share(job.target, place, mine)
            files = {p: n for i in {index, *share} for p, n in self.models[i].items()}
            # a comparison engine missing there only leaves that comparison unmeasured
            engines = needed_engines(self.jobs[i] for i in mine if not self.jobs[i].comparison)
            with self.ctx.progress.task(f"copy {len({index, *share})} models to {job.target} "
                                        f"({place.label})", None):
                self.held[key] = place.stage({**files, **self.inputs}, engines,
                                             self.ctx.progress.note)
            return _with_folder(self.held[key], self.ctx.path(job.artifact))
        held = self.held[key]
        missing = {p: n for p, n in self.models[index].items() if p not in held}
        if missing:
            held.update(place.add(missing))
        return _with_folder(held, self.ctx.path(job.artifact))


def _model_files(path: Path, name: str) -> dict[Path, str]:
    """{local file: its name on the device} of one artifact, under models/<name>/."""
    if path.is_dir():
        return {part: f"models/{name}/{part.relative_to(path).as_posix()}"
                for part in artifact_files(path)}
    return {part: f"models/{name}/{part.name}" for part in artifact_files(path)}


def _with_folder(held: dict, path: Path) -> dict:
    """`held` with a folder artifact's own path there (from one of its files')."""
    if path.is_dir() and path not in held:
        part = next(p for p in held if path in Path(p).parents)
        depth = len(Path(part).relative_to(path).parts)
        held[path] = str(PurePosixPath(held[part]).parents[depth - 1])
    return held
