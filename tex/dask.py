"""tex over dask arrays: an einsum or a compiled program on chunked operands becomes a
dask graph whose chunk tasks are tex kernels (dask schedules; tex does not grow a
scheduler of its own).

    tex.einsum("ik,kj->ij", x, y)      x or y a dask array: a dask array (dask's blockwise,
                                       built as dask.array.einsum builds it)
    f = tex.compile(R); f(x, y)        dask arrays in: a dask array (elementwise and
                                       broadcast programs; reductions over chunked axes)

What travels in a graph is small and picklable: an einsum's subscripts and keywords, or
a compiled function's pickle (its program and schedule history, API.md), never machine
code. A worker compiles a task function on its first call (or loads the kernel from its
disk cache) and keeps it for the next tasks of that kind.

A reduction whose reduced axis is split into chunks runs as split-K one level up: each
chunk reduces its part (the combiner's identity for an empty part; argmax/argmin keep the
value and the global position), then dask's tree reduction merges the parts. A program
that cannot be split so (a reduction feeding another definition across chunks, an
offset access on a chunked axis) is refused with a message that names the tensor, the
axis and the rechunk that makes it run; nothing is rechunked behind the user's back.

dask is optional: `import tex` never imports this module's dask imports; tex.einsum and
the compiled call path come here only when an operand is a dask collection.
"""
import pickle
import sys

import numpy as np
import tex.symbolic as sym

import tex
from . import dtypes
from .expr import Access, IndexValue, Reduce, walk
from .indices import Index
from .tensor import Definition

_KEEP = 64      # compiled functions a process keeps for its tasks (oldest dropped)
_FUNCTIONS = {}


def is_dask(x):
    """A dask collection with chunks (a dask.array.Array), known without importing dask:
    only a process that imported dask can hold one."""
    return "dask" in sys.modules and hasattr(type(x), "__dask_graph__") and hasattr(x, "chunks")


def any_dask(values):
    return "dask" in sys.modules and any(is_dask(v) for v in values)


# ---------------------------------------------------------------- einsum

class EinsumChunk:
    """The task function of an einsum over dask arrays: tex.einsum on one block of each
    operand (its kernel cache compiles once per process and kind), with a size-1 axis
    in front per contracted label so that dask's blockwise keeps them apart. `through`: a
    dtype the blocks are cast to first (float16 partial sums are kept in float32: the
    operands are rounded to float16 as numpy's einsum rounds them, the sums are not)."""
    __slots__ = ("subscripts", "dtype", "casting", "ncontract", "through")

    def __init__(self, subscripts, dtype, casting, ncontract, through=None):
        self.subscripts, self.dtype = subscripts, dtype
        self.casting, self.ncontract, self.through = casting, ncontract, through

    def __getstate__(self):
        return (self.subscripts, self.dtype, self.casting, self.ncontract, self.through)

    def __setstate__(self, state):
        self.subscripts, self.dtype, self.casting, self.ncontract, self.through = state

    def __call__(self, *blocks):
        blocks = [_only_block(b) for b in blocks]
        if self.through is not None:
            blocks = [np.asarray(b).astype(self.through) for b in blocks]
        r = np.asarray(tex.einsum(self.subscripts, *blocks, dtype=self.dtype,
                                  casting=self.casting))
        if r.ndim == 0 and not self.ncontract:
            return r[()]                # a 0-d result: a numpy scalar, as np.einsum's
        return r.reshape((1,) * self.ncontract + r.shape)

    def __dask_tokenize__(self):
        return ("tex.EinsumChunk",) + self.__getstate__()

    def __repr__(self):
        return f"<tex einsum chunk {self.subscripts!r}>"


def _only_block(block):
    """The block itself from blockwise's lists of blocks along the labels the output
    drops: a label in one chunk gives a list of one block, passed as it is (blockwise's
    concatenate=True copied it: 64 MiB a task for an int8 row sum, which then ran at
    3 GB/s); several blocks are concatenated as dask would."""
    b = block
    while isinstance(b, list) and len(b) == 1:
        b = b[0]
    if isinstance(b, list):
        from dask.array.core import concatenate3
        return concatenate3(block)
    return b


