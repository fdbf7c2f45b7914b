"""LLVM IR for a loop nest, built with llvmlite.ir.

Each kernel is two functions:

    i32 @k(ptr arr0, ..., i64 param0, ...)        the entry point called from Python
    i32 @k.body(ptr noalias data0, ..., i64 stride..., i64 size..., i64 param...)

`@k` (entry.py) reads the arrays' data pointers, shapes and strides from numpy's array
struct, checks alignment and calls `@k.body`, which is always inlined so that its
`noalias` arguments become alias scopes for the optimizer. The body emits the nest's
statements (this module), its loops (vector loops: vector.py and transposed.py, from
the plans schedule/vectorize.py made; parallel loops: parallel.py), its buffers
(memory.py) and, in bounds_check mode, its checks (bounds.py); every way out frees the
temporaries and returns a status (irtypes.STATUS_*). Index arithmetic is 64-bit and
follows Python's floor semantics for `//` and `%`. Element strides may be negative or
zero, so views work without copies.
"""
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import tex.symbolic as sym
from llvmlite import ir

from tex.expr import Access, CeilDiv, Const, IndexValue, Op

from ...scheduler.ir import (Allocate, Guard, Kernel, Loop, LoopKind, Scope, Stage, Store,
                             Update, buffers_of, map_nest, symbols_of, walk)
from ...scheduler.nests import choice_guards
from ...scheduler.vectorize import Transposed, plan_vectors
from .bounds import BoundsMixin, scalar_loops
from .compile_worker import UNSWITCH
from .entry import emit_entry
from .irtypes import (I1, I8, I32, I64, NTHREADS, PTR, RELATIONS, STATUS_DEFERRED,
                      STATUS_DETAIL_SHIFT, STATUS_OK, Builder, OpContext, const, declare,
                      floor_div, memory_type, self_referential)
from .memory import MemoryMixin
from .ops import COMBINE, OPS, _better, increasing_better, vector_flags
from .pairs import at_both_steps, emit_paired_loop, pairs_steps
from .parallel import ParallelMixin
from .transposed import emit_transposed
from .vector import emit_vector_loop, fused_product, unit_steps_test

MAX_STRAIGHT_LINE = 64                  # constant loops up to this count may be emitted flat


@dataclass
class FunctionScope:
    """The function being emitted: its builders (`eb` writes the entry block's allocas),
    the values of the sizes, parameters and loop variables in scope (`env`), each
    buffer's base pointer and element strides (`memory`), the heap slots to free on the
    way out (`temps`), and the status slot and block of its failure exits."""
    fn: object
    b: object
    eb: object
    env: dict
    memory: dict
    temps: list
    status: object
    fail_block: object
    start: object            # the block after the entry block's allocas


def _scope_field(name):
    return property(lambda self: getattr(self.scope, name))


