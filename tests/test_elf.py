"""tex's object loader (backends/llvm/elf.py), which every kernel of the suite runs
through: here what the rest of the suite does not reach -- page protections, unmapping,
a missing symbol, a relocation it does not know, a damaged file -- on objects LLVM
compiles for the test."""
import ctypes
import os
import struct
import subprocess
import sys

import pytest

from isolate import in_child
from tex.backends.llvm import elf, jit, split

# a writable global (bss), a read-only constant table, a call into libm and one into
# the image's own code
IR = r"""
@counter = global i64 0
@table = private unnamed_addr constant [4 x double] [double 1.5, double 2.5, double 3.5, double 4.5]
declare double @cos(double)

define internal double @twice(double %x) noinline {
  %y = fmul double %x, 2.0
  ret double %y
}

define double @probe(i64 %k) {
  %p = getelementptr [4 x double], [4 x double]* @table, i64 0, i64 %k
  %t = load double, double* %p
  %c = call double @cos(double 0.0)
  %s = fadd double %t, %c
  %r = call double @twice(double %s)
  %n = load i64, i64* @counter
  %n1 = add i64 %n, 1
  store i64 %n1, i64* @counter
  ret double %r
}
"""


def obj_of(ir_text):
    return jit.Machine.get().machine.emit_object(jit.optimized_module(ir_text))


def mappings():
    """[(start, end, permissions)] of this process's memory map."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split()[:2]
            start, end = (int(x, 16) for x in span.split("-"))
            out.append((start, end, perms))
    return out


def perms_at(address):
    return next(p for s, e, p in mappings() if s <= address < e)


@pytest.fixture(scope="module")
def probe_object():
    return obj_of(IR)


@in_child          # runs loaded code: a loader bug crashes the child, not pytest
def test_an_image_runs_its_code_reads_its_constants_and_keeps_its_data(probe_object):
    image = elf.Image(probe_object)
    probe = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_int64)(image.address("probe"))
    assert [probe(k) for k in range(4)] == [5.0, 7.0, 9.0, 11.0]   # 2 (table[k] + cos 0)
    assert ctypes.c_int64.from_address(image.address("counter")).value == 4
    assert "twice" not in image.symbols and "table" not in image.symbols   # not exported
    with pytest.raises(KeyError):
        image.address("no_such_symbol")


def test_code_is_never_writable_and_data_never_executable(probe_object):
    image = elf.Image(probe_object)
    code, data = perms_at(image.address("probe")), perms_at(image.address("counter"))
    assert code.startswith("r-x"), code
    assert data.startswith("rw-"), data
    span = [p for s, e, p in mappings() if image.base <= s < image.base + image.size]
    assert span and not any("w" in p and "x" in p for p in span), span


UNMAP_CHILD = r"""
import gc, sys
from tex.backends.llvm import elf

def mapped(address):
    with open("/proc/self/maps") as f:
        spans = [line.split()[0].split("-") for line in f]
    return any(int(s, 16) <= address < int(e, 16) for s, e in spans)

image = elf.Image(open(sys.argv[1], "rb").read())
base = image.base
if not mapped(base):
    sys.exit("the image is not mapped")
del image
gc.collect()
if mapped(base):
    sys.exit("the image is still mapped")
