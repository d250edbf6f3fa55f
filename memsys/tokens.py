"""Re-export of ``harness.tokens`` (the fixed base), so memsys code keeps its import path."""

from harness.tokens import *  # noqa: F401,F403
