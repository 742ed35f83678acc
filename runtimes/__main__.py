"""`python -m runtimes bench ...` (the on-device entry point)."""
import sys

COMMAND = "bench"   # the only one
USAGE = f"usage: python -m runtimes {COMMAND} MODEL [options]   ({COMMAND} --help for the options)"


def _main() -> int:
    command = sys.argv[1] if len(sys.argv) > 1 else None
    if command in ("-h", "--help"):
        print(USAGE)
        return 0
    if command != COMMAND:
        problem = f"unknown command '{command}'" if command is not None else "no command given"
        print(f"error: {problem}; the command is `{COMMAND}`\n{USAGE}", file=sys.stderr)
        return 2
    from runtimes.bench import main
    return main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(_main())