"""


def test_an_image_is_unmapped_when_dropped(probe_object, tmp_path):
    # a process of its own: in pytest's, another thread (a background compile, a BLAS
    # worker) may map something new at the freed address before the check
    path = tmp_path / "probe.o"
    path.write_bytes(probe_object)
    proc = subprocess.run([sys.executable, "-c", UNMAP_CHILD, str(path)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TEX_WARMUP": "0"})
    assert proc.returncode == 0, proc.stderr


@in_child
def test_two_images_of_one_object_have_their_own_data(probe_object):
    a, b = elf.Image(probe_object), elf.Image(probe_object)
    fa = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_int64)(a.address("probe"))
    fa(0)
    fa(1)
    assert ctypes.c_int64.from_address(a.address("counter")).value == 2
    assert ctypes.c_int64.from_address(b.address("counter")).value == 0


def test_a_symbol_nothing_defines_is_named():
    obj = obj_of("declare void @tex_test_undefined_thing()\n"
                 "define void @f() {\n  call void @tex_test_undefined_thing()\n  ret void\n}\n")
    with pytest.raises(elf.LoadError, match="tex_test_undefined_thing"):
        elf.Image(obj)
    elf.define("tex_test_undefined_thing", ctypes.cast(
        ctypes.CFUNCTYPE(None)(lambda: None), ctypes.c_void_p).value)
    try:
        assert elf.Image(obj).address("f")
    finally:
        del elf._defined["tex_test_undefined_thing"]


def relocations(obj):
    """[(file offset of the entry, type)] of every relocation of `obj`."""
    (shoff,) = struct.unpack_from("<Q", obj, 0x28)
    (shnum,) = struct.unpack_from("<H", obj, 0x3C)
    out = []
    for k in range(shnum):
        sh = struct.unpack_from("<IIQQQQIIQQ", obj, shoff + 64 * k)
        if sh[1] == elf.SHT_RELA:
            for r in range(sh[5] // 24):
                at = sh[4] + 24 * r
                out.append((at, struct.unpack_from("<Q", obj, at + 8)[0] & 0xFFFFFFFF))
    return out


def test_a_relocation_it_does_not_know_is_refused(probe_object):
    obj = bytearray(probe_object)
    at, kind = relocations(probe_object)[0]
    assert kind == elf.R_X86_64_64
    struct.pack_into("<I", obj, at + 8, 42)          # R_X86_64_GOTPCRELX, say
    with pytest.raises(elf.LoadError, match="relocation type 42"):
        elf.Image(bytes(obj))


@pytest.mark.parametrize("cut", [64, 1000, -100])
def test_a_damaged_object_is_an_error_not_a_crash(probe_object, cut):
    with pytest.raises(elf.LoadError):
        elf.Image(probe_object[:cut])


def test_thread_local_data_is_refused():
    obj = obj_of("@t = thread_local global i64 0\n"
                 "define i64 @f() {\n  %v = load i64, i64* @t\n  ret i64 %v\n}\n")
    with pytest.raises(elf.LoadError, match="section"):
        elf.Image(obj)


@in_child
def test_a_weak_reference_nothing_defines_is_null():
    obj = obj_of("declare extern_weak i64 @tex_test_weak_thing()\n"
                 "define i1 @has() {\n"
                 "  %c = icmp ne i64 ()* @tex_test_weak_thing, null\n  ret i1 %c\n}\n")
    image = elf.Image(obj)        # kept: its code is unmapped with it
    has = ctypes.CFUNCTYPE(ctypes.c_bool)(image.address("has"))
    assert has() is False


# two objects that call each other and share one's data: a kernel compiled as two
# modules (split.split_module) calls across them in both directions
CALLER = r"""
declare i64 @tex_test_far(i64)
@shared = global i64 40
define i64 @tex_test_near(i64 %x) {
  %y = call i64 @tex_test_far(i64 %x)
  %s = load i64, i64* @shared
  %r = add i64 %y, %s
  ret i64 %r
}
define i64 @tex_test_back(i64 %x) {
  %r = mul i64 %x, 3
  ret i64 %r
}
"""
CALLEE = r"""
declare i64 @tex_test_back(i64)
define i64 @tex_test_far(i64 %x) {
  %y = call i64 @tex_test_back(i64 %x)
  %r = add i64 %y, 1
  ret i64 %r
}
"""


@in_child
def test_objects_loaded_together_resolve_each_others_symbols():
    image = elf.Image([obj_of(CALLER), obj_of(CALLEE)])
    near = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(image.address("tex_test_near"))
    assert near(5) == 5 * 3 + 1 + 40
    # alone, the second object's reference is nothing this process defines
    with pytest.raises(elf.LoadError, match="tex_test_back"):
        elf.Image(obj_of(CALLEE))


def test_a_large_kernel_is_split_into_two_modules_that_load_as_one():
    """A matmul's module (its parallel regions reached through pointers, and regions
    starting regions) splits in two around its regions, each compiles alone, the two
    objects pack into one cache payload and load as one image; a small module and one
    with a defined global stay whole."""
    import numpy as np
    import tex
    from tex.backends.llvm import runtime
    M, N, K = tex.sizes("M N K")
    i, j, k = tex.indices("i j k")
    A = tex.tensor("A", (M, K), "float32")
    B = tex.tensor("B", (K, N), "float32")
    C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
    f = runtime.compile(C, sizes={M: 100, N: 70, K: 33})
    text = f._sig.built.make_ir()
    parts = split.split_module(text)
    assert len(parts) == 2 and all(".par" in p for p in parts)
    assert 'define i32 @"tex_C"(' in parts[0] and '@"tex_C"(' not in parts[1]
    objs = [obj_of(p) for p in parts]
    payload = jit.pack_objects(objs)
    assert jit._is_kernel_payload(payload) and jit.unpack_objects(payload) == objs
    assert not jit._is_kernel_payload(payload[:-1])
    image = elf.Image(jit.unpack_objects(payload))
    assert image.address("tex_C")
    assert split.split_module("define void @f() {\n  ret void\n}\n") == \
        ["define void @f() {\n  ret void\n}\n"]
    with_global = "@g = global i64 0\n" + text
    assert split.split_module(with_global) == [with_global]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((100, 33)).astype(np.float32)
    b = rng.standard_normal((33, 70)).astype(np.float32)
    np.testing.assert_allclose(f(A=a, B=b), a @ b, rtol=1e-4, atol=1e-4)


def test_a_half_that_fails_gets_the_module_compiled_whole(monkeypatch):
    """A half LLVM refuses (here: a second half that is not IR) does not fail the
    kernel: the module is compiled whole instead, where it would have been unsplit."""
    text = "define i64 @tex_test_whole(i64 %x) {\n  %y = add i64 %x, 2\n  ret i64 %y\n}\n"
    monkeypatch.setattr(split, "split_module", lambda t: [t, "this is not LLVM IR"])
    objs = jit.compile_module(text)
    assert len(objs) == 1
    assert elf.Image(objs).address("tex_test_whole")


def test_a_compiler_process_that_cannot_run_does_not_fail_a_large_kernel(monkeypatch):
    """A compiler process that dies at once (an interpreter that is not Python, an
    environment without subprocesses) costs a split module its second core, not the
    kernel: the module compiles whole, as it would have unsplit."""
    import sys
    text = "define i64 @tex_test_alone(i64 %x) {\n  %y = add i64 %x, 3\n  ret i64 %y\n}\n"
    monkeypatch.setattr(split, "split_module", lambda t: [t, t.replace("alone", "other")])
    monkeypatch.setattr(sys, "executable", "/bin/false")
    monkeypatch.setattr(jit, "_compilers", {})
    monkeypatch.setitem(jit.STATS, "compiled", 0)     # whole, it would compile here
    objs = jit.compile_module(text)
    assert len(objs) == 1
    assert elf.Image(objs).address("tex_test_alone")


def test_code_for_two_targets_in_turn_keeps_a_compiler_process_for_each(monkeypatch):
    """Modules for the host and for an AVX2 target in turn (the suite's AVX2 tests, a
    block under TEX_CPU) are compiled by one process a target, started once each, not
    by a new process at each switch."""
    from tex.scheduler.target import named, overriding
    started = []
    start = jit.CompilerProcess.__init__

    def counted(self, machine):
        started.append(machine.cpu)
        start(self, machine)
    monkeypatch.setattr(jit.CompilerProcess, "__init__", counted)
    monkeypatch.setattr(jit, "_compilers", {})
    monkeypatch.setitem(jit.STATS, "compiled", jit.IN_PROCESS_COMPILES)  # (not in here)
    text = "define i64 @tex_test_turns(i64 %x) {\n  %y = add i64 %x, 3\n  ret i64 %y\n}\n"
    try:
        for _ in range(3):
            for cpu in (None, "haswell"):
                with overriding(named(cpu) if cpu else None):
                    assert elf.Image([jit.compile_object(text)]).address("tex_test_turns")
        assert sorted(started) == sorted([jit.Machine.get().cpu, "haswell"])
        assert len(jit._compilers) == 2
    finally:
        for process in jit._compilers.values():
            process.close()
