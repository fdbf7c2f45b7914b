"""numpy.einsum computed by tex's compiled kernels.

    tex.einsum("ik,kj->ij", a, b)           arrays in, an array out (a cached compiled kernel)
    tex.einsum("ik,kj->ij", A, B)           tex tensors in: the Definition (IR); nothing runs
    tex.einsum_program("ik,kj->ij", a, b)   the Program, for operands or (shape, dtype) specs

The semantics are numpy.einsum's: implicit and explicit output, repeated labels
(diagonals, traces), '...' with broadcasting, size-1 broadcasting of named labels, 0-d
operands, dtype promotion, `dtype=` with `casting=`, `out=`, the interleaved form.

A subscripts string goes through three named steps (as loopy's make_einsum does):

  parse    the string alone, cached per string: each operand's labels and the output's,
           '...' kept as one marker; bad characters and bad outputs raise ValueError.
  expand   against the operands' ranks, cached: '...' becomes the labels '.0', '.1', ...
           (right-aligned, as numpy broadcasts), the implicit output is derived.
  build    against the shapes: one size symbol per label; a dimension of size 1 where
           the label is larger elsewhere is broadcast (declared 1, read at index 0), so
           the kernel cache key records which dimensions are 1. Operands are contracted
           pairwise in numpy.einsum_path's order, one tex.compute per step: the product
           of its operands, summed over the labels that neither the output nor a later
           step needs.

Values: operands are cast to the result dtype inside the expression (no extra pass over
memory); sums accumulate in the result dtype, float16 in float32 as numpy does; bool sums
are OR and products AND.

Calls: a kernel is cached under (subscripts, dtype, casting, path, and per operand its
dtype and which dimensions are 1, or its rank). The common call (ndarrays, default
keywords, no out= or one of the result's dtype) skips even that key: each subscripts
string keeps a guard for its last kernel, which checks the operands' types and dtypes by
identity and their patterns of 1s, and lets the kernel's own size checks refuse the rest
(see _make_guard).
"""
import collections
import functools
import itertools
import operator
import string
import sys

import numpy as np
import tex.symbolic as sym

from . import complex_einsum, dtypes
from .errors import ShapeError
from .gcpause import paused
from .layout import fortran_result
from .expr import Index, cast, sizes
from .expr import sum as tex_sum
from .program import Program
from .tensor import Tensor, compute, tensor
from .backends.llvm import warm
from .backends.llvm.warm import Kernel as _Kernel
from .backends.llvm.warm import make_guard as _make_guard, reordered as _reordered

ELLIPSIS = "..."
_LETTERS = frozenset(string.ascii_letters)
_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
_LAYOUTS = {"K": "C", "C": "C", "F": "F", "A": "A"}
_names = itertools.count()


# ---------------------------------------------------------------- parse

@functools.lru_cache(maxsize=1024)
def parse(subscripts):
    """'ij,jk->ik' -> ((('i','j'), ('j','k')), ('i','k')); the output is None when implicit.
    '...' stays one item. Refuses what numpy refuses without looking at the operands."""
    text = subscripts.replace(" ", "")
    inputs_text, arrow, output_text = text.partition("->")
    if "-" in inputs_text:
        raise ValueError("einstein sum subscript string does not contain proper '->' "
                         "output specified")
    inputs = tuple(_parse_term(term, f"operand {k}")
                   for k, term in enumerate(inputs_text.split(",")))
    if not arrow:
        return inputs, None
    output = _parse_term(output_text, "the output")
    seen = {label for term in inputs for label in term}
    for n, label in enumerate(output):
        if label in output[:n]:
            raise ValueError("einstein sum subscripts string includes output subscript "
                             f"{label!r} multiple times")
        if label not in seen and label != ELLIPSIS:
            raise ValueError(f"einstein sum subscripts string included output subscript "
                             f"{label!r} which never appeared in an input")
    return inputs, output


