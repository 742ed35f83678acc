"""`python -m runtimes bench ...` (the on-device entry point)."""
import sys

USAGE = "usage: python -m runtimes bench MODEL [options]   (bench --help for the options)"


def _main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("bench",):
        print(USAGE, file=sys.stderr)
        return 2
    from runtimes.bench import main
    return main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(_main())
