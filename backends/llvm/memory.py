"""Memory a kernel allocates: local buffers on the stack, temporaries on the heap
(64-byte aligned, given back on every way out to the runtime, which keeps large ones for
the next call: pool.py), sizes computed with overflow checks."""
import numpy as np
import tex.symbolic as sym
from llvmlite import ir

from ...scheduler.ir import Scope
from .irtypes import (I1, I8, I64, PTR, STATUS_NOMEM, STATUS_TOO_LARGE, is_i64_constant,
                      memory_type)

# the largest buffer a kernel allocates: beyond it (or when count * itemsize overflows)
# the call fails with MemoryError naming the buffer, before any memory is touched
MAX_BUFFER_BYTES = 1 << 62
STACK_TEMP_BYTES = 16 * 1024            # kernel-wide temporaries up to this size live on the stack


class MemoryMixin:
    """Codegen's allocation of buffers (uses its builder, scope and fail paths)."""

    def _allocate(self, s):
        """A buffer live only inside `s.body`: a stack slot when its size is a constant
        (and small), else memory taken the first time the body runs and kept until the
        function returns (on its stack up to STACK_TEMP_BYTES, else from the runtime) --
        a packed panel inside a loop is allocated once a call (once a thread, inside a
        parallel loop), not once an iteration."""
        buf = s.buffer
        if buf.scope is Scope.LOCAL and all(sym.sympify(d).is_Integer for d in buf.shape):
            self._alloca(buf)
        else:
            self._malloc(buf, once=True)
        for c in s.body:
            self._stmt(c)
        del self.memory[buf]        # its pointer and strides exist only inside the body

    def _contiguous_strides(self, shape):
        strides, acc, known = [], ir.Constant(I64, 1), 1
        for d in reversed(shape):
            strides.append(acc)
            d = sym.sympify(d)
            if known is not None and d.is_Integer:       # constant strides stay constants
                known *= int(d)
                acc = ir.Constant(I64, known)
            else:
                known = None
                acc = self.b.mul(acc, self.index(d))
        return list(reversed(strides)), acc

    def _alloca(self, buf):
        if any(not sym.sympify(d).is_Integer for d in buf.shape):
            return self._malloc(buf)
        count = int(np.prod([int(d) for d in buf.shape])) if buf.shape else 1
        ptr = self.eb.alloca(memory_type(buf.dtype), size=ir.Constant(I64, count), name=buf.name)
        # typed as an opaque `ptr` (LLVM reads llvmlite's `float*` as one anyway): a
        # register tile's every vector load and store took a bitcast to `<16 x float>*`
        ptr.type = PTR
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
        alloc = self._extern("tex_rt_take", PTR, [I64])         # pool.py: kept between calls
        null = ir.Constant(PTR, None)
        if once:
            # taken on the first run: on the stack when small (a nested parallel loop's
            # outlined function runs once per iteration of the loop around it: a tiny
            # product's packed panel cost a malloc and a free per product, 45% of a
            # batch of 3 x 3 products), else from the runtime (`slot`, given back)
            taken = self.eb.alloca(PTR, name=f"{buf.name}.at")
            self.eb.store(null, taken)
            with self.b.if_then(self.b.icmp_unsigned("==", self.b.load(taken, typ=PTR), null)):
                small = self.b.icmp_unsigned("<=", nbytes, ir.Constant(I64, STACK_TEMP_BYTES))
                with self.b.if_else(small) as (then, otherwise):
                    with then:
                        on_stack = self.b.alloca(I8, size=nbytes)
                        on_stack.align = 64
                        self.b.store(on_stack, taken)
                    with otherwise:
                        on_heap = self.b.call(alloc, [nbytes])
                        self.b.store(on_heap, slot)
                        self.b.store(on_heap, taken)
            ptr = self.b.load(taken, typ=PTR, name=buf.name)
        elif stack_ok:
            small = self.b.icmp_unsigned("<=", nbytes, ir.Constant(I64, STACK_TEMP_BYTES))
            with self.b.if_else(small) as (then, otherwise):
                with then:
                    on_stack = self.b.alloca(I8, size=nbytes)
                    on_stack.align = 64
                    stack_block = self.b.block
                with otherwise:
                    on_heap = self.b.call(alloc, [nbytes])
                    self.b.store(on_heap, slot)
                    heap_block = self.b.block
            ptr = self.b.phi(PTR, name=buf.name)
            ptr.add_incoming(on_stack, stack_block)
            ptr.add_incoming(on_heap, heap_block)
        else:
            ptr = self.b.call(alloc, [nbytes], name=buf.name)
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
        i64; an overflow or a size over MAX_BUFFER_BYTES leaves the kernel with
        STATUS_TOO_LARGE (a broadcast view of 2**31 x 2**31 elements would otherwise wrap
        to a small allocation and be written out of bounds). A negative dimension holds
        nothing (a pack's box over an empty axis, 5*ceil(K/5) - 2 rows at K = 0: no loop
        reaches it), so it counts as 0; it was a MemoryError where numpy gives zeros."""
        b = self.b
        total = ir.Constant(I64, np.dtype(buf.dtype).itemsize)
        bad = ir.Constant(I1, 0)
        pair = ir.LiteralStructType([I64, I1])
        mul = self._extern("llvm.smul.with.overflow.i64", pair, [I64, I64])
        for d in buf.shape:
            d = sym.sympify(d)
            if d.is_Integer and is_i64_constant(total) and \
                    0 <= int(d) * total.constant <= MAX_BUFFER_BYTES:
                total = ir.Constant(I64, int(d) * total.constant)
                continue
            n = self.index(d)
            zero = ir.Constant(I64, 0)
            n = b.select(b.icmp_signed("<", n, zero), zero, n)
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
        give = self._extern("tex_rt_give", ir.VoidType(), [PTR])
        for slot in self.temps:
            self.b.call(give, [self.b.load(slot, typ=PTR)])
