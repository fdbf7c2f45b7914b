"""The benchmark harness's honesty rules (tex/bench/): baselines are checked against an
independent numpy result, the ratio is against the fastest competent baseline, every row
says each side's threads, the peak probe fits the register file and a fraction above
the peak is flagged. Nothing here asserts on a time."""
import numpy as np
import pytest

import tex
from tex import bench, cli
from tex.bench import peak, report
from tex.scheduler import target as targets

FAST = bench.Options(repeat=1, min_sample_s=1e-5)


def test_compare_refuses_a_baseline_that_disagrees():
    a = np.arange(6.0)
    with pytest.raises(AssertionError, match="baseline 'wrong'"):
        bench.compare(lambda: a * 2, {"right": lambda: a + a, "wrong": lambda: a * 3}, FAST,
                      unit="ns/call", threads=1, same_threads=False)
    with pytest.raises(AssertionError):            # tex itself against the reference
        bench.compare(lambda: a * 2, lambda: a * 2, FAST, unit="ns/call",
                      reference=lambda: a * 3, threads=1, same_threads=False)


def test_compare_takes_the_fastest_competent_baseline(monkeypatch):
    """Times are injected: the ratio is against the fastest baseline whose label does not
    say naive, the others are notes, and each side's threads are recorded."""
    monkeypatch.setattr(bench.harness, "interleave_all",
                        lambda fns, rounds, min_sample_s: [1.0, 5.0, 0.1, 2.0][:len(fns)])
    a = np.ones(3)
    r = bench.compare(lambda: a, {"slow": lambda: a, "fast (naive)": lambda: a,
                                  "mid": lambda: a}, FAST, unit="ns/call", threads=1,
                      same_threads=False)
    assert (r.baseline, r.numpy_s, r.ratio) == ("mid", 2.0, 2.0)
    assert r.extra == {"vs slow": "5.00x", "vs fast (naive)": "0.10x"}
    assert (r.tex_threads, r.numpy_threads) == (tex.get_num_threads(), 1)
    assert report.threads_cell(r) == f"{tex.get_num_threads()}/1"


def test_compare_times_tex_on_numpys_threads_too(monkeypatch):
    calls = []

    def fake(fns, rounds, min_sample_s):
        calls.append(tex.get_num_threads())
        return [1.0] * len(fns)
    monkeypatch.setattr(bench.harness, "interleave_all", fake)
    with bench.tex_threads(2):
        r = bench.compare(lambda: 1, lambda: 1, FAST, unit="ns/call", threads=1)
    assert calls == [2, 1] and r.extra["ratio at 1 thread"] == "1.00x"


def test_every_row_names_its_threads_and_baseline():
    r = bench.Result("GFLOP/s", 1.0, 2.0, 1e9, baseline="a @ b", tex_threads=2,
                     numpy_threads=2, name="x")
    cells = report._cells(r)
    assert cells[report.HEADER.index("threads")] == "2/2"
    assert cells[report.HEADER.index("baseline")] == "a @ b"


@pytest.mark.parametrize("cpu, registers", [("znver3", 16), ("haswell", 16),
                                            ("skylake-avx512", 32), ("x86-64", 16)])
def test_fma_chains_fit_the_register_file(cpu, registers):
    t = targets.named(cpu)
    assert t.vector_registers == registers
    chains = peak.fma_chains(t)
    assert chains == min(peak.FMA_LATENCY * peak.FMA_PORTS, registers - 2)
    assert chains + 2 <= registers


def test_fma_probe_computes_what_numpy_says_and_does_not_spill():
    k = bench._fma_kernels("float32")
    for iters in (1, 1000):
        assert k.peak(iters, peak._X, peak._Y) == pytest.approx(peak.expected_sum(iters),
                                                                rel=1e-4)
    assert k.chains == peak.fma_chains()
    if "vfmadd" in k.asm:
        assert not peak.spills(k.asm), "the probe's accumulators do not fit in registers"
    k64 = bench._fma_kernels("float64")
    assert k64.lanes * 2 == k.lanes
    assert k64.peak(10, peak._X, peak._Y) == pytest.approx(
        peak.expected_sum(10, "float64"), rel=1e-9)


