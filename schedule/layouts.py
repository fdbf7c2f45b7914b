"""A program in the layout (or the dtypes, `retyped`) of the arrays it is called with
(pure: Program -> Program).

The auto schedule picks loop orders, vector axes and packing for row-major arrays: a
tensor's last axis is taken to be its unit-stride one. A Fortran-ordered input (a pandas
frame's `.values`, `X.T`, a LAPACK result) breaks that assumption, and the kernel then
walks memory across the grain: `X[i, j] * Y[i, j] + 1` over two Fortran-ordered
2048 x 2048 float32 arrays took 33 ms where C-ordered ones take 1.3 ms and numpy 8.
tex.einsum rewrites its subscripts for the operands it is given (tex/layout.py); a
compiled program is rewritten here the same way, for the call path's layout variants
(backends/llvm/layouts.py):

- An input whose axes, largest stride first, come in another order becomes a tensor of
  the same name with its axes in that order, and every read of it takes its index
  expressions in that order: the schedule then sees the layout the array has.
- A definition whose reads of tensors of its own rank, at its own indices, all come in
  one other order (an elementwise map over Fortran-ordered arrays) follows them: it is
  computed with its indices in that order, and its readers read it so. An output that
  follows is handed back transposed, a view in its inputs' layout, as numpy's ufuncs
  (order='K') hand back theirs.
"""
from tex.symbolic import sympify

from tex.expr import Access, Index, cast, rebuild, walk, with_children
from tex.program import Program
from tex.tensor import Definition, Tensor


def permuted(program, orders, outputs_follow=True):
    """(the program for inputs laid out in `orders` ({input position: axis order,
    largest stride first}), the axis order of each output or None where it stays as
    written). `outputs_follow=False` keeps every output as written (a call with `out=`
    writes into the caller's arrays as they are)."""
    moved = {}            # tensor -> (its replacement, the order of its axes), or order None
    for pos, order in orders.items():
        t = program.inputs[pos]
        moved[t] = (Tensor(t.name, [t.shape[a] for a in order], t.dtype), tuple(order))

    def read(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Access) and node.tensor in moved:
            new, order = moved[node.tensor]
            return Access(new, node.index if order is None else [node.index[a] for a in order])
        return node

    for d in program.definitions:
        expr = rebuild(d.expr, read, {})
        may_follow = outputs_follow or d not in program.outputs
        changed = {new for new, order in moved.values() if order is not None}
        order = _followed_order(d, expr, changed) if may_follow else None
        indices = d.indices if order is None else tuple(d.indices[a] for a in order)
        new = Definition(d.name, indices, expr, d.extents)
        moved[d] = (new, order)
    outputs = tuple(moved[o][0] for o in program.outputs)
    inputs = tuple(moved.get(t, (t,))[0] for t in program.inputs)
    rewritten = Program(outputs, program._extra_params, inputs=inputs)
    return rewritten, tuple(moved[o][1] for o in program.outputs)


def retyped(program, dtypes):
    """The program for inputs of other dtypes ({input position: dtype}, each a safe cast
    to the input's own): such an input becomes a tensor of the same name and shape in
    that dtype, every read of it cast to the dtype the program declared. The kernel then
    converts each element as it loads it, exactly as `astype` would, where the call path
    copied the whole array first (a float64 map over 2000 x 2000 float32: 9.8 ms, its
    float64 twin 1.5)."""
    moved = {}
    for pos, dtype in dtypes.items():
        t = program.inputs[pos]
        moved[t] = Tensor(t.name, t.shape, dtype)

    def read(node, kids):
        node = with_children(node, kids)
        if isinstance(node, Access) and node.tensor in moved:
            new = moved[node.tensor]
            access = Access(new, node.index)
            return access if isinstance(node.tensor, Definition) else \
                cast(access, node.tensor.dtype)
        return node

    for d in program.definitions:
        moved[d] = Definition(d.name, d.indices, rebuild(d.expr, read, {}), d.extents)
    outputs = tuple(moved[o] for o in program.outputs)
    inputs = tuple(moved.get(t, t) for t in program.inputs)
    return Program(outputs, program._extra_params, inputs=inputs)


def movable_inputs(program):
    """The positions of the inputs a layout variant may permute: all but the factors of
    a contraction (`_product_side`), whose packed copies read any layout."""
    return frozenset(pos for pos, t in enumerate(program.inputs)
                     if not any(_product_side(d, t) for d in program.definitions))


def _product_side(d, t):
    """Whether d's reduction multiplies t by another tensor over a summed index, each
    with an index the other lacks (A and B of a matmul; not X and Y of sum_j X*Y, nor
    the matrix of a matrix-vector product). Such a contraction copies its operands into
    packed panels (or reads the broadcast side in place, tex/layout.py), so a variant
    gained nothing there: numpy/tex as written -> variant, Emerald Rapids, 2 threads,
    1024^3 with B Fortran-ordered 15.2 -> 14.2 ms, 4096 x 4096 @ x 8 4.0 -> 5.9 ms,
    2048 x 2048 @ x 16 with A and B Fortran-ordered 2.7 -> 2.8 ms."""
    red = d.reduction
    if red is None:
        return False
    over = set(red.over)
    reads = [(a.tensor, set().union(*(sympify(ix).free_symbols for ix in a.index)))
             for a in walk(red.body) if isinstance(a, Access)]
    for tensor, mine in reads:
        if tensor is not t:
            continue
        for other, theirs in reads:
            if other is not t and mine & theirs & over and mine - theirs and theirs - mine:
                return True
    return False


def _followed_order(d, expr, changed):
    """The order of d's indices that its reads of same-rank tensors at exactly its own
    indices agree on, when it is not d's own and one of those reads is of a tensor in
    `changed` (laid out anew); else None."""
    if len(d.indices) < 2:
        return None
    own = set(d.indices)
    seen, of_changed = set(), False
    for node in walk(expr):
        if isinstance(node, Access) and len(node.index) == len(d.indices) and \
                all(isinstance(ix, Index) for ix in node.index) and set(node.index) == own:
            seen.add(tuple(node.index))
            of_changed = of_changed or node.tensor in changed
    if len(seen) != 1 or not of_changed:
        return None
    (sequence,) = seen
    if sequence == d.indices:
        return None
    return tuple(d.indices.index(ix) for ix in sequence)
