"""`python -m runtimes bench ...` (the on-device entry point) and `python -m runtimes
lm-bench ...` (a language model's tokens/s, runtimes/lm/bench.py)."""
import sys

COMMANDS = ("bench", "lm-bench")
USAGE = ("usage: python -m runtimes bench MODEL [options]   (bench --help for the options)\n"
         "       python -m runtimes lm-bench FOLDER [options]   (an onnxruntime-genai folder)")


def _main() -> int:
    command = sys.argv[1] if len(sys.argv) > 1 else None
    if command in ("-h", "--help"):
        print(USAGE)
        return 0
    if command not in COMMANDS:
        from runtimes.safe_text import safe_text   # the command line may hold anything
        problem = (f"unknown command '{safe_text(command, multiline=False)}'"
                   if command is not None else "no command given")
        print(f"error: {problem}; the commands are {', '.join(COMMANDS)}\n{USAGE}",
              file=sys.stderr)
        return 2
    if command == "lm-bench":
        from runtimes.lm.bench import main
    else:
        from runtimes.bench import main
    return main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(_main())
