"""An einsum's operands in the layout its schedule assumes.

tex compiles one kernel for an einsum's subscripts and reads operands through their
strides at run time, but the schedule picks loop orders, vector axes and packing for
row-major operands: an operand's last label is taken to be its unit-stride axis. A
Fortran-ordered array or a transposed view breaks that assumption, and the kernel then
walks memory across the grain (`ij->i` over a Fortran-ordered 4096 x 1024 float32 array:
0.03-0.06x numpy; `ik,kj->ij` with A = X.T, 2048 x 4096 @ 4096 x 64: 0.48x).

An einsum does not change when an operand's axes are permuted together with the
operand's labels (`ik,kj->ij` on X.T is `ki,kj->ij` on X), so the front door hands the
kernel each such operand transposed back to its largest-stride-first order, with its
labels permuted to match: the schedule then sees the layout the operand has, and the
kernel cache keys the kernel by it (a layout is one more thing a kernel is compiled
for, as a dtype is). numpy/tex, Emerald Rapids, 1 thread, as written -> transposed:
`ij->i` 0.06 -> 1.22, `ij->j` 0.19 -> 1.33, `ij,ij->i` 0.08 -> 0.95; a row vector
times a Fortran-ordered 4096 x 4096 matrix 0.11 -> 0.76. The side of a product that
the register tile broadcasts stays as written (`_broadcast_side`).
"""
import collections
import functools

import numpy as np

_ndarray = np.ndarray


def canonical_layout(subscripts, operands, output_follows=False):
    """(subscripts, operands, result axes) with each strided ndarray operand's axes in
    largest-stride-first order and its labels permuted with them, or None when no
    operand needs it. With `output_follows` (order='K' without out=), an einsum whose
    operands all carry the output's labels, in one order other than the output's (an
    elementwise map over Fortran-ordered arrays), writes its result in that order, and
    the result axes (else None) transpose it back: the result then has its operands'
    layout, as numpy's order='K' gives it, and the kernel streams every array.

    Only explicit labels are rewritten (no `...`), only operands that are all exact
    ndarrays, and not an operand that axis_order leaves (below SMALL, or with a
    dimension of 1 or 0 or a stride of 0) or the broadcast side of a product."""
    if any(a.__class__ is not _ndarray for a in operands):
        return None
    moved = tuple((k, order) for k, a in enumerate(operands) if (order := axis_order(a)))
    if not moved:
        return None
    rewrite = _rewrite(subscripts, len(operands), moved, output_follows)
    if rewrite is None:
        return None
    subscripts, axes, transposed = rewrite
    operands = list(operands)
    for k, order in moved:
        if k in transposed:
            operands[k] = operands[k].transpose(order)
    return subscripts, operands, axes


@functools.lru_cache(maxsize=1024)
def _rewrite(subscripts, count, moved, output_follows):
    """canonical_layout's subscripts, result axes and the operands it transposes, for
    operands whose axis orders are `moved` ((position, order), ...): string work that a
    call in a loop need not repeat."""
    checked = checked_operands(subscripts, count)
    moved = [(k, order) for k, order in moved if k in checked]
    inputs, arrow, output = subscripts.partition("->")
    terms = inputs.split(",")
    if not moved or any(len(terms[k]) != len(order) for k, order in moved):
        return None
    for k, order in moved:
        terms[k] = "".join(terms[k][axis] for axis in order)
    labels = output if arrow else _implicit_output(terms)
    first, transposed = terms[0], frozenset(k for k, _ in moved)
    if output_follows and first != labels and len(set(first)) == len(first) and \
            sorted(first) == sorted(labels) and all(t == first for t in terms):
        return (",".join(terms) + "->" + first, tuple(first.index(c) for c in labels),
                transposed)
    return ",".join(terms) + arrow + output, None, transposed


SMALL = 32 << 10     # bytes: an operand this small runs as it is


