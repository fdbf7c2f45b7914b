"""LLVM IR for a loop nest, built with llvmlite.ir.

Each kernel is two functions:

    i32 @k(ptr arr0, ..., i64 param0, ...)        the entry point called from Python
    void @k.body(ptr noalias data0, ..., i64 stride..., i64 size..., i64 param...)

`@k` receives numpy array objects, reads data pointers, shapes and strides from
numpy's array struct (no Python-side pointer extraction, which costs ~1 us an
array), checks that strides and data are aligned to the element size (returns 1 if
not, and Python retries with copies), binds the sizes and calls `@k.body`, which is
always inlined so that its `noalias` arguments become alias scopes for the optimizer.
Index arithmetic is 64-bit and follows Python's floor semantics for `//` and `%`.
Element strides may be negative or zero, so views work without copies.
"""
from dataclasses import dataclass

import numpy as np
import sympy as sp
from llvmlite import ir

from tex.expr import Access, CeilDiv, Const, Index, IndexValue, Op

from ...scheduler.ir import (Allocate, Guard, Kernel, Loop, LoopKind, Scope, Stage, Store,
                             Update, map_nest, walk)
from ...scheduler.vectorize import Transposed, plan_vectors
from .irtypes import (I1, I8, I32, I64, PTR, Builder, const, floor_div,
                      is_i64_constant, memory_type, self_referential, type_suffix, value_type)
from .ops import COMBINE, OPS, _better
from .vector import emit_vector_loop
from .transposed import emit_transposed

# numpy's PyArrayObject_fields: ob_refcnt, ob_type, data, nd, dimensions, strides
ARRAY_DATA, ARRAY_DIMS, ARRAY_STRIDES = 16, 32, 40
# A kernel returns code | detail << 8: MISALIGNED (Python retries on aligned copies),
# NOMEM and TOO_LARGE (detail: 1 + the buffer's number in kernel_buffers), INTERRUPTED
# (a Ctrl-C: tex_rt_interrupt was set), OUT_OF_BOUNDS (detail: the checked access).
STATUS_OK, STATUS_MISALIGNED, STATUS_NOMEM, STATUS_INTERRUPTED, STATUS_TOO_LARGE, \
    STATUS_OUT_OF_BOUNDS = range(6)
STATUS_DETAIL_SHIFT = 8
NTHREADS = sp.Symbol("tex_num_threads")   # the hidden last argument: threads to use
# fewer inner iterations than this run on one thread: waking the sleeping workers costs
# tens of microseconds, as much as ~1M vectorized iterations of a light loop body; a
# kernel with at least this much work also listens for Ctrl-C (threads.tex_rt_arm)
PARALLEL_MIN_WORK = 1 << 20
# the largest buffer a kernel allocates: beyond it (or when count * itemsize overflows)
# the call fails with MemoryError naming the buffer, before any memory is touched
MAX_BUFFER_BYTES = 1 << 62
STACK_TEMP_BYTES = 16 * 1024            # kernel-wide temporaries up to this size live on the stack
MAX_STRAIGHT_LINE = 64                  # constant loops up to this count may be emitted flat