class Codegen(MemoryMixin, ParallelMixin, BoundsMixin):
    """Builds the LLVM module of one Kernel. Use `build(kernel, name)`. The function
    being emitted is `self.scope` (a FunctionScope: the kernel's body, or an outlined
    parallel loop, swapped by `in_function`); `self.b`, `self.env` and the like are its
    fields."""
    fn, b, eb, env, memory, temps, status, fail_block = map(_scope_field, (
        "fn", "b", "eb", "env", "memory", "temps", "status", "fail_block"))

    def __init__(self, kernel, name, fast_math=True, bounds_check=False, deferred=()):
        if bounds_check:        # every access checked one element at a time
            kernel = map_nest(kernel, scalar_loops)
        # the vector plan of loops that have none (a nest built or changed by hand)
        kernel = plan_vectors(kernel, fast_math)
        self.kernel, self.name, self.fast_math = kernel, name, fast_math
        # the choices (by number) whose nests this build leaves out
        guards = choices(kernel)
        self.deferred = {id(g): n for n, g in enumerate(guards) if n in deferred}
        holes = [g.choice for g in guards if g.hole and id(g) not in self.deferred]
        if holes:
            raise ValueError(f"codegen: the nests of {', '.join(holes)} are not lowered "
                             "(schedule/nests.py: a build has the nests it does not defer)")
        self.bounds_check = bounds_check
        self.checks = []         # BoundsCheck of each checked access, by number
        self.stage = None        # the definition whose statements are being emitted
        self.module = ir.Module(name=name)
        self.buffers = kernel_buffers(kernel)
        self._block_values = {}  # _reuse: key -> (basic block, value)
        self._idom = {}          # Builder: block -> immediate dominator
        # id(vector loop) -> whether its accesses step by one element, when a loop
        # around it tested that (vector.unit_steps_test)
        self.known_unit_steps = {}
        # whether the code tests access steps inside a reduction loop, its hot path: the
        # module then asks for LLVM's loop unswitching (compile_worker.pipeline_level)
        self.tests_steps = False
        self.reductions_around = 0      # reduction loops around the code being emitted
        self.pairing = None      # (variable, k, k + 1) while a pair of steps is emitted
        # while a vector loop's scalar remainder (or its loop for steps other than one)
        # is emitted: its sums take the vector code's flags (summing_as_vectors)
        self.vector_tail = False

    # ------------------------------------------------------------ functions
    def build(self):
        emit_entry(self.module, self.name, self.kernel, self._body_function())
        if self.tests_steps:
            self.module.add_named_metadata(UNSWITCH)
        return self.module

    def new_scope(self, fn):
        """A FunctionScope for `fn`: an entry block for allocas, a start block and a
        failure exit (whose code the caller emits)."""
        entry, start = fn.append_basic_block("entry"), fn.append_basic_block("start")
        eb = ir.IRBuilder(entry)
        return FunctionScope(fn, Builder(start, self._idom), eb, {}, {}, [],
                             eb.alloca(I32, name="status"), fn.append_basic_block("fail"),
                             start)

    @contextmanager
    def in_function(self, scope):
        """Emit into `scope` (an outlined function) inside the block."""
        saved, self.scope = self.scope, scope
        try:
            yield scope
        finally:
            self.scope = saved

    def _body_function(self):
        k = self.kernel
        arrays = list(k.inputs) + list(k.outputs)
        n_strides = sum(buf.ndim for buf in arrays)
        fnty = ir.FunctionType(I32, [PTR] * len(arrays) + [I64] * n_strides
                               + [I64] * (len(k.sizes) + len(k.params) + 1))
        fn = ir.Function(self.module, fnty, name=f"{self.name}.body")
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        fn.attributes.add("nounwind")
        for pos in range(len(arrays)):
            fn.args[pos].add_attribute("noalias")
        self.scope = self.new_scope(fn)
        b = self.b
        args = iter(fn.args)
        data = [next(args) for _ in arrays]
        for pos, (buf, ptr) in enumerate(zip(arrays, data)):
            strides = [next(args) for _ in range(buf.ndim)]
            if pos >= len(k.inputs) and strides:
                strides[-1] = ir.Constant(I64, 1)      # checked by the entry point
            self.memory[buf] = (ptr, strides)
        for s in list(k.sizes) + list(k.params) + [NTHREADS]:
            self.env[s] = next(args)
        # a call that needs a nest left out returns before anything is computed
        self._leave_if_deferred(k)
        self._listen_for_interrupts()
        scoped = {id(n.buffer) for n in walk(k) if isinstance(n, Allocate)}
        for buf in self.buffers:
            if buf.scope is Scope.LOCAL and id(buf) not in scoped:
                self._alloca(buf)
        # a partial that may be its output (alias) comes after the output's memory; a
        # temporary that only one choice's nest uses is taken when that nest runs
        self.choice_temps = {}
        owners = choice_owners(k)
        for buf in sorted(self.buffers, key=lambda b: b.alias is not None):
            if buf.scope is Scope.TEMP and id(buf) not in scoped:
                if id(buf) in owners:
                    self.choice_temps.setdefault(id(owners[id(buf)]), []).append(buf)
                else:
                    self._malloc(buf, stack_ok=True)
        for stmt in k.body:
            self._stmt(stmt)
        self._free_temps()
        b.ret(ir.Constant(I32, STATUS_OK))
        b.position_at_end(self.fail_block)
        self._free_temps()
        b.ret(b.load(self.status, typ=I32))
        self.eb.branch(self.scope.start)
        return fn

    def _leave_if_deferred(self, k):
        """Return STATUS_DEFERRED when a call's nest is one this build left out: each
        stage's choices tested in turn by their own conditions (`Guard.shown`), as the
        `if ... elif ...` they are, where each choice's `cond` repeats the negations of
        all before it (a matmul's 12 deferred choices took 210 instructions so)."""
        if not self.deferred:
            return
        b = self.b
        for node in walk(k):
            chain = [g for g in getattr(node, "body", ()) if isinstance(g, Guard)
                     and g.choice is not None]
            last = max((n for n, g in enumerate(chain) if id(g) in self.deferred), default=None)
            if last is None:
                continue
            chain = chain[:last + 1]        # (the choices after it are all built)
            known = b.dominated(self.fn.append_basic_block("choice.known"))
            for g in chain:
                own = g.cond if g.shown is None else g.shown
                if id(g) in self.deferred:
                    self.fail_if(self.condition(own), STATUS_DEFERRED, self.deferred[id(g)])
                else:
                    rest = b.dominated(self.fn.append_basic_block("choice.next"))
                    b.cbranch(self.condition(own), known, rest)
                    b.position_at_end(rest)
            b.branch(known)
            b.position_at_end(known)

    def fail_if(self, cond, code, detail=0):
        """Leave the function with status `code | detail << 8` when `cond` holds (its
        temporaries are freed on the way out); the builder continues where it does not."""
        b = self.b
        bad = self.fn.append_basic_block("fail.now")
        ok = b.dominated(self.fn.append_basic_block("fail.not"))
        b.cbranch(cond, bad, ok)
        b.position_at_end(bad)
        b.store(ir.Constant(I32, code | detail << STATUS_DETAIL_SHIFT), self.status)
        b.branch(self.fail_block)
        b.position_at_end(ok)

    def _extern(self, name, ret, args):
        return declare(self.module, name, ret, args)

    def ops(self, lanes=None, contract=False):
        """The OpContext the op tables lower with, at the current insertion point."""
        return OpContext(self.b, self.module, lanes, contract)

    # ------------------------------------------------------------ statements
    def _stmt(self, s):
        if isinstance(s, Stage):
            self.stage = s.definition
            for c in s.body:
                self._stmt(c)
        elif isinstance(s, Loop):
            self._loop(s)
        elif isinstance(s, Guard):
            if id(s) in self.deferred:          # never reached: the entry returned
                return
            temps = self.choice_temps.get(id(s), ())
            with self.b.if_then(self.condition(s.cond)):
                for buf in temps:
                    self._malloc(buf, stack_ok=True)
                for c in s.body:
                    self._stmt(c)
            for buf in temps:
                del self.memory[buf]        # its pointer exists only inside the choice
        elif isinstance(s, Store):
            self.store(s.buffer, s.index, self.value(s.value))
        elif isinstance(s, Update):
            self._update(s)
        elif isinstance(s, Allocate):
            self._allocate(s)
        else:
            raise NotImplementedError(f"codegen: {type(s).__name__}")

    def _loop(self, loop):
        if loop.kind is LoopKind.PARALLEL:
            return self._parallel_loop(loop)
        start = self.index(loop.start)
        end = self.b.add(start, self.index(loop.extent))
        if loop.kind is LoopKind.VECTOR:
            return emit_vector_loop(self, loop, start, end)
        if loop.kind is LoopKind.UNROLLED and self.straight_line(loop):
            return
        if isinstance(loop.plan, Transposed):
            return emit_transposed(self, loop, start, end)
        test = unit_steps_test(self, loop)
        if test is None:
            return self._serial_loop(loop, start, end)
        unit, vectors = test
        with self.b.if_else(unit) as (steps_of_one, other_steps):
            for arm, known in ((steps_of_one, True), (other_steps, False)):
                with arm:
                    self.known_unit_steps.update(dict.fromkeys(vectors, known))
                    self._serial_loop(loop, start, end)
        for v in vectors:
            del self.known_unit_steps[v]

    def tested_steps(self):
        """A vector loop tests its accesses' steps here (VectorLoop.emit)."""
        self.tests_steps = self.tests_steps or self.reductions_around > 0

    def straight_line(self, loop):
        """A loop of constant bounds (an unrolled loop over a register tile's rows) as
        its body repeated with the variable a constant; False if the bounds are not
        constant or too many. The tile's addresses fold, so its local accumulator is
        promoted to registers (SROA needs constant offsets in every access)."""
        first, count = sym.sympify(loop.start), sym.sympify(loop.extent)
        if not (first.is_Integer and count.is_Integer and 0 <= count <= MAX_STRAIGHT_LINE):
            return False
        for n in range(int(first), int(first) + int(count)):
            self.env[loop.var] = ir.Constant(I64, n)
            for c in loop.body:
                self._stmt(c)
        self.env.pop(loop.var, None)
        return True

    def _serial_loop(self, loop, start, end, metadata=None, poll=None):
        """`for var in start..end` with the body's statements as scalars; `metadata`
        replaces the loop hints of the loop's kind. A loop around other loops checks
        for Ctrl-C at every iteration (`poll`, default: when it holds a loop that is
        not unrolled or vectorized: the body is long enough for a load and a branch to
        cost nothing)."""
        if poll is None:
            poll = any(isinstance(n, Loop) and n.kind in (LoopKind.SERIAL, LoopKind.PARALLEL)
                       for c in loop.body for n in walk(c))

        def body(var):
            self.env[loop.var] = var
            if poll:
                self.poll_interrupt()
            self.reductions_around += loop.reduction
            for c in loop.body:
                self._stmt(c)
            self.reductions_around -= loop.reduction
        if metadata is None and pairs_steps(loop):
            emit_paired_loop(self, loop, start, end, body)
        else:
            self.counted_loop(start, end, 1, loop.var.name, body,
                              metadata or self._loop_metadata(loop))
        del self.env[loop.var]

    def counted_loop(self, start, stop, step, name, body, metadata=None):
        """for v in start..stop step `step`: body(v) -- the blocks and the phi of every
        loop the code generator emits; `metadata` goes on the latch as `llvm.loop`."""
        b = self.b
        pre = b.block
        head = self.fn.append_basic_block(f"{name}.head")
        loop_body = self.fn.append_basic_block(f"{name}.body")
        done = self.fn.append_basic_block(f"{name}.end")
        b.branch(head)
        b.dominated(head)
        b.position_at_end(head)
        b.dominated(loop_body)
        b.dominated(done)
        v = b.phi(I64, name=name)
        v.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", v, stop), loop_body, done)
        b.position_at_end(loop_body)
        body(v)
        nxt = b.add(v, ir.Constant(I64, step))
        nxt.flags.append("nsw")
        latch = b.branch(head)
        if metadata is not None:
            latch.set_metadata("llvm.loop", metadata)
        v.add_incoming(nxt, b.block)
        b.position_at_end(done)

    # ------------------------------------------------------------ threads
    def _loop_metadata(self, loop):
        if loop.kind is LoopKind.UNROLLED:
            full = sym.sympify(loop.extent).is_Integer      # a symbolic count: unroll by LLVM's choice
            hint = self.module.add_metadata([ir.MetaDataString(
                self.module, "llvm.loop.unroll.full" if full else "llvm.loop.unroll.enable")])
            return self_referential(self.module, hint)
        if any(isinstance(n, Loop) and n.kind in (LoopKind.VECTOR, LoopKind.UNROLLED)
               for c in loop.body for n in walk(c)):
            # a loop around explicit vector code or unrolled rows (a register tile, a
            # packed panel) is as wide as the schedule wants it: LLVM's vectorizer and
            # unroller would only multiply its code (and the compile time)
            md = self.module
            return self_referential(md, md.add_metadata([
                ir.MetaDataString(md, "llvm.loop.vectorize.enable"), ir.Constant(I1, 0)]),
                md.add_metadata([ir.MetaDataString(md, "llvm.loop.unroll.disable")]))
        return None

    def _update(self, s):
        b = self.b
        ptr = self.address(s.buffer, s.index)
        acc = self._load(ptr, s.buffer.dtype)
        if s.arg is None and self.vector_tail and self.pairing is None and \
                fused_product(s, s.buffer.dtype):
            # as the vector lanes compute it (VectorLoop._fma)
            a, m = (self.value(v) for v in s.value.args)
            fma = self.ops().intrinsic("fma", s.buffer.dtype, 3)
            self._store(ptr, b.call(fma, [a, m, acc]), s.buffer.dtype)
            return
        x = self.reduced_value(s)
        if s.arg is None:
            self._store(ptr, COMBINE[s.combiner](self.ops(), s.buffer.dtype, acc, x,
                                                 self._flags(s)), s.buffer.dtype)
            return
        pos_ptr = self.address(s.arg.buffer, s.arg.index)
        pos, acc_pos = self.value(s.arg.position), self._load(pos_ptr, np.int64)
        dt = s.buffer.dtype
        better = increasing_better(self.ops(), dt, s.combiner, x, acc) if s.arg.ordered \
            else _better(self.ops(), dt, s.combiner, x, acc, pos, acc_pos)
        self._store(ptr, b.select(better, x, acc), s.buffer.dtype)
        self._store(pos_ptr, b.select(better, pos, acc_pos), np.int64)

    def reduced_value(self, update):
        """The value an Update combines in: with fast_math, its float products may fuse
        with the accumulation into FMAs (as BLAS does); elementwise code never does."""
        if self.pairing is not None:        # both steps of a pair (pairs.py)
            return self.b.add(*at_both_steps(self, lambda: self.value(update.value)))
        return self.value(update.value, contract=self._flags(update))

    @contextmanager
    def summing_as_vectors(self):
        """Scalar code of a vector loop (its peeled remainder, its loop for steps other
        than one): its sums take the vector code's flags (ops.vector_flags), so the loop
        sums in one order, tex's, at any optimization level."""
        outer, self.vector_tail = self.vector_tail, True
        try:
            yield
        finally:
            self.vector_tail = outer

    def _flags(self, update):
        """Whether the update's combine (and value) take the fast-math flags."""
        if self.vector_tail:
            return vector_flags(update.combiner, update.fast_math)
        return update.fast_math

    # ------------------------------------------------------------ memory
    def _reuse(self, key, make):
        """make(), or the value an identical `key` made earlier in the current basic
        block or in a block that dominates it. Keys hold the values of the variables they read,
        so a rebound loop variable (an unrolled copy, the next vector chunk) misses.
        The straight-line micro-kernel and its write-back repeat the same index
        arithmetic for every row and vector; emitting it once keeps the IR (and LLVM's
        time on it) small."""
        hit = self.reused(key)
        if hit is not None:
            return hit
        value = make()
        self._block_values[key] = (self.b.block, value)
        return value

    def reused(self, key):
        """The value `_reuse(key, ...)` would give without making one, or None."""
        hit = self._block_values.get(key)
        if hit is not None and self.b.dominates(hit[0], self.b.block):
            return hit[1]
        return None

    def _bound(self, exprs):
        """The current values of the symbols `exprs` read, for a `_reuse` key."""
        syms = set().union(*(symbols_of(e) for e in exprs))
        return tuple(sorted(((s.name, id(s), self.env.get(s)) for s in syms),
                            key=lambda t: (t[0], t[1])))

    def address(self, buf, index):
        base, strides = self.memory[buf]
        return self._reuse(("address", buf, base, tuple(strides), tuple(index),
                            self._bound(index)),
                           lambda: self._address(buf, base, strides, index))

    def _address(self, buf, base, strides, index):
        if self.bounds_check:
            self._check_bounds(buf, index)
        # the products and partial sums are reused as values (keys by the values they
        # combine): a register tile's vectors of one row of B differ in their last
        # offset only, and were each a multiply and add of every dimension
        offset = None
        for ix, st in zip(index, strides):
            iv = self.index(ix)
            term = self._reuse(("scaled", iv, st), lambda: self.b.mul(iv, st))
            offset = term if offset is None else \
                self._reuse(("sum", offset, term), lambda: self.b.add(offset, term))
        if offset is None:
            return base
        return self.b.gep(base, [offset], source_etype=memory_type(buf.dtype))

    def _load(self, ptr, dt):
        v = self.b.load(ptr, typ=memory_type(dt), align=np.dtype(dt).itemsize)
        return self.b.trunc(v, I1) if np.dtype(dt).kind == "b" else v

    def _store(self, ptr, v, dt):
        if np.dtype(dt).kind == "b":
            v = self.b.zext(v, I8)
        self.b.store(v, ptr, align=np.dtype(dt).itemsize)

    def store(self, buf, index, v):
        self._store(self.address(buf, index), v, buf.dtype)

    # ------------------------------------------------------------ index expressions
    def index(self, e):
        """An affine sympy expression (sizes, params, loop variables) as an i64 value."""
        e = sym.sympify(e)
        if e.is_Integer:
            return ir.Constant(I64, int(e))
        if e.is_Symbol:
            return self.env[e]
        return self._reuse(("index", e, self._bound([e])), lambda: self._index(e))

    def _index(self, e):
        b = self.b
        if isinstance(e, sym.Add):
            vals = [self.index(a) for a in e.args]
            out = vals[0]
            for v in vals[1:]:
                out = b.add(out, v)
            return out
        if isinstance(e, sym.Mul):
            num, den = sym.fraction(e)
            if den != 1:
                raise NotImplementedError(f"codegen: non-integer index expression {e}")
            vals = [self.index(a) for a in e.args]
            out = vals[0]
            for v in vals[1:]:
                out = b.mul(out, v)
            return out
        if isinstance(e, CeilDiv):
            return b.neg(floor_div(b, b.neg(self.index(e.args[0])), self.index(e.args[1])))
        if isinstance(e, (sym.floor, sym.ceiling)):
            num, den = sym.numer_denom(e.args[0])      # den: a constant or a param
            d = self.index(den)
            if isinstance(e, sym.ceiling):
                return b.neg(floor_div(b, b.neg(self.index(num)), d))
            return floor_div(b, self.index(num), d)
        if isinstance(e, sym.Mod):
            a, m = self.index(e.args[0]), self.index(e.args[1])
            return b.sub(a, b.mul(m, floor_div(b, a, m)))
        if isinstance(e, (sym.Min, sym.Max)):
            op = "<" if isinstance(e, sym.Min) else ">"
            vals = [self.index(a) for a in e.args]
            out = vals[0]
            for v in vals[1:]:
                out = b.select(b.icmp_signed(op, out, v), out, v)
            return out
        if isinstance(e, sym.Abs):                                      # abs(M - N)
            x = self.index(e.args[0])
            return b.select(b.icmp_signed("<", x, ir.Constant(I64, 0)), b.neg(x), x)
        if isinstance(e, sym.Pow) and e.exp.is_Integer and e.exp > 0:    # L*L of a size
            base = self.index(e.base)
            out = base
            for _ in range(int(e.exp) - 1):
                out = b.mul(out, base)
            return out
        raise NotImplementedError(f"codegen: index expression {e} ({type(e).__name__})")

    def condition(self, c):
        if c is sym.true:
            return ir.Constant(I1, 1)
        if c is sym.false:
            return ir.Constant(I1, 0)
        # once a block and the blocks it dominates: the tests that pick a stage's nest
        # repeat the earlier choices' conditions (negated) in each choice's condition
        return self._reuse(("condition", c, self._bound([c])), lambda: self._condition(c))

    def _condition(self, c):
        b = self.b
        if isinstance(c, (sym.And, sym.Or)):
            join = b.and_ if isinstance(c, sym.And) else b.or_
            out = self.condition(c.args[0])
            for a in c.args[1:]:
                out = join(out, self.condition(a))
            return out
        if isinstance(c, sym.Not):
            return b.not_(self.condition(c.args[0]))
        return b.icmp_signed(RELATIONS[type(c)], self.index(c.lhs), self.index(c.rhs))

    # ------------------------------------------------------------ values
    def value(self, e, contract=False):
        """A scalar expression's value; `contract`: float products may become FMAs."""
        if isinstance(e, Const):
            return const(e.dtype, e.value)
        if isinstance(e, Access):
            return self._load(self.address(e.tensor, e.index), e.tensor.dtype)
        if isinstance(e, IndexValue):
            return self.index(e.expr)
        if isinstance(e, Op):
            args = [self.value(a, contract) for a in e.args]
            return OPS[e.name](self.ops(contract=contract), e, *args)
        raise NotImplementedError(f"codegen: value {e!r}")


