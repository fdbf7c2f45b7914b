"""Two steps of a reduction loop at a time: int32 sums of 16-bit products by pmaddwd.

An int8 (or int16) matmul's register tile adds int32(a[i, k]) * int32(b[k, j]) into its
int32 accumulators one step of k at a time, by one vpmaddwd a vector whose int16 pairs
have one half zeroed (vector_reduce._short_product): half of each multiply is wasted.
pmaddwd multiplies int16 pairs and adds each pair, so with the steps k and k + 1 in the
two halves of every lane -- a[i, k] and a[i, k + 1] in the broadcast, b[k, j] and
b[k + 1, j] interleaved -- one instruction makes both steps' products and their sum:

    for k in 0..K:  (reduction)                for k in 0..K - K % 2 step 2:
      for i in 0..6:  (unrolled)        ->       for i:  for j:  acc[i, j] += pmaddwd(
        for j:  (vector)                              (a[i, k] | a[i, k + 1] << 16),
          acc[i, j] += a[i, k] * b[k, j]              interleave(b[k, j], b[k + 1, j]))
                                               then the last step alone when K is odd

The interleave costs shuffles of B's vectors, shared by the tile's rows (LLVM makes them
once a step); the multiplies halve. Exact: the sums wrap as int32's do in any order.

A serial loop pairs its steps when everything it runs is such an update: int32 sums
(wrapping, so any order is exact) of products of two 8- or 16-bit values, one moving
with an enclosing vector loop and one not, into targets that do not depend on the
paired variable; loops, guards and bounds inside not reading it. While the code of a
pair is emitted, Codegen.pairing holds (variable, k, k + 1): every update's value is
then made for both steps (paired_vector_value; Codegen.reduced_value adds the two
for the scalar paths), so a statement that is not paired cannot lose a step.
"""
import numpy as np
from llvmlite import ir

from ...scheduler.ir import Guard, Loop, LoopKind, Update, symbols_of
from .irtypes import I16, I32, I64
from .vector_reduce import _concatenate, _pmaddwd_bits, _split, pmaddwd, short_product


def pairs_steps(loop):
    """Does the serial loop `loop` run its steps in pairs (module docstring)?"""
    if loop.kind is not LoopKind.SERIAL or not loop.reduction:
        return False
    updates = []
    if not _pairable(loop.body, loop.var, None, updates):
        return False
    return bool(updates)


def _pairable(body, var, vector, updates):
    for s in body:
        if isinstance(s, Loop):
            if s.kind not in (LoopKind.UNROLLED, LoopKind.VECTOR) or \
                    var in symbols_of(s.start) | symbols_of(s.extent):
                return False
            if s.kind is LoopKind.VECTOR and (vector is not None or s.plan is None):
                return False
            if not _pairable(s.body, var, s if s.kind is LoopKind.VECTOR else vector,
                             updates):
                return False
        elif isinstance(s, Guard):
            if var in symbols_of(s.cond) or not _pairable(s.body, var, vector, updates):
                return False
        elif isinstance(s, Update):
            if vector is None or not _pairs(s, var, vector.plan):
                return False
            updates.append(s)
        else:
            return False
    return True


def _pairs(update, var, plan):
    """An int32 sum of one short product into a target that moves with the vector loop
    and not with `var`, the product's one operand moving and the other not."""
    if (update.combiner != "sum" or update.arg is not None or update.buffer.dtype != np.int32
            or not short_product(update.value) or id(update) in plan.vnni
            or any(u is update for u in plan.reductions)
            or any(var in symbols_of(x) for x in update.index)):
        return False
    moving = [id(a) in plan.dependent for a in update.value.args]
    return moving.count(True) == 1 and \
        _pmaddwd_bits(plan.width * plan.unroll, plan.bits) is not None


def emit_paired_loop(cg, loop, start, end, body):
    """`for var in start..end` as pairs of steps (body(k) runs with cg.pairing set), then
    the last step alone when the count is odd."""
    b = cg.b
    count = b.sub(end, start)
    pairs_end = b.add(start, b.and_(count, ir.Constant(I64, -2)))

    def pair(k):
        cg.pairing = (loop.var, k, b.add(k, ir.Constant(I64, 1)))
        body(k)
        cg.pairing = None
    cg.counted_loop(start, pairs_end, 2, loop.var.name, pair, cg._loop_metadata(loop))
    odd = b.and_(b.icmp_signed(">", count, ir.Constant(I64, 0)),
                 b.icmp_signed("!=", b.and_(count, ir.Constant(I64, 1)),
                               ir.Constant(I64, 0)))
    with b.if_then(odd):
        body(b.sub(end, ir.Constant(I64, 1)))


def at_both_steps(cg, make):
    """[make() with the paired variable at k, make() at k + 1]."""
    var, k0, k1 = cg.pairing
    saved = cg.env[var]
    out = []
    for k in (k0, k1):
        cg.env[var] = k
        out.append(make())
    cg.env[var] = saved
    return out


def paired_vector_value(vl, update, mask):
    """The value of `update` (pairs_steps passed it) for both steps of the pair, in the
    vector loop `vl`: one pmaddwd a register of the broadcast operand's two steps (an
    int32 of two int16 halves) by the moving operand's two steps interleaved."""
    cg = vl.cg
    b = cg.b
    x, y = update.value.args
    if id(x) in vl.plan.dependent:
        x, y = y, x
    bits = _pmaddwd_bits(vl.w, vl.plan.bits)
    if bits is None or id(x) in vl.plan.dependent:     # (another width of the loop)
        return b.add(*at_both_steps(cg, lambda: vl.value(update.value, mask)))
    xs = at_both_steps(cg, lambda: vl._scalar(x, mask))
    ys = at_both_steps(cg, lambda: vl.value(y, mask))
    halves = b.or_(b.and_(xs[0], ir.Constant(I32, 0xFFFF)), b.shl(xs[1], ir.Constant(I32, 16)))
    fn, lanes, narrow = pmaddwd(cg, bits)
    interleave = ir.Constant(ir.VectorType(I32, 2 * lanes),
                             [ir.Constant(I32, n // 2 + (n % 2) * lanes)
                              for n in range(2 * lanes)])
    short = ir.VectorType(I16, vl.w)
    first, second = (_split(b, b.trunc(v, short), lanes) for v in ys)
    broadcast = vl.splat(halves)
    return _concatenate(b, [
        b.call(fn, [b.bitcast(xp, narrow), b.shuffle_vector(p0, p1, interleave)])
        for xp, p0, p1 in zip(_split(b, broadcast, lanes), first, second)])
