"""Schedule primitives: pure functions `StageState -> StageState` with legality checks.

Each raises `ScheduleError` naming the primitive, the stage, the loop and the reason.
"""
import enum
from dataclasses import replace

import tex.symbolic as sym

from tex.combiners import COMBINERS
from tex.errors import ScheduleError
from tex.expr import CeilDiv, Index, Min, Param, less
from tex.indices import format_size

from .ir import LoopKind, VectorTail, unique_name
from .region import upper_bound
from .stage import Axis, Layout



class Tail(enum.Enum):
    """What a split does when the factor does not divide the extent.
    GUARD: the inner loop runs the full factor and a guard skips the tail iterations.
    PEEL: the last outer iteration runs a shorter inner loop (extent Min(T, E - o*T)),
          so no guard sits in the loop body.
    MASK: GUARD's structure, meant for an inner loop that is then vectorized: the
          guard becomes a mask on the vector lanes (masked loads and stores)."""
    GUARD = "guard"
    PEEL = "peel"
    MASK = "mask"       # as GUARD; once the inner loop is vectorized the guard is a lane mask

    @classmethod
    def parse(cls, value):
        try:
            return value if isinstance(value, cls) else cls(value)
        except ValueError:
            valid = ", ".join(repr(t.value) for t in cls)
            raise ScheduleError(f"split: tail={value!r} is not one of {valid}") from None


def show(e):
    """An index expression with loop variables under their display names."""
    e = sym.sympify(e)
    return format_size(e)         # (an Index prints its display name)


# a split's factor or part count, as a parameter's (runtime.MAX_PARAM): the generated
# code's 64-bit index arithmetic (a loop's bound times a factor) must not overflow
MAX_FACTOR = 1 << 62


def _fail(prim, state, msg):
    raise ScheduleError(f"{prim}: in stage {state.definition.name}, {msg}")


def _require(prim, state, var):
    axis = state.axis(var)
    if axis is None:
        _fail(prim, state, f"loop {getattr(var, 'name', var)} is not a loop of this stage")
    return axis


def fresh_name(state, base):
    """`base`, or `base_1`, `base_2`, ... when a loop of the stage has that name (the
    printer's rule for loops of one name)."""
    return unique_name(base, {a.name for a in state.axes})


def split(state, var, factor, tail=Tail.PEEL):
    """Split loop `var` by `factor`.

    rewrite:  for x in 0..E: s(x)
           -> for xo in 0..ceil(E/T): for xi in 0..T': s(xo*T + xi)
       with T' = T and a guard `xo*T + xi < E` (tail=guard), or T' = Min(T, E - xo*T) (peel).
    requires: an integer factor >= 1; any extent (symbolic, not divisible) works.
    """
    axis = _require("split", state, var)
    tail = Tail.parse(tail)
    if var is state.private:
        _fail("split", state, f"loop {axis.name} holds private partial results; split it "
              "before privatize")
    _check_not_anchor("split", state, axis)
    if isinstance(factor, Param):
        _fail("split", state, f"loop {axis.name}: a split's factor is fixed when compiled, "
              f"not a parameter ({factor}); split_parts (or split_k, for a reduction) "
              "splits a loop into a number of parts given at each call")
    if isinstance(factor, bool) or not isinstance(factor, int):
        _fail("split", state, f"loop {axis.name}: factor {factor!r} is not an integer")
    if not 1 <= factor <= MAX_FACTOR:
        _fail("split", state, f"loop {axis.name}: factor must be from 1 to 2**62, got {factor}")
    E, T = axis.extent, sym.Integer(factor)
    outer = Index(fresh_name(state, axis.name + "o"))
    inner = Index(fresh_name(state, axis.name + "i"))
    divisible = E.is_Integer and int(E) % factor == 0
    guards = state.guards
    if divisible:
        inner_ext = T
    elif tail in (Tail.GUARD, Tail.MASK):
        inner_ext = T
        guards = guards + (less(outer * T + inner, E),)
    else:
        inner_ext = Min(T, E - outer * T)
    new_axes = []
    for a in state.axes:
        if a is axis:
            new_axes += [Axis(outer, CeilDiv(E, T), a.reduction),
                         Axis(inner, inner_ext, a.reduction)]
        else:
            new_axes.append(a)
    old = axis.var
    subst = {x: e.xreplace({old: outer * T + inner}) for x, e in state.subst.items()}
    guards = tuple(g.xreplace({old: outer * T + inner}) for g in guards)
    new_axes = [replace(a, extent=sym.sympify(a.extent).xreplace({old: outer * T + inner}))
                for a in new_axes]
    return state.with_axes(new_axes, subst=subst, guards=guards), outer, inner


