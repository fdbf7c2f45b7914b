"""`tex.einsum`'s front door, and its warm start: a kernel that an earlier process
compiled runs here without sympy, scheduling or IR generation.

When tex/einsum.py compiles an einsum with default keywords, it records (`record`) what
its call needs under a call-level key: the einsum's own cache key (subscripts, path,
each operand's dtype and pattern of 1s or rank) together with tex's source hash (every
module of the package), the code generator's fingerprint (llvmlite and LLVM versions,
target CPU and features), the full Target (TEX_CPU / TEX_CACHES overrides, caches,
cores), numpy's and Python's versions. The record names the kernels' object files by
their own cache keys and holds each kernel's generated call path (runtime.py's Python
source) with the constants it reads. A new process computes the key from the operands
alone (`kernel_key`), reads the record and the objects from the disk cache (both under
jit.py's HMAC and ownership checks: the record is Python source this user's tex wrote)
and runs. Any change of source, versions or target changes the key: a stale record is
never found, let alone used.

A warm kernel serves only the common call (ndarrays, default keywords, no out=); its
call path has no program behind it, so whatever needs one -- a dtype to convert, a shape
to refuse with numpy's message, out=, order= -- goes to tex/einsum.py (`_MISS`), which
builds the program as before (its kernel then comes from the disk cache).
"""
import collections
import ctypes
import functools
import hashlib
import importlib
import json
import os
import sys

import numpy as np

from tex.errors import ShapeError
from tex import layout
from tex.layout import (axis_order, canonical_layout, checked_operands, fortran_result,
                        product_sides, tall_k_major, transposed_product)

from .calls import _NUM_THREADS, thread_parts

MISS = object()
RECORD_VERSION = "tex-warm-1"
STATS = collections.Counter()   # "loaded": records used, "recorded": records written
_ndarray = np.ndarray
_entries = collections.OrderedDict()   # call key -> Kernel (or None: no record on disk)
_guards = {}                    # subscripts -> the guard of its last kernel
_full = []                      # tex/einsum.py's general path, once imported
_loaded_keys = {}               # kernel key of a record this process loaded -> its calls

# A compiled einsum: `fn(*operands in program order)`; `perm`: that order (None when it is
# the operands' own); the result dtype; whether the result is 0-d; the (operand, axis)
# giving each output dimension; `guard`: the fast path's call (see make_guard).
Kernel = collections.namedtuple("Kernel", "fn perm dtype scalar out_dims guard")


def einsum(subscripts, *operands, dtype=None, out=None, optimize=False, casting="safe",
           order="K"):
    """numpy.einsum on tex's compiled code: operands that np.asarray takes give an ndarray
    (a numpy scalar for a 0-d result, or `out`); any tex Tensor operand gives the
    Definition instead (IR, nothing runs). Kernels are cached by subscripts, operand
    dtypes, ranks and dimensions of size 1, `dtype`, `casting` and `optimize`; a
    Fortran-ordered or transposed operand runs as the einsum of its row-major
    transpose (tex/layout.py)."""
    if len(operands) == 1 and out is None and dtype is None and \
            operands[0].__class__ is _ndarray and subscripts.__class__ is str and \
            _relabels(subscripts):
        # numpy gives a view (np.einsum("ii->i", a)[:] = 0 sets a's diagonal)
        return np.einsum(subscripts, operands[0], casting=casting, order=order)
    if (subscripts.__class__ is str and dtype is None and casting == "safe"
            and order == "K" and (optimize is False or optimize is True)):
        guard = _guards.get(subscripts)
        if guard is not None:
            result = guard(*operands, out=out)
            if result is not MISS:
                return result
    if subscripts.__class__ is str and dtype is None and out is None and operands and \
            all(a.__class__ is _ndarray for a in operands) and \
            any(a.dtype.kind == "c" for a in operands):
        # complex operands: real einsums of their parts (tex/complex_einsum.py), whose
        # kernels' guards the terms take
        return _complex().einsum(einsum, subscripts, list(operands), None, None, optimize,
                                 casting, order)
    if subscripts.__class__ is str:
        # an operand out of the layout its kernel assumes, or a tall product of a k-major
        # operand (which the guard refuses): the einsum rewritten (tex/layout.py)
        result = _rewritten(subscripts, operands, dtype, out, optimize, casting, order)
        if result is not MISS:
            return result
    if (subscripts.__class__ is str and dtype is None and casting == "safe"
            and order == "K" and (optimize is False or optimize is True)):
        entry = _warm_entry(subscripts, operands)
        if entry is not None:
            result = entry.guard(*operands, out=out)
            if result is not MISS:
                _guards[subscripts] = entry.guard
                return result
    if not _full:
        from tex import warmup
        warmup.start_llvm()
        _full.append(importlib.import_module("tex.einsum")._einsum)
    return _full[0](subscripts, operands, dtype, out, optimize, casting, order)