def einsum(subscripts, operands, dtype=None, out=None, casting="safe", split_every=None):
    """numpy.einsum's result as a dask array: dask.array.einsum's graph (its rechunking
    rule, blockwise over output and contracted labels, a tree sum of the partial
    products) with tex.einsum as the chunk function."""
    import dask.array as da
    from dask.array.einsumfuncs import parse_einsum_input
    if out is not None:
        raise TypeError("tex.einsum over dask arrays returns a new dask array; out= "
                        "applies to numpy arrays only")
    # dask's parsing (the interleaved form too): explicit letters, '...' expanded
    inputs, output, ops = parse_einsum_input((subscripts,) + tuple(operands))
    terms = inputs.split(",")
    explicit = f"{inputs}->{output}"
    for n, op in enumerate(ops):
        _check_known_chunks(op, f"tex.einsum: operand {n}")
    # numpy's semantics and refusals (ranks, dtype=, casting=, sizes) from tex's program
    spec = [(o.shape, o.dtype) for o in ops]
    result = tex.einsum_program(explicit, *spec, dtype=dtype, casting=casting).outputs[0].dtype
    _check_einsum_chunks(ops, terms)
    contract = sorted(set(inputs.replace(",", "")) - set(output))
    ops = _dask_einsum_rechunk(ops, terms, output, contract)
    pairs = [a for pair in zip(ops, terms) for a in pair]
    if all(_label_chunks(ops, terms, label) == 1 for label in contract):
        # every contracted label in one chunk: each task's einsum is final, no tree sum
        # (8 tasks instead of 24 for an int8 row sum over 64 MiB row blocks)
        return da.blockwise(
            EinsumChunk(explicit, result if dtype is not None else None, casting, 0),
            output, *pairs, dtype=result, token="tex-einsum",
            meta=np.empty((0,) * len(output), result))
    # the contracted labels lead: the tree sum then adds whole partial blocks (a
    # reduction over the first axis of the stacked parts); trailing, it summed each
    # element's few parts along the last axis, 3x slower than dask's own matmul merge
    # float16 parts are summed in float32 and rounded once (numpy's rule; rounded per
    # chunk, 1024 + 1024 + 0.5 - 1024 - 1024 + 0.5 in chunks of 3 summed to 0)
    acc = dtypes.accumulator(result)
    chunk = EinsumChunk(explicit, acc if dtype is not None or acc != result else None,
                        casting, len(contract), result if acc != result else None)
    partial = da.blockwise(
        chunk, "".join(contract) + output, *pairs,
        adjust_chunks=dict.fromkeys(contract, 1), dtype=acc, token="tex-einsum",
        meta=np.empty((0,) * (len(output) + len(contract)), acc))
    axes = tuple(range(len(contract)))
    if result.kind == "b":                           # bool sums are OR, as in numpy
        return partial.any(axis=axes, split_every=split_every)
    # the parts are final per task (no chunk step: da.sum's copied each 4 MiB block)
    merge = _Merge("sum", acc)
    total = da.reduction(partial, _keep, merge, axis=axes, dtype=acc, combine=merge,
                         split_every=split_every, concatenate=False, name="tex-einsum-sum",
                         meta=np.empty((0,) * len(output), acc))
    return total if acc == result else total.astype(result)


def _check_known_chunks(a, what):
    if any(c != c for sizes in a.chunks for c in sizes):        # NaN: a size not known
        raise ValueError(f"{what} has chunks of unknown size (as after boolean indexing); "
                         "x.compute_chunk_sizes() finds them")


def _check_einsum_chunks(ops, terms):
    """Chunks a graph can be built on: a label repeated within one operand (a diagonal,
    `ii->i`) chunked alike on its axes (dask's blockwise aligns chunks across operands,
    not within one)."""
    for n, (op, term) in enumerate(zip(ops, terms)):
        for label in set(term):
            axes = [axis for axis, c in enumerate(term) if c == label]
            chunks = {op.chunks[axis] for axis in axes}
            if len(chunks) > 1:
                raise ValueError(
                    f"tex.einsum: label {label} is repeated in operand {n}, whose axes "
                    f"{', '.join(map(str, axes))} are chunked differently "
                    f"({'; '.join(map(str, (op.chunks[a] for a in axes)))}): rechunk them "
                    f"alike, e.g. x.rechunk({op.chunks[axes[0]][0]})")


