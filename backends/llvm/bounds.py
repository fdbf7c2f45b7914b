"""bounds_check mode: every load and store checked against its buffer's shape; a failed
check records the index, the dimension and the enclosing loops' values and leaves the
kernel with STATUS_OUT_OF_BOUNDS (runtime.py turns it into an IndexError)."""
from llvmlite import ir

from tex.expr import Index
from tex.records import record

from ...scheduler.ir import Loop, LoopKind
from .irtypes import I32, I64, STATUS_DETAIL_SHIFT, STATUS_OUT_OF_BOUNDS

BOUNDS_LOOPS = 8             # enclosing loops recorded for a failed bounds check


@record
class BoundsCheck:
    """One checked dimension of one access (bounds_check mode)."""
    buffer: str
    axis: int
    index: object            # the index expression, over loop variables and sizes
    dimension: object        # the buffer's dimension (a size expression)
    loops: tuple             # the enclosing loops' variables whose values are recorded
    stage: str



def scalar_loops(node):
    """bounds_check mode runs vector loops as serial ones."""
    if isinstance(node, Loop) and node.kind is LoopKind.VECTOR:
        return node.replace(kind=LoopKind.SERIAL)
    return node


class BoundsMixin:
    """Codegen's bounds checks."""

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
