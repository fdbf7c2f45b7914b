"""The target override (schedule/target.py): named CPUs, TEX_CPU and TEX_CACHES, code for
a CPU this host cannot run refused at call time, and contractions and reductions
compiled for an AVX2 target (haswell) against numpy whatever the host is."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tex
from tex.scheduler.blocking import default_blocking
from tex.scheduler.target import CPU_FEATURES, host, missing_here, named, overriding, target

M, N, K = tex.sizes("M N K")


def test_named_cpus_have_the_vector_width_of_their_family():
    assert named("haswell").vector_bits == 256 and named("haswell").vector_registers == 16
    assert named("znver3").vector_bits == 256
    assert named("skylake-avx512").vector_bits == 512
    assert named("znver4").vnni_widths == (512, 256, 128)
    assert named("alderlake").vnni_widths == (256, 128)
    assert named("x86-64").vector_bits == 128
    with pytest.raises(ValueError, match="not a CPU tex knows"):
        named("pentium-pro")


def test_block_sizes_follow_the_target():
    small = named("haswell", ((1, 32 << 10), (2, 256 << 10), (3, 8 << 20)))
    big = named("znver5", ((1, 48 << 10), (2, 1 << 20), (3, 32 << 20)))
    for t in (small, big, named("znver3", ((2, 512 << 10),))):
        b = default_blocking("float32", 4, t)
        assert b.mc % b.mr == 0 and b.nr % t.lanes("float32") == 0
        assert b.kc * b.nr * 4 <= t.cache(2, 0) // 4          # a B micro-panel in L2
    assert default_blocking("float32", 4, big).nr == 64
    assert default_blocking("float32", 4, small).nr == 16
    # a server's whole-socket L3 (300 MiB on Emerald Rapids) counts as a core complex's
    server = named("emeraldrapids", ((1, 48 << 10), (2, 2 << 20), (3, 300 << 20)))
    assert default_blocking("float32", 4, server).nc == default_blocking("float32", 4, big).nc


def _run(env, code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_tex_cpu_and_tex_caches_set_the_target():
    out = _run({"TEX_CPU": "haswell", "TEX_CACHES": "32K,256K,8M"}, (
        "from tex.scheduler.target import target\n"
        "t = target(); print(t.cpu, t.vector_bits, dict(t.caches)[2])"))
    assert out.stdout.split() == ["haswell", "256", str(256 << 10)], out.stderr
    bad = _run({"TEX_CACHES": "lots"}, "from tex.scheduler.target import target; target()")
    assert "TEX_CACHES='lots'" in bad.stderr


def built_asm(f):
    """The assembly of the nests `f`'s calls built (f.asm would compile every nest)."""
    from tex.backends.llvm import jit
    with overriding(f._nests.target):
        return "".join(jit.assembly(b.make_ir()) for b in f._sig.builds)


def test_code_for_a_cpu_this_host_lacks_is_refused_not_run():
    from tex.backends.llvm import runtime
    wide = named("znver4")
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), "float32"), tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    with overriding(wide):
        f = runtime.compile(C, sizes={M: 2, N: 2, K: 2})       # the nest the call below runs
        assert "zmm" in built_asm(f)
    if not missing_here(wide):
        pytest.skip(f"this host ({host().cpu}) runs AVX-512 code")
    with pytest.raises(RuntimeError, match="illegal instruction"):
        f(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_avx2_contractions_and_reductions_match_numpy(dtype):
    """On an AVX-512 host this runs the AVX2 code path (16 registers, 6 x 16 tiles)."""
    avx2 = named("haswell", host().caches)
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), dtype), tex.tensor("B", (K, N), dtype)
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    R = tex.compute("R", (i,), tex.max(C[i, j], over=j))
    S = tex.compute("S", (i,), tex.sum(A[i, k], over=k))
    Am = tex.compute("Am", (i,), tex.argmax(A[i, k], over=k))
    with overriding(avx2):
        assert target().vector_bits == 256
        fc, fr, fs, fa = (tex.compile(x) for x in (C, R, S, Am))
    rng = np.random.default_rng(0)
    tol = 1e-4 if dtype == "float32" else 1e-10
    for m, kk, n in [(1, 1, 1), (7, 65, 63), (65, 7, 1000), (100, 257, 17)]:
        a = rng.standard_normal((m, kk)).astype(dtype)
        b = rng.standard_normal((kk, n)).astype(dtype)
        np.testing.assert_allclose(fc(a, b), a @ b, rtol=tol, atol=tol * kk)
        np.testing.assert_allclose(fr(a, b), (a @ b).max(1), rtol=tol, atol=tol * kk)
        np.testing.assert_allclose(fs(a), a.sum(1), rtol=tol, atol=tol * kk)
        np.testing.assert_array_equal(fa(a), a.argmax(1))
    assert "ymm" in built_asm(fc) and "zmm" not in built_asm(fc)


def test_every_named_cpu_compiles():
    i, j = tex.indices("i j")
    X = tex.tensor("X", (M, N), "float32")
    S = tex.compute("S", (i,), tex.sum(X[i, j] * 2, over=j))
    for cpu in ("x86-64", "sandybridge", "haswell", "alderlake", "skylake-avx512", "znver5"):
        assert cpu in CPU_FEATURES
        with overriding(named(cpu)):
            assert "define" in tex.compile(S).llvm_ir


def test_the_host_remembered_on_disk_is_what_llvm_says(tmp_path, monkeypatch):
    """jit.host_facts keeps LLVM's answer under the host's signature (CPU identity and
    flags, llvmlite build): a process that finds it is told exactly what LLVM would
    say; another signature (another CPU, another llvmlite) is another entry."""
    from tex.backends.llvm import jit
    from tex.scheduler.target import llvm_host_cpu
    monkeypatch.setenv("TEX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "_facts", [])
    asked = []
    real = jit._ask_llvm
    monkeypatch.setattr(jit, "_ask_llvm", lambda: asked.append(1) or real())
    first = jit.host_facts()
    assert asked == [1] and list(first[:2]) == list(llvm_host_cpu())
    assert len(list((tmp_path / "host").glob("*.o"))) == 1
    jit._facts.clear()
    assert jit.host_facts() == first and asked == [1]          # from disk
    signature = jit._host_signature()
    assert "flags" in signature and first[0] not in ("", None)
    monkeypatch.setattr(jit, "_host_signature", lambda: signature + "\nflags : other")
    jit._facts.clear()
    assert jit.host_facts() == first and asked == [1, 1]       # asked again
    assert len(list((tmp_path / "host").glob("*.o"))) == 2


def test_float16_on_a_cpu_without_f16c():
    """Without F16C, LLVM converts half precision by calling __extendhfsf2 and
    __truncsfhf2 (libgcc_s, compiler-rt): the loader finds them in libgcc_s; a kernel
    for x86-64-v2 failed to load (LoadError naming the symbol)."""
    x = np.array([1.5, -2.25, 65504, 6e-8, np.inf, np.nan], np.float16)
    y = np.array([1e-8, 3.14159, 70000, -0.1], np.float32)
    M = tex.sizes("M")
    i = tex.indices("i")
    A = tex.tensor("A", (M,), "float32")
    with overriding(named("x86-64-v2")), np.errstate(over="ignore"):
        assert "f16c" not in target().feature_set
        np.testing.assert_array_equal(tex.einsum("i,i->i", x, x), x * x)
        assert tex.einsum("i->", np.ones(3, np.float16)) == 3
        halves = tex.compile(tex.compute("H", (i,), A[i].astype("float16")))
        np.testing.assert_array_equal(halves(y), y.astype(np.float16))