def choice_owners(kernel):
    """id(buffer) -> the choice (the outermost Guard.choice) whose nest alone uses it,
    for the buffers that only one choice uses: a split-K partial of each of a matmul's
    specializations was taken (or its taking emitted, for a nest left out of the build)
    at every call whichever nest ran."""
    users, guards = {}, {}

    def visit(node, choice, in_loop):
        # (a choice inside a loop, were there one, would take its memory once per
        # iteration, or per thread: its temporaries stay the kernel's)
        if choice is None and not in_loop and isinstance(node, Guard) and \
                node.choice is not None:
            choice = node
            guards[id(node)] = node
        if isinstance(node, (Store, Update, Allocate)):
            # (an Allocate's own buffer: its body is visited below)
            for buf in [node.buffer] if isinstance(node, Allocate) else buffers_of(node):
                users.setdefault(id(buf), set()).add(None if choice is None else id(choice))
        for child in getattr(node, "body", ()):
            visit(child, choice, in_loop or isinstance(node, Loop))
    visit(kernel, None, False)
    return {b: guards[next(iter(g))] for b, g in users.items() if len(g) == 1 and None not in g}


def allocated_buffers(kernel):
    """The intermediate buffers a kernel allocates (outputs excluded): for display. Once
    each: the nests of a stage's specializations allocate alike (a symbolic matmul's
    listed C_part six times)."""
    out = {}
    for stage in kernel.body:
        for b in buffers_of(stage):
            wanted = b.scope is Scope.TEMP or (b.scope is Scope.LOCAL and b.shape)
            if wanted:
                out.setdefault((b.name, tuple(map(str, b.shape)), b.dtype, b.scope), b)
    return list(out.values())