def _parse_term(text, where):
    labels, pos = [], 0
    while pos < len(text):
        c = text[pos]
        if c in _LETTERS:
            labels.append(c)
            pos += 1
        elif text.startswith(ELLIPSIS, pos) and ELLIPSIS not in labels:
            labels.append(ELLIPSIS)
            pos += 3
        elif c == ".":
            raise ValueError("einstein sum subscripts string contains a '.' that is not part "
                             f"of an ellipsis ('...') in {where}")
        else:
            raise ValueError(f"invalid subscript {c!r} in einstein sum subscripts string, "
                             "subscripts must be letters")
    return tuple(labels)


def interleaved_subscripts(args):
    """numpy's form `einsum(op0, sublist0, op1, sublist1, ..., [sublist_out])` ->
    (subscripts, operands). Integers 0-25 are 'A'-'Z', 26-51 'a'-'z'."""
    operands, sublists = list(args[0::2]), list(args[1::2])
    output = operands.pop() if len(args) % 2 else None

    def letters(sublist):
        out = []
        for s in sublist:
            if s is Ellipsis:
                out.append(ELLIPSIS)
            elif isinstance(s, (int, np.integer)) and not isinstance(s, bool):
                if not 0 <= s < 52:
                    raise ValueError("subscript is not within the valid range [0, 52)")
                out.append((string.ascii_uppercase + string.ascii_lowercase)[s])
            else:
                raise TypeError("each subscript must be either an integer or an ellipsis")
        return "".join(out)

    subscripts = ",".join(letters(s) for s in sublists)
    if output is not None:
        subscripts += "->" + letters(output)
    return subscripts, operands


# ---------------------------------------------------------------- expand

@functools.lru_cache(maxsize=4096)
def expand(subscripts, ndims):
    """(subscripts, operand ranks) -> (labels of each operand, output labels), with '...'
    replaced by the labels '.0', '.1', ...: an operand whose '...' covers w dimensions
    takes the last w of them (numpy aligns broadcast dimensions on the right)."""
    inputs, output = parse(subscripts)
    if len(inputs) != len(ndims):
        more = "more" if len(ndims) > len(inputs) else "fewer"
        raise ValueError(f"{more} operands provided to einstein sum function than specified "
                         f"in the subscripts string ({len(ndims)} operands for "
                         f"{len(inputs)} terms in {subscripts!r})")
    widths = []
    for k, (labels, ndim) in enumerate(zip(inputs, ndims)):
        named = len(labels) - (ELLIPSIS in labels)
        if named > ndim:
            raise ValueError("einstein sum subscripts string contains too many subscripts "
                             f"for operand {k}")
        if named < ndim and ELLIPSIS not in labels:
            raise ValueError("operand has more dimensions than subscripts given in einstein "
                             "sum, but no '...' ellipsis provided to broadcast the extra "
                             f"dimensions. (operand {k})")
        widths.append(ndim - named)
    width = max(widths, default=0)
    broadcast = tuple(f".{n}" for n in range(width))
    operands = tuple(_splice(labels, broadcast[width - w:])
                     for labels, w in zip(inputs, widths))
    if output is None:
        counts = collections.Counter(label for labels in operands for label in labels)
        output = broadcast + tuple(sorted(label for label, n in counts.items()
                                          if n == 1 and label[0] != "."))
    elif width and ELLIPSIS not in output:
        raise ValueError("output has more dimensions than subscripts given in einstein sum, "
                         "but no '...' ellipsis provided to broadcast the extra dimensions.")
    else:
        output = _splice(output, broadcast)
    return operands, output


def _splice(labels, broadcast):
    if ELLIPSIS not in labels:
        return labels
    at = labels.index(ELLIPSIS)
    return labels[:at] + broadcast + labels[at + 1:]


# ---------------------------------------------------------------- build

Spec = collections.namedtuple("Spec", "shape dtype tensor")   # tensor: a tex Tensor or None