def _complex():
    return importlib.import_module("tex.complex_einsum")


@functools.lru_cache(maxsize=256)
def _relabels(subscripts):
    """Whether a one-operand einsum only relabels its operand's axes, summing none
    (`ii->i`, `ij->ji`, `ji`, `...ii->...i`): numpy.einsum returns a view of the operand
    then, which writes reach (numpy's documented behaviour since 1.10)."""
    if subscripts.__class__ is not str:
        return False
    inputs, arrow, output = subscripts.replace(" ", "").partition("->")
    labels = inputs.replace("...", "")
    if "," in inputs or not labels.isalpha() and labels:
        return False
    if not arrow:                    # implicit output: the labels seen once
        return len(set(labels)) == len(labels)
    return set(output.replace("...", "")) == set(labels) and \
        ("..." in inputs) == ("..." in output)


def _rewritten(subscripts, operands, dtype, out, optimize, casting, order):
    """einsum's result through canonical_layout or transposed_product, or MISS when
    neither applies or the rewritten call refuses the operands (the call as written then
    raises, in the user's own terms)."""
    layout = canonical_layout(subscripts, operands, out is None and order == "K")
    if layout is None and out is None and order in ("K", "C"):
        layout = transposed_product(subscripts, operands)
        order = "C"
    if layout is None:
        return MISS
    if isinstance(order, str) and order.upper() == "A":
        order = fortran_result(operands)
    try:
        result = einsum(layout[0], *layout[1], dtype=dtype, out=out, optimize=optimize,
                        casting=casting, order=order)
    except ValueError:
        return MISS
    if layout[2] is None:
        return result
    result = result.transpose(layout[2])
    return result if order == "K" else np.ascontiguousarray(result)


def kernel_key(subscripts, arrays, dtype, casting, optimize):
    """tex/einsum.py's kernel cache key of these operands (arrays)."""
    greedy = optimize is False or optimize is True or optimize == "greedy"
    path_key = None if len(arrays) <= 2 else "greedy" if greedy else repr(optimize)
    key = [subscripts, dtype, casting, path_key]
    for a in arrays:
        key += (a.dtype, 1 in a.shape and tuple([d == 1 for d in a.shape]) or a.ndim)
    return tuple(key)


def ones_patterns(key):
    """Each operand's pattern of 1s in kernel_key `key` (None: no dimension is 1)."""
    return [p if isinstance(p, tuple) else None for p in key[5::2]]


def _tall_test(sides):
    """The guard's refusal of the shapes that transposed_product runs (product_sides'
    `sides`, None: none): the shape tests inline, so that a small product's call pays
    for two comparisons, then tall_k_major."""
    if sides is None:
        return ""
    p, q, terms = sides.p, sides.q, sides.terms
    summed = " * ".join(f"x{p}.shape[{n}]" for n in sides.summed)
    return (f" and not (x{p}.ndim == {len(terms[p])} and x{q}.ndim == {len(terms[q])} and "
            f"x{q}.shape[{sides.column}] <= {layout.NARROW} and "
            f"{summed} >= {layout.LONG} and _tall_k_major(_sides, (x0, x1)))")


