"""Smoke tests of the command line, the benchmark harness and the README's example.

Each command runs in a fresh interpreter, as a user would start it; they share one
private kernel cache. Nothing here asserts on a time."""
import json
import os
import pathlib
import platform
import re
import subprocess
import sys

import numpy as np
import pytest

from tex import bench, cli

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    # one thread: with more, the timing harness waits 0.25 s before each sample for
    # OpenBLAS's spinning threads to sleep (tex/bench/harness.py SETTLE_S): 5-6 s of
    # each timed command here, whose output is the same but for its figures
    env = dict(os.environ, TEX_CACHE_DIR=str(tmp_path_factory.mktemp("kernel-cache")),
               TEX_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

    def run(*args, cwd=ROOT):
        proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout
    return run


def test_einsum_prints_loop_nest_and_times(run):
    out = run("-m", "tex", "einsum", "ij,jk->ik", "7x5", "5x3")
    assert re.search(r"^\s*for \w+ in 0\.\.", out, re.M), out
    assert "numpy.einsum" in out


def test_einsum_show_prints_llvm_ir_for_a_scalar_operand(run):
    out = run("-m", "tex", "einsum", ",i->i", "scalar", "4", "--show", "--dtype", "int32")
    assert "define " in out


# `python -m tex demo` with its timing cut to one short round (its 5 rounds of 0.2 s
# samples were 3/4 of this test's time): the checks against numpy and the tables are
# the demo's own
QUICK_DEMO = """
import sys
from tex import cli
time_rows = cli._time_rows
cli._time_rows = lambda name, fn, base, threads, rounds, sample: time_rows(
    name, fn, base, threads, 1, 0.001)
sys.exit(cli.main(["demo"]))
"""


def test_demo_passes(run):
    out = run("-c", QUICK_DEMO)
    assert out.count("PASS") == 3 and "FAIL" not in out, out
    assert "numpy/tex" in out and "matmul f32 512x512x512" in out, out


def test_bench_writes_json(run, tmp_path):
    path = tmp_path / "out.json"
    run("-m", "tex", "bench", "--filter", "call_overhead", "--repeat", "3", "--json", str(path))
    doc = json.loads(path.read_text())
    names = [r["name"] for r in doc["results"]]
    assert names == ["call_overhead_einsum_i_i_8", "call_overhead_compiled_8"]
    for r in doc["results"]:
        assert r["error"] is None and r["unit"] == "ns/call"
        assert r["tex_s"] > 0 and r["numpy_s"] > 0 and r["ratio"] > 0
    assert doc["environment"]["repeat"] == 3


def test_quickstart_runs(run):
    out = run(str(ROOT / "examples" / "quickstart.py"))
    assert "all results match numpy" in out


def test_readme_example_is_the_quickstart():
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    quickstart = (ROOT / "examples" / "quickstart.py").read_text()
    assert quickstart.endswith(example)


@pytest.mark.parametrize("text, shape", [("512x256", (512, 256)), ("7", (7,)),
                                         ("", ()), ("scalar", ()), ("0x3", (0, 3))])
def test_parse_shape(text, shape):
    assert cli.parse_shape(text) == shape


def test_bench_registry_has_the_issue_workloads():
    assert set(bench.select()) >= {
        "call_overhead_einsum_i_i_8", "call_overhead_compiled_8", "compile_cold_matmul_f32",
        "compile_warm_disk_matmul_f32", "rowsum_f32_4096x4096", "rowsum_i8_4096x16384_i32",
        "fma_peak_f32", "matmul_f32_256", "matmul_f32_512", "matmul_f32_1000",
        "matmul_f32_1023", "matmul_f32_1024", "matmul_f32_2048", "matmul_f64_1024",
        "matmul_i8_i32_1024", "batched_bmk_bkn_32x128x128x128", "splitk_123x51234x456",
        # fusions (issue 11) and whole programs (issue 12)
        "matmul_rowmax_1024", "matmul_rowsum_1024", "logits_argmax_4096x512x1000",
        "matmul_bias_transpose_1024", "geglu_512x1024x4096", "gelu_of_gemm_1024",
        "attention_head_512x64", "layernorm_4096x1024", "conv1d_8x64x1024_w7",
        "bilinear_4096x256", "distance_matrix_2048x2048x64",
        # first calls and import (issue 13)
        "import_tex", "compile_cold_elementwise_f32", "compile_cold_row_reduction_f32",
        "compile_cold_three_operand_f32", "compile_cold_batched_f32",
        "compile_warm_disk_elementwise_f32", "compile_warm_disk_batched_f32"}
    assert bench.select("rowsum") == ["rowsum_f32_4096x4096", "rowsum_i8_4096x16384_i32",
                                      "matmul_rowsum_1024"]


def test_check_close_refuses_a_wrong_dtype_or_value():
    bench.check_close(np.float32([1, 2]), np.float32([1, 2.00001]))
    with pytest.raises(AssertionError):
        bench.check_close(np.int64([1, 2]), np.int32([1, 2]))
    with pytest.raises(AssertionError):
        bench.check_close(np.int32([1, 2]), np.int32([1, 3]))


def test_fma_peak_kernel_keeps_its_chains():
    seconds, flops = bench.fma_peak(1, samples=1, sample_s=0.002)
    assert seconds > 0 and flops > 0
    asm = bench._fma_kernels().asm
    if "x86" in platform.machine() or platform.machine() == "AMD64":
        assert "vfmadd" in asm


def test_bench_for_another_cpu_measures_its_code(run, tmp_path):
    """--cpu haswell on any AVX2 host: the FMA peak is that target's code (ymm, not zmm),
    and the JSON says which code the figures are of; a CPU tex does not know is refused
    with the names it knows."""
    from tex.scheduler.target import missing_here, named
    if missing_here(named("haswell")):
        pytest.skip("haswell's code cannot run on this host")
    path = tmp_path / "peak.json"
    out = run("-m", "tex", "bench", "--cpu", "haswell", "--filter", "fma_peak_f32",
              "--repeat", "1", "--json", str(path))
    assert "code for haswell" in out, out
    doc = json.loads(path.read_text())
    assert doc["environment"]["target"]["cpu"] == "haswell"
    (peak,) = doc["results"]
    notes = str(peak["extra"])
    assert peak["error"] is None and "ymm" in notes and "zmm" not in notes, notes
    proc = subprocess.run([sys.executable, "-m", "tex", "bench", "--cpu", "pentium42"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--cpu pentium42" in proc.stderr and "haswell" in proc.stderr


def test_counts_and_budgets_must_be_positive():
    for argv in (["bench", "--repeat", "0"], ["einsum", "ij->i", "4x4", "--repeat", "-1"],
                 ["tune", "ij->i", "4x4", "--budget", "nan"]):
        proc = subprocess.run([sys.executable, "-m", "tex", *argv], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2 and "must be above 0" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
