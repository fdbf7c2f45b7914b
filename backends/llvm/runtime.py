"""`tex.compile`: a scheduled program becomes a Python callable on NumPy arrays.

The call path is generated Python source, specialised to the program's signature and
compiled once with `exec`: argument binding is Python's own (inputs by position or
name, parameters and `out=` by keyword), then an identity check of each array's type
and dtype, the rank and size checks, the output allocation, and one ctypes call that
hands the array objects themselves to the machine code (which reads data pointers,
shapes and strides from numpy's array struct). No sympy, no IR walk, no per-element
Python on that path; everything slow (coercion, copies for overlapping `out=`,
misaligned views, error messages) lives in helpers that run only when needed (a kernel's
non-zero status: status.py).
"""
import builtins
import functools
import operator
import os
import re
import weakref

import numpy as np

from tex.combiners import COMBINERS
from tex.errors import ShapeError
from tex.expr import AutoParts
from tex.indices import format_size, size_template
from tex.layout import SMALL
from tex.program import as_program, check_fast_math

from ...gcpause import paused
from ...scheduler.nests import Nests
from ...scheduler.target import overriding
from ...scheduler.printer import format_nest
from . import codegen, jit, threads
from .builds import Signature, _build
from .parallel import MIDDLING_MIN_BYTES
from .choices import not_taken, pyexpr
from .display import compiled_html
from .status import _status
from .layouts import NOTHING, Retyped, by_dtype, by_layout, retypes
from .calls import (MAX_THREADS, _NUM_THREADS, get_num_threads, set_num_threads,  # noqa: F401
                    thread_parts)

# split-K's part count at call time, as Python source over the thread count `t`, the
# rows the threads would otherwise share and the reduction's length: split across the
# threads only when the rows are too few to keep every thread busy (fewer than 4 a
# thread) and the reduction is long enough to amortise the merge; then four parts a
# thread, taken from the parts loop's shared counter, so a thread that loses its core
# for a while (numpy's BLAS threads spin for ~0.1 s after each call) leaves its share
# to the others (123 x 51234 x 456 on 2 threads right after a numpy call: 34-38 ms with
# a part a thread, 25-29 with four; 18-20 alone either way)
AUTO_PARTS = "1 if {t} <= 1 or {rows} >= 4 * {t} or {length} < 1024 * {t} else 4 * {t}"
# For a few rows streaming B (auto._stream_rows_of_b: x @ W with x a row or a few),
# `rows` are B's columns and `block` its element size: parts from that length too, when
# B is large enough for a team (parallel.MIDDLING_MIN_BYTES: a smaller one ran its
# parts on one thread, and the merge after them, for nothing), and from a quarter of
# that length while calls come as in a loop (`_looping`: threads.tex_rt_team_pays, from
# the third quick question on), when a team is cheap. 2 threads, Zen 5, calls in a
# loop: 1 x 1000 @ 1000 x 4096 216 -> 112 us, 1 x 2000 @ 2000 x 500 52 -> 33, 2 x 1000
# @ 1000 x 1000 65 -> 38; a call after a pause keeps one part (a team woken for it cost
# 5-15% there)
STREAM_PARTS = ("1 if {t} <= 1 or {length} < 256 * {t} or ({length}) * ({rows}) * {block} < "
                f"{MIDDLING_MIN_BYTES} or ({{length}} < 1024 * {{t}} and not "
                "_looping({t})) else 4 * {t}")
# AutoParts rules by name (tex.expr.AutoParts.rule), Python expressions of the call
# path: "threads" is calls.thread_parts (a fused matmul's column blocks in parts)
THREAD_PARTS = "_thread_parts({t}, {rows}, {length}, {block}, _crowded)"
PART_RULES = {"split_k": AUTO_PARTS, "split_k_stream": STREAM_PARTS, "threads": THREAD_PARTS}