def reorder(state, vars_):
    """Put the named loops in the given order, in the positions they occupy now.

    requires: loops of this stage, each once; an extent may only depend on loops
    outside it; reduction loops keep their relative order unless the combiner may be
    reassociated (integers, max/min/argmax/argmin, or floats with fast_math).
    """
    axes = [_require("reorder", state, v) for v in vars_]
    if len({id(a) for a in axes}) != len(axes):
        twice = next(a.name for n, a in enumerate(axes) if any(b is a for b in axes[:n]))
        _fail("reorder", state, f"loop {twice} appears twice")
    slots = [n for n, a in enumerate(state.axes) if a in axes]
    new = list(state.axes)
    for slot, a in zip(slots, axes):
        new[slot] = a
    _check_extents("reorder", state, new)
    old_red = [a for a in state.axes if a.reduction]
    new_red = [a for a in new if a.reduction]
    if old_red != new_red and not _may_reassociate(state):
        red = state.reduction
        moved = next(a for a, b in zip(new_red, old_red) if a is not b)
        _fail("reorder", state, f"loop {moved.name} cannot move across another reduction "
              f"loop: combiner '{red.combiner}' on {red.dtype} would be reassociated and "
              "fast_math is off")
    return state.with_axes(new)


def _check_not_anchor(prim, state, axis):
    for tensor, at, *_ in state.packs + state.hosted:
        if at is axis.var:
            _fail(prim, state, f"loop {axis.name} anchors the local copy of {tensor.name}; "
                  f"{prim} it before pack/compute_at")


def _check_extents(prim, state, axes):
    seen = set()
    for a in axes:
        deps = sym.sympify(a.extent).free_symbols & {b.var for b in state.axes}
        if not deps <= seen:
            bad = ", ".join(sorted(v.name for v in deps - seen))
            _fail(prim, state, f"loop {a.name} has extent {show(a.extent)}, which depends on loop "
                  f"{bad}; it must stay inside it")
        seen.add(a.var)


MAX_UNROLL = 256        # iterations an unrolled loop may have


def set_kind(state, var, kind, tail="peel"):
    """parallel / vectorize / unroll a loop, with each kind's legality rule. A vector
    loop's `tail` is "peel" (a scalar remainder loop) or "mask" (masked vector lanes)."""
    prim = {LoopKind.PARALLEL: "parallel", LoopKind.VECTOR: "vectorize",
            LoopKind.UNROLLED: "unroll", LoopKind.SERIAL: "serial"}[kind]
    axis = _require(prim, state, var)
    red = state.reduction
    if kind is LoopKind.PARALLEL and axis.reduction and axis.var is not state.private:
        _fail(prim, state, f"loop {axis.name} is a reduction loop: threads would race on the "
              "accumulator; use split_k to split a reduction across threads")
    if kind is LoopKind.UNROLLED:
        bound = upper_bound(axis.extent, {a.var for a in state.axes})
        if not bound.is_Integer:
            _fail(prim, state, f"loop {axis.name} runs {format_size(axis.extent)} times, not "
                  "a constant number of times (LLVM would leave it rolled): split it by a "
                  "constant factor and unroll the inner loop")
        if bound > MAX_UNROLL:
            _fail(prim, state, f"loop {axis.name} runs up to {bound} times: unrolled whole, "
                  f"more than {MAX_UNROLL} copies of its body cost more in code than they "
                  "save (LLVM leaves it rolled); split it and unroll the inner loop")
    if kind is LoopKind.VECTOR:
        if axis is not state.axes[-1]:
            _fail(prim, state, f"loop {axis.name} is not the innermost loop")
        if axis.reduction and not _may_reassociate(state):
            _fail(prim, state, f"loop {axis.name} carries the '{red.combiner}' dependence on "
                  f"{red.dtype}; vectorizing it reassociates the {red.combiner}, and fast_math is off")
    try:
        tail = VectorTail(tail)
    except ValueError:
        valid = ", ".join(repr(t.value) for t in VectorTail)
        _fail(prim, state, f"loop {axis.name}: tail={tail!r} is not one of {valid}")
    new = [Axis(a.var, a.extent, a.reduction, kind, tail) if a is axis else a
           for a in state.axes]
    return state.with_axes(new)


