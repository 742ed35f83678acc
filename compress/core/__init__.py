"""The leaves every wing may use: artifacts on disk and the stage cache they share, the
registrar of small registries, lazy imports of heavy libraries and of user code, Python
objects a pipeline may hold, scratch folders. Nothing here imports another wing.

    artifacts.py     Artifacts: immutable files in the run directory, with size and sha256.
    bounded_read.py  Reading a file a run left only when it is a regular file of a sane size.
    imports.py       Import user code named as `module.path:attribute` in pipeline.yaml.
    lazy.py          Import heavy libraries only when a stage needs them.
    library_errors.py  A third-party library failing inside itself on the user's model: ...
    pyobjects.py     Python objects in a Pipeline built from Python: a torch module, an ...
    safe_files.py    Files a run writes inside its folder, never through a link planted there, ...
    registry.py      A named table of functions filled by a decorator: how places and trial ...
    scratch.py       A scratch working directory for libraries that write into the current one.
    stage_cache.py   The stage cache shared by every run under one output folder (`runs/.stages/`).
"""