def _refuse_data_among_tensors(operands):
    """einsum on tex tensors builds a definition, called later with every tensor's data:
    an array among them would have been declared as a tensor and its data dropped."""
    at, t = next((k, a) for k, a in enumerate(operands) if isinstance(a, Tensor))
    for k, a in enumerate(operands):
        if not isinstance(a, Tensor) and not _is_shape_dtype(a):
            what = "a numpy array" if isinstance(a, np.ndarray) else f"a {type(a).__name__}"
            raise TypeError(f"einsum: operand {k} is {what}, while operand {at} is the tex "
                            f"tensor {t.name}: declare it "
                            "with tex.tensor(...) too (its data is passed when the result "
                            "is called), or pass arrays for every operand")


def _is_shape_dtype(x):
    """Is `x` an operand declared as (shape, dtype), data to come at the call?"""
    return (isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], (tuple, list))
            and isinstance(x[1], (str, type, np.dtype)))


def _spec(x):
    """An einsum_program operand -> Spec(shape of integers or size expressions, dtype,
    tensor): a tex Tensor, a (shape, dtype) pair or anything np.asarray takes."""
    if isinstance(x, Tensor):
        return Spec(x.shape, x.dtype, x)
    if _is_shape_dtype(x):
        return Spec(tuple(map(sym.sympify, x[0])), dtypes.as_dtype(x[1]), None)
    a = np.asarray(x)
    dtype = a.dtype if a.dtype.isnative else np.dtype(a.dtype.type)
    return Spec(tuple(map(sym.Integer, a.shape)), dtype, None)


def resolve_labels(labels, specs):
    """Check the sizes of each label and decide broadcasting. Returns ({label: extent},
    each operand's dimension labels with None for a broadcast dimension, {label: a size
    for einsum_path}). A label's extent is a tex operand's dimension if there is one, else
    a new size symbol n_<label> (1 when all its dimensions are 1); its dimensions of size
    1 are broadcast when another is not 1."""
    uses = collections.defaultdict(list)             # label -> [(operand, axis, dim)]
    for k, (term, spec) in enumerate(zip(labels, specs)):
        for axis, (label, d) in enumerate(zip(term, spec.shape)):
            same_operand = [e for kk, _, e in uses[label] if kk == k]
            if same_operand and same_operand[0] != d:
                raise ShapeError(f"dimensions in operand {k} for collapsing index {label!r} "
                                 f"don't match ({same_operand[0]} != {d})")
            uses[label].append((k, axis, d))
    extents, broadcast, path_sizes = {}, set(), {}
    for label, occurrences in uses.items():
        large = [u for u in occurrences if u[2] != 1]
        numbers = [u for u in large if u[2].is_number]
        from_tex = [u for u in large or occurrences if specs[u[0]].tensor is not None]
        for group in (numbers, from_tex):
            for k, axis, d in group[1:]:
                k0, axis0, d0 = group[0]
                if d != d0:
                    what = f"subscript {label!r}" if label[0] != "." else "a '...' dimension"
                    raise ShapeError(f"operands could not be broadcast together: {what} has "
                                     f"size {d0} in operand {k0} (dimension {axis0}) and {d} "
                                     f"in operand {k} (dimension {axis})")
        if large:
            broadcast |= {(k, axis) for k, axis, d in occurrences if d == 1}
        name = label if label[0] != "." else "e" + label[1:]
        # a label whose every dimension is 1 has extent 1 (the kernel cache keeps the
        # pattern of 1s apart): a row vector times a matrix then gets its own schedule
        extents[label] = from_tex[0][2] if from_tex else sym.Integer(1) if not large else \
            sizes(f"n_{name}")
        path_sizes[label] = int(numbers[0][2]) if numbers else 64 if large else 1
    dims = [tuple(None if (k, axis) in broadcast else label for axis, label in enumerate(term))
            for k, term in enumerate(labels)]
    return extents, dims, path_sizes


