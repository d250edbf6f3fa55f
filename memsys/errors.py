"""Re-export of ``harness.errors`` (the fixed base), so memsys code keeps its import path."""

from harness.errors import *  # noqa: F401,F403