def compile(target, fast_math=True, name=None, bounds_check=None, casting="safe", fuse=True,
            sizes=None):
    """Compile a schedule, a definition, a tuple of definitions or a Program.

    `fuse=False` (with a definition or program) compiles each definition in a nest of its
    own, every intermediate stored: the unfused program, for comparison.

    `bounds_check=True` (or TEX_BOUNDS_CHECK=1 in the environment) checks every load
    and store of the generated code, which then runs one element at a time: an index
    outside its dimension raises IndexError naming the tensor, the index and the loops
    (for debugging a schedule; a correct kernel never trips it).

    `casting` is numpy's rule for an input array whose dtype differs from its tensor's,
    and for an `out=` array whose dtype differs from its result's ("safe": only
    conversions that keep every value; "same_kind" also rounds float64 to float32;
    "unsafe" converts anything). Python scalars and lists of them are weak, as
    in numpy (NEP 50): a float32 tensor takes 0.5 or [1.0, 2.5] under any rule.

    `fast_math=False` keeps float reductions in order (see tex.sum); `name` names the
    kernel (its symbol, `tex_<name>`, shown in tracebacks and profiles).

    A kernel whose stages have specializations (the auto schedule of a symbolic matmul
    has 13 nests) builds at first only what its first call runs: the nests of the sizes
    in `sizes` ({size: value}) when given, else those of the first call; `sizes="every"`
    builds every nest now (f.loop_nest and f.llvm_ir show them all in any case)."""
    check_fast_math(fast_math, "tex.compile")
    if casting not in _CASTINGS:
        raise ValueError(f"casting must be one of {', '.join(map(repr, _CASTINGS))}, "
                         f"not {casting!r}")
    with paused():
        return _compile(target, fast_math, name, bounds_check, casting, fuse, sizes)


def compile_without_variants(program, fast_math=True, name=None, bounds_check=None,
                             casting="safe", fuse=True, sizes=None):
    """tex.compile of a program whose calls bring operands laid out as its schedule
    assumes (tex.einsum's, tex/layout.py; a layout variant itself): no layout variants,
    and no layout check in its call path."""
    with paused():
        return _compile(program, fast_math, name, bounds_check, casting, fuse, sizes,
                        variants=False)


def compile_retyped(program, fast_math=True, name=None, bounds_check=None, casting="safe",
                    fuse=True):
    """A dtype variant (layouts.by_dtype) compiled as its function was, with layout
    variants of its own: its arrays come in the layout the caller gave them."""
    with paused():
        return _compile(program, fast_math, name, bounds_check, casting, fuse, None)


def _compile(target, fast_math, name, bounds_check, casting, fuse, sizes, variants=True):
    """`variants`: True gives the default schedule's function layout variants
    (layouts.py); False none; a tuple is the flags of a pickled function's."""
    from ...scheduler.schedule import Schedule, default_schedule
    if bounds_check is None:
        bounds_check = os.environ.get("TEX_BOUNDS_CHECK", "") not in ("", "0")
    layouts = variants if isinstance(variants, tuple) else None
    if not isinstance(target, Schedule):
        from ...scheduler.tunedb import tuned_schedule      # what tex.tune found, if any
        program = as_program(target)
        sched = tuned_schedule(jit.cache_dir(), program, fast_math, fuse,
                               threads=get_num_threads())
        if sched is None:
            # the default schedule's function gets layout variants (layouts.py); a
            # user's schedule, or a tuned one, runs as written
            sched = default_schedule(program, fast_math, fuse)
            if variants is True:
                layouts = (fast_math, name, bool(bounds_check), casting, fuse)
    elif target.fast_math and not fast_math:
        sched = Schedule(target.program, fast_math=False).replay(target.history)
    else:
        sched = target
    f = compile_kernel(sched.program, sched.nests(), fast_math, name, bool(bounds_check),
                       casting, sizes, layouts)
    # (the history as it is now: a deferred specialization's steps are read, running
    # its schedule, only when the function is pickled)
    f._rebuild_entries = (sched.source, sched.fast_math, tuple(sched._history), fast_math,
                          name, bool(bounds_check), casting)
    return f