def result_dtype(operand_dtypes, dtype, casting):
    """numpy's einsum dtype: `dtype` or the operands' result_type; every operand must cast
    to it under `casting`."""
    if casting not in _CASTINGS:
        raise ValueError(f"casting must be one of {', '.join(map(repr, _CASTINGS))} "
                         f"(got {casting!r})")
    result = np.result_type(*operand_dtypes) if dtype is None else np.dtype(dtype)
    result = dtypes.as_dtype(result, "einsum result")
    for k, dt in enumerate(operand_dtypes):
        if not np.can_cast(dt, result, casting):
            raise TypeError(f"Iterator operand {k} dtype could not be cast from {dt!r} to "
                            f"{result!r} according to the rule {casting!r}")
    return result


def contraction_path(subscripts, optimize, shapes):
    """The pairwise order as numpy.einsum_path gives it: a list of tuples of positions in
    the current operand list (contracted operands removed, the result appended)."""
    n = len(shapes)
    if n <= 2:
        return [tuple(range(n))]
    if isinstance(optimize, (list, tuple)) and optimize and optimize[0] == "einsum_path":
        path = [tuple(step) for step in optimize[1:]]
    else:
        kind = "greedy" if optimize is True or optimize is False else optimize
        if not (kind in ("greedy", "optimal") or isinstance(kind, (list, tuple))):
            raise ValueError(f"optimize: expected False, True, 'greedy', 'optimal' or an "
                             f"explicit ['einsum_path', ...] list, not {optimize!r}")
        dummies = [np.broadcast_to(np.empty((), np.float64), s) for s in shapes]
        path = [tuple(step) for step in np.einsum_path(subscripts, *dummies, optimize=kind)[0][1:]]
    remaining = n
    for step in path:
        if not step or len(set(step)) != len(step) or not all(0 <= p < remaining for p in step):
            raise ValueError(f"Invalid einsum_path: step {step} with {remaining} operands left")
        remaining -= len(step) - 1
    if remaining != 1:
        raise ValueError(f"Invalid einsum_path is specified: {remaining - 1} more operands "
                         "has to be contracted.")
    return path


def einsum_program(subscripts, *operands, dtype=None, casting="safe", optimize="greedy",
                   name=None):
    """The Program computing numpy.einsum(subscripts, *operands). Operands are tex Tensors,
    (shape, dtype) pairs or arrays (only their shape and dtype are used; sizes become
    symbols, one per label). `name` names the output definition (default "einsum", or a
    unique "einsumN" when tex tensors take part, so that einsums compose)."""
    return _build(subscripts, operands, dtype, casting, optimize, name)[0]


_Plan = collections.namedtuple("_Plan", "specs dims output extents result path")


def _plan(subscripts, operands, dtype, casting, optimize):
    """The labels of each operand's dimensions (None: broadcast), the output's labels,
    each label's extent, the result dtype and the contraction path."""
    if not operands:
        raise ValueError("must specify the einstein sum subscripts string and at least one "
                         "operand")
    specs = [_spec(x) for x in operands]
    labels, output = expand(subscripts, tuple(len(s.shape) for s in specs))
    extents, dims, path_sizes = resolve_labels(labels, specs)
    result = result_dtype([s.dtype for s in specs], dtype, casting)
    shapes = [tuple(1 if lb is None else path_sizes[lb] for lb in d) for d in dims]
    path = contraction_path(subscripts, optimize, shapes)
    return _Plan(specs, dims, output, extents, result, path)


def _step_keep(output, picked, terms, last):
    """The labels a contraction step keeps: the output's (last step), else those the
    output or a later step needs, in order of first appearance."""
    if last:
        return output
    needed = set(output).union(*(t[1] for t in terms))
    return tuple(dict.fromkeys(lb for t in picked for lb in t[1]
                               if lb is not None and lb in needed))