def _label_chunks(ops, terms, label):
    """How many chunks the operands have along `label` (at most one count: dask's
    blockwise unifies them)."""
    return max(len(o.chunks[term.index(label)]) for o, term in zip(ops, terms)
               if label in term)


def _dask_einsum_rechunk(ops, terms, output, contract):
    """dask.array.einsum's rechunking (smaller input chunks where the output's chunks
    would grow past the largest input chunk), so that chunking follows dask's rule."""
    try:
        import math
        from dask import config
        from dask.array._shuffle import _calculate_new_chunksizes
        from dask.utils import cached_max
    except ImportError:                              # another dask: keep the chunks
        return ops
    if len(ops) < 2 or not output:
        return ops
    sizes, biggest = {}, 1
    for op, term in zip(ops, terms):
        biggest = max(math.prod(map(cached_max, op.chunks)), biggest)
        for n, label in enumerate(term):
            if label not in contract:
                sizes[label] = max(cached_max(op.chunks[n]), sizes.get(label, 1))
    factor = math.prod(sizes.values()) / (biggest * config.get("array.chunk-size-tolerance"))
    out = []
    for op, term in zip(ops, terms):
        changeable = {n for n, label in enumerate(term) if label in output}
        f = max(factor ** (len(changeable) / len(output)), 1)
        new = _calculate_new_chunksizes(op.chunks, list(op.chunks), changeable,
                                        math.prod(map(cached_max, op.chunks)) / f)
        out.append(op.rechunk(new))
    return out


# ---------------------------------------------------------------- compiled programs

def compiled_function(payload):
    """The compiled function a pickle stands for (of a compiled function, or of a
    program to compile with the default schedule), unpickled -- compiled, or loaded from
    the disk cache -- once per process."""
    f = _FUNCTIONS.get(payload)
    if f is None:
        f = pickle.loads(payload)
        if isinstance(f, tex.Program):              # a program without a schedule
            f = tex.compile(f)
        if len(_FUNCTIONS) >= _KEEP:
            del _FUNCTIONS[next(iter(_FUNCTIONS))]
        _FUNCTIONS[payload] = f
    return f


class ProgramChunk:
    """The task function of a compiled program over dask arrays: the function's pickle
    (program and schedule history, never code), compiled where it first runs.

    `reduce`: None for a blockwise program (one block in, the output block out), else
    the partial step of a root reduction over chunked axes: (combiner, identity, number
    of reduced axes, the (operand, axis) pairs they run along); an empty part gives the
    identity, and argmax/argmin give a record of the best value (from `value`, the
    pickled program of max(body), min for argmin) and its position in the block (-1 for
    an empty part)."""
    __slots__ = ("payload", "params", "reduce", "value")

    def __init__(self, payload, params, reduce=None, value=None):
        self.payload, self.params, self.reduce, self.value = payload, params, reduce, value

    def __getstate__(self):
        return (self.payload, self.params, self.reduce, self.value)

    def __setstate__(self, state):
        self.payload, self.params, self.reduce, self.value = state

    def __call__(self, *blocks):
        blocks = [_only_block(b) for b in blocks]
        f = compiled_function(self.payload)
        if self.reduce is None:
            return f(*blocks, **self.params)
        combiner, identity, nred, reduced_axes = self.reduce
        empty = any(blocks[n].shape[a] == 0 for n, a in reduced_axes)
        if combiner not in ("argmax", "argmin"):
            r = None if empty else np.asarray(f(*blocks, **self.params))
            if r is None:
                shape = _out_shape(f, blocks)
                r = np.full(shape, identity, f.program.outputs[0].dtype)
            return r.reshape((1,) * nred + r.shape)
        if empty:
            shape = _out_shape(f, blocks)
            vals = np.full(shape, identity, _value_dtype(self.value))
            pos = np.full(shape, -1, np.int64)
        else:
            pos = np.asarray(f(*blocks, **self.params))
            vals = np.asarray(compiled_function(self.value)(*blocks, **self.params))
        rec = np.empty(pos.shape, [("v", vals.dtype), ("a", np.int64)])
        rec["v"], rec["a"] = vals, pos
        return rec.reshape((1,) * nred + rec.shape)

    def __dask_tokenize__(self):
        return ("tex.ProgramChunk",) + self.__getstate__()

    def __repr__(self):                 # never compiles (a scheduler may print it)
        kind = "blockwise" if self.reduce is None else f"partial {self.reduce[0]}"
        return f"<tex chunk ({kind}, a {len(self.payload)}-byte program)>"