def _may_reassociate(state):
    red = state.reduction
    return COMBINERS[red.combiner].may_reassociate(red.dtype, state.fast_math)


def _check_reassociation(prim, state, axis):
    red = state.reduction
    if not _may_reassociate(state):
        _fail(prim, state, f"loop {axis.name}: combining partial '{red.combiner}' results "
              f"on {red.dtype} reassociates the reduction, and fast_math is off")


def privatize(state, var):
    """Give reduction loop `var` private partial results, merged after the loop nest.

    rewrite:  for p: for r: acc = combine(acc, body)          (p a reduction loop)
           -> for p: part[p, out] = reduce_r(body)
              for out: C[out] = reduce_p part[p, out]          (a serial, deterministic merge)
    requires: a reduction loop; the combiner may be reassociated; one private loop a stage.
    """
    axis = _require("privatize", state, var)
    if not axis.reduction:
        _fail("privatize", state, f"loop {axis.name} is not a reduction loop")
    if state.private is var:
        _fail("privatize", state, f"loop {axis.name} is already private")
    if state.private is not None:
        _fail("privatize", state, f"loop {axis.name}: a stage has one private loop, and "
              f"{state.private.name} already is (split_k makes its parts loop private)")
    _check_reassociation("privatize", state, axis)
    return replace(state, private=var)


def split_k(state, var, parts):
    """Split reduction loop `var` into `parts` chunks run as an outer parallel loop, each
    reducing into its own partial result; a merge reduction follows.

    rewrite:  for k in 0..K: acc = combine(acc, body(k))
           -> for ko in 0..P (parallel): for ki in 0..Min(c, K - ko*c): part[ko] = ...
              merge over ko                              with c = ceil(K / P)
    Chunks are c long and the last is shorter; P need not divide K; with P > K the empty
    chunks hold the combiner's identity. `parts` is an integer >= 1 or a `tex.param`.
    """
    axis = _require("split_k", state, var)
    if not axis.reduction:
        _fail("split_k", state, f"loop {axis.name} is not a reduction loop: split_k splits "
              "a reduction's loop across threads (an output loop is shared among them by "
              "parallel)")
    _check_reassociation("split_k", state, axis)
    if state.private is not None:       # (said before its parts loop has a name)
        _fail("split_k", state, f"loop {axis.name}: the stage's partial results are "
              f"{state.private.name}'s already (a split_k's or privatize's), and a stage has "
              "one private loop")
    state, outer, inner = _into_parts("split_k", state, axis, parts, outermost=True)
    return privatize(state, outer), outer, inner


def split_parts(state, var, parts):
    """Split loop `var` into `parts` chunks (the outer loop counts the chunks): the
    split of split_k without its partial results, for a loop whose chunks the threads
    may share otherwise (a fused consumer's reduction over the column blocks of a
    matmul, each chunk's partials kept apart by the epilogue: epilogue.privatize_parts).

    rewrite:  for x in 0..E: s(x)
           -> for xo in 0..P: for xi in 0..Min(c, E - xo*c): s(xo*c + xi)    c = ceil(E / P)
    in the loop's place, both loops serial (as split leaves them). `parts` is an
    integer >= 1 or a `tex.param` (or the auto schedule's AutoParts)."""
    axis = _require("split_parts", state, var)
    if var is state.private:
        _fail("split_parts", state, f"loop {axis.name} holds private partial results; split "
              "it before privatize")
    return _into_parts("split_parts", state, axis, parts, outermost=False)


