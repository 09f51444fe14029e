"""The ``energylens`` command line."""

import sys

try:
    from energylens.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while the command line's modules load: one line, no traceback
    print("energylens: interrupted", file=sys.stderr)
    sys.exit(130)

__all__ = ["main"]
