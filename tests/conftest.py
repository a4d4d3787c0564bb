import os
import sys
from pathlib import Path

# Tests import the tiny-model helpers in tests/families.py by name.
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