def _build(subscripts, operands, dtype, casting, optimize, name):
    """-> (Program, the operands' tensors, result dtype, (operand, axis) of each output dim)."""
    if not isinstance(subscripts, str):
        subscripts, operands = interleaved_subscripts((subscripts,) + tuple(operands))
    specs, dims, output, extents, result, path = _plan(subscripts, operands, dtype, casting,
                                                       optimize)
    if name is None:
        tex_operands = any(s.tensor is not None for s in specs)
        name = f"einsum{next(_names)}" if tex_operands else "einsum"
    prefix = "" if name == "einsum" else name + "_"
    tensors = [s.tensor if s.tensor is not None else
               tensor(f"{prefix}op{k}", [1 if lb is None else extents[lb] for lb in d], s.dtype)
               for k, (s, d) in enumerate(zip(specs, dims))]

    terms = [(t, d, True) for t, d in zip(tensors, dims)]     # (tensor, labels, is operand)
    for step, positions in enumerate(path):
        picked = [terms[p] for p in positions]
        for p in sorted(positions, reverse=True):
            del terms[p]
        last = step == len(path) - 1
        keep = _step_keep(output, picked, terms, last)
        if last:
            out_dtype, step_name = result, name
        else:
            out_dtype, step_name = dtypes.accumulator(result), f"{prefix}t{step}"
        terms.append((_contract(step_name, picked, keep, result, out_dtype), keep, False))
    out_dims = tuple(next((k, d.index(lb)) for k, d in enumerate(dims) if lb in d)
                     for lb in output)
    return Program(terms[0][0]), tensors, result, out_dims


def _contract(name, picked, keep, result, out_dtype):
    """name[keep] = sum over the other labels of the product of the picked terms' elements.
    Operands are cast to the result dtype, then to the accumulator (float16 -> float32)."""
    acc = dtypes.accumulator(result)
    index = {}
    for _, labels, _ in picked:
        for lb in labels:
            if lb is not None and lb not in index:
                index[lb] = Index(lb if lb[0] != "." else "e" + lb[1:])
    factors = []
    for t, labels, is_operand in picked:
        value = t[tuple(0 if lb is None else index[lb] for lb in labels)]
        factors.append(cast(cast(value, result), acc) if is_operand else value)
    body = functools.reduce(operator.mul, factors)
    summed = tuple(x for lb, x in index.items() if lb not in keep)
    if summed:
        body = tex_sum(body, over=summed, dtype=acc)
    return compute(name, [index[lb] for lb in keep], cast(body, out_dtype))


# ---------------------------------------------------------------- einsum on arrays

_kernels = {}       # (subscripts, dtype, casting, optimize, per operand: dtype, ones or ndim)
# subscripts -> the guard of its last kernel used with default keywords: the dict the
# front door (warm.einsum, which is tex.einsum) tries before anything else
_guards = warm._guards
einsum = warm.einsum


