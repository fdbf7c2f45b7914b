"""Tensors: inputs (`tex.tensor`) and definitions (`tex.compute`).

A definition is a tensor too, so later definitions read it (`C[i, j]`). Its shape is
the extents of its output indices, inferred from the accesses each index appears in:
the intersection of their valid ranges (API.md section 2), unless the index has an
explicit extent. Reductions nested inside a larger expression are lifted into
definitions of their own, so every definition is either elementwise or one reduction
at its root.

Tensors and definitions are immutable, and identity is what programs go by. So that
notebook cells can be re-run, `tex.tensor` returns the tensor already declared with
the same name, shape and dtype (a different shape or dtype under the same name is
another tensor, and a program refuses to hold both). Copies and unpickled copies are
the objects they were made from: a definition carries a random `uid`, and one process
holds one object per uid (in the process that made it, that is the original).
"""
import itertools
import os
import weakref

import numpy as np
import tex.symbolic as sym

from . import dtypes
from .errors import ShapeError
from .expr import (Access, Const, Index, IndexValue, Op, Reduce, affine_terms, as_expr, as_size,
                   check_rank, expr_indices, format_expr, free_indices, index_symbols, rebuild,
                   some_indices, walk, with_children, without_indices)
from .html import box, code, escape, pre, table
from .indices import argument_name, format_size, indices as _indices


class Tensor:
    """An array with a name, a shape of size expressions (tex.symbolic) and a dtype."""
    needs_indices = True        # an expression reads it as T[i, j] (expr.as_expr says so)

    def __init__(self, name, shape, dtype):
        self.name = argument_name(name, "tensor")
        if isinstance(shape, str):
            raise TypeError(f"tensor {name}: the shape is a tuple of sizes, not the string "
                            f"{shape!r}: tex.tensor({name!r}, (M, K)) with M, K = "
                            "tex.sizes('M K')")
        if not isinstance(shape, (tuple, list)):
            shape = (shape,)            # numpy's habit: np.zeros(5) is np.zeros((5,))
        self.shape = tuple(_as_extent(d, f"tensor {name}") for d in shape)
        self.dtype = dtypes.as_dtype(dtype, f"tensor {name}")

    @property
    def ndim(self):
        return len(self.shape)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        element = f"{self.name}[{some_indices(self)}]"
        if method in ("reduce", "accumulate", "reduceat", "outer", "at"):
            # np.sum(A) is np.add.reduce(A), np.max(A) np.maximum.reduce(A)
            combiner = {"add": "sum", "multiply": "prod", "maximum": "max",
                        "minimum": "min"}.get(ufunc.__name__, "sum")
            over = some_indices(self).split(", ")[-1]
            spelling = f"tex.{combiner}({element}, over={over})" if self.shape else element
        elif ufunc.__name__ == "matmul":
            spelling = "tex.sum(A[i, k] * B[k, j], over=k)"
        else:
            spelling = f"np.{ufunc.__name__}(" + ", ".join(
                f"{x.name}[{some_indices(x)}]" if isinstance(x, Tensor) else "..."
                for x in inputs) + ")"
        raise TypeError(without_indices(self, spelling))

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        check_rank(self, index)
        norm = []
        for axis, ix in enumerate(index):
            if isinstance(ix, slice) or ix is Ellipsis:
                raise TypeError(f"tensor {self.name}, dimension {axis}: slices are not "
                                "index expressions; use an index with an offset (C[i, j + H])")
            if ix is None:
                raise TypeError(f"tensor {self.name}, dimension {axis}: None (numpy's "
                                "newaxis) is not an index expression; a tensor is indexed "
                                "by one index expression per dimension")
            if isinstance(ix, str):     # (sympify would make a plain symbol of "i")
                raise TypeError(f"tensor {self.name}, dimension {axis}: the string {ix!r} "
                                f"is not an index: make indices with tex.indices({ix!r})")
            if isinstance(ix, (list, tuple, np.ndarray)):
                kind = "an array" if isinstance(ix, np.ndarray) else f"a {type(ix).__name__}"
                raise TypeError(f"tensor {self.name}, dimension {axis}: {kind} of positions "
                                "is not an index expression: tex has no gathers (numpy's "
                                "fancy indexing); each dimension takes an index "
                                "(tex.indices), an integer or an affine expression of them")
            if isinstance(ix, (float, np.floating)):
                raise TypeError(f"tensor {self.name}, dimension {axis}: {ix!r} is a float; "
                                "an index is an integer, an index or an affine expression "
                                "of them (N // 2, not N / 2)")
            try:
                ix = sym.sympify(ix)
            except (sym.SympifyError, TypeError):
                ix = None
            if not isinstance(ix, sym.Expr):
                raise TypeError(f"tensor {self.name}, dimension {axis}: {index[axis]!r} is "
                                "not an index expression") from None
            affine_terms(ix, f"tensor {self.name}, dimension {axis}")
            norm.append(ix)
        return Access(self, norm)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (tensor, (self.name, self.shape, self.dtype.name))

    @property
    def type_str(self):
        """`float32[M, K]`: the dtype and the shape, as displays show them."""
        return f"{self.dtype.name}[{', '.join(map(format_size, self.shape))}]"

    def __repr__(self):
        shape = "(" + "".join(f"{format_size(d)}, " for d in self.shape).rstrip(" ") + ")"
        shape = shape.replace(",)", ")") if len(self.shape) > 1 else shape
        return f"tex.tensor({self.name!r}, {shape}, {self.dtype.name!r})"

    def _repr_html_(self):
        return box(f"input tensor {escape(self.name)}", f"<div>{code(self.type_str)}</div>")