def compile_kernel(program, kernel, fast_math=True, name=None, bounds_check=False,
                   casting="safe", sizes=None, layouts=None):
    """The CompiledFunction of a loop nest of `program`: a Kernel, or the Nests of a
    schedule (`Schedule.nests()`: a specialization's nest is lowered when built).

    Of the nests among which stages choose by size (codegen.choices: specializations),
    it builds those that calls at `sizes` ([{Size: value}], or one such dict) run;
    without `sizes`, none (a dispatch that returns STATUS_DEFERRED); with EVERY, all.
    A call that needs a nest left out has the kernel built again with it
    (`Signature.build_choice`). `f.llvm_ir` and `f.asm` show every nest. `layouts`:
    the compile flags of its layout variants (layouts.py), None for none."""
    nests = Nests.of(kernel)
    symbol = name or "tex_" + re.sub(r"\W", "_", "_".join(o.name for o in program.outputs))
    if isinstance(sizes, str) and sizes == EVERY:
        deferred = frozenset()
    elif sizes is None:
        deferred = frozenset(range(len(nests.choices)))
    else:
        deferred = not_taken(nests.skeleton, sizes)
    known = isinstance(sizes, dict) or isinstance(sizes, list) and sizes
    built = _build(nests, symbol, fast_math, bounds_check, deferred,
                   (program, sizes) if known else None)
    compiled = CompiledFunction(program, nests, built, layouts)
    compiled.casting = compiled._sig.casting = casting
    return compiled


EVERY = "every"         # compile_kernel(sizes=EVERY): build every nest at once


_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
_LIVE = weakref.WeakValueDictionary()       # pickle token -> the function it stands for


def _rebuilt(token, program, sched_fast_math, history, fast_math, name, bounds_check,
             casting, layouts=None):
    """Unpickling a compiled function: replay its schedule and compile it (the kernel
    comes from the disk cache when it holds it), once per process and token."""
    f = _LIVE.get(token)
    if f is None:
        from ...scheduler.schedule import Schedule
        sched = Schedule(program, sched_fast_math).replay(history)
        with paused():
            f = _compile(sched, fast_math, name, bounds_check, casting, True, None,
                         variants=layouts or False)
        f._token = token
        _LIVE[token] = f
    return f


class _CallSignature:
    """A compiled function's `__signature__`: its call path's (inspect.signature, which
    Jupyter's Shift-Tab shows, would otherwise take the `__call__` of the one-off class
    below for a method and drop the first input)."""

    def __get__(self, obj, owner=None):
        if obj is None:
            return None             # the class itself: inspect's own rules
        import inspect
        return inspect.signature(obj._call)