def _ones_test(x, pattern):
    """Python that holds when operand `x` has the pattern of 1s `pattern` (its rank and
    which dimensions are 1), written out dimension by dimension on one read of its shape:
    98 ns for a (1, 8) operand, where building the pattern's tuple with a generator and
    comparing it took 458."""
    return " and ".join([f"len(s_{x} := {x}.shape) == {len(pattern)}"] +
                        [f"s_{x}[{d}] {'==' if one else '!='} 1"
                         for d, one in enumerate(pattern)])


def make_guard(fn, perm, scalar, dtypes_in, key, dtype_out):
    """`guard(*operands, out=None)`: the kernel's result if every operand is an ndarray
    of the kernel's dtype with the kernel's pattern of 1s (from kernel_key `key`), in the
    layout the kernel is for (tex/layout.py), `out` is None or an ndarray of the result's
    dtype `dtype_out` (not for a 0-d result), and the kernel accepts their shapes, else
    MISS. Another pattern of 1s has a kernel of its own (a row vector's, where a label's
    dimensions are all 1), so the guard of a kernel without 1s refuses shapes with one;
    the kernel's size checks refuse the rest (ShapeError), which sends the call to the
    general path. (`out=` went the general path, 3-4 us more a call: a 1 x 8 @ 8 x 16
    product 6.9 us with out=, 3.6 without; the preallocated-buffer habit cost the most.)"""
    ones = ones_patterns(key)
    ranks = [len(r) if isinstance(r, tuple) else r for r in key[5::2]]
    checked = checked_operands(key[0], len(dtypes_in))
    sides = product_sides(key[0]) if len(dtypes_in) == 2 else None
    xs = [f"x{k}" for k in range(len(dtypes_in))]
    test = " and ".join(f"{x}.__class__ is _nd and {x}.dtype is _dt{k} and " +
                        (f"1 not in {x}.shape" if ones[k] is None else
                         _ones_test(x, ones[k])) +
                        (f" and ({x}.flags.c_contiguous or _laid_out({x}))"
                         if k in checked and ranks[k] > 1 else "")
                        for k, x in enumerate(xs)) + _tall_test(sides)
    args = ", ".join(xs[p] for p in (perm or range(len(xs))))
    out_test = "out is None" if scalar else \
        "(out is None or out.__class__ is _nd and out.dtype is _dto)"
    call = f"fn({args})[()]" if scalar else \
        f"(fn({args}) if out is None else fn({args}, out=out))"
    src = (f"def guard({''.join(x + '=_MISS, ' for x in xs)}*rest, out=None):\n"
           f"    if not rest and {out_test} and {test}:\n"
           f"        try:\n"
           f"            return {call}\n"
           f"        except ShapeError:\n"
           f"            pass\n"
           f"    return _MISS\n")
    scope = {"fn": fn, "_nd": _ndarray, "_MISS": MISS, "ShapeError": ShapeError,
             "_dto": dtype_out,
             "_laid_out": lambda a: axis_order(a) is None,
             "_tall_k_major": tall_k_major, "_sides": sides,
             **{f"_dt{k}": dt for k, dt in enumerate(dtypes_in)}}
    exec(compile(src, "<tex einsum guard>", "exec"), scope)
    return scope["guard"]


def chain(steps):
    """`run(*operands, out=None)`: contraction steps [(operand positions, call path)], a
    step at a time, each step's result appended to the operands left."""
    def run(*operands, out=None):
        values = list(operands)
        for n, (positions, fn) in enumerate(steps):
            args = [values[p] for p in positions]
            for p in sorted(positions, reverse=True):
                del values[p]
            values.append(fn(*args) if out is None or n < len(steps) - 1 else fn(*args, out=out))
        return values[0]
    run.steps = steps
    return run


def reordered(fn, perm):
    def call(*args, out=None):
        return fn(*[args[p] for p in perm], out=out)
    call.reorder = (fn, perm)
    return call