def _out_shape(f, blocks):
    """The output block's shape when the kernel is not run (an empty reduced part): the
    sizes bound from the blocks' shapes."""
    program = f.program
    values = {}
    for t, b in zip(program.inputs, blocks):
        for d, n in zip(t.shape, np.shape(b)):
            if isinstance(d, sym.Symbol):
                values[d] = n
    return tuple(int(sym.sympify(d).subs(values)) for d in program.outputs[0].shape)


def _value_dtype(value_payload):
    return compiled_function(value_payload).program.outputs[0].dtype


def call_compiled(f, args, params, out):
    """`f(*args, **params)` with a dask array among args: the dask array of the result."""
    import dask.array as da
    if out is not None:
        raise TypeError(f"{f.symbol}: out= applies to numpy arrays; over dask arrays the "
                        "result is a new dask array (store it with dask's da.store)")
    program = f.program
    if len(program.outputs) != 1:
        raise NotImplementedError(
            f"{f.symbol}: a program with {len(program.outputs)} outputs over dask arrays; "
            "compile each output on its own")
    arrays = [da.asarray(a) for a in args]
    for t, a in zip(program.inputs, arrays):
        _check_known_chunks(a, f"{f.symbol}: input {t.name}")
    plan = _plan(program, arrays)
    payload = pickle.dumps(f)
    params = {k: v for k, v in params.items() if v is not None}
    o = program.outputs[0]
    pairs = [x for pair in zip(arrays, plan.input_labels) for x in pair]
    if plan.split is None:
        return da.blockwise(ProgramChunk(payload, params), plan.output_labels, *pairs,
                            dtype=o.dtype, token=f"{f.symbol}",
                            meta=np.empty((0,) * o.ndim, o.dtype))
    return _split_reduction(f, payload, params, plan, arrays, pairs)


# ---------------------------------------------------------------- which axes may split

class _Plan:
    """Blockwise labels: one per class of axes that must be chunked alike (an input's
    axis and the definition indices that read it plainly), and the split reduction."""

    def __init__(self, input_labels, output_labels, split):
        self.input_labels, self.output_labels, self.split = input_labels, output_labels, split


