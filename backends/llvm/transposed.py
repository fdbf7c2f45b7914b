"""The transposed row blocks of an inner-parallel reduction (schedule/vectorize.py's
Transposed plan): VectorLoop's chunks over the lanes, with the loop over the columns
inside each chunk and the rows' elements transposed in registers."""
import numpy as np
import tex.symbolic as sym
from llvmlite import ir

from tex.combiners import COMBINERS

from ...scheduler.ir import Update
from ...scheduler.vector_plan import affine_coefficient, itemsize
from .irtypes import I1, I32, I64, PTR, memory_type, self_referential, splat_constant, type_suffix
from .ops import COMBINE, vector_flags
from .vector import VectorLoop, vector_pointer


def emit_transposed(cg, loop, start, end):
    """Codegen._loop for a serial loop `for j: V` with a Transposed plan (V one vector
    loop, for ii, reading rows that step by a runtime stride across the lanes and by
    one element along j -- the inner-parallel reduction `for j: for ii (vector):
    acc[ii] += f(X[ii, j])`, where each lane owns a row). Emitted as, for each vector
    of W rows (lanes):

        for jb in steps of K columns:       load K contiguous elements of each of the
                                            W rows, transpose the W x K block in
                                            registers (log2 W rounds of shuffles), run V
                                            once per column on the transposed vectors
        for the last columns:               V per column, the rows gathered

    Each lane sees its row's elements in the original order, so any combiner and any
    dtype give the scalar loop's result, except that a lone row update whose combiner
    regroups exactly (integer ops, float max/min) or under fast_math combines a block's
    columns as a tree first (a chain of log2 K steps instead of K). At run time a j
    step other than one element runs the loop as it was."""
    inner, plan = loop.body[0], loop.plan
    TransposedLoop(cg, inner, inner.plan, loop, plan.rows, plan.block).emit_outer(start, end)


