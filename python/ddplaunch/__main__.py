"""`python -m ddplaunch ARGS`: the same as `ddplaunch ARGS` (the binary takes
this process's place, so signals and the exit status are its own)."""
import os
import sys

from ddplaunch import binary


def main():
    try:
        path = binary()
    except FileNotFoundError as e:
        print(f"ddplaunch: error: {e}", file=sys.stderr)
        return 127
    os.execv(path, ["ddplaunch", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