def _plan(program, arrays):
    """Label every axis; refuse what a per-chunk run would compute wrongly."""
    parent = {}

    def find(n):
        while parent.setdefault(n, n) != n:
            n = parent[n]
        return n

    def union(a, b):
        parent[find(a)] = find(b)

    def node(t, axis):
        return ("ix", t, t.indices[axis]) if isinstance(t, Definition) else ("ax", t, axis)

    offsets, reduced, values = [], [], []
    for d in program.definitions:
        for x in d.indices:
            find(("ix", d, x))
        for n in walk(d.expr):
            if isinstance(n, Access):
                for axis, e in enumerate(n.index):
                    if isinstance(e, Index):
                        union(("ix", d, e), node(n.tensor, axis))
                    else:
                        offsets.append((d, n, axis))
            elif isinstance(n, Reduce):
                reduced += [(d, x) for x in n.over]
            elif isinstance(n, IndexValue):
                values.append((d, n))
    nchunks = {}
    for t, a in zip(program.inputs, arrays):
        if a.ndim != t.ndim:
            raise tex.ShapeError(f"tensor {t.name} has {t.ndim} dimensions, the dask array "
                                 f"given for it {a.ndim}")
        for axis in range(t.ndim):
            root = find(("ax", t, axis))
            nchunks[root] = max(nchunks.get(root, 1), len(a.chunks[axis]))
    chunked = {r for r, n in nchunks.items() if n > 1}

    def where(root):
        """'input A's axis 1 (3 chunks)' for a class."""
        for t, a in zip(program.inputs, arrays):
            for axis in range(t.ndim):
                if find(("ax", t, axis)) == root and len(a.chunks[axis]) > 1:
                    return (f"input {t.name}'s axis {axis} ({len(a.chunks[axis])} chunks); "
                            f"rechunk it into one ({t.name}.rechunk({{{axis}: -1}}))")
        return "an axis of one chunk"

    _check_inputs(program, arrays, find, chunked, where)
    for d, n, axis in offsets:
        root = find(node(n.tensor, axis))
        if root in chunked:
            raise ValueError(f"{d.name} reads {n.tensor.name} at index {n.index[axis]} in "
                             f"axis {axis}: a chunk has no neighbours' elements, and that "
                             f"axis is {where(root)}")
    for d, v in values:
        for s in v.expr.free_symbols:
            root = find(("ix", d, s)) if isinstance(s, Index) else None
            if root is None:
                root = next((find(("ax", t, axis)) for t, a in zip(program.inputs, arrays)
                             for axis, dim in enumerate(t.shape)
                             if s in sym.sympify(dim).free_symbols and len(a.chunks[axis]) > 1),
                            None)
            if root in chunked:
                raise ValueError(f"{d.name} uses {s} as a value, which a chunk would see "
                                 f"as its own (local) {s}; {s} runs along {where(root)}")
    o = program.outputs[0]
    out_roots = [find(("ix", o, x)) for x in o.indices]
    _check_output(program, arrays, o, out_roots, find)
    labels = {}
    for r in parent:
        if find(r) == r:
            labels[r] = len(labels)
    input_labels = [tuple(labels[find(("ax", t, a))] for a in range(t.ndim))
                    for t in program.inputs]
    output_labels = tuple(labels[r] for r in out_roots)
    split_roots = {find(("ix", d, x)) for d, x in reduced} & chunked
    if not split_roots:
        return _Plan(input_labels, output_labels, None)
    red = o.reduction
    own = [find(("ix", o, x)) for x in red.over] if red is not None else []
    for d, x in reduced:
        root = find(("ix", d, x))
        if root in chunked and (d is not o or root in out_roots):
            consumer = next((c.name for c in program.definitions
                             if d in c.reads()), o.name)
            raise ValueError(
                f"{d.name} reduces over {x} along {where(root)}: its partial results per "
                f"chunk would feed {consumer}, and only a reduction at the program's output "
                "can be merged across chunks")
    if red.combiner in ("argmax", "argmin") and len(set(own)) < len(own):
        raise ValueError(f"{o.name}: {red.combiner} over indices that run along the same "
                         f"chunked axis ({where(next(iter(split_roots)))}): its flat "
                         "positions cannot be split by chunks")
    red_labels = tuple(dict.fromkeys(labels[r] for r in own))
    return _Plan(input_labels, output_labels, red_labels)


def _check_inputs(program, arrays, find, chunked, where):
    """A chunked axis must be a size of its own (N, not 8 or N // 2), shared only with
    axes chunked alike: its chunks then bind N to their own length."""
    for t, a in zip(program.inputs, arrays):
        for axis, dim in enumerate(t.shape):
            root = find(("ax", t, axis))
            if root not in chunked:
                continue
            if not isinstance(dim, sym.Symbol):
                raise ValueError(f"tensor {t.name}'s axis {axis} has the fixed size {dim} and "
                                 f"is split into chunks: {where(root)}")
            for u in program.inputs:
                for ax2, d2 in enumerate(u.shape):
                    if dim in sym.sympify(d2).free_symbols and find(("ax", u, ax2)) != root:
                        raise ValueError(f"size {dim} is both {t.name}'s axis {axis} and "
                                         f"{u.name}'s axis {ax2}, which are not chunked "
                                         f"alike: {where(root)}")


def _check_output(program, arrays, o, out_roots, find):
    """Every output axis follows an input axis of the same extent (its chunks)."""
    for x, root in zip(o.indices, out_roots):
        ok = any(find(("ax", t, axis)) == root and sym.simplify(t.shape[axis] - o.extents[x]) == 0
                 for t in program.inputs for axis in range(t.ndim))
        if not ok:
            raise ValueError(f"{o.name}'s index {x} (extent {o.extents[x]}) does not run "
                             "over a whole axis of an input, so its chunks cannot follow an "
                             "input's chunks: call the function on numpy arrays")


