"""A device fleet: the quickstart pipeline measured on two boards of one profile at once.

The boards are two OpenSSH servers on 127.0.0.1 (throwaway keys, the test suite's
loopback sshd), so everything a real fleet does happens: each board is probed, gets the
runner and the models, measures one thing at a time, and the variants' rounds rotate
over the boards. The report shows how the measurements were split and each board's own
p90 beside the pooled one (the spread); with --drop-one the second board is killed
while it measures, and its measurement is retried on the first.

    python examples/device/fleet.py [--drop-one]     (make fleet; needs openssh-server)

Both boards are this machine, measured side by side: their spread is what two
measurements competing for two cores look like, not a difference between boards.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import compress  # noqa: E402
from compress.config.pipeline import TargetSpec, load_pipeline  # noqa: E402
from tests.sshd_server import pull_the_plug, runner_under, start_fleet  # noqa: E402
from ssh_loopback import require_quickstart_model  # noqa: E402  (its neighbour here)


def _drop_when_busy(server) -> None:
    """Kill the board as soon as it measures (in the background)."""
    def watch():
        deadline = time.monotonic() + 600
        while not runner_under(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        pull_the_plug(server)
        print(f"\n*** {server.address} unplugged while it measured ***\n", file=sys.stderr)
    threading.Thread(target=watch, daemon=True).start()


def _print_split(report: dict) -> None:
    fleet = report["fleets"]["boards"]
    print(f"\nboards in service: {', '.join(fleet['devices'])}")
    for dropped in fleet["dropped"]:
        print(f"dropped out: {dropped['device']}: {dropped['reason']}")
    counts: dict[str, int] = {}
    for bench in report["benchmarks"]:
        rows = "; ".join(f"{r['device']} p90 {r['p90']:.4f} ms ({r['rounds']} rounds)"
                         for r in bench["devices"])
        spread = bench["device_spread"]
        print(f"{bench['artifact']}: pooled p90 {bench['latency_ms']['p90']:.4f} ms; {rows}; "
              f"spread {'—' if spread is None else f'{spread * 100:.1f} %'}")
        for row in bench["devices"]:
            counts[row["device"]] = counts.get(row["device"], 0) + row["rounds"]
    print("rounds per board: " + ", ".join(f"{d} {n}" for d, n in counts.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drop-one", action="store_true",
                        help="kill the second board while it measures")
    args = parser.parse_args()
    require_quickstart_model()
    with tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
        fleet = start_fleet(Path(tmp))
        if isinstance(fleet, str):
            sys.exit(f"cannot start the loopback boards: {fleet}")
        servers, known = fleet
        try:
            pipeline = load_pipeline(REPO / "examples" / "quickstart" / "pipeline.yaml")
            target = TargetSpec(profile="host-cpu", name="boards",
                                ssh=tuple(s.address for s in servers),
                                identity=str(servers[0].identity), known_hosts=str(known),
                                python=sys.executable, connect_timeout_s=30)
            stages = pipeline.stages[:-1] + (pipeline.stages[-1].model_copy(
                update={"rounds": 4, "min_seconds": 8.0 if args.drop_one else 0.0}),)
            pipeline = pipeline.model_copy(update={"name": "fleet", "targets": (target,),
                                                   "stages": stages})
            if args.drop_one:
                _drop_when_busy(servers[1])
            result = compress.run(pipeline, quiet=False)
            _print_split(result.report)
            print(f"report: {result.run_dir / 'report.md'}")
        finally:
            for server in servers:
                server.stop()


if __name__ == "__main__":
    main()
