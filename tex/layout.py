"""An einsum's operands in the layout its schedule assumes.

tex compiles one kernel for an einsum's subscripts and reads operands through their
strides at run time, but the schedule picks loop orders, vector axes and packing for
row-major operands: an operand's last label is taken to be its unit-stride axis. A
Fortran-ordered array or a transposed view breaks that assumption, and the kernel then
walks memory across the grain (`ij->i` over a Fortran-ordered 4096 x 1024 float32 array:
0.03x numpy; `ik,kj->ij` with A = X.T, 2048 x 4096 @ 4096 x 64: 0.48x).

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
    ndarrays, and not an operand with a dimension of 1 or 0 or a stride of 0 (a
    broadcast view): their strides say nothing about the layout."""
    if any(a.__class__ is not _ndarray for a in operands):
        return None
    moved = {k: order for k, a in enumerate(operands) if (order := axis_order(a))}
    checked = checked_operands(subscripts, len(operands)) if moved else ()
    moved = {k: order for k, order in moved.items() if k in checked}
    if not moved:
        return None
    inputs, arrow, output = subscripts.partition("->")
    terms, operands = inputs.split(","), list(operands)
    for k, order in moved.items():
        if len(terms[k]) != len(order):
            return None
        terms[k] = "".join(terms[k][axis] for axis in order)
        operands[k] = operands[k].transpose(order)
    labels = output if arrow else _implicit_output(terms)
    first = terms[0]
    if output_follows and first != labels and len(set(first)) == len(first) and \
            sorted(first) == sorted(labels) and all(t == first for t in terms):
        return (",".join(terms) + "->" + first, operands,
                tuple(first.index(c) for c in labels))
    return ",".join(terms) + arrow + output, operands, None


def axis_order(a):
    """The order of ndarray a's axes, largest stride first, when it is not theirs; None
    when it is, or when a's strides say nothing (a dimension of 1 or 0, a stride of 0)."""
    if a.ndim < 2 or a.flags.c_contiguous:
        return None
    strides, shape = a.strides, a.shape
    if 0 in strides or 1 in shape or 0 in shape:
        return None
    order = sorted(range(a.ndim), key=lambda axis: -abs(strides[axis]))
    return order if order != list(range(a.ndim)) else None


def checked_operands(subscripts, count):
    """The positions of the operands that canonical_layout transposes when their axes
    are out of order: all but the broadcast side of a product (`_broadcast_side`);
    none for subscripts with `...` or other than `count` terms of letters."""
    inputs, arrow, output = subscripts.partition("->")
    terms = inputs.split(",")
    if "." in subscripts or len(terms) != count or not all(t.isalpha() for t in terms):
        return frozenset()
    output = output if arrow else _implicit_output(terms)
    return frozenset(k for k in range(count) if not _broadcast_side(k, terms, output))


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


def fortran_result(operands):
    """order='A' of these operands: 'F' when all are Fortran- and not all C-contiguous
    (decided before canonical_layout makes them C-contiguous)."""
    arrays = [np.asarray(a) for a in operands]
    fortran = all(a.flags.f_contiguous for a in arrays)
    return "F" if fortran and not all(a.flags.c_contiguous for a in arrays) else "C"