def test_a_fraction_above_the_peak_is_a_measurement_error(monkeypatch):
    monkeypatch.setattr(peak, "fma_peak_gflops", lambda threads, dtype="float32": 10.0)
    r = bench.Result("GFLOP/s", tex_s=1.0, numpy_s=0.5, work=8e9, tex_threads=1,
                     numpy_threads=1)
    peak.peak_notes(r, "float32")
    assert r.extra["peak_fraction"] == pytest.approx(0.8)
    assert r.extra["numpy_peak_fraction"] == pytest.approx(1.6)
    assert "numpy_peak_fraction" in r.extra["MEASUREMENT ERROR"]
    ok = peak.peak_notes(bench.Result("GFLOP/s", 1.0, 2.0, 8e9, tex_threads=1,
                                      numpy_threads=1), "float32")
    assert "MEASUREMENT ERROR" not in ok.extra


def test_workloads_name_their_baselines():
    """The issue's workloads, with the baselines a numpy user would write."""
    names = bench.select()
    for name in ("fma_peak_f64", "splitk_4x65536x512", "matvec_1x4096x4096",
                 "matmul_tall_2048x3", "matmul_narrow_1024x1024x8"):
        assert name in names
    for name in ("call_overhead_compiled_8", "matmul_i8_i32_1024",
                 "threads_scale_scaled_add_64mib"):
        doc = bench.WORKLOADS[name].__doc__
        assert {"call_overhead_compiled_8": "np.dot", "matmul_i8_i32_1024": "float64 BLAS",
                "threads_scale_scaled_add_64mib": "np.multiply"}[name] in doc


def test_small_workloads_check_and_record_threads():
    for name in ("call_overhead_compiled_8", "reduce_f32_384x512"):
        r = bench.WORKLOADS[name](FAST)
        assert r.tex_threads == tex.get_num_threads() and r.numpy_threads == 1
        assert r.baseline and r.tex_s > 0 and r.numpy_s > 0


def test_int8_reference_is_exact():
    from tex.bench import linalg
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (5, 300), dtype=np.int8)
    b = rng.integers(-128, 128, (300, 4), dtype=np.int8)
    want = np.array([[sum(int(a[i, k]) * int(b[k, j]) for k in range(300)) for j in range(4)]
                     for i in range(5)], dtype=np.int32)
    assert np.array_equal(linalg.exact_reference(a, b, np.int32), want)


@pytest.mark.parametrize("subscripts, chain", [("ij,jk->ik", True), ("ij,jk,kl->il", True),
                                               ("ij,jk->ki", False), ("ij,kj->ik", False),
                                               ("ii,ij->ij", False), ("ij->i", False),
                                               ("bij,bjk->bik", False)])
def test_einsum_matmul_chain(subscripts, chain):
    assert cli.matmul_chain(subscripts) == chain


def test_einsum_baselines_agree_with_numpy():
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal(s) for s in ((3, 4), (4, 5), (5, 2))]
    base = cli.einsum_baselines("ij,jk,kl->il", ops)
    assert set(base) == {"numpy.einsum(optimize=True)", "a @ b @ c"}
    for fn in base.values():
        np.testing.assert_allclose(fn(), ops[0] @ ops[1] @ ops[2])


def test_split_k_rows_report_the_kernels_parts():
    """The parts note comes from the compiled kernel's own rule: four parts a thread for
    the split-K shape on two threads, one on one thread and for a square product."""
    from tex.bench import linalg
    M, N, K = tex.sizes("M N K")
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    f = tex.compile(tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k)))
    shape = {"M": 123, "K": 51234, "N": 456}
    with bench.tex_threads(2):
        assert linalg.auto_parts(f, shape) == 8
        assert linalg.auto_parts(f, {"M": 1024, "K": 1024, "N": 1024}) == 1
    with bench.tex_threads(1):
        assert linalg.auto_parts(f, shape) == 1