class CompiledFunction:
    """A compiled program. Call it with the inputs (by position, in order of first use,
    or by name), call-time parameters by keyword and optionally `out=`."""
    __signature__ = _CallSignature()

    def __init__(self, program, nests, built, layouts=None):
        self.program, self._nests, self.symbol = program, nests, built.symbol
        self._sig = Signature(program, built)
        self._sig.owner = weakref.ref(self)
        self._asm = None         # the assembly of llvm_ir, once f.asm is read
        self._full_ir = None     # llvm_ir with every nest, while some are not built
        self.input_names = tuple(t.name for t in program.inputs)
        self._layout_flags = layouts    # the compile flags of its layout variants
        self._layout_variants = {}      # layouts.by_layout's compiled variants
        self.param_names = self._sig.param_names
        self._call = _make_caller(self._sig, layouts is not None)
        from ...scheduler.target import missing_here, target
        missing = missing_here(target())
        if missing:
            self._call = _cannot_run(target().cpu, missing)
        self.__call__ = self._call
        # `f(...)` looks `__call__` up on the type: a one-off subclass whose `__call__` is
        # the generated call path itself saves a Python frame (~0.2 us) on every call
        self.__class__ = type("CompiledFunction", (CompiledFunction,),
                              {"__call__": staticmethod(self._call), "__slots__": (),
                               "__doc__": CompiledFunction.__doc__})

    def __del__(self):
        # a class is always in a reference cycle (with its own __mro__): without this,
        # the one-off subclass would keep the call path, and so the kernel's JIT memory,
        # alive until the garbage collector runs
        cls = type(self)
        if cls is not CompiledFunction and "__call__" in cls.__dict__:
            del cls.__call__

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    @property
    def llvm_ir(self):
        """The kernel's LLVM IR with every nest, also those no call has needed yet (it
        is generated on first use when the kernel came from the cache; nothing is
        compiled for it)."""
        b = self._sig.built
        if not b.deferred:
            return b.make_ir()
        if self._full_ir is None:
            with overriding(self._nests.target):
                self._full_ir = str(codegen.build(self.kernel, b.symbol, b.fast_math,
                                                  b.bounds_check))
        return self._full_ir

    _rebuild_entries = None     # (program, its fast_math, history entries, compile flags)
    _layout_movable = None      # the positions of the inputs they may lay out anew

    @property
    def _rebuild(self):
        """What rebuilds this function (its pickle): the program, the schedule's fast_math
        and steps, the compile flags; None for a function of a hand-made nest."""
        if self._rebuild_entries is None:
            return None
        from ...scheduler.schedule import expand
        source, sched_fast_math, history, *flags = self._rebuild_entries
        return (source, sched_fast_math, tuple(expand(history)), *flags, self._layout_flags)

    @property
    def kernel(self):
        """The loop nest (tex.scheduler.ir.Kernel) with every specialization's nest."""
        return self._nests.kernel()

    @property
    def loop_nest(self):
        """The loop nest as pseudo-code, every specialization's nest included (print it)."""
        return format_nest(self.kernel)

    @property
    def asm(self):
        """The assembly of llvm_ir (every nest)."""
        if self._asm is None:
            ir_text = self.llvm_ir
            with overriding(self._nests.target):
                self._asm = jit.assembly(ir_text)
        return self._asm

    @property
    def _cfunc(self):
        return self._sig.cfunc

    @property
    def buffers(self):
        """The intermediate buffers the kernel allocates (outputs excluded)."""
        return codegen.allocated_buffers(self.kernel)

    def __repr__(self):
        sig = self.program.signature()
        if self.param_names:
            sig = sig.replace(") -> ", f", *, {', '.join(self.param_names)}) -> ", 1)
        return f"<tex compiled {self.symbol}{sig}>"

    def _repr_html_(self):
        return compiled_html(self)

    def __reduce__(self):
        """Pickles as its program, schedule history and flags; rebuilt where unpickled.
        A function still running quick code (tiers.py) first has its optimized code
        compiled and cached: the processes that unpickle it (dask's workers) load that
        from a shared disk cache instead of each compiling it."""
        upgrade = self._sig.built.upgrade
        if upgrade is not None:
            try:
                upgrade.wait()
            except Exception:       # (warned; the unpickled function compiles its own)
                pass
        token = getattr(self, "_token", None)
        if token is None:
            token = self._token = os.urandom(8).hex()
            _LIVE[token] = self
        return (_rebuilt, (token, *self._rebuild))


# ---------------------------------------------------------------- the generated call path

def _cannot_run(cpu, missing):
    def call(*args, **kwargs):
        raise RuntimeError(f"this kernel was compiled for {cpu} (TEX_CPU), whose "
                           f"{', '.join(missing)} this CPU lacks: running it would stop "
                           "the process with an illegal instruction. Its code is in "
                           "f.llvm_ir and f.asm; unset TEX_CPU to run tex here")
    return call


# a call-time parameter must fit the kernel's 64-bit arithmetic with room to spare
# (a split_k part count is multiplied by the chunk length and the output's size)
MAX_PARAM = 1 << 62


