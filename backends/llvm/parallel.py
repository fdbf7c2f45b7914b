"""Parallel loops and Ctrl-C: a PARALLEL loop is outlined into a function of its own
run on tex's thread pool (threads.py), and long loops poll the interrupt flag."""
import functools

import tex.symbolic as sym
from llvmlite import ir

from ...scheduler.ir import (Allocate, Guard, Loop, Scope, Store, Update, buffers_of, symbols_of,
                             walk)
from .irtypes import I32, I64, NTHREADS, PTR, STATUS_INTERRUPTED, floor_div

# fewer inner iterations than this run on one thread: waking the sleeping workers costs
# tens of microseconds, as much as ~1M vectorized iterations of a light loop body; a
# kernel with at least this much work also listens for Ctrl-C (threads.tex_rt_arm)
PARALLEL_MIN_WORK = 1 << 20
# ... unless a worker is still awake, spinning after the last region (threads.py's
# SPIN_TICKS), or the last two regions of middling work each began moments after a
# region ended (calls in a loop: tex_rt_team_pays): then a team costs little, and from
# this much work on two threads beat one (2 cores, Zen 5, calls in a loop: a 512 x 512
# product 33 -> 17 us, one row times a (1000 x 1000).T 51 -> 29 us; a call after a
# pause, workers asleep, runs on one thread as before)
PARALLEL_MIN_WORK_AWAKE = 1 << 17
# ... when those iterations stream at least this many bytes of arrays: a team lost on
# small contractions, whose iterations are register-tile FMAs over data in L1 (64^3:
# 5 -> 9 us; three 64 x 64 operands 11 -> 17 us) and on a 400 x 400 outer product (7 -> 10 us)
MIDDLING_MIN_BYTES = 1 << 20
CHUNKS_PER_THREAD = 8       # a parallel loop's iterations are dealt in this many chunks a thread


