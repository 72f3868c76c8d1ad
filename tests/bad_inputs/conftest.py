"""The catalogue's helpers are imported by name (``from harness import Case, check``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
