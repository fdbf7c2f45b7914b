"""The examples run and check themselves against numpy."""
import os
import re
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


def test_innermost_reduction_example_small():
    # one thread: with more, the timing harness waits 0.25 s before each sample for
    # OpenBLAS's spinning threads to sleep (tex/bench/harness.py SETTLE_S), 10 of this
    # run's 11 s; the output checked here is the same
    run = subprocess.run([sys.executable, str(EXAMPLES / "innermost_reduction.py"), "--small"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TEX_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr
    out = run.stdout
    for strategy in ("inner_parallel", "inner_reduction", "vector_accumulator"):
        assert f"--- {strategy}" in out and out.count(strategy) >= 3, strategy
    assert re.search(r"S_\w+\[ji\] \+= int32\(X\[i, ji \+ ", out)  # the accumulator vector
    assert "S_acc += S_part[ji]" in out                     # one horizontal reduction
    assert "fast_math=False" in out and "numpy a.sum(axis=1)" in out
    assert "innermost_reduction: all results match numpy" in out


def test_matmul_example_small():
    run = subprocess.run([sys.executable, str(EXAMPLES / "matmul.py"), "--small"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "the same loop nest as the auto schedule's blocked specialization C#2: True" in out
    # the blocked micro-kernel: packed A and B, a register tile of accumulators
    assert re.search(r"C_acc\[iii\w*, jii\w*\] \+= \(A_pack\[iio\w*, kii\w*, iii\w*\] \* "
                     r"B_pack\[jio\w*, kii\w*, jii\w*\]\)", out), out
    assert "matmul: all results match numpy" in out