def _einsum(subscripts, operands, dtype, out, optimize, casting, order):
    """The general path: conversions, tex tensors, the kernel cache, out=, order=."""
    if isinstance(subscripts, bytes):                  # numpy takes ASCII bytes too
        subscripts = subscripts.decode("ascii")
    if "dask" in sys.modules:
        from . import dask as tex_dask          # dask arrays in: a dask array out
        if tex_dask.any_dask((subscripts,) + tuple(operands)):
            return tex_dask.einsum(subscripts, operands, dtype, out, casting)
    if not isinstance(subscripts, str):
        subscripts, operands = interleaved_subscripts((subscripts,) + tuple(operands))
    if dtype is not None:
        dtype = np.dtype(dtype)         # (numpy's error for what is not a dtype)
    if any(isinstance(a, Tensor) for a in operands):
        _refuse_data_among_tensors(operands)
        if out is not None:
            raise TypeError("einsum on tex tensors builds IR; out= applies only to arrays")
        return einsum_program(subscripts, *operands, dtype=dtype, casting=casting,
                              optimize=optimize).outputs[0]
    arrays = [np.asarray(a) for a in operands]
    if out is not None and dtype is not None and isinstance(out, np.ndarray) and \
            isinstance(casting, str) and not np.can_cast(out.dtype, dtype, casting):
        # numpy's iterator takes out= as read-write: its dtype must cast to dtype= too
        raise TypeError(f"Iterator operand {len(arrays)} dtype could not be cast from "
                        f"{out.dtype!r} to {np.dtype(dtype)!r} according to the rule "
                        f"{casting!r}")
    if out is not None and dtype is None and isinstance(out, np.ndarray) and arrays:
        # numpy computes in the common dtype of the operands and out= (a sum of bools
        # into an int64 out= counts them; int8 products into int64 do not wrap)
        own = np.result_type(*(a.dtype for a in arrays))
        if np.result_type(own, out.dtype) != own:
            dtype = np.result_type(own, out.dtype)
    if complex_einsum.is_complex(arrays, dtype, out):   # as real einsums of the parts
        return complex_einsum.einsum(warm.einsum, subscripts, arrays, dtype, out, optimize,
                                     casting, order)
    greedy = optimize is False or optimize is True or optimize == "greedy"
    key = warm.kernel_key(subscripts, arrays, dtype, casting, optimize)
    entry = _kernels.get(key)
    calls = None
    if entry is None:
        with paused():
            entry, calls = _compile_kernel(key, subscripts, arrays, dtype, casting,
                                           optimize)
    if dtype is None and casting == "safe" and greedy:
        _guards[subscripts] = entry.guard
    args = arrays if entry.perm is None else [arrays[p] for p in entry.perm]
    out = _check_out_and_order(entry, arrays, out, order)
    try:
        if out is None:
            result = entry.fn(*args)
            result = result[()] if entry.scalar else result
        elif out.dtype == entry.dtype:
            result = entry.fn(*args, out=out)
        else:
            result = _cast_into(out, entry, args, casting, len(arrays))
    except ShapeError:
        # the kernel refused the sizes: say it as numpy does, when the labels disagree
        resolve_labels(expand(subscripts, tuple(a.ndim for a in arrays))[0],
                       [_spec(a) for a in arrays])
        raise
    if calls is not None:
        # recorded after the first call, for the next process's warm start: a kernel
        # shared with an earlier einsum (a chain's step) builds this call's nests at the
        # call, and the record must name that build
        warm.record(key, entry, calls)
    return result


def _compile_kernel(key, subscripts, arrays, dtype, casting, optimize):
    """A cache miss: compile these operands' einsum. Two operands (or one) are one
    kernel; more run the contraction path one step after another, each step a kernel
    of its own (so compile time grows with the number of steps, not faster), compiled
    once for each distinct step: the steps of a chain of matrix products are all
    `ab,bc->ac` and share one kernel. Returns (the entry, the operands' shapes of the
    calls whose nests it built, for the record the caller writes after the first call)."""
    plan = _plan(subscripts, arrays, dtype, casting, optimize)
    out_dims = tuple(next((k, d.index(lb)) for k, d in enumerate(plan.dims) if lb in d)
                     for lb in plan.output)
    # A kernel builds only the specializations its calls run (a symbolic matmul has
    # nine: first call 1.4 -> 1.0 s), this call's and, when an earlier process's record
    # could not serve this call (warm.py fell back to here), those of the calls the
    # record was built for: the new record serves all of them warm.
    calls = [c for c in warm.recorded_calls(key) if len(c) == len(arrays)]
    calls = list(dict.fromkeys(calls + [tuple(a.shape for a in arrays)]))
    if len(plan.path) > 1:
        fn, perm = _chain(plan, calls), None
    else:
        program, tensors, _, _ = _build(subscripts, arrays, dtype, casting, optimize, "einsum")
        sizes = [{d: n for t, shape in zip(tensors, c) for d, n in zip(t.shape, shape)
                  if isinstance(d, sym.Symbol)} for c in calls]
        fn, perm = _compile_with_order(program, tensors, sizes)
    guard = _make_guard(fn, perm, not out_dims, [s.dtype for s in plan.specs], key,
                        plan.result)
    entry = _Kernel(fn, perm, plan.result, not out_dims, out_dims, guard)
    _remember(_kernels, key, entry)
    return entry, calls


