"""`python -m specscope` runs the command-line interface."""

import sys

try:
    from specscope.cli import main
except KeyboardInterrupt:  # Ctrl-C while Python still imports: nothing has started
    print("specscope: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