class Definition(Tensor):
    """`name[indices] = expr`: a tensor computed by a loop nest. `expr` is elementwise or
    a single `Reduce` at the root (nested reductions were lifted into `reads`)."""

    _live = weakref.WeakValueDictionary()      # uid -> the one object of this process

    def __init__(self, name, out_indices, expr, extents, uid=None):
        self.indices = tuple(out_indices)
        self.expr = expr
        self.extents = extents          # {Index: extent} for every index used
        super().__init__(name, [extents[x] for x in self.indices], expr.dtype)
        self.uid = uid or os.urandom(8).hex()
        Definition._live[self.uid] = self

    def __reduce__(self):
        return (_definition, (self.uid, self.name, self.indices, self.expr, self.extents,
                              self.written))

    written = None      # the expression as written, when nested reductions were lifted

    def __repr__(self):
        """As written: `mu[i] = sum(X[i, j], over=j) / N`, where `notation` (a stage's)
        reads the lifted reduction, `mu[i] = mu_sum0[i] / N`."""
        written = self.expr if self.written is None else self.written
        return f"{self._notation(written)}  # {self.type_str}"

    @property
    def notation(self):
        """`C[i, j] = sum(A[i, k] * B[k, j], over=k)`: the definition in index notation."""
        return self._notation(self.expr)

    def _notation(self, expr):
        idx = ", ".join(map(str, self.indices)) if self.indices else "()"
        return f"{self.name}[{idx}] = {format_expr(expr)}"

    def _repr_html_(self):
        return _definition_html(self)

    def __call__(self, /, *args, **kwargs):
        """`C(a, b)`: compile C with the default schedule (once: the compiled function
        is kept while C lives) and call it; inputs in the order `repr(C.compiled)` and the
        notebook display show (first use), or by name."""
        return self.compiled(*args, **kwargs)

    @property
    def compiled(self):
        """The compiled function `C(...)` calls: `tex.compile(C)`, made on first use."""
        f = self.__dict__.get("_compiled")
        if f is None:
            import tex          # the compiler, through the public namespace
            f = self._compiled = tex.compile(self)
        return f

    @property
    def reduction(self):
        return self.expr if isinstance(self.expr, Reduce) else None

    @property
    def element(self):
        """The expression of one element's value: the reduction's body (what it
        combines), or the elementwise expression."""
        red = self.reduction
        return red.body if red is not None else self.expr

    def reads(self):
        """The tensors this definition reads, in order of first use."""
        seen = {}
        for node in walk(self.expr):
            if isinstance(node, Access):
                seen.setdefault(id(node.tensor), node.tensor)
        return list(seen.values())