class ParallelMixin:
    """Codegen's parallel loops and interrupt polling."""

    def _parallel_loop(self, loop):
        """Outline the loop into `void fn(ptr ctx, i64 thread, i64 team)` (the threads
        take chunks of iterations from a shared counter) and run it on tex's thread pool
        (threads.py), or on this thread alone when the work is small."""
        b = self.b
        start = self.index(loop.start)
        extent = self.index(loop.extent)
        inner_vars = {n.var: 0 for n in walk(loop) if isinstance(n, Loop)}
        work = self._iterations(loop, inner_vars)
        syms, bufs = self._shared_with(loop)
        status = self.eb.alloca(I32, name="par.status")
        counter = self.eb.alloca(I64, name="par.next")
        # constant strides (local and packed buffers) stay constants in the outlined
        # function, so its vector loops know their steps at compile time
        ints = [v for _, v in syms] + [start, extent] + [st for _, (_, sts) in bufs for st in sts
                                                         if not isinstance(st, ir.Constant)]
        ctx_i = self.eb.alloca(I64, size=ir.Constant(I64, len(ints)), name="par.ints")
        ptrs = [ctx_i, status, counter] + [p for _, (p, _) in bufs]
        ctx = self.eb.alloca(PTR, size=ir.Constant(I64, len(ptrs)), name="par.ctx")
        for n, v in enumerate(ptrs):
            b.store(v, b.gep(ctx, [ir.Constant(I64, n)], source_etype=PTR))
        for n, v in enumerate(ints):
            b.store(v, b.gep(ctx_i, [ir.Constant(I64, n)], source_etype=I64))
        b.store(ir.Constant(I32, 0), status)
        b.store(ir.Constant(I64, 0), counter)
        fn = self._outlined(loop, bufs, syms)
        threads = self.env[NTHREADS]
        # a team pays only for enough work spread over at least two iterations; otherwise
        # the loop runs on this thread and a parallel loop nested in it gets the team
        big = b.and_(self._team_pays(work, loop), b.icmp_signed(">", extent, ir.Constant(I64, 1)))
        team = b.select(big, threads, ir.Constant(I64, 1))
        pool = self._extern("tex_rt_parallel", ir.VoidType(), [PTR, PTR, I64])
        b.call(pool, [fn, ctx, team])
        code = b.load(status, typ=I32)
        failed = b.icmp_signed("!=", code, ir.Constant(I32, 0))
        bad = self.fn.append_basic_block("par.failed")
        ok = b.dominated(self.fn.append_basic_block("par.ok"))
        b.cbranch(failed, bad, ok)
        b.position_at_end(bad)
        b.store(code, self.status)           # a thread's failure is the kernel's
        b.branch(self.fail_block)
        b.position_at_end(ok)

    def _shared_with(self, loop):
        """The (symbol, value) and (buffer, (pointer, strides)) pairs of this function
        that the outlined `loop` reads, for its context. Only those: a matmul's nested
        parallel loops stored and loaded every size, loop variable and buffer of the
        kernel (a third of their functions' code). A bounds-checked kernel passes every
        symbol: its error messages show the enclosing loops' values."""
        used = {id(buf) for buf in buffers_of(loop)}
        bufs = [(buf, v) for buf, v in self.memory.items() if id(buf) in used]
        if self.bounds_check:
            return list(self.env.items()), bufs
        names = _symbols_read(loop) | {NTHREADS}
        for buf, _ in bufs:
            for d in buf.shape:
                names |= symbols_of(d)
        return [(s, v) for s, v in self.env.items() if s in names], bufs

    def _team_pays(self, work, loop):
        """i1: PARALLEL_MIN_WORK iterations; or PARALLEL_MIN_WORK_AWAKE over at least
        MIDDLING_MIN_BYTES of the kernel's arrays while the workers are awake
        (tex_rt_team_pays, asked only then)."""
        b = self.b
        if isinstance(work, ir.Constant) and not PARALLEL_MIN_WORK_AWAKE <= work.constant \
                < PARALLEL_MIN_WORK:
            return ir.Constant(ir.IntType(1), int(work.constant >= PARALLEL_MIN_WORK))
        large = b.icmp_signed(">=", work, ir.Constant(I64, PARALLEL_MIN_WORK))
        middling = b.and_(b.not_(large), b.icmp_signed(">=", work,
                                                       ir.Constant(I64, PARALLEL_MIN_WORK_AWAKE)))
        before = b.block
        weigh = b.dominated(self.fn.append_basic_block("par.weigh"))
        join = b.dominated(self.fn.append_basic_block("par.asked"), by=before)
        b.cbranch(middling, weigh, join)
        b.position_at_end(weigh)
        streams = b.icmp_signed(">=", self._array_bytes(loop), ir.Constant(I64, MIDDLING_MIN_BYTES))
        ask = b.dominated(self.fn.append_basic_block("par.ask"))
        b.cbranch(streams, ask, join)
        b.position_at_end(ask)
        pays = b.call(self._extern("tex_rt_team_pays", I32, [I64]), [self.env[NTHREADS]])
        answer = b.icmp_signed("!=", pays, ir.Constant(I32, 0))
        b.branch(join)
        b.position_at_end(join)
        out = b.phi(ir.IntType(1))
        out.add_incoming(large, before)
        out.add_incoming(ir.Constant(ir.IntType(1), 0), weigh)
        out.add_incoming(answer, ask)
        return out

    def _array_bytes(self, loop):
        """i64: the bytes of the kernel's inputs and outputs that `loop` reads or writes
        (whole arrays: a measure of the memory a region streams, not of its footprint)."""
        total = ir.Constant(I64, 0)
        for buf in buffers_of(loop):
            if buf.scope in (Scope.INPUT, Scope.OUTPUT):
                size = self.index(sym.Mul(*buf.shape) * buf.dtype.itemsize)
                total = self.b.add(total, size)
        return total

    def _iterations(self, node, at_zero):
        """Statements `node` executes, as an i64: nested loops multiply, sibling loops
        add (inner extents taken with the loop variables at 0). Built as IR, not sympy,
        to keep compile time low."""
        b = self.b
        inner = None
        for child in getattr(node, "body", ()):
            n = self._iterations(child, at_zero)
            inner = n if inner is None else b.add(inner, n)
        one = ir.Constant(I64, 1)
        if inner is None:
            inner = one
        if not isinstance(node, Loop):
            return inner
        if not (isinstance(inner, ir.Constant) and inner.constant >= 1):
            inner = b.select(b.icmp_signed("<", inner, one), one, inner)
        extent = sym.sympify(node.extent)
        zeroed = frozenset(at_zero).intersection(symbols_of(extent))
        return b.mul(self.index(_at_zero(extent, zeroed) if zeroed else extent), inner)

    def _outlined(self, loop, bufs, syms):
        """`void fn(ptr ctx, i64 thread, i64 team)`: one thread's share of the loop,
        reading the enclosing function's values and buffers from `ctx`. The iterations
        are dealt in chunks (about eight a thread) from a shared counter, not split in
        equal parts up front: a thread that loses its core for a while (to numpy's BLAS
        threads, which spin for a while after each call, or another process) leaves its
        chunks to the others instead of holding up the whole region. Which thread runs
        an iteration never changes a result (iterations write apart)."""
        n = sum(1 for g in self.module.globals if g.startswith(f"{self.name}.par"))
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]),
                         name=f"{self.name}.par{n}")
        fn.linkage = "internal"
        with self.in_function(self.new_scope(fn)):
            b, (ctx, tid, nt) = self.b, fn.args

            def load(base, k, ty):
                return b.load(b.gep(base, [ir.Constant(I64, k)], source_etype=ty), typ=ty)
            ctx_i, shared_status = load(ctx, 0, PTR), load(ctx, 1, PTR)
            counter = load(ctx, 2, PTR)
            n_ints = len(syms) + 2 + sum(not isinstance(st, ir.Constant)
                                         for _, (_, sts) in bufs for st in sts)
            ints = iter(load(ctx_i, k, I64) for k in range(n_ints))
            self.env.update({s: next(ints) for s, _ in syms})
            start, extent = next(ints), next(ints)
            for k, (buf, (_, sts)) in enumerate(bufs):
                self.memory[buf] = (load(ctx, k + 3, PTR), [st if isinstance(st, ir.Constant)
                                                            else next(ints) for st in sts])
            outside = _buffers_outside(self.kernel, loop)
            scoped = {id(n.buffer) for n in walk(loop) if isinstance(n, Allocate)}
            for buf in buffers_of(loop):
                if buf.scope is Scope.LOCAL and buf not in outside and id(buf) not in scoped:
                    self._alloca(buf)                 # private to each thread
            self._chunks(counter, extent, nt,
                         lambda lo, hi: self._serial_loop(loop, b.add(start, lo),
                                                          b.add(start, hi)))
            self._free_temps()
            b.ret_void()
            b.position_at_end(self.fail_block)
            self._free_temps()
            b.store(b.load(self.status, typ=I32), shared_status)
            b.ret_void()
            self.eb.branch(self.scope.start)
        return fn

    def _chunks(self, counter, extent, team, body):
        """while (lo = fetch_add(counter, grain)) < extent: body(lo, min(lo + grain,
        extent)), with grain = ceil(extent / (8 * team))."""
        b = self.b
        parts = b.mul(team, ir.Constant(I64, CHUNKS_PER_THREAD))
        grain = floor_div(b, b.add(extent, b.sub(parts, ir.Constant(I64, 1))), parts)
        grain = b.select(b.icmp_signed("<", grain, ir.Constant(I64, 1)),
                         ir.Constant(I64, 1), grain)
        head = self.fn.append_basic_block("chunk.head")
        work = self.fn.append_basic_block("chunk.body")
        done = self.fn.append_basic_block("chunk.end")
        b.branch(head)
        b.dominated(head)
        b.position_at_end(head)
        b.dominated(work)
        b.dominated(done)
        lo = b.atomic_rmw("add", counter, grain, "monotonic")
        b.cbranch(b.icmp_signed("<", lo, extent), work, done)
        b.position_at_end(work)
        hi = b.add(lo, grain)
        body(lo, b.select(b.icmp_signed("<", hi, extent), hi, extent))
        b.branch(head)
        b.position_at_end(done)

    def _listen_for_interrupts(self):
        """Clear tex_rt_interrupt (a Ctrl-C between calls is Python's business), and
        for a kernel with enough work to take noticeable time (~1M points in its
        definitions' domains), make sure a Ctrl-C sets it (tex_rt_arm: two system
        calls, negligible against that work)."""
        b = self.b
        b.store_atomic(ir.Constant(I32, 0), self._interrupt_flag(), "monotonic", 4)
        work = None
        for stage in self.kernel.body:
            # the definition's iteration domain, not the scheduled nest's iterations
            # (_iterations): a matmul's nests with their specializations and packing
            # made that sum 650 instructions, 15% of LLVM's time on the kernel
            n = self.index(sym.Mul(*stage.definition.extents.values()))
            work = n if work is None else b.add(work, n)
        if work is None:
            return
        with b.if_then(b.icmp_signed(">=", work, ir.Constant(I64, PARALLEL_MIN_WORK))):
            b.call(self._extern("tex_rt_arm", ir.VoidType(), []), [])

    def _interrupt_flag(self):
        flag = self.module.globals.get("tex_rt_interrupt")
        if flag is None:
            flag = ir.GlobalVariable(self.module, I32, "tex_rt_interrupt")
        return flag

    def poll_interrupt(self):
        """Leave with STATUS_INTERRUPTED if a Ctrl-C arrived (a load and a branch)."""
        b = self.b
        flag = b.load_atomic(self._interrupt_flag(), "monotonic", 4, typ=I32)
        self.fail_if(b.icmp_unsigned("!=", flag, ir.Constant(I32, 0)), STATUS_INTERRUPTED)