def _remember(cache, key, entry):
    """Insert into one of einsum's caches, dropping the oldest entry when it is full (as
    many entries as compiled kernels the JIT keeps: an entry holds its kernel's code)."""
    from .backends.llvm.jit import kernel_cache_size
    while len(cache) >= kernel_cache_size():
        del cache[next(iter(cache))]
        _guards.clear()
    cache[key] = entry


def _compile_with_order(program, tensors, sizes):
    """(the compiled program's call path, the operands' order in its signature, or None
    when it is theirs). `sizes`: [{Size: value}] of the calls whose specializations are
    built first."""
    position = {t: k for k, t in enumerate(tensors)}
    perm = tuple(position[t] for t in program.inputs)
    compiled = compile_program(program, sizes)
    # a CompiledFunction's instance `__call__` is its generated call path: one frame less
    return compiled.__call__, None if perm == tuple(range(len(perm))) else perm


_steps = {}         # a contraction step's canonical form -> (call path, operand order)


def _chain(plan, calls):
    """`run(*operands, out=None)`: the contraction path of `plan`, a step at a time
    (`calls`: the operands' shapes of the calls whose specializations it builds). Steps
    of one canonical form run one kernel, built once with the specializations of every
    step that runs it (a chain of float32 matrix products: one kernel for all its steps,
    first call of `ij,jk,kl->il` ~370 -> ~320 ms)."""
    label_sizes = [{lb: n for shape, d in zip(c, plan.dims) for lb, n in zip(d, shape)
                    if lb is not None} for c in calls]
    terms = [_as_term(d, True, s.dtype, plan.result) for s, d in zip(plan.specs, plan.dims)]
    forms = []
    for step, positions in enumerate(plan.path):
        picked = [terms[p] for p in positions]
        for p in sorted(positions, reverse=True):
            del terms[p]
        last = step == len(plan.path) - 1
        out_dtype = plan.result if last else dtypes.accumulator(plan.result)
        needed = None if last else set(plan.output).union(*(t[0] for t in terms))
        form = _canonical(picked, plan.output if last else needed, plan.result, out_dtype)
        forms.append((positions, form))
        terms.append(_as_term(form.kept, False, out_dtype, plan.result))
    runs = {}           # canonical key -> the sizes ({letter: size}) of each step's calls
    for _, form in forms:
        runs.setdefault(form.key, []).extend(
            {letter: ls[lb] for lb, letter in form.rename.items() if lb in ls}
            for ls in label_sizes)
    steps = []
    for positions, form in forms:
        fn = _step_kernel(form.key, runs[form.key])
        steps.append((tuple(positions[k] for k in form.order), fn))
    return warm.chain(steps)


def _as_term(labels, is_operand, dtype, result):
    """A term of the contraction path: (labels, is_operand, dtype). An operand already of
    the result dtype, which is its own accumulator (float32, float64), is read as an
    intermediate is (nothing to cast), so steps on operands and on intermediates share a
    kernel."""
    plain = np.dtype(dtype) == np.dtype(result) == dtypes.accumulator(result)
    return (labels, is_operand and not plain, dtype)


# A contraction step in canonical form: `key` (its kernel's), `order` (of the picked
# terms, as the kernel takes them), `kept` (the labels of its result), `rename` (label ->
# canonical letter)
_Form = collections.namedtuple("_Form", "key order kept rename")