_TENSORS = weakref.WeakValueDictionary()        # (name, shape, dtype) -> the input tensor


def _definition(uid, name, indices, expr, extents, written=None):
    """Unpickling: the definition with this uid if the process has it, else a new one."""
    known = Definition._live.get(uid)
    if known is not None:
        return known
    d = Definition(name, indices, expr, extents, uid)
    d.written = written
    return d


def tensor(name, shape, dtype="float32"):
    """An input tensor: `A = tex.tensor("A", (M, K), "float32")`. Declaring it again with
    the same name, shape and dtype (a re-run notebook cell) gives the same tensor."""
    t = Tensor(argument_name(name, "tensor", call_argument=True), shape, dtype)
    return _TENSORS.setdefault((t.name, t.shape, t.dtype), t)


def compute(name, out_indices, expr):
    """Define `name[out_indices] = expr`; returns the new tensor (a Definition)."""
    out_indices = tuple(out_indices) if isinstance(out_indices, (tuple, list)) else (out_indices,)
    for x in out_indices:
        if not isinstance(x, Index):
            raise TypeError(f"compute {name}: output indices must be tex.indices, not {x!r}")
    if len(set(out_indices)) != len(out_indices):
        raise ValueError(f"compute {name}: an output index appears twice")
    expr = as_expr(expr)
    if isinstance(expr, Reduce):       # (a nested reduction may reuse one: it binds its own)
        both = [x for x in expr.over if x in out_indices]
        if both:
            raise ValueError(f"compute {name}: index {both[0].name} is an output index and "
                             f"is reduced ({expr.combiner}(..., over={both[0].name})) in the "
                             "body; reduce over another index")
    missing = free_indices(expr) - set(out_indices)
    if missing:
        names = ", ".join(sorted(map(str, missing)))
        raise ValueError(f"compute {name}: index {names} is used in the body but is neither "
                         "an output index nor reduced (over=)")
    _one_index_a_name(name, out_indices, expr)
    lifted = _lift_nested_reductions(name, out_indices, expr)
    extents = infer_extents(name, out_indices, lifted)
    d = Definition(name, out_indices, lifted, extents)
    if lifted is not expr:
        d.written = expr
    return d


def _one_index_a_name(name, out_indices, expr):
    """Refuse two index objects of one name in a definition: it printed as a diagonal
    (`D[i, i] = X[i, i]`), and a schedule's steps, recorded and replayed by loop name
    (copies, pickles, workers, the tuning database), went to the other loop."""
    named = {}
    for x in list(out_indices) + sorted(expr_indices(expr), key=lambda s: s.dummy_index):
        if named.setdefault(x.name, x) is not x:
            raise ValueError(f"compute {name}: two different indices are named {x.name} "
                             f"(tex.indices({x.name!r}) made twice?): use one object for "
                             "one index, or give them different names")


def _lift_nested_reductions(name, out_indices, expr):
    """Replace each reduction that is not the root by a read of a new definition.
    Lifted names are numbered per definition (not by a global counter), so that building
    an equal program twice gives equal code and the kernel cache finds it."""
    counter = itertools.count()

    def lift(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Reduce):
            free = free_indices(node)
            order = [x for x in out_indices if x in free]
            order += sorted(free - set(order), key=lambda s: s.dummy_index)
            inner = compute(f"{name}_{node.combiner}{next(counter)}", order, node)
            return Access(inner, order)
        return node

    if isinstance(expr, Reduce):
        body = rebuild(expr.body, lift)
        return with_children(expr, (body,))
    return rebuild(expr, lift)