def kernel_buffers(kernel):
    seen = {}
    for stage in kernel.body:
        for buf in buffers_of(stage):
            seen.setdefault(id(buf), buf)
    return list(seen.values())




def settings():
    """The knobs besides the loop nest that change the IR of a kernel (the target, or
    tests): part of the kernel cache key."""
    from ...scheduler import vectorize
    from ...scheduler.target import target
    return f"register_bits={target().vector_bits} vnni={vectorize.USE_VNNI}"


# the guards that choose among a stage's specializations, in the order of the nest:
# their numbers are what `deferred` and STATUS_DEFERRED name
choices = choice_guards


def build(kernel, name, fast_math=True, bounds_check=False, deferred=()):
    """Kernel -> llvmlite.ir.Module with entry point `name`; the choices numbered in
    `deferred` (see `choices`) are left out: a call that needs one returns
    STATUS_DEFERRED before computing anything."""
    assert isinstance(kernel, Kernel)
    return Codegen(kernel, name, fast_math, bounds_check, deferred).build()


def bounds_checks(kernel, name, fast_math=True, deferred=()):
    """The BoundsCheck records of a bounds_check kernel, by number (code generation is
    deterministic: they number the checks of the machine code built from this kernel
    with these choices left out)."""
    cg = Codegen(kernel, name, fast_math, bounds_check=True, deferred=deferred)
    cg.build()
    return cg.checks