def axis_order(a):
    """The order of ndarray a's axes, largest stride first, when it is not theirs; None
    when it is, when a's strides say nothing (a dimension of 1 or 0, a stride of 0), or
    when a is below SMALL: within L1 the order costs less than the rewrite's 3-4 us
    (`ij,j->i` over a Fortran n x n float32, 1 thread, us as written | rewritten: n =
    64 5.6 | 9.7, 96 13.6 | 7.0, 128 20.6 | 11.6, 256 94 | 14). A matrix's answer is a
    few comparisons: the guard of every kernel asks it of every strided operand."""
    if a.ndim < 2 or a.flags.c_contiguous or a.nbytes < SMALL:
        return None
    strides, shape = a.strides, a.shape
    if a.ndim == 2:
        if abs(strides[0]) >= abs(strides[1]) or 0 in strides or 1 in shape or 0 in shape:
            return None
        return (1, 0)
    if 0 in strides or 1 in shape or 0 in shape:
        return None
    order = tuple(sorted(range(a.ndim), key=lambda axis: -abs(strides[axis])))
    return order if order != tuple(range(a.ndim)) else None


@functools.lru_cache(maxsize=1024)
def checked_operands(subscripts, count):
    """The positions of the operands that canonical_layout transposes when their axes
    are out of order: all but the broadcast side of a product (`_broadcast_side`) and a
    diagonal (`ii`); none for subscripts with `...` or other than `count` terms of
    letters."""
    inputs, arrow, output = subscripts.partition("->")
    terms = inputs.split(",")
    if "." in subscripts or len(terms) != count or not all(t.isalpha() for t in terms):
        return frozenset()
    output = output if arrow else _implicit_output(terms)
    # (a diagonal, `ii`, reads the same elements in either order: no rewrite for it)
    return frozenset(k for k in range(count)
                     if len(set(terms[k])) > 1 and not _broadcast_side(k, terms, output))


def _implicit_output(terms):
    """numpy's implicit output: the labels seen once, in alphabetical order."""
    labels = "".join(terms)
    return "".join(sorted(c for c in set(labels) if labels.count(c) == 1))


def _broadcast_side(k, terms, output):
    """Whether operand k is the side of a product whose elements the register tile
    broadcasts: it shares a summed label with another operand and lacks the output's
    last label (the vector axis). Read in place, a column-major such operand gives the
    tile's rows at one k as contiguous elements, as a packed panel would: measured mixed
    against the transposed schedule (numpy/tex, Emerald Rapids, 1 thread, in place ->
    transposed: 2048 x 2048 @ 2048 x 16 0.57 -> 0.46, 512 x 64 @ 64 x 512 1.13 -> 0.80,
    2048 x 4096 @ 4096 x 64 0.38 -> 0.58), so it is left as it is."""
    if len(terms) < 2 or (output and output[-1] in terms[k]):
        return False
    others = set("".join(t for n, t in enumerate(terms) if n != k))
    return any(c in others and c not in output for c in terms[k])


# A product whose broadcast side is read k-major (its unit-stride axis a row of the
# output), much taller than it is wide, with a long reduction, runs transposed:
# `ki,kj->ij` as `ki,kj->ji`, its result copied out. The big operand is then the side
# the tile reads as vectors, and the k-major copy the blocked tier makes is of the small
# one. numpy/tex, Emerald Rapids, 1 thread, as written -> transposed, `ki,kj` | `ik,kj`
# with A = X.T: M x K @ K x N 2048 x 2048 @ x 16 0.44 -> 0.71 | 0.64 -> 0.69, 2048 x
# 4096 @ x 64 0.66 -> 0.87 | 0.43 -> 0.84, 4096 x 4096 @ x 8 0.43 -> 1.00 | 0.47 ->
# 1.00, 256 x 4096 @ x 32 0.46 -> 0.75 | 0.62 -> 0.71; wider or shorter products lost:
# 4096 x 512 @ x 64 0.67 -> 0.64, 1024 x 1024 @ x 128 0.77 -> 0.51, 1024 x 256 @ x 128
# 0.94 -> 0.56.
TALL = 8            # output rows per column, at least
NARROW = 64         # output columns, at most
LONG = 1024         # reduction length, at least