# ---------------------------------------------------------------- split reductions

def _split_reduction(f, payload, params, plan, arrays, pairs, split_every=None):
    """A partial reduction per chunk (blockwise, one leading size-1 axis per reduced label),
    global positions for argmax/argmin, then dask's tree reduction merges the parts."""
    import dask.array as da
    from dask.array.core import unify_chunks
    from .combiners import COMBINERS
    o = f.program.outputs[0]
    red = o.reduction
    chunkss, arrays = unify_chunks(*pairs)
    pairs = [x for pair in zip(arrays, plan.input_labels) for x in pair]
    total = 1
    for label in plan.split:
        total *= sum(chunkss[label])
    comb = COMBINERS[red.combiner]
    if total == 0 and not comb.has_identity and red.strict:
        raise ValueError(f"{f.symbol}: {red.combiner} of an empty range (zero-size "
                         f"reduction over {', '.join(map(str, red.over))}), which numpy refuses")
    positional = comb.positional
    value_dtype = red.body.dtype if positional else o.dtype
    identity = COMBINERS["max" if red.combiner == "argmax" else "min"].identity(value_dtype) \
        if positional else comb.identity(value_dtype)
    reduced_axes = tuple((n, axis) for n, labels in enumerate(plan.input_labels)
                         for axis, label in enumerate(labels) if label in plan.split)
    task = ProgramChunk(payload, params,
                        (red.combiner, identity, len(plan.split), reduced_axes),
                        _value_payload(f, payload) if positional else None)
    labels = plan.split + plan.output_labels       # the parts lead (see einsum)
    part_dtype = np.dtype([("v", value_dtype), ("a", np.int64)]) if positional else o.dtype
    partial = da.blockwise(task, labels, *pairs, adjust_chunks=dict.fromkeys(plan.split, 1),
                           token=f"{f.symbol}-partial",
                           dtype=part_dtype, meta=np.empty((0,) * len(labels), part_dtype))
    axes = tuple(range(len(plan.split)))
    if positional:
        partial = partial.map_blocks(_Shift([chunkss[label] for label in plan.split]),
                                     dtype=part_dtype, token=f"{f.symbol}-positions",
                                     meta=np.empty((0,) * len(labels), part_dtype))
        merge = _ArgMerge(red.combiner)
        meta = np.empty((0,) * len(plan.output_labels), part_dtype)
        best = da.reduction(partial, _keep, merge, axis=axes, dtype=part_dtype, combine=merge,
                            split_every=split_every, concatenate=True, meta=meta,
                            name=f"{f.symbol}-merge")
        return best.map_blocks(_positions, dtype=np.int64, meta=meta["a"])
    merge = _Merge(red.combiner, o.dtype)
    return da.reduction(partial, _keep, merge, axis=axes, dtype=o.dtype, combine=merge,
                        split_every=split_every, concatenate=False, name=f"{f.symbol}-merge",
                        meta=np.empty((0,) * len(plan.output_labels), o.dtype))


def _keep(x, axis=None, keepdims=True):
    """dask's chunk step: the parts are already reduced."""
    return x


class _Merge:
    """Merge partial sums, products, maxima or minima (numpy's: NaN propagates), given
    as dask's lists of blocks (reduction(concatenate=False)): combined in order into one
    new array, without stacking them first (concatenating four 4 MiB partial products
    copied 16 MiB an output block). numpy's sum over the stack added them in the same
    order, except 8 or more parts of a one-element block (a user's split_every of 8 or
    more), which it summed pairwise: those may differ in the last bits."""

    UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}

    def __init__(self, combiner, dtype):
        self.combiner, self.dtype = combiner, dtype

    def __dask_tokenize__(self):
        return ("tex._Merge", self.combiner, str(self.dtype))

    def __call__(self, x, axis=None, keepdims=False):
        parts = list(_blocks(x))
        ufunc = self.UFUNCS[self.combiner]
        dtype = self.dtype if self.combiner in ("sum", "prod") else None
        out = parts[0] if len(parts) == 1 else ufunc(parts[0], parts[1], dtype=dtype)
        for p in parts[2:]:
            ufunc(out, p, out=out, dtype=dtype)
        if dtype is not None and out.dtype != dtype:
            out = out.astype(dtype)
        if keepdims:
            return out
        axes = {a % out.ndim for a in (axis if isinstance(axis, tuple) else (axis,))}
        out = out.reshape([n for d, n in enumerate(out.shape) if d not in axes])
        return out[()] if out.ndim == 0 else out        # a numpy scalar, as np.sum gives