def _make_caller(sig, variants=False):
    program, kernel = sig.program, sig.kernel
    inputs, outputs = program.inputs, program.outputs
    argnames = [f"{t.name}" for t in inputs]
    clash = set(argnames) & (set(sig.param_names) | {"out"})
    if clash or len(set(argnames)) != len(argnames):
        raise ValueError(f"input names must be distinct from each other, from the "
                         f"parameters and from 'out': {sorted(clash) or argnames}")
    names = {s: f"_z_{s}" for s in program.sizes}
    names.update({p: f"_p_{p}" for p in kernel.params})
    g = sig.scope = {"_ndarray": np.ndarray, "_empty": np.empty, "_cfunc": sig.cfunc,
         "_coerce": _coerce, "_ShapeError": ShapeError, "_param": _param,
         "_finish_out": _finish_out, "_prepare_out": _prepare_out, "_status": _status,
         "_sig": sig, "_rank_error": _rank_error, "_dim_error": _dim_error,
         "_nt": _NUM_THREADS, "_crowded": threads.runtime().is_crowded,
         "_looping": threads.runtime().team_pays, "_thread_parts": thread_parts}
    L = []
    kw = [f"{p}=None" for p in sig.param_names] + ["out=None"]
    # named after the kernel, so that Python's own binding errors name it
    L.append(f"def {sig.symbol}({', '.join(argnames)}{', ' if argnames else ''}*, "
             f"{', '.join(kw)}):")
    if inputs:
        L.append("    try:")          # free unless raised (Python 3.11's zero-cost try)
    for pos, t in enumerate(inputs):
        a = argnames[pos]
        g[f"_dt{pos}"] = t.dtype
        L.append(f"        if type({a}) is not _ndarray or {a}.dtype is not _dt{pos}: "
                 f"{a} = _coerce(_sig, {pos}, {a})")
    if inputs:                        # a dask array among the inputs: a dask graph
        g["_Lazy"], g["_lazy"] = _Lazy, _lazy
        L.append("    except _Lazy:")
        L.append(f"        return _lazy(_sig, ({', '.join(argnames)},), "
                 f"{{{', '.join(f'{p!r}: {p}' for p in sig.param_names)}}}, out)")
    if inputs and variants:           # an input of another dtype: the variant for it
        g["_Retyped"] = Retyped
        g["_by_dtype"] = functools.partial(by_dtype, compile_retyped)
        L.append("    except _Retyped:")
        L.append(f"        return _by_dtype(_sig, ({', '.join(argnames)},), "
                 f"{{{', '.join(f'{p!r}: {p}' for p in sig.param_names)}}}, out)")
    # one tuple unpack per input binds its sizes and checks its rank (a ValueError)
    checks, unpack = [], []
    for pos, t in enumerate(inputs):
        a, targets = argnames[pos], []
        for axis, d in enumerate(t.shape):
            if kernel.bindings.get(d) == (pos, axis):
                targets.append(names[d])
            else:
                targets.append(f"_s{pos}_{axis}")
                checks.append((pos, axis, d))
        unpack.append(f"        {', '.join(targets)}{',' if len(targets) == 1 else ''} = {a}.shape"
                      if targets else f"        () = {a}.shape")
    if inputs:
        L.append("    try:")
        L.extend(unpack)
        L.append("    except ValueError:")
        L.append(f"        raise _rank_error(_sig, ({', '.join(argnames)},)) from None")
    for p in kernel.params:
        if isinstance(p, AutoParts):
            rule = PART_RULES[p.rule].format(t="_t", rows=pyexpr(p.rows, names),
                                             length=pyexpr(p.length, names), block=p.block)
            L.append("    _t = _nt[0]")
            L.append(f"    {names[p]} = {rule}")
            continue
        L.append(f"    {names[p]} = {p} if {p}.__class__ is int and 0 < {p} <= {MAX_PARAM} "
                 f"else _param(_sig, '{p}', {p})")
    for pos, axis, d in checks:
        a = argnames[pos]
        L.append(f"    if _s{pos}_{axis} != {pyexpr(d, names)}: "
                 f"raise _dim_error(_sig, {pos}, {axis}, _s{pos}_{axis}, {pyexpr(d, names)})")
    for n, (t, axis, largest, smallest, dim, exts, ix, defn) in enumerate(
            program.access_checks()):
        cond = " and ".join(f"{pyexpr(x, names)} > 0" for x in exts) or "True"
        # (the user's names: the definition, the tensor, its index expression)
        where = (f"compute {defn}: tensor {t.name}, dimension {axis}: index "
                 f"{format_size(ix).replace('%', '%%')}")
        if largest is not None:
            g[f"_acc_msg{n}"] = (f"{where} reaches {size_template(largest)}, past the end "
                                 f"({size_template(dim)} elements)")
            L.append(f"    if {cond} and {pyexpr(largest, names)} >= {pyexpr(dim, names)}: "
                     f"raise _ShapeError(_acc_msg{n} % ({pyexpr(largest, names)}, "
                     f"{pyexpr(dim, names)}))")
        if smallest is not None:
            g[f"_acc_low{n}"] = (f"{where} goes down to {size_template(smallest)}, below 0")
            L.append(f"    if {cond} and {pyexpr(smallest, names)} < 0: "
                     f"raise _ShapeError(_acc_low{n} % ({pyexpr(smallest, names)},))")
    for d in program.definitions:
        for x, ext in d.extents.items():
            if not (ext.is_Symbol or ext.is_Integer):
                L.append(f"    if {pyexpr(ext, names)} < 0: raise _ShapeError('compute {d.name}:"
                         f" index {x.name} has a negative extent "
                         f"{format_size(ext).replace('%', '%%')} = %d' % "
                         f"{pyexpr(ext, names)})")
    for n, (d, message, empty) in enumerate(_identityless_reductions(program)):
        g[f"_red_msg{n}"] = message
        cond_red = " or ".join(f"{pyexpr(e, names)} == 0" for e in empty)
        L.append(f"    if {cond_red}: raise ValueError(_red_msg{n})")
    # an input laid out other than row-major: the variant for its layout (layouts.py)
    strided = [f"({a}.nbytes >= {SMALL} and not {a}.flags.c_contiguous)"
               for a, t in zip(argnames, inputs) if len(t.shape) >= 2] if variants else []
    if strided:
        g["_by_layout"], g["_NOTHING"] = functools.partial(by_layout, compile_without_variants), NOTHING
        L.append(f"    if {' or '.join(strided)}:")
        L.append(f"        _r = _by_layout(_sig, ({', '.join(argnames)},), "
                 f"{{{', '.join(f'{p!r}: {p}' for p in sig.param_names)}}}, out)")
        L.append("        if _r is not _NOTHING: return _r")
    outs = []
    for n, o in enumerate(outputs):
        g[f"_odt{n}"] = o.dtype
        shape = "(" + "".join(pyexpr(d, names) + ", " for d in o.shape) + ")"
        outs.append((f"_o{n}", shape))
    arrays = ", ".join(argnames + [o for o, _ in outs])
    params = "".join(f", {names[p]}" for p in kernel.params) + ", _nt[0]"
    L.append("    if out is None:")
    for n, (o, shape) in enumerate(outs):
        L.append(f"        {o} = _empty({shape}, _odt{n})")
    L.append(f"        _st = _cfunc({arrays}{params})")
    L.append("        if _st:")
    L.append(f"            _status(_sig, _st, ({', '.join(argnames)}{',' if argnames else ''}), "
             f"({''.join(o + ', ' for o, _ in outs)}), ({params.lstrip(', ')}{',' if params else ''}))")
    L.append(f"        return {', '.join(o for o, _ in outs)}")
    if len(outs) == 1:
        # the common out=: one array of the output's dtype and shape, written in place
        # (an overlap with an input is the kernel's STATUS_OVERLAP: _status copies)
        (o, shape), = outs
        ins = "".join(a + ", " for a in argnames)
        L.append(f"    if out.__class__ is _ndarray and out.dtype is _odt0 and "
                 f"out.shape == {shape} and out.flags.writeable:")
        L.append(f"        _st = _cfunc({ins}out{params})")
        L.append(f"        if _st: _status(_sig, _st, ({ins}), (out,), "
                 f"({params.lstrip(', ')}{',' if params else ''}))")
        L.append("        return out")
    shapes = "(" + "".join(s + ", " for _, s in outs) + ")"
    L.append(f"    _ins, _tgt, _fin = _prepare_out(_sig, out, {shapes}, "
             f"({', '.join(argnames)}{',' if argnames else ''}))")
    L.append(f"    _st = _cfunc(*_ins, *_tgt{params})")
    L.append(f"    if _st: _status(_sig, _st, _ins, _tgt, ({params.lstrip(', ')}{',' if params else ''}))")
    L.append("    return _finish_out(out, _tgt, _fin)")
    src = "\n".join(L)
    exec(builtins.compile(src, f"<tex call path of {sig.symbol}>", "exec"), g)
    call = g[sig.symbol]
    call.__doc__ = f"Compiled tex kernel {sig.symbol}."
    call.source = src
    return call


