"""Where things are, for tests in any folder of tests/."""

from __future__ import annotations

import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]
ROOT = TESTS.parent  # the repository
SCRIPTS = TESTS / "scripts"  # scripts that tests start, apart from the tests
GOLDEN = TESTS / "golden"  # pinned sequences (tests/golden/regenerate.py writes them)