def remember(key, entry):
    """Keep `entry` (a Kernel, or None for a key without a record) in this process, as
    many as the kernels the JIT keeps (an entry holds its kernel's code)."""
    from . import jit
    while len(_entries) >= jit.kernel_cache_size():
        _entries.popitem(last=False)
        _guards.clear()
    _entries[key] = entry


# ---------------------------------------------------------------- the call-level key

def source_hash(folders):
    """sha256 of every .py file under `folders` (names and contents): any change to tex's
    code may change the kernel a call compiles to. Read from the disk cache while no
    file changed (sources.py)."""
    from . import jit, sources
    return sources.digest(sources.python_files(folders), jit.read_cached, jit.write_cached)


def _package_folders():
    """tex's three source folders (the DSL, tex.scheduler, tex.backends)."""
    return [os.path.dirname(sys.modules[name].__file__)
            for name in ("tex", "tex.scheduler", "tex.backends")]


_SOURCE = []


def call_key(key):
    """The call-level key of einsum's kernel key `key` (see the module docstring)."""
    from . import jit
    from ...scheduler.target import target
    if not _SOURCE:
        _SOURCE.append(source_hash(_package_folders()))
    parts = [RECORD_VERSION, _SOURCE[0], jit.fingerprint(), repr(target()),
             np.__version__, sys.version.split()[0],
             repr(tuple(k.str if isinstance(k, np.dtype) else k for k in key))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def recorded_calls(key):
    """The operands' shapes of the calls the record this process loaded for einsum's
    kernel key `key` was built for ([] without one): a kernel builds only the
    specializations its calls ran, so one built again for a new call builds theirs too
    (and the record grows, never flips between size classes)."""
    return _loaded_keys.get(key, [])


def _warm_entry(subscripts, operands):
    """The Kernel of these operands from this process or a record on disk, or None."""
    for a in operands:
        if a.__class__ is not _ndarray:
            return None
    key = kernel_key(subscripts, operands, None, "safe", False)
    if key in _entries:
        return _entries[key]
    entry = None
    if os.environ.get("TEX_BOUNDS_CHECK", "") in ("", "0"):
        entry = _load(call_key(key), key)
    remember(key, entry)
    return entry


# ---------------------------------------------------------------- records

def _is_record(payload):
    try:
        return json.loads(payload).get("version") == RECORD_VERSION
    except (ValueError, AttributeError, UnicodeDecodeError):
        return False


def record(key, entry, calls=()):
    """Write the record of einsum's freshly compiled `entry` (default keywords only), and
    keep the entry for the front door; `calls`, the operands' shapes of the calls whose
    specializations it built. A kernel whose call path is not a plain generated
    one (bounds checks, a CPU that cannot run it) is not recorded."""
    _, dtype, casting, path = key[:4]
    if dtype is not None or casting != "safe" or path not in (None, "greedy") or \
            os.environ.get("TEX_BOUNDS_CHECK", "") not in ("", "0"):
        return
    remember(key, entry)
    fn = _describe(entry.fn)
    if fn is None:
        return
    from . import jit
    rec = {"version": RECORD_VERSION, "fn": fn, "perm": entry.perm, "dtype": entry.dtype.str,
           "scalar": entry.scalar, "out_dims": entry.out_dims,
           "dtypes_in": [k.str for k in key[4::2]], "calls": [list(c) for c in calls]}
    jit.write_cached(call_key(key), json.dumps(rec).encode(), kind="calls")
    STATS["recorded"] += 1


def _describe(fn):
    """A call path as JSON: a generated call path, a reordering of one, or a chain."""
    if hasattr(fn, "steps"):
        steps = [(list(pos), _describe(f)) for pos, f in fn.steps]
        return None if any(d is None for _, d in steps) else {"chain": steps}
    if hasattr(fn, "reorder"):
        inner = _describe(fn.reorder[0])
        return inner and {"reorder": list(fn.reorder[1]), "fn": inner}
    g = getattr(fn, "__globals__", {})
    sig, source = g.get("_sig"), getattr(fn, "source", None)
    if source is None or getattr(sig, "object_key", None) is None or sig.bounds is not None:
        return None
    from . import irtypes
    consts = {}
    for name, value in g.items():
        if name.startswith(("_dt", "_odt")):
            consts[name] = ["dtype", value.str]
        elif name.startswith(("_acc_msg", "_acc_low", "_red_msg")):
            consts[name] = ["str", value]
    return {"call": {"source": source, "symbol": sig.symbol, "object": sig.object_key,
                     "arrays": len(sig.kernel.inputs) + len(sig.kernel.outputs),
                     "ints": len(sig.kernel.params) + 1, "consts": consts,
                     "interrupted": irtypes.STATUS_INTERRUPTED}}


def _load(ckey, key):
    """The Kernel a record on disk describes, or None (no record, or an object missing).
    `key`: its kernel_key."""
    from . import jit
    payload = jit.read_cached(ckey, "calls", check=_is_record)
    if payload is None:
        return None
    rec = json.loads(payload)
    from . import threads
    threads.runtime()            # the symbols every kernel links against
    fn = _build(rec["fn"])
    if fn is None:
        return None
    perm = None if rec["perm"] is None else tuple(rec["perm"])
    dtypes_in = [np.dtype(s) for s in rec["dtypes_in"]]
    dtypes_in = [dt if dt.isnative else np.dtype(dt.type) for dt in dtypes_in]
    guard = make_guard(fn, perm, rec["scalar"], dtypes_in, key, np.dtype(rec["dtype"]))
    STATS["loaded"] += 1
    _loaded_keys[key] = [tuple(map(tuple, shapes)) for shapes in rec.get("calls", [])]
    return Kernel(fn, perm, np.dtype(rec["dtype"]), rec["scalar"],
                  tuple(map(tuple, rec["out_dims"])), guard)


def _build(d):
    if "chain" in d:
        steps = [(tuple(pos), _build(f)) for pos, f in d["chain"]]
        return None if any(f is None for _, f in steps) else chain(steps)
    if "reorder" in d:
        inner = _build(d["fn"])
        return inner and reordered(inner, tuple(d["reorder"]))
    return _call_path(d["call"])


class Fallback(ShapeError):
    """A warm call path reached a slow path that needs the program: the call goes to
    tex/einsum.py instead (its guard treats this as a refused shape)."""


def _fallback(*args, **kwargs):
    raise Fallback("this call needs the general path")


def _call_path(c):
    from . import fastcall, jit, threads
    loaded = jit.load_key(c["object"], c["symbol"])
    if loaded is None:
        return None
    _, image = loaded
    interrupted = c["interrupted"]

    def status(sig, st, *rest):
        if st & 0xFF == interrupted:
            ctypes.pythonapi.PyErr_CheckSignals()      # (KeyboardInterrupt, by default)
            raise Fallback(f"{c['symbol']}: interrupted, and the signal's handler did "
                           "not raise: the general path runs it again (status._status)")
        raise Fallback(f"{c['symbol']}: status {st}")
    g = {"_ndarray": np.ndarray, "_empty": np.empty,
         "_cfunc": fastcall.caller(image, c["symbol"]),
         "_ShapeError": ShapeError, "_nt": _NUM_THREADS, "_sig": None, "_status": status,
         "_image": image, "_crowded": threads.runtime().is_crowded,
         "_looping": threads.runtime().team_pays, "_thread_parts": thread_parts}
    for name in ("_coerce", "_param", "_finish_out", "_prepare_out", "_rank_error",
                 "_dim_error"):
        g[name] = _fallback
    for name, (kind, value) in c["consts"].items():
        g[name] = np.dtype(value) if kind == "dtype" else value
    exec(compile(c["source"], f"<tex warm call path of {c['symbol']}>", "exec"), g)
    return g[c["symbol"]]