_SIZE_FUNCTIONS = {"minimum": sym.Min, "maximum": sym.Max, "absolute": sym.Abs}


def _size_of(d):
    """tex.minimum / tex.maximum / tex.abs of sizes and integers (elementwise nodes, as
    in any expression) as the size expression an extent needs (`min(M, N)`); else `d`."""
    if isinstance(d, Op) and d.name in _SIZE_FUNCTIONS:
        args = [_size_of(a) for a in d.args]
        if all(isinstance(a, sym.Basic) for a in args):
            return _SIZE_FUNCTIONS[d.name](*args)
    elif isinstance(d, IndexValue):
        return d.expr
    elif isinstance(d, Const) and isinstance(d.value, int) and not isinstance(d.value, bool):
        return sym.Integer(d.value)
    return d


def indices(names, extent=None):
    """`i, j = tex.indices("i j")`; `extent=` fixes the range instead of inferring it: a
    size expression, or tex.minimum / tex.maximum / tex.abs of sizes (`min(M, N)`)."""
    return _indices(names, _size_of(extent) if extent is not None else None)


def _as_extent(d, where):
    d = _size_of(d)
    try:
        e = sym.sympify(d)
    except (sym.SympifyError, TypeError):
        raise TypeError(f"{where}: extent {d!r} is not an integer or size expression") from None
    if index_symbols(e):
        raise ValueError(f"{where}: extent {format_size(e)} uses a loop index")
    if e.is_number and (not e.is_Integer or e < 0):
        raise ShapeError(f"{where}: extent {format_size(e)} is not a non-negative integer")
    return as_size(e, f"{where}, extent")


def access_bound(coeff, offset, dim):
    """The extent an index x may have so that `coeff*x + offset` stays inside [0, dim):
    for a decreasing index (coeff < 0: `x[N - 1 - j]`, a reversal) the bound from 0
    (that its first value, `offset`, is below `dim` is a check at call time unless it
    holds for every size: access_checks)."""
    if coeff < 0:
        return sym.floor(offset / -coeff) + 1 if coeff != -1 else offset + 1
    return sym.floor((dim - offset - 1) / coeff) + 1 if coeff != 1 else dim - offset


def infer_extents(name, out_indices, expr):
    """{Index: extent} for every index of the definition (output and reduced)."""
    order = list(out_indices) + sorted(expr_indices(expr) - set(out_indices),
                                       key=lambda s: s.dummy_index)
    return index_extents(f"compute {name}", expr, order)


def index_extents(where, expr, wanted):
    """{Index: extent} for the indices `wanted` of `expr`.

    An index with an explicit extent keeps it. Otherwise its extent is the intersection
    of the valid ranges of the accesses it appears in alone (`x[t]`, `C[i, j + H]`). An
    index that never appears alone takes its range from the accesses where every other
    index already has one (`x[t + r]` with r in [0, R) over T elements: t in
    [0, T - R + 1)), repeatedly, until nothing more is learned."""
    single, multi = {}, []
    for node in walk(expr):
        if not isinstance(node, Access):
            continue
        for axis, ix in enumerate(node.index):
            where_ix = f"{where}: tensor {node.tensor.name}, dimension {axis}"
            coeffs, offset = affine_terms(ix, where_ix)
            if offset.is_number and offset < 0 and not coeffs:
                last = format_size(node.tensor.shape[axis] + offset)
                raise ShapeError(f"{where_ix}: index {ix} is negative: tex does not count from "
                                 f"the end as numpy does; write {last} for that element")
            if offset.is_number and offset < 0:
                raise ShapeError(f"{where_ix}: index {format_size(ix)} is negative at the "
                                 "start of its range")
            if len(coeffs) > 1 and any(c < 0 for c in coeffs.values()):
                continue                # a difference of indices: checked at call time
            if len(coeffs) == 1:
                (x, c), = coeffs.items()
                single.setdefault(x, []).append(access_bound(c, offset, node.tensor.shape[axis]))
            elif coeffs:
                multi.append((coeffs, offset, node.tensor.shape[axis]))
    known = {x: x.extent for x in expr_indices(expr) if x.extent is not None}
    known.update({x: _intersect(b) for x, b in single.items() if x not in known})
    while True:
        learned = {}
        for coeffs, offset, dim in multi:
            open_ = [x for x in coeffs if x not in known]
            if len(open_) != 1:
                continue
            x, = open_
            rest = offset + sum(c * (known[y] - 1) for y, c in coeffs.items() if y is not x)
            learned.setdefault(x, []).append(access_bound(coeffs[x], rest, dim))
        if not learned:
            break
        known.update({x: _intersect(b) for x, b in learned.items()})
    for x in wanted:
        if x not in known:
            raise ShapeError(f"{where}: cannot infer the extent of index {x}: it is never "
                             "used alone in an access, nor in a sum of indices whose other "
                             f"extents are known; give tex.indices('{x}', extent=...)")
    return {x: known[x] for x in wanted}


