"""Tests written to kill the mutants of issue 16 (tools/mutation_check.py applies them):
guard-tailed reductions under register tiles, fixed (compile-time) shapes whose splits
need tails, split-K with several parts on any host. Each runs in a child process
(tests/mutant_cases.py), since the bugs they catch read out of bounds."""
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent


def run_cases(*names):
    proc = subprocess.run([sys.executable, str(HERE / "mutant_cases.py"), *names],
                          cwd=HERE, env=dict(os.environ), capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"child exited {proc.returncode}\n{out[-3000:]}"
    for name in names:
        assert f"ok {name}" in proc.stdout, out


@pytest.mark.parametrize("cases", [("guard_tails", "guard_tails_property"),
                                   ("fixed_shapes",), ("split_k",)],
                         ids=["guard_tails", "fixed_shapes", "split_k"])
def test_mutant_cases(cases):
    run_cases(*cases)