def _canonical(picked, keep, result, out_dtype):
    """The canonical form of a contraction step: the terms in the order whose labels,
    renamed 'a', 'b', ... as they appear, give the smallest key, so that `ij,jk` and
    `jk,ij` -- and every step of a chain of matrix products -- share one kernel. `keep`
    is the output's labels (the last step), or the set of labels later steps need, kept
    in order of appearance."""
    best = None
    for order in itertools.permutations(range(len(picked))) if len(picked) <= 3 else \
            [tuple(range(len(picked)))]:
        rename = {}
        for k in order:
            for lb in picked[k][0]:
                if lb is not None:
                    rename.setdefault(lb, string.ascii_letters[len(rename)])
        kept = keep if isinstance(keep, tuple) else tuple(lb for lb in rename if lb in keep)
        canon = tuple((tuple(None if lb is None else rename[lb] for lb in picked[k][0]),
                       picked[k][1], picked[k][2]) for k in order)
        key = (canon, tuple(rename[lb] for lb in kept), result, out_dtype)
        if best is None or repr(key) < repr(best[0]):
            best = _Form(key, order, kept, rename)
    return best


def _step_kernel(key, letter_sizes):
    """The call path of a step's kernel (canonical `key`), compiled once per key;
    `letter_sizes`: [{canonical letter: size}] of the calls whose specializations it
    builds first."""
    hit = _steps.get(key)
    if hit is None:
        canon, out_labels, result, out_dtype = key
        size = {c: sizes(f"n_{c}") for labels, _, _ in canon for c in labels if c}
        tensors = [tensor(f"op{k}", [1 if lb is None else size[lb] for lb in labels], dt)
                   for k, (labels, _, dt) in enumerate(canon)]
        program = Program(_contract("einsum", [(t, labels, is_op) for t, (labels, is_op, _)
                                               in zip(tensors, canon)],
                                    out_labels, result, out_dtype))
        step_sizes = [{size[c]: n for c, n in ls.items()} for ls in letter_sizes]
        fn, perm = _compile_with_order(program, tensors, _unique(step_sizes))
        hit = fn if perm is None else _reordered(fn, perm)
        _remember(_steps, key, hit)
    return hit


def _unique(dicts):
    """`dicts` without repeats, in order."""
    out = []
    for d in dicts:
        if d not in out:
            out.append(d)
    return out


def compile_program(program, sizes=None):
    """The compiler behind einsum's kernels (imported late: tex's modules do not import
    the backends at import time); `sizes`, the first call's (see runtime.compile). No
    layout variants: einsum lays its operands out itself (tex/layout.py)."""
    from .backends.llvm.runtime import compile_without_variants
    return compile_without_variants(program, sizes=sizes)


def _check_out_and_order(entry, arrays, out, order):
    """Checks `order=` and `out=`; returns the array to write: `out`, an F-ordered array
    if asked, or None ('K' gives C order; 'A' gives F when every operand is F- and not
    every operand C-contiguous)."""
    layout = _LAYOUTS.get(order.upper() if isinstance(order, str) else
                          "K" if order is None else None)    # numpy takes None for 'K'
    if layout is None:
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    if out is not None:
        if not isinstance(out, np.ndarray):
            raise TypeError("keyword parameter out must be an array for einsum")
        return out
    if layout == "A":
        layout = fortran_result(arrays)
    if layout == "C" or len(entry.out_dims) < 2:
        return None
    shape = tuple(arrays[k].shape[axis] for k, axis in entry.out_dims)
    return np.empty(shape, entry.dtype, order="F")


def _cast_into(out, entry, args, casting, n_operands):
    """`out=` of another dtype than the computation's (_einsum made a wider out='s its own):
    computed, then cast as numpy casts."""
    if not np.can_cast(entry.dtype, out.dtype, casting):
        raise TypeError(f"Iterator requested dtype could not be cast from {entry.dtype!r} "
                        f"to {out.dtype!r}, the operand {n_operands} dtype, according to the "
                        f"rule {casting!r}")
    result = entry.fn(*args)
    if out.shape != result.shape:
        raise ShapeError(f"out= has shape {out.shape} but the einsum result has shape "
                         f"{result.shape}")
    np.copyto(out, result, casting="unsafe")
    return out

