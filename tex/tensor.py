"""Tensors: inputs (`tex.tensor`) and definitions (`tex.compute`).

A definition is a tensor too, so later definitions read it (`C[i, j]`). Its shape is
the extents of its output indices, inferred from the accesses each index appears in:
the intersection of their valid ranges (API.md section 2), unless the index has an
explicit extent. Reductions nested inside a larger expression are lifted into
definitions of their own, so every definition is either elementwise or one reduction
at its root.
"""
import itertools

import sympy as sp

from . import dtypes
from .errors import ShapeError
from .expr import (Access, Index, Reduce, affine_terms, as_expr, check_rank,
                   expr_indices, free_indices, index_symbols, rebuild, walk, with_children)


class Tensor:
    """An array with a name, a shape of sympy size expressions and a dtype."""

    def __init__(self, name, shape, dtype):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"tensor name {name!r} is not an identifier")
        self.name = name
        self.shape = tuple(_as_extent(d, f"tensor {name}") for d in shape)
        self.dtype = dtypes.as_dtype(dtype, f"tensor {name}")

    @property
    def ndim(self):
        return len(self.shape)

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        check_rank(self, index)
        norm = []
        for axis, ix in enumerate(index):
            if isinstance(ix, slice) or ix is Ellipsis:
                raise TypeError(f"tensor {self.name}, dimension {axis}: slices are not "
                                "index expressions; use an index with an offset (C[i, j + H])")
            try:
                ix = sp.sympify(ix)
            except (sp.SympifyError, TypeError):
                raise TypeError(f"tensor {self.name}, dimension {axis}: {ix!r} is not an "
                                "index expression") from None
            affine_terms(ix, f"tensor {self.name}, dimension {axis}")
            norm.append(ix)
        return Access(self, norm)

    def __repr__(self):
        return f"{type(self).__name__}({self.name}, {self.shape}, {self.dtype.name})"


class Definition(Tensor):
    """`name[indices] = expr`: a tensor computed by a loop nest. `expr` is elementwise or
    a single `Reduce` at the root (nested reductions were lifted into `reads`)."""

    def __init__(self, name, out_indices, expr, extents):
        self.indices = tuple(out_indices)
        self.expr = expr
        self.extents = extents          # {Index: sympy extent} for every index used
        super().__init__(name, [extents[x] for x in self.indices], expr.dtype)

    @property
    def reduction(self):
        return self.expr if isinstance(self.expr, Reduce) else None

    def reads(self):
        """The tensors this definition reads, in order of first use."""
        seen = {}
        for node in walk(self.expr):
            if isinstance(node, Access):
                seen.setdefault(id(node.tensor), node.tensor)
        return list(seen.values())


def tensor(name, shape, dtype="float32"):
    """An input tensor: `A = tex.tensor("A", (M, K), "float32")`."""
    return Tensor(name, shape, dtype)


def compute(name, out_indices, expr):
    """Define `name[out_indices] = expr`; returns the new tensor (a Definition)."""
    out_indices = tuple(out_indices) if isinstance(out_indices, (tuple, list)) else (out_indices,)
    for x in out_indices:
        if not isinstance(x, Index):
            raise TypeError(f"compute {name}: output indices must be tex.indices, not {x!r}")
    if len(set(out_indices)) != len(out_indices):
        raise ValueError(f"compute {name}: an output index appears twice")
    expr = as_expr(expr)
    for node in walk(expr):
        if isinstance(node, Reduce):
            both = [x for x in node.over if x in out_indices]
            if both:
                raise ValueError(f"compute {name}: index {both[0].name} is an output index "
                                 f"and is reduced ({node.combiner}(..., over={both[0].name})) "
                                 "in the body; reduce over another index")
    missing = free_indices(expr) - set(out_indices)
    if missing:
        names = ", ".join(sorted(map(str, missing)))
        raise ValueError(f"compute {name}: index {names} is used in the body but is neither "
                         "an output index nor reduced (over=)")
    expr = _lift_nested_reductions(name, out_indices, expr)
    extents = infer_extents(name, out_indices, expr)
    return Definition(name, out_indices, expr, extents)


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


def _as_extent(d, where):
    try:
        d = sp.sympify(d)
    except (sp.SympifyError, TypeError):
        raise TypeError(f"{where}: extent {d!r} is not an integer or size expression") from None
    if index_symbols(d):
        raise ValueError(f"{where}: extent {d} uses a loop index")
    if d.is_number and (not d.is_Integer or d < 0):
        raise ShapeError(f"{where}: extent {d} is not a non-negative integer")
    return d


def access_bound(coeff, offset, dim):
    """The extent an index x may have so that `coeff*x + offset` stays inside [0, dim)."""
    return sp.floor((dim - offset - 1) / coeff) + 1 if coeff != 1 else dim - offset


def infer_extents(name, out_indices, expr):
    """{Index: extent} for every index of the definition (output and reduced)."""
    candidates = {}
    for node in walk(expr):
        if not isinstance(node, Access):
            continue
        for axis, ix in enumerate(node.index):
            coeffs, offset = affine_terms(ix, f"tensor {node.tensor.name}, dimension {axis}")
            if offset.is_number and offset < 0:
                raise ShapeError(f"compute {name}: tensor {node.tensor.name}, dimension {axis}: "
                                 f"index {ix} is negative at the start of its range")
            if len(coeffs) == 1:
                (x, c), = coeffs.items()
                if c <= 0:
                    raise ShapeError(f"compute {name}: tensor {node.tensor.name}, dimension "
                                     f"{axis}: index {ix} must increase with {x}")
                bound = access_bound(c, offset, node.tensor.shape[axis])
                candidates.setdefault(x, []).append(bound)
    extents = {}
    for x in list(out_indices) + sorted(expr_indices(expr) - set(out_indices),
                                        key=lambda s: s.dummy_index):
        if x.extent is not None:
            extents[x] = x.extent
        elif x in candidates:
            uniq = list(dict.fromkeys(candidates[x]))
            extents[x] = uniq[0] if len(uniq) == 1 else sp.Min(*uniq)
        else:
            raise ShapeError(f"compute {name}: cannot infer the extent of index {x}; it is "
                             f"never used alone in an access; give tex.indices('{x}', extent=...)")
    return extents


def access_checks(defn):
    """Accesses whose bounds the inferred extents do not already imply, as
    (tensor, axis, largest index value, dimension): checked at call time."""
    checks = []
    for node in walk(defn.expr):
        if not isinstance(node, Access):
            continue
        for axis, ix in enumerate(node.index):
            coeffs, offset = affine_terms(ix, node.tensor.name)
            dim = node.tensor.shape[axis]
            if len(coeffs) == 1:
                (x, c), = coeffs.items()
                bound = access_bound(c, offset, dim)
                ext = defn.extents[x]
                if ext == bound or (isinstance(ext, sp.Min) and bound in ext.args):
                    continue
            largest = offset + sum(c * (defn.extents[x] - 1) for x, c in coeffs.items())
            checks.append((node.tensor, axis, largest, dim, tuple(defn.extents[x] for x in coeffs)))
    return checks
