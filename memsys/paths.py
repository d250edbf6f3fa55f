"""Re-export of ``harness.paths`` (the fixed base), so memsys code keeps its import path."""

from harness.paths import *  # noqa: F401,F403
