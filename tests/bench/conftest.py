import sys
from pathlib import Path

# The bench scripts import each other by module name (`from benchenv import ...`), as they
# do when run from the project root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