_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2}


def _coerce(sig, pos, a):
    """Slow path: convert an argument to an array of the declared dtype, or refuse.
    Python scalars and (nested) lists of them are weak (NEP 50): converted to the
    tensor's dtype when their kind fits it (bool < int < float), as numpy does with
    `np.asarray(a, dtype)` (an int out of range raises OverflowError)."""
    t = sig.program.inputs[pos]
    if hasattr(type(a), "__dask_graph__"):
        raise _Lazy
    arr = np.asarray(a)
    if arr.dtype == t.dtype:
        return arr if arr.dtype.isnative else arr.astype(t.dtype)
    if arr.dtype == object and arr.ndim == 0:       # not an array, nor a list of numbers
        try:
            arr.astype(t.dtype)
        except (TypeError, ValueError):
            raise TypeError(f"tensor {t.name}: expected an array of {t.dtype}, got "
                            f"{type(a).__name__} {_short_repr(a)}") from None
    if not isinstance(a, (np.ndarray, np.generic)) and arr.dtype.kind in _KIND_RANK \
            and t.dtype.kind in _KIND_RANK \
            and (arr.size == 0 or _KIND_RANK[arr.dtype.kind] <= _KIND_RANK[t.dtype.kind]):
        try:
            return np.asarray(a, dtype=t.dtype)
        except OverflowError as err:
            raise OverflowError(f"tensor {t.name}: {err}") from None
    casting = sig.casting
    if not np.can_cast(arr.dtype, t.dtype, casting):
        fix = f"convert it with a.astype(np.{t.dtype.name})"
        if casting in ("no", "equiv", "safe") and np.can_cast(arr.dtype, t.dtype, "same_kind"):
            fix += ", or compile with tex.compile(..., casting='same_kind') to round it"
        elif arr.dtype.kind in _KIND_RANK and t.dtype.kind in _KIND_RANK:
            fix += ", or compile with tex.compile(..., casting='unsafe') to convert " \
                   "whatever comes"
        raise TypeError(f"tensor {t.name}: got {arr.dtype} data, which numpy does not cast "
                        f"to {t.dtype} with casting={casting!r}; {fix}")
    if retypes(sig, pos, arr):
        raise Retyped               # the variant that reads this dtype (layouts.py)
    return arr.astype(t.dtype)


