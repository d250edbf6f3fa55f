"""Re-export of ``harness.atomic`` (the fixed base), so memsys code keeps its import path."""

from harness.atomic import *  # noqa: F401,F403