# a product_sides answer: the broadcast side p and the other operand q (positions), the
# terms, the output's labels, the output column's axis in q's term and the summed axes
# of p's term
Sides = collections.namedtuple("Sides", "p q terms output column summed")


@functools.lru_cache(maxsize=1024)
def product_sides(subscripts):
    """The Sides of a product of two operands whose broadcast side p (see
    _broadcast_side) has a label of its own in the output, a row of the result that
    may be its unit-stride axis; None for other einsums."""
    inputs, arrow, output = subscripts.partition("->")
    terms = inputs.split(",")
    if "." in subscripts or len(terms) != 2 or \
            not all(t.isalpha() and len(set(t)) == len(t) for t in terms):
        return None
    output = output if arrow else _implicit_output(terms)
    sides = [k for k in (0, 1) if _broadcast_side(k, terms, output)]
    if len(sides) != 1 or not output:
        return None
    p, q = sides[0], 1 - sides[0]
    if not any(c in output and c not in terms[q] for c in terms[p]):
        return None
    summed = tuple(n for n, c in enumerate(terms[p]) if c in terms[q] and c not in output)
    return Sides(p, q, tuple(terms), output, terms[q].index(output[-1]), summed)


def tall_k_major(sides, operands):
    """Whether the product of `sides` (product_sides) over these ndarrays runs
    transposed: its broadcast side's unit-stride axis is a row of the result, which has
    at least TALL rows per column and at most NARROW columns, summed over at least LONG
    elements."""
    p, q, terms, output = sides.p, sides.q, sides.terms, sides.output
    a, b = operands[p], operands[q]
    if a.ndim != len(terms[p]) or b.ndim != len(terms[q]):
        return False
    cols = b.shape[sides.column]
    if cols > NARROW:
        return False
    reduction = 1           # the shape tests first: a small product's call stays cheap
    for axis in sides.summed:
        reduction *= a.shape[axis]
    if reduction < LONG:
        return False
    row = _unit_stride_label(terms[p], a)
    # TALL > 1 keeps the transposed product from running transposed again
    return row in output and row not in terms[q] and \
        a.shape[terms[p].index(row)] >= max(TALL, 2) * cols


def _unit_stride_label(term, a):
    """The label of ndarray a's smallest-stride axis (its last, unless axis_order says
    otherwise)."""
    order = axis_order(a)
    return term[order[-1] if order else -1]


def transposed_product(subscripts, operands):
    """(subscripts, operands, result axes) of the product run transposed (the output's
    row label last, every operand in its own layout), or None when tall_k_major does not
    hold."""
    sides = product_sides(subscripts)
    # (a missing or extra operand is the general path's error, in numpy's words)
    if sides is None or len(operands) != 2 or \
            any(a.__class__ is not _ndarray for a in operands) or \
            not tall_k_major(sides, operands):
        return None
    p, terms, output = sides.p, sides.terms, sides.output
    row = _unit_stride_label(terms[p], operands[p])
    swapped = output.replace(row, "") + row
    terms, operands = list(terms), list(operands)
    for k, a in enumerate(operands):
        if (order := axis_order(a)) is not None:
            terms[k], operands[k] = "".join(terms[k][x] for x in order), a.transpose(order)
    return (",".join(terms) + "->" + swapped, operands,
            tuple(swapped.index(c) for c in output))


def fortran_result(operands):
    """order='A' of these operands: 'F' when all are Fortran- and not all C-contiguous
    (decided before canonical_layout makes them C-contiguous)."""
    arrays = [np.asarray(a) for a in operands]
    fortran = all(a.flags.f_contiguous for a in arrays)
    return "F" if fortran and not all(a.flags.c_contiguous for a in arrays) else "C"