class TransposedLoop(VectorLoop):
    """emit_transposed's code: VectorLoop's chunks over the lanes, with a loop over j
    inside each chunk."""

    def __init__(self, cg, inner, plan, outer, rows, block):
        super().__init__(cg, inner, plan)
        self.outer, self.rows, self.block = outer, rows, block
        self.single = plan.bound is not None and plan.bound <= plan.width

    def emit_outer(self, start, end):
        cg = self.cg
        b = cg.b
        j = self.outer.var
        ok = ir.Constant(I1, 1)
        for a in self.rows:                       # one element along j
            _, strides = cg.memory[a.tensor]
            step = None
            for ix, st in zip(a.index, strides):
                c = affine_coefficient(ix, j)
                if c != 0:
                    term = b.mul(cg.index(c), st)
                    step = term if step is None else b.add(step, term)
            ok = b.and_(ok, b.icmp_signed("==", step, ir.Constant(I64, 1)))
        row_keys = {(id(a.tensor), tuple(a.index)) for a in self.rows}
        for buf, index in self.plan.moving:       # other rows: one element across lanes
            if (id(buf), tuple(index)) in row_keys:
                continue
            st = self.access_step(buf, index)
            if isinstance(st, int):
                ok = b.and_(ok, ir.Constant(I1, int(st == 1)))
            else:
                ok = b.and_(ok, b.icmp_signed("==", st, ir.Constant(I64, 1)))
        cg.tested_steps()
        with b.if_else(ok) as (fast, other):
            with fast:
                self._lane_chunks(start, end)
            with other:
                cg._serial_loop(self.outer, start, end)

    def _lane_chunks(self, j_start, j_end):
        """Chunks of W lanes over the vector loop's range, the last one masked."""
        cg, w = self.cg, self.w
        b = cg.b
        start = cg.index(self.loop.start)
        end = b.add(start, cg.index(self.loop.extent))
        n = b.sub(end, start)
        n = b.select(b.icmp_signed("<", n, ir.Constant(I64, 0)), ir.Constant(I64, 0), n)
        main_end = b.add(start, b.and_(n, ir.Constant(I64, -w)))
        self._each(start, main_end, lambda base: self._columns(base, None, j_start, j_end))
        extent = sym.sympify(self.loop.extent)
        if extent.is_Integer and int(extent) % w == 0:
            return                      # whole vectors only (a split's whole tiles)
        rem = b.sub(end, main_end)
        with b.if_then(b.icmp_signed(">", rem, ir.Constant(I64, 0))):
            mask = b.icmp_signed("<", self.iota, self.splat(rem))
            # the last rows take the columns one by one (gathered): less code than a
            # masked copy of the blocks, and at most W-1 rows
            self._columns(start if self.single else main_end, mask, j_start, j_end,
                          blocks=False)

    def _each(self, start, stop, body):
        """body(base) for base in start..stop step W (a branch when one vector covers it)."""
        cg = self.cg
        b = cg.b
        if self.single:
            with b.if_then(b.icmp_signed("<", start, stop)):
                body(start)
            return
        self._serial(start, stop, self.w, body, "tr.lanes")

    def _columns(self, base, mask, j_start, j_end, blocks=True):
        """The j loop for the lanes base..base+W-1: blocks of K = W columns, then the
        remaining columns one by one (their rows gathered)."""
        cg, k = self.cg, self.block
        b = cg.b
        j = self.outer.var
        n = b.sub(j_end, j_start)
        n = b.select(b.icmp_signed("<", n, ir.Constant(I64, 0)), ir.Constant(I64, 0), n)
        blocks_end = b.add(j_start, b.and_(n, ir.Constant(I64, -k))) if blocks else j_start

        def block(jb):
            cg.env[j] = jb
            cg.env[self.var] = base
            cols = {id(a): self._transposed_block(a, base, mask) for a in self.rows}
            u = self._tree_update()
            if u is not None:
                self._tree_block(u, cols, jb, base, mask)
            else:
                for c in range(k):
                    cg.env[j] = b.add(jb, ir.Constant(I64, c))
                    self.override = {key: v[c] for key, v in cols.items()}
                    self._chunk(base, mask)
            self.override = {}
            del cg.env[j]
        if blocks:
            self._serial(j_start, blocks_end, k, block, "tr.j")

        def column(jc):
            cg.env[j] = jc
            self.gathering = {id(a.tensor) for a in self.rows}
            self._chunk(base, mask)
            self.gathering = set()
            del cg.env[j]
        self._serial(blocks_end, j_end, 1, column, "tr.jrest")

    def _tree_update(self):
        """The loop's one statement, an update of its row whose combiner regroups
        exactly (integer sum/prod/max/min, float max/min -- llvm.maximum is associative
        -- and float sum/prod under fast_math), or None. Its block then combines the K
        columns as a tree before the row: a dependence chain of log2 K steps, not K."""
        body = self.loop.body
        if len(body) != 1 or not isinstance(body[0], Update) or body[0].arg is not None:
            return None
        u = body[0]
        fast = u.fast_math and self.cg.fast_math
        return u if COMBINERS[u.combiner].may_reassociate(u.buffer.dtype, fast) else None

    def _tree_block(self, u, cols, jb, base, mask):
        cg, k = self.cg, self.block
        b, dt = cg.b, u.buffer.dtype
        j = self.outer.var
        cg.env[self.var] = base
        vals = []
        for c in range(k):
            cg.env[j] = b.add(jb, ir.Constant(I64, c))
            self.override = {key: v[c] for key, v in cols.items()}
            vals.append(self.reduced_value(u, mask))
        combine, fast = COMBINE[u.combiner], vector_flags(u.combiner, u.fast_math)
        while len(vals) > 1:
            vals = [combine(self.ops(), dt, vals[t], vals[t + 1], fast)
                    for t in range(0, len(vals), 2)]
        acc = self._read(u.buffer, u.index, mask)
        self._write(u.buffer, u.index, combine(self.ops(), dt, acc, vals[0], fast), mask)
        del cg.env[self.var]

    def _serial(self, start, stop, step, body, name):
        """A counted loop that LLVM must not vectorize again (its body is vector code)."""
        cg = self.cg
        md = cg.module.add_metadata([ir.MetaDataString(cg.module, "llvm.loop.vectorize.enable"),
                                     ir.Constant(I1, 0)])
        cg.counted_loop(start, stop, step, name, body, self_referential(cg.module, md))

    def _transposed_block(self, a, base, mask):
        """The W x K block of `a` (rows: the lanes base.., columns: the current j..j+K-1)
        as K vectors of W lanes. The rows' K-element loads are concatenated into K
        vectors of W elements (the block's elements in row-major order), then log2 W
        rounds of perfect shuffles (each rotates the bits of an element's flat index by
        one) move element (r, c) from r*K + c to c*W + r: vector c, lane r. K*W elements
        fill at most 16 registers, so the block stays in registers."""
        cg, w, k = self.cg, self.w, self.block
        b = cg.b
        kty = ir.VectorType(memory_type(a.dtype), k)
        rows = []
        for r in range(w):
            cg.env[self.var] = b.add(base, ir.Constant(I64, r))
            ptr = cg.address(a.tensor, a.index)
            if mask is None:
                v = b.load(vector_pointer(b, ptr, kty), typ=kty, align=itemsize(a.dtype))
            else:                   # a masked-off lane's row may not exist: do not touch it
                on = self._splat_to(b.extract_element(mask, ir.Constant(I32, r)), k)
                fn = cg._extern(f"llvm.masked.load.{type_suffix(kty)}.p0", kty,
                                [PTR, I32, on.type, kty])
                v = b.call(fn, [ptr, ir.Constant(I32, itemsize(a.dtype)), on,
                                ir.Constant(kty, None)])
            rows.append(v)
        cg.env[self.var] = base
        vs = rows
        while vs[0].type.count < w:             # concatenate neighbouring rows
            n = vs[0].type.count
            idx = ir.Constant(ir.VectorType(I32, 2 * n), [ir.Constant(I32, x)
                                                          for x in range(2 * n)])
            vs = [b.shuffle_vector(vs[t], vs[t + 1], idx) for t in range(0, len(vs), 2)]
        half, n = w // 2, len(vs)
        for _ in range(w.bit_length() - 1):
            new = []
            for t in range(n):
                off = (t % 2) * half
                idx = [off + e // 2 + (w if e % 2 else 0) for e in range(w)]
                new.append(b.shuffle_vector(vs[t // 2], vs[n // 2 + t // 2], ir.Constant(
                    ir.VectorType(I32, w), [ir.Constant(I32, x) for x in idx])))
            vs = new
        if np.dtype(a.dtype).kind == "b":
            vs = [b.trunc(v, self.vtype(I1)) for v in vs]
        return vs

    def _splat_to(self, v, n):
        b = self.cg.b
        one = b.insert_element(ir.Constant(ir.VectorType(v.type, n), None), v,
                               ir.Constant(I32, 0))
        return b.shuffle_vector(one, ir.Constant(ir.VectorType(v.type, n), None),
                                splat_constant(ir.VectorType(I32, n), 0))
