"""`python -m specscope` runs the command-line interface."""

import sys

from specscope.cli import main

sys.exit(main())
