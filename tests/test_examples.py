"""The examples run and check themselves against numpy."""
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_split_k_example_small():
    run = subprocess.run([sys.executable, str(EXAMPLES / "split_k.py"), "--small"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "after split_k" in run.stdout
    assert "C_part[ko, i, j] +=" in run.stdout
    assert "split_k: all results match numpy" in run.stdout
