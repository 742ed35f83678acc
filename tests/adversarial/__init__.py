"""The project's adversarial corpus: what a hostile or unlucky environment does to a run,
one file per class (docs/reference.md, "Guarantees, and the tests that hold them").

    test_links_and_space.py      links planted in a run folder; a full disk (real tmpfs)
    test_terminal_text.py        control characters from user data; passwords in URIs
    test_bounds.py               sizes: search spaces, protobuf bytes, npz headers, inputs
    test_readers_and_kills.py    report.json of any shape; FIFOs; a runner killed by a signal
    test_api_and_small.py        the Python API as documented; meters; odd model paths
    test_followups.py            reports and validate, preflight, the LM runner, searches
    test_followups_cache.py      the stage cache, the quantizer's litter, killed = failed
    planted.py                   (a helper) the folder a planted link points to; a tmpfs

Fast cases run in `make test`; whole-process runs are marked `runs` (`make test-runs`).
"""