def _intersect(bounds):
    uniq = list(dict.fromkeys(bounds))
    return uniq[0] if len(uniq) == 1 else sym.Min(*uniq)


def access_checks(defn):
    """Accesses whose bounds the inferred extents do not already imply, as (tensor, axis,
    largest index value or None, smallest or None, dimension, extents of its indices,
    the index expression, the definition's name):
    checked at call time, the largest against the dimension, the smallest against 0 (a
    symbolic offset such as `x[N - 10]`, or a difference of indices such as `y[i - j]`)."""
    checks = []
    for node in walk(defn.expr):
        if not isinstance(node, Access):
            continue
        for axis, ix in enumerate(node.index):
            coeffs, offset = affine_terms(ix, node.tensor.name)
            dim = node.tensor.shape[axis]
            exts = tuple(defn.extents[x] for x in coeffs)
            largest = offset + sum(c * (defn.extents[x] - 1) for x, c in coeffs.items() if c > 0)
            smallest = offset + sum(c * (defn.extents[x] - 1) for x, c in coeffs.items() if c < 0)
            low = sym.expand(smallest)
            if low.is_nonnegative or (low.is_number and low >= 0):
                smallest = None         # never below 0 (index_extents refused a number)
            if len(coeffs) == 1:
                (x, c), = coeffs.items()
                bound = access_bound(c, offset, dim)
                ext = defn.extents[x]
                if ext == bound or (isinstance(ext, sym.Min) and bound in ext.args):
                    if c > 0:
                        largest = None
                    else:
                        smallest = None     # (its first value, `offset`: checked below)
            gap = sym.expand(dim - largest) if largest is not None else None
            if gap is not None and gap.is_number and gap > 0:
                largest = None          # inside by construction (an inferred valid range)
            if largest is not None or smallest is not None:
                checks.append((node.tensor, axis, largest, smallest, dim, exts, ix,
                               defn.name))
    return checks


def _definition_html(d):
    import tex          # the Program (above this module) through the public namespace
    try:
        prog = tex.Program(d)
    except ValueError as err:           # a program tex refuses: say why, show the rest
        return box(f"definition {escape(d.name)}: {code(d.type_str)}", pre(d.notation),
                   _extents_table(d), f"<div><b>cannot be compiled:</b> {escape(str(err))}"
                                      "</div>")
    lines = [x.notation for x in prog.definitions]
    args = ", ".join(t.name for t in prog.inputs)
    return box(f"definition {escape(d.name)}: {code(d.type_str)}",
               pre("\n".join(lines)),
               _extents_table(d),
               f"<div>call: {code(f'{d.name}({args})')} (compiled on the first call; "
               f"inputs in order of first use, or by name: {code(prog.signature())})</div>")


def _extents_table(d):
    own = [x for x in d.extents]
    return table(["index", "extent", "role"],
                 [(str(x), format_size(d.extents[x]),
                   "output" if x in d.indices else "reduced") for x in own])