class Codegen:
    """Builds the LLVM module of one Kernel. Use `build(kernel, name)`."""

    def __init__(self, kernel, name, fast_math=True, bounds_check=False):
        if bounds_check:        # every access checked one element at a time
            kernel = map_nest(kernel, _scalar_loops)
        # the vector plan of loops that have none (a nest built or changed by hand)
        kernel = plan_vectors(kernel, fast_math)
        self.kernel, self.name, self.fast_math = kernel, name, fast_math
        self.bounds_check = bounds_check
        self.checks = []         # BoundsCheck of each checked access, by number
        self.stage = None        # the definition whose statements are being emitted
        self.module = ir.Module(name=name)
        self.buffers = kernel_buffers(kernel)
        self.contract = False  # set while emitting a fast-math reduction's value
        self._block_values = {}  # _reuse: key -> (basic block, value)
        self._idom = {}          # Builder: block -> immediate dominator
        self.lanes = None      # while vector.py emits <lanes x T> values: intrinsics take .vN

    # ------------------------------------------------------------ entry point
    def build(self):
        body_fn = self._body_function()
        arrays = list(self.kernel.inputs) + list(self.kernel.outputs)
        fnty = ir.FunctionType(I32, [PTR] * len(arrays) + [I64] * (len(self.kernel.params) + 1))
        fn = ir.Function(self.module, fnty, name=self.name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        bad = fn.append_basic_block("misaligned")
        call_args, strides_args, ok = [], [], ir.Constant(I1, 1)
        dims = {}
        for pos, buf in enumerate(arrays):
            obj = fn.args[pos]
            data = b.load(b.gep(obj, [ir.Constant(I64, ARRAY_DATA)], source_etype=I8), typ=PTR)
            size = np.dtype(buf.dtype).itemsize
            if size > 1:
                addr = b.ptrtoint(data, I64)
                ok = b.and_(ok, b.icmp_unsigned("==", b.and_(addr, ir.Constant(I64, size - 1)),
                                                ir.Constant(I64, 0)))
            call_args.append(data)
            if buf.ndim:
                dptr = b.load(b.gep(obj, [ir.Constant(I64, ARRAY_DIMS)], source_etype=I8), typ=PTR)
                sptr = b.load(b.gep(obj, [ir.Constant(I64, ARRAY_STRIDES)], source_etype=I8),
                              typ=PTR)
            for axis in range(buf.ndim):
                dims[pos, axis] = lambda dptr=dptr, axis=axis: b.load(
                    b.gep(dptr, [ir.Constant(I64, axis)], source_etype=I64), typ=I64)
                st = b.load(b.gep(sptr, [ir.Constant(I64, axis)], source_etype=I64), typ=I64)
                if pos >= len(self.kernel.inputs) and axis == buf.ndim - 1:
                    # outputs are written along their last axis with unit stride (the
                    # body assumes it); another view is retried on a contiguous copy.
                    # The stride does not matter when the axis has one element or the
                    # array none (numpy gives empty arrays zero strides).
                    unit = b.icmp_signed("==", st, ir.Constant(I64, size))
                    for d in range(buf.ndim):
                        n = dims[pos, d]()
                        few = ir.Constant(I64, 1 if d == axis else 0)
                        unit = b.or_(unit, b.icmp_signed("<=", n, few))
                    ok = b.and_(ok, unit)
                if size > 1:
                    rem = b.srem(st, ir.Constant(I64, size))
                    ok = b.and_(ok, b.icmp_signed("==", rem, ir.Constant(I64, 0)))
                    st = b.sdiv(st, ir.Constant(I64, size))
                strides_args.append(st)
        size_args = [dims[self.kernel.bindings[s]]() for s in self.kernel.sizes]
        param_args = list(fn.args[len(arrays):])
        good = fn.append_basic_block("call")
        b.cbranch(ok, good, bad)
        b.position_at_end(bad)
        b.ret(ir.Constant(I32, STATUS_MISALIGNED))
        b.position_at_end(good)
        status = b.call(body_fn, call_args + strides_args + size_args + param_args)
        b.ret(status)
        return self.module

    # ------------------------------------------------------------ the body
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
        self.fn = fn
        entry = fn.append_basic_block("entry")      # allocas only; branches to start
        start = fn.append_basic_block("start")
        self.eb = ir.IRBuilder(entry)
        self.b = b = Builder(start, self._idom)
        self.env = {}
        self.memory = {}       # Buffer -> (base pointer, [element strides])
        args = iter(fn.args)
        data = [next(args) for _ in arrays]
        for pos, (buf, ptr) in enumerate(zip(arrays, data)):
            strides = [next(args) for _ in range(buf.ndim)]
            if pos >= len(k.inputs) and strides:
                strides[-1] = ir.Constant(I64, 1)      # checked by the entry point
            self.memory[buf] = (ptr, strides)
        for s in list(k.sizes) + list(k.params) + [NTHREADS]:
            self.env[s] = next(args)
        self.fail_block = fn.append_basic_block("fail")
        self.status = self.eb.alloca(I32, name="status")
        self.temps = []          # stack slots holding heap pointers (null until allocated)
        self._listen_for_interrupts()
        scoped = {id(n.buffer) for n in walk(k) if isinstance(n, Allocate)}
        for buf in self.buffers:
            if buf.scope is Scope.LOCAL and id(buf) not in scoped:
                self._alloca(buf)
        # a partial that may be its output (alias) comes after the output's memory
        for buf in sorted(self.buffers, key=lambda b: b.alias is not None):
            if buf.scope is Scope.TEMP and id(buf) not in scoped:
                self._malloc(buf, stack_ok=True)
        for stmt in k.body:
            self._stmt(stmt)
        self._free_temps()
        b.ret(ir.Constant(I32, STATUS_OK))
        b.position_at_end(self.fail_block)
        self._free_temps()
        b.ret(b.load(self.status, typ=I32))
        self.eb.branch(start)
        return fn

    def _listen_for_interrupts(self):
        """Clear tex_rt_interrupt (a Ctrl-C between calls is Python's business), and
        for a kernel with enough work to take noticeable time, make sure a Ctrl-C sets
        it (tex_rt_arm: two system calls, negligible against ~1M iterations)."""
        b = self.b
        b.store_atomic(ir.Constant(I32, 0), self._interrupt_flag(), "monotonic", 4)
        at_zero = {n.var: 0 for n in walk(self.kernel) if isinstance(n, Loop)}
        work = None
        for stage in self.kernel.body:
            n = self._iterations(stage, at_zero)
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

    def poll_interrupt(self):
        """Leave with STATUS_INTERRUPTED if a Ctrl-C arrived (a load and a branch)."""
        b = self.b
        flag = b.load_atomic(self._interrupt_flag(), "monotonic", 4, typ=I32)
        self.fail_if(b.icmp_unsigned("!=", flag, ir.Constant(I32, 0)), STATUS_INTERRUPTED)

    def _contiguous_strides(self, shape):
        strides, acc, known = [], ir.Constant(I64, 1), 1
        for d in reversed(shape):
            strides.append(acc)
            d = sp.sympify(d)
            if known is not None and d.is_Integer:       # constant strides stay constants
                known *= int(d)
                acc = ir.Constant(I64, known)
            else:
                known = None
                acc = self.b.mul(acc, self.index(d))
        return list(reversed(strides)), acc

    def _alloca(self, buf):
        if any(not sp.sympify(d).is_Integer for d in buf.shape):
            return self._malloc(buf)
        count = int(np.prod([int(d) for d in buf.shape])) if buf.shape else 1
        ptr = self.eb.alloca(memory_type(buf.dtype), size=ir.Constant(I64, count), name=buf.name)
        self.memory[buf] = (ptr, self._contiguous_strides(buf.shape)[0])

    def _malloc(self, buf, stack_ok=False, once=False):
        """Heap memory for `buf` (64-byte aligned), freed when the function returns.
        With `stack_ok` (buffers the kernel allocates once, at its start) a small buffer
        goes on the stack instead: a split-K partial of a few elements must not cost a
        malloc and a free on every call. With `once` (code that may run many times) the
        memory is taken on the first run and reused after; its size must not change."""
        strides, _ = self._contiguous_strides(buf.shape)
        number = 1 + self.buffers.index(buf)
        nbytes = self._checked_bytes(buf, number)
        single = None
        if buf.alias is not None:        # one part: the output itself, nothing to allocate
            single = self.b.icmp_signed("==", self.index(buf.shape[0]), ir.Constant(I64, 1))
            nbytes = self.b.select(single, ir.Constant(I64, 0), nbytes)
        nbytes = self.b.add(nbytes, ir.Constant(I64, 64))       # never 0; room to round up
        nbytes = self.b.and_(nbytes, ir.Constant(I64, ~63))
        slot = self.eb.alloca(PTR, name=f"{buf.name}.slot")    # the heap pointer, or null
        self.eb.store(ir.Constant(PTR, None), slot)
        self.temps.append(slot)
        alloc = self._extern("aligned_alloc", PTR, [I64, I64])
        null = ir.Constant(PTR, None)
        if once:
            with self.b.if_then(self.b.icmp_unsigned("==", self.b.load(slot, typ=PTR), null)):
                self.b.store(self.b.call(alloc, [ir.Constant(I64, 64), nbytes]), slot)
            ptr = self.b.load(slot, typ=PTR, name=buf.name)
        elif stack_ok:
            small = self.b.icmp_unsigned("<=", nbytes, ir.Constant(I64, STACK_TEMP_BYTES))
            with self.b.if_else(small) as (then, otherwise):
                with then:
                    on_stack = self.b.alloca(I8, size=nbytes)
                    on_stack.align = 64
                    stack_block = self.b.block
                with otherwise:
                    on_heap = self.b.call(alloc, [ir.Constant(I64, 64), nbytes])
                    self.b.store(on_heap, slot)
                    heap_block = self.b.block
            ptr = self.b.phi(PTR, name=buf.name)
            ptr.add_incoming(on_stack, stack_block)
            ptr.add_incoming(on_heap, heap_block)
        else:
            ptr = self.b.call(alloc, [ir.Constant(I64, 64), nbytes], name=buf.name)
            self.b.store(ptr, slot)
        self.fail_if(self.b.icmp_unsigned("==", ptr, null), STATUS_NOMEM, number)
        if single is not None:
            out_ptr, out_strides = self.memory[buf.alias]
            ptr = self.b.select(single, out_ptr, ptr)
            strides = [self._either(single, a, b)
                       for a, b in zip([ir.Constant(I64, 0)] + list(out_strides), strides)]
        self.memory[buf] = (ptr, strides)

    def _checked_bytes(self, buf, number):
        """The bytes of `buf` (the product of its dimensions and the element size) as an
        i64; a negative dimension, an overflow or a size over MAX_BUFFER_BYTES leaves the
        kernel with STATUS_TOO_LARGE (a broadcast view of 2**31 x 2**31 elements would
        otherwise wrap to a small allocation and be written out of bounds)."""
        b = self.b
        total = ir.Constant(I64, np.dtype(buf.dtype).itemsize)
        bad = ir.Constant(I1, 0)
        pair = ir.LiteralStructType([I64, I1])
        mul = self._extern("llvm.smul.with.overflow.i64", pair, [I64, I64])
        for d in buf.shape:
            d = sp.sympify(d)
            if d.is_Integer and is_i64_constant(total) and \
                    0 <= int(d) * total.constant <= MAX_BUFFER_BYTES:
                total = ir.Constant(I64, int(d) * total.constant)
                continue
            n = self.index(d)
            bad = b.or_(bad, b.icmp_signed("<", n, ir.Constant(I64, 0)))
            product = b.call(mul, [total, n])
            total = b.extract_value(product, 0)
            bad = b.or_(bad, b.extract_value(product, 1))
        if is_i64_constant(total) and isinstance(bad, ir.Constant):
            return total
        bad = b.or_(bad, b.icmp_signed(">", total, ir.Constant(I64, MAX_BUFFER_BYTES)))
        self.fail_if(bad, STATUS_TOO_LARGE, number)
        return total

    def _either(self, cond, a, b):
        """select(cond, a, b) for i64 values, folded when both are the same constant (a
        unit last stride must stay a compile-time constant for the vector code)."""
        if isinstance(a, ir.Constant) and isinstance(b, ir.Constant) and \
                a.constant == b.constant:
            return a
        return self.b.select(cond, a, b)

    def _free_temps(self):
        free = self._extern("free", ir.VoidType(), [PTR])
        for slot in self.temps:
            self.b.call(free, [self.b.load(slot, typ=PTR)])

    def _extern(self, name, ret, args):
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return fn

    def intrinsic(self, name, dt, nargs):
        ty = value_type(dt)
        if self.lanes:
            ty = ir.VectorType(ty, self.lanes)
        return self._extern(f"llvm.{name}.{type_suffix(ty)}", ty, [ty] * nargs)

    # ------------------------------------------------------------ statements
    def _stmt(self, s):
        if isinstance(s, Stage):
            self.stage = s.definition
            for c in s.body:
                self._stmt(c)
        elif isinstance(s, Loop):
            self._loop(s)
        elif isinstance(s, Guard):
            with self.b.if_then(self.condition(s.cond)):
                for c in s.body:
                    self._stmt(c)
        elif isinstance(s, Store):
            self.store(s.buffer, s.index, self.value(s.value))
        elif isinstance(s, Update):
            self._update(s)
        elif isinstance(s, Allocate):
            self._allocate(s)
        else:
            raise NotImplementedError(f"codegen: {type(s).__name__}")

    def _allocate(self, s):
        """A buffer live only inside `s.body`: a stack slot when its size is a constant
        (and small), else heap memory taken the first time the body runs and kept until
        the function returns -- a packed panel inside a loop is allocated once a call
        (once a thread, inside a parallel loop), not once an iteration."""
        buf = s.buffer
        if buf.scope is Scope.LOCAL and all(sp.sympify(d).is_Integer for d in buf.shape):
            self._alloca(buf)
        else:
            self._malloc(buf, once=True)
        for c in s.body:
            self._stmt(c)
        del self.memory[buf]        # its pointer and strides exist only inside the body

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
        self._serial_loop(loop, start, end)

    def straight_line(self, loop):
        """A loop of constant bounds (an unrolled loop over a register tile's rows) as
        its body repeated with the variable a constant; False if the bounds are not
        constant or too many. The tile's addresses fold, so its local accumulator is
        promoted to registers (SROA needs constant offsets in every access)."""
        first, count = sp.sympify(loop.start), sp.sympify(loop.extent)
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
            for c in loop.body:
                self._stmt(c)
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
    def _parallel_loop(self, loop):
        """Outline the loop into `void fn(ptr ctx, i64 thread, i64 team)` (each thread a
        contiguous chunk) and run it on tex's thread pool (threads.py), or on this thread
        alone when the work is small."""
        b = self.b
        start = self.index(loop.start)
        extent = self.index(loop.extent)
        inner_vars = {n.var: 0 for n in walk(loop) if isinstance(n, Loop)}
        work = self._iterations(loop, inner_vars)
        syms = list(self.env.items())
        bufs = list(self.memory.items())
        status = self.eb.alloca(I32, name="par.status")
        # constant strides (local and packed buffers) stay constants in the outlined
        # function, so its vector loops know their steps at compile time
        ints = [v for _, v in syms] + [start, extent] + [st for _, (_, sts) in bufs for st in sts
                                                         if not isinstance(st, ir.Constant)]
        ctx_i = self.eb.alloca(I64, size=ir.Constant(I64, len(ints)), name="par.ints")
        ptrs = [ctx_i, status] + [p for _, (p, _) in bufs]
        ctx = self.eb.alloca(PTR, size=ir.Constant(I64, len(ptrs)), name="par.ctx")
        for n, v in enumerate(ptrs):
            b.store(v, b.gep(ctx, [ir.Constant(I64, n)], source_etype=PTR))
        for n, v in enumerate(ints):
            b.store(v, b.gep(ctx_i, [ir.Constant(I64, n)], source_etype=I64))
        b.store(ir.Constant(I32, 0), status)
        fn = self._outlined(loop, bufs, syms)
        threads = self.env[NTHREADS]
        # a team pays only for enough work spread over at least two iterations; otherwise
        # the loop runs on this thread and a parallel loop nested in it gets the team
        big = b.and_(b.icmp_signed(">=", work, ir.Constant(I64, PARALLEL_MIN_WORK)),
                     b.icmp_signed(">", extent, ir.Constant(I64, 1)))
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
        inner = b.select(b.icmp_signed("<", inner, one), one, inner)
        return b.mul(self.index(sp.sympify(node.extent).xreplace(at_zero)), inner)

    def _outlined(self, loop, bufs, syms):
        saved = (self.fn, self.b, self.eb, self.env, self.memory, self.fail_block, self.temps,
                 self.status)
        n = sum(1 for g in self.module.globals if g.startswith(f"{self.name}.par"))
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]),
                         name=f"{self.name}.par{n}")
        fn.linkage = "internal"
        self.fn = fn
        entry, begin = fn.append_basic_block("entry"), fn.append_basic_block("start")
        self.eb, self.b = ir.IRBuilder(entry), Builder(begin, self._idom)
        b, (ctx, tid, nt) = self.b, fn.args

        def load(base, k, ty):
            return b.load(b.gep(base, [ir.Constant(I64, k)], source_etype=ty), typ=ty)
        ctx_i, shared_status = load(ctx, 0, PTR), load(ctx, 1, PTR)
        n_ints = len(syms) + 2 + sum(not isinstance(st, ir.Constant)
                                     for _, (_, sts) in bufs for st in sts)
        ints = iter(load(ctx_i, k, I64) for k in range(n_ints))
        self.env = {sym: next(ints) for sym, _ in syms}
        start, extent = next(ints), next(ints)
        self.memory = {}
        for k, (buf, (_, sts)) in enumerate(bufs):
            self.memory[buf] = (load(ctx, k + 2, PTR), [st if isinstance(st, ir.Constant)
                                                        else next(ints) for st in sts])
        self.temps = []
        self.fail_block = fn.append_basic_block("fail")
        self.status = self.eb.alloca(I32, name="status")
        outside = _buffers_outside(self.kernel, loop)
        from ...scheduler.ir import buffers_of
        scoped = {id(n.buffer) for n in walk(loop) if isinstance(n, Allocate)}
        for buf in buffers_of(loop):
            if buf.scope is Scope.LOCAL and buf not in outside and id(buf) not in scoped:
                self._alloca(buf)                 # private to each thread
        chunk = floor_div(b, b.add(extent, b.sub(nt, ir.Constant(I64, 1))), nt)
        lo = b.mul(tid, chunk)
        hi = b.add(lo, chunk)
        hi = b.select(b.icmp_signed("<", hi, extent), hi, extent)
        lo = b.select(b.icmp_signed("<", lo, hi), lo, hi)
        self._serial_loop(loop, b.add(start, lo), b.add(start, hi))
        self._free_temps()
        b.ret_void()
        b.position_at_end(self.fail_block)
        self._free_temps()
        b.store(b.load(self.status, typ=I32), shared_status)
        b.ret_void()
        self.eb.branch(begin)
        (self.fn, self.b, self.eb, self.env, self.memory, self.fail_block, self.temps,
         self.status) = saved
        return fn

    def _loop_metadata(self, loop):
        if loop.kind is LoopKind.UNROLLED:
            full = sp.sympify(loop.extent).is_Integer      # a symbolic count: unroll by LLVM's choice
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
        x = self.reduced_value(s)
        if s.arg is None:
            self._store(ptr, COMBINE[s.combiner](self, s.buffer.dtype, acc, x, s.fast_math),
                        s.buffer.dtype)
            return
        pos_ptr = self.address(s.arg.buffer, s.arg.index)
        pos, acc_pos = self.value(s.arg.position), self._load(pos_ptr, np.int64)
        better = _better(self, s.buffer.dtype, s.combiner, x, acc, pos, acc_pos)
        self._store(ptr, b.select(better, x, acc), s.buffer.dtype)
        self._store(pos_ptr, b.select(better, pos, acc_pos), np.int64)

    def reduced_value(self, update):
        """The value an Update combines in: with fast_math, its float products may fuse
        with the accumulation into FMAs (as BLAS does); elementwise code never does."""
        self.contract = update.fast_math
        try:
            return self.value(update.value)
        finally:
            self.contract = False

    # ------------------------------------------------------------ memory
    def _reuse(self, key, make):
        """make(), or the value an identical `key` made earlier in the current basic
        block or in a block that dominates it. Keys hold the values of the variables they read,
        so a rebound loop variable (an unrolled copy, the next vector chunk) misses.
        The straight-line micro-kernel and its write-back repeat the same index
        arithmetic for every row and vector; emitting it once keeps the IR (and LLVM's
        time on it) small."""
        hit = self._block_values.get(key)
        if hit is not None and self.b.dominates(hit[0], self.b.block):
            return hit[1]
        value = make()
        self._block_values[key] = (self.b.block, value)
        return value

    def _bound(self, exprs):
        """The current values of the symbols `exprs` read, for a `_reuse` key."""
        syms = set().union(*(sp.sympify(e).free_symbols for e in exprs))
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
        offset = None
        for ix, st in zip(index, strides):
            term = self.b.mul(self.index(ix), st)
            offset = term if offset is None else self.b.add(offset, term)
        if offset is None:
            return base
        return self.b.gep(base, [offset], source_etype=memory_type(buf.dtype))

    def _check_bounds(self, buf, index):
        """bounds_check mode: leave with STATUS_OUT_OF_BOUNDS (detail: the check's
        number in self.checks) when an index of `buf[index]` is outside its dimension,
        after writing the index, the dimension and the enclosing loops' values to the
        kernel's `<name>.bounds` record for the error message."""
        b = self.b
        loops = [(v, value) for v, value in self.env.items() if isinstance(v, Index)]
        loops = loops[-BOUNDS_LOOPS:]
        for axis, (ix, d) in enumerate(zip(index, buf.shape)):
            value, dim = self.index(ix), self.index(d)
            number = len(self.checks)
            self.checks.append(BoundsCheck(buf.name, axis, ix, d, tuple(v for v, _ in loops),
                                           getattr(self.stage, "name", "?")))
            bad = self.fn.append_basic_block("bounds.bad")
            ok = b.dominated(self.fn.append_basic_block("bounds.ok"))
            b.cbranch(b.icmp_unsigned(">=", value, dim), bad, ok)    # < 0 is >= as unsigned
            b.position_at_end(bad)
            record = self._bounds_record()
            for slot, v in enumerate([value, dim, ir.Constant(I64, len(loops))] +
                                     [x for _, x in loops]):
                b.store(v, record.gep([ir.Constant(I32, 0), ir.Constant(I32, slot)]))
            b.store(ir.Constant(I32, STATUS_OUT_OF_BOUNDS | number << STATUS_DETAIL_SHIFT),
                    self.status)
            b.branch(self.fail_block)
            b.position_at_end(ok)

    def _bounds_record(self):
        name = f"{self.name}.bounds"
        record = self.module.globals.get(name)
        if record is None:
            record = ir.GlobalVariable(self.module, ir.ArrayType(I64, 3 + BOUNDS_LOOPS), name)
            record.initializer = ir.Constant(record.value_type, None)
        return record

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
        e = sp.sympify(e)
        if e.is_Integer:
            return ir.Constant(I64, int(e))
        if e.is_Symbol:
            return self.env[e]
        return self._reuse(("index", e, self._bound([e])), lambda: self._index(e))

    def _index(self, e):
        b = self.b
        if isinstance(e, sp.Add):
            vals = [self.index(a) for a in e.args]
            out = vals[0]
            for v in vals[1:]:
                out = b.add(out, v)
            return out
        if isinstance(e, sp.Mul):
            num, den = sp.fraction(e)
            if den != 1:
                raise NotImplementedError(f"codegen: non-integer index expression {e}")
            vals = [self.index(a) for a in e.args]
            out = vals[0]
            for v in vals[1:]:
                out = b.mul(out, v)
            return out
        if isinstance(e, CeilDiv):
            return b.neg(floor_div(b, b.neg(self.index(e.args[0])), self.index(e.args[1])))
        if isinstance(e, (sp.floor, sp.ceiling)):
            num, den = sp.fraction(sp.together(e.args[0]))      # den: a constant or a param
            d = self.index(den)
            if isinstance(e, sp.ceiling):
                return b.neg(floor_div(b, b.neg(self.index(num)), d))
            return floor_div(b, self.index(num), d)
        if isinstance(e, sp.Mod):
            a, m = self.index(e.args[0]), self.index(e.args[1])
            return b.sub(a, b.mul(m, floor_div(b, a, m)))
        if isinstance(e, (sp.Min, sp.Max)):
            op = "<" if isinstance(e, sp.Min) else ">"
            vals = [self.index(a) for a in e.args]
            out = vals[0]
            for v in vals[1:]:
                out = b.select(b.icmp_signed(op, out, v), out, v)
            return out
        raise NotImplementedError(f"codegen: index expression {e} ({type(e).__name__})")

    def condition(self, c):
        b = self.b
        if c is sp.true:
            return ir.Constant(I1, 1)
        if isinstance(c, sp.And):
            out = self.condition(c.args[0])
            for a in c.args[1:]:
                out = b.and_(out, self.condition(a))
            return out
        if isinstance(c, sp.Or):
            out = self.condition(c.args[0])
            for a in c.args[1:]:
                out = b.or_(out, self.condition(a))
            return out
        if isinstance(c, sp.Not):
            return b.not_(self.condition(c.args[0]))
        ops = {sp.StrictLessThan: "<", sp.LessThan: "<=", sp.StrictGreaterThan: ">",
               sp.GreaterThan: ">=", sp.Eq: "==", sp.Ne: "!="}
        return b.icmp_signed(ops[type(c)], self.index(c.lhs), self.index(c.rhs))

    # ------------------------------------------------------------ values
    def value(self, e):
        if isinstance(e, Const):
            return const(e.dtype, e.value)
        if isinstance(e, Access):
            return self._load(self.address(e.tensor, e.index), e.tensor.dtype)
        if isinstance(e, IndexValue):
            return self.index(e.expr)
        if isinstance(e, Op):
            args = [self.value(a) for a in e.args]
            return OPS[e.name](self, e, *args)
        raise NotImplementedError(f"codegen: value {e!r}")


