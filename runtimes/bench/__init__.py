"""`python -m runtimes bench MODEL`: one model measured with numpy and a runtime only, as
the pipeline's benchmark and a device run it.

    run.py       The runner: load, time, score, report; `main(argv)` is the command
    options.py   Its argument parser and what is checked of the arguments before any work
    auto.py      `--engine auto`: the installed engines probed here, the fastest kept
    metric.py    The model run on every evaluation feed and scored (accuracy, fidelity)
    report.py    The human-readable report (without --json)
"""
from runtimes.bench.run import main

__all__ = ["main"]