def _into_parts(prim, state, axis, parts, outermost):
    """The split of split_k and split_parts: the chunk loop outermost and parallel
    (split_k's), or in the loop's place and serial."""
    _check_not_anchor(prim, state, axis)
    if isinstance(parts, bool) or not isinstance(parts, (int, Param)):
        _fail(prim, state, f"loop {axis.name}: parts {parts!r} is not an integer or "
              "tex.param")
    if isinstance(parts, int) and not 1 <= parts <= MAX_FACTOR:
        _fail(prim, state, f"loop {axis.name}: parts must be from 1 to 2**62, got {parts}")
    E = sym.sympify(axis.extent)
    if E.free_symbols & {a.var for a in state.axes}:
        _fail(prim, state, f"loop {axis.name} has extent {show(E)}, which depends on "
              "another loop")
    P = sym.sympify(parts)
    chunk = CeilDiv(E, P)
    outer = Index(fresh_name(state, axis.name + "o"))
    inner = Index(fresh_name(state, axis.name + "i"))
    old = axis.var
    rebuilt = outer * chunk + inner
    new_axes = [Axis(outer, P, axis.reduction, LoopKind.PARALLEL)] if outermost else []
    for a in state.axes:
        if a is axis:
            if not outermost:
                new_axes.append(Axis(outer, P, axis.reduction))
            new_axes.append(Axis(inner, Min(chunk, E - outer * chunk), axis.reduction))
        else:
            new_axes.append(replace(a, extent=sym.sympify(a.extent).xreplace({old: rebuilt})))
    subst = {x: e.xreplace({old: rebuilt}) for x, e in state.subst.items()}
    guards = tuple(g.xreplace({old: rebuilt}) for g in state.guards)
    return state.with_axes(new_axes, subst=subst, guards=guards), outer, inner


def pack(state, tensor, var, layout="box"):
    """Copy what the loops below `var` read of `tensor` into a contiguous local buffer
    at the top of each iteration of `var`; the reads are rewritten to it.

    layout "box": the copy is the box of the tensor that those loops read, in the
    tensor's own dimension order:
        for ko: B_pack[0..Tk, 0..Tn] = B[ko*Tk + .., jo*Tn + ..]; ... B_pack[ki, ji] ...
    layout "loops": the copy has one dimension per loop below `var` that the read
    uses, in loop order, each as long as that loop's largest extent (BLIS's
    micro-panels: the innermost loops then read consecutive addresses); elements
    outside the tensor (the padding of guarded tails) are zero:
        for kc: B_pack[jr, k, jj] = B[kc*KC + k, jr*NR + jj] (0 past N); ... B_pack[jr, k, jj]
    requires: the stage reads `tensor` below `var` -- "box": at one offset, with indices
    that grow with the inner loops; "loops": through one index.
    """
    axis = _require("pack", state, var)
    reads = state.definition.reads()
    if tensor not in reads:
        _fail("pack", state, f"the stage does not read {getattr(tensor, 'name', tensor)}")
    try:
        layout = Layout(layout)
    except ValueError:
        _fail("pack", state, f"layout={layout!r} is not one of "
              f"{', '.join(repr(x.value) for x in Layout)}")
    if any(t is tensor for t, *_ in state.packs + state.hosted):
        _fail("pack", state, f"{tensor.name} is already packed or computed inside this stage")
    return replace(state, packs=state.packs + ((tensor, axis.var, layout),))


def host(state, producer, var):
    """Compute `producer` (a definition this stage reads) inside loop `var`, over the box
    of it that the loops below read, into a local buffer (compute_at)."""
    axis = _require("compute_at", state, var)
    if producer not in state.definition.reads():
        _fail("compute_at", state, f"the stage does not read {producer.name}")
    if any(p is producer for p, *_ in state.hosted + state.packs):
        _fail("compute_at", state, f"{producer.name} is already packed or computed inside "
              "this stage")
    return replace(state, hosted=state.hosted + ((producer, axis.var),))