def _short_repr(a, width=40):
    text = repr(a)
    return text if len(text) <= width else text[:width - 3] + "..."


class _Lazy(Exception):
    """Raised by _coerce for a dask array: the call builds a dask graph instead."""


def _lazy(sig, args, params, out):
    from ...dask import call_compiled
    f = sig.owner() if sig.owner is not None else None
    if f is None or f._rebuild_entries is None:
        raise TypeError(f"{sig.symbol}: dask arrays need a function from tex.compile")
    try:
        return call_compiled(f, args, params, out)
    except BaseException as e:
        e.__suppress_context__ = True           # not "during handling of _Lazy"
        raise


def _param(sig, name, value):
    """Slow path of a call-time parameter: an integer from 1 to MAX_PARAM, or an error
    that names it (and the kernel)."""
    if value is None:
        raise TypeError(f"{sig.symbol}: missing call-time parameter {name}")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{sig.symbol}: parameter {name} must be an integer, got "
                        f"{value!r}") from None
    if not 0 < n <= MAX_PARAM:
        raise ValueError(f"{sig.symbol}: parameter {name} must be from 1 to 2**62, got {n}")
    return n


def _identityless_reductions(program):
    """(definition, message, extents that make its reduction empty) for every
    max/min/argmax/argmin: numpy refuses to reduce an empty axis with them (there is no
    identity to return), also into an empty result (a (0, 0) array's max over axis 1),
    and so does tex."""
    out = []
    for d in program.definitions:
        red = d.reduction
        if red is None or COMBINERS[red.combiner].has_identity or not red.strict:
            continue
        over = ", ".join(f"{x.name} (extent {format_size(d.extents[x])})" for x in red.over)
        message = (f"zero-size array to reduction operation {COMBINERS[red.combiner].numpy} "
                   f"which has no identity: {d.name} reduces over {over}, which is empty")
        out.append((d, message, [d.extents[x] for x in red.over]))
    return out


