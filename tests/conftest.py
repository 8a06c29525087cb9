import sys
from pathlib import Path

# Top-level modules (rollout, reward, sync) live at the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