def _buffers_outside(kernel, loop):
    """Buffers used by statements of the kernel that are not inside `loop`."""
    from ...scheduler.ir import Store, Update, buffers_of
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


def kernel_buffers(kernel):
    from ...scheduler.ir import buffers_of
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


def build(kernel, name, fast_math=True, bounds_check=False):
    """Kernel -> llvmlite.ir.Module with entry point `name`."""
    assert isinstance(kernel, Kernel)
    return Codegen(kernel, name, fast_math, bounds_check).build()


def bounds_checks(kernel, name, fast_math=True):
    """The BoundsCheck records of a bounds_check kernel, by number (code generation is
    deterministic: they number the checks of the machine code built from this kernel)."""
    cg = Codegen(kernel, name, fast_math, bounds_check=True)
    cg.build()
    return cg.checks


@dataclass(frozen=True)
class BoundsCheck:
    """One checked dimension of one access (bounds_check mode)."""
    buffer: str
    axis: int
    index: object            # the index expression, over loop variables and sizes
    dimension: object        # the buffer's dimension (a size expression)
    loops: tuple             # the enclosing loops' variables whose values are recorded
    stage: str


BOUNDS_LOOPS = 8             # enclosing loops recorded for a failed bounds check


def _scalar_loops(node):
    """bounds_check mode runs vector loops as serial ones."""
    if isinstance(node, Loop) and node.kind is LoopKind.VECTOR:
        return node.replace(kind=LoopKind.SERIAL)
    return node