def _symbols_read(node):
    """The symbols (sizes, parameters, loop variables) the statements under `node` read:
    in loop bounds, conditions, indices, values and the shapes of buffers allocated."""
    from tex.expr import Access, IndexValue, walk as walk_expr
    exprs = []
    for n in walk(node):
        if isinstance(n, Loop):
            exprs += [n.start, n.extent]
        elif isinstance(n, Guard):
            exprs.append(n.cond)
        elif isinstance(n, Allocate):
            exprs += list(n.buffer.shape)
        elif isinstance(n, (Store, Update)):
            exprs += list(n.index)
            values = [n.value]
            if isinstance(n, Update) and n.arg is not None:
                exprs += list(n.arg.index)
                values.append(n.arg.position)
            for v in values:
                for a in walk_expr(v):
                    if isinstance(a, Access):
                        exprs += list(a.index)
                    elif isinstance(a, IndexValue):
                        exprs.append(a.expr)
    out = set()
    for e in exprs:
        out |= symbols_of(e)
    return out


def _buffers_outside(kernel, loop):
    """Buffers used by statements of the kernel that are not inside `loop`."""
    out = set()
    stack = [kernel]
    while stack:
        n = stack.pop()
        if n is loop:
            continue
        if isinstance(n, (Store, Update)):
            out.update(buffers_of(n))
        stack.extend(getattr(n, "body", ()))
    return out


@functools.lru_cache(maxsize=4096)
def _at_zero(extent, zeroed):
    """`extent` with the loop variables `zeroed` at 0. Memoized (per process, keyed by
    the variables it mentions only): sympy re-evaluates every Min it rebuilds, which
    was most of a matmul's code generation time."""
    return extent.xreplace(dict.fromkeys(zeroed, 0))