def _blocks(x):
    """The arrays of dask's (nested) list of blocks, in order."""
    if isinstance(x, (list, tuple)):
        for item in x:
            yield from _blocks(item)
    else:
        yield x


class _Shift:
    """Block positions -> global positions (argmax/argmin): a part's flat position over
    its block of the reduced axes (row-major, as numpy's) becomes the flat position over
    the whole reduced axes. `chunks`: each reduced label's chunk lengths, in the
    reduction's order; the labels lead the partial blocks."""

    def __init__(self, chunks):
        self.chunks = tuple(tuple(c) for c in chunks)

    def __dask_tokenize__(self):        # (the same graph, the same keys)
        return ("tex._Shift", self.chunks)

    def __call__(self, part, block_id=None):
        ids = block_id[:len(self.chunks)]
        sizes = [c[b] for c, b in zip(self.chunks, ids)]
        if 0 in sizes:
            return part                         # an empty part: its positions are -1
        starts = [sum(c[:b]) for c, b in zip(self.chunks, ids)]
        totals = [sum(c) for c in self.chunks]
        a = part["a"]
        found = a >= 0
        local = np.unravel_index(np.where(found, a, 0), sizes)
        flat = np.ravel_multi_index(tuple(x + s for x, s in zip(local, starts)), totals)
        out = part.copy()
        out["a"] = np.where(found, flat, -1)
        return out


class _ArgMerge:
    """Merge (value, position) records: a part wins with a better value, or a NaN
    against a number (numpy's argmax takes the first NaN); between equal values (or two
    NaNs) the smaller global position wins, as in numpy; empty parts (-1) never win."""

    def __init__(self, combiner):
        self.combiner = combiner

    def __dask_tokenize__(self):
        return ("tex._ArgMerge", self.combiner)

    def __call__(self, x, axis=None, keepdims=True):
        axes = tuple(a % x.ndim for a in (axis if isinstance(axis, tuple) else (axis,)))
        rest = tuple(d for d in range(x.ndim) if d not in axes)
        count = int(np.prod([x.shape[d] for d in axes]))       # (-1 fails beside a 0)
        parts = np.transpose(x, axes + rest).reshape((count,) + tuple(x.shape[d] for d in rest))
        best = parts[0]
        for p in parts[1:]:
            bv, pv = best["v"], p["v"]
            better = pv > bv if self.combiner == "argmax" else pv < bv
            same = pv == bv
            if pv.dtype.kind == "f":
                better |= np.isnan(pv) & ~np.isnan(bv)
                same |= np.isnan(pv) & np.isnan(bv)
            earlier = p["a"] < best["a"]
            take = (p["a"] >= 0) & ((best["a"] < 0) | better | (same & earlier))
            best = np.where(take, p, best)
        if keepdims:
            best = best.reshape(tuple(1 if d in axes else x.shape[d] for d in range(x.ndim)))
        return best


def _positions(records):
    return records["a"]


_VALUE_PAYLOADS = {}    # a program's payload -> its _value_payload


def _value_payload(f, payload):
    """The pickle of max(body) (min for argmin) over the same indices: the values an
    argmax's parts are compared by, compiled with the default schedule. One pickle per
    program (each new definition pickles apart): the graph of f(x) is the same graph,
    with the same keys, at every call."""
    if payload not in _VALUE_PAYLOADS:
        if len(_VALUE_PAYLOADS) >= 256:
            _VALUE_PAYLOADS.clear()
        _VALUE_PAYLOADS[payload] = _new_value_payload(f)
    return _VALUE_PAYLOADS[payload]


def _new_value_payload(f):
    o = f.program.outputs[0]
    red = o.reduction
    fn = tex.max if red.combiner == "argmax" else tex.min
    v = tex.compute(f"{o.name}_value", o.indices, fn(red.body, over=red.over))
    return pickle.dumps(tex.Program(v, inputs=f.program.inputs))