def _rank_error(sig, arrays):
    """The first input whose rank is wrong, as a ShapeError naming it."""
    for t, a in zip(sig.program.inputs, arrays):
        if a.ndim != t.ndim:
            return ShapeError(f"tensor {t.name}: expected rank {t.ndim} (shape {t.shape}), "
                              f"got an array of rank {a.ndim} (shape {a.shape})")
    return ShapeError("an input has the wrong rank")


def _dim_error(sig, pos, axis, got, expected):
    t = sig.program.inputs[pos]
    return ShapeError(f"tensor {t.name}, dimension {axis}: expected "
                      f"{size_template(t.shape[axis]) % expected}, got {got}")


def _prepare_out(sig, out, shapes, inputs):
    """Validate `out=`; returns (inputs, arrays to write, (results to copy back)). As
    numpy's ufuncs take it: a tuple an array an output (a list too, when there are
    several outputs), None for an output to allocate."""
    several = isinstance(out, tuple) or (isinstance(out, list) and len(shapes) > 1)
    outs = tuple(out) if several else (out,)
    if len(outs) != len(shapes):
        kind = "a tuple of " if len(shapes) > 1 and not isinstance(out, (tuple, list)) else ""
        raise ValueError(f"out= needs {kind}{len(shapes)} array"
                         f"{'s' if len(shapes) > 1 else ''}, got {len(outs)}")
    outs = tuple(np.empty(shape, d.dtype) if o is None else o
                 for o, shape, d in zip(outs, shapes, sig.program.outputs))
    targets, finish = [], []
    names = [d.name for d in sig.program.outputs]
    for n, o in enumerate(outs):
        for m in range(n):
            if isinstance(o, np.ndarray) and np.may_share_memory(o, outs[m]):
                raise ValueError(f"out= for {names[m]} and for {names[n]} overlap: each "
                                 "output needs memory of its own")
    for o, shape, d in zip(outs, shapes, sig.program.outputs):
        if not isinstance(o, np.ndarray):
            raise TypeError(f"out= for {d.name} must be a numpy array, not {type(o).__name__}")
        if o.shape != shape:
            raise ShapeError(f"out= for {d.name}: expected shape {shape}, got {o.shape}")
        if not o.flags.writeable:
            raise ValueError(f"out= for {d.name} is read-only")
        if o.dtype != d.dtype:
            if not np.can_cast(d.dtype, o.dtype, sig.casting):
                raise TypeError(f"out= for {d.name}: numpy does not cast the result "
                                f"{d.dtype} to {o.dtype} with casting={sig.casting!r}; "
                                f"{_out_fix(d.dtype, o.dtype, sig.casting)}")
            targets.append(np.empty(shape, d.dtype))
            finish.append(o)
            continue
        targets.append(o)           # (sharing an input's memory: the kernel's STATUS_OVERLAP)
        finish.append(None)
    return inputs, targets, finish


def _out_fix(result, wanted, casting):
    """What to do about an out= array whose dtype the compile's casting rule refuses."""
    fix = f"pass out= an array of {result}"
    for looser in ("safe", "same_kind", "unsafe"):
        if _CASTINGS.index(looser) > _CASTINGS.index(casting) and \
                np.can_cast(result, wanted, looser):
            return fix + f", or compile with tex.compile(..., casting={looser!r})"
    return fix


def _finish_out(out, targets, finish):
    results = []
    for tgt, dst in zip(targets, finish):
        if dst is not None:
            np.copyto(dst, tgt, casting="unsafe")      # (allowed by _prepare_out)
        results.append(tgt if dst is None else dst)
    return tuple(results) if len(results) > 1 else results[0]
