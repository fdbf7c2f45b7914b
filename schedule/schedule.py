"""Schedules: `tex.schedule(out)`, its stages, loop handles and a replayable history.

    s = tex.schedule(C)
    io, ii = s[C].split(i, 64)
    s[C].reorder(io, k, ii)
    s[C].parallel(io)
    print(s)                 # the loop nest after these steps
    s.history                # [Split('C', 'i', 64, 'peel'), Reorder('C', ('io', 'k', 'ii')), ...]

The user-facing methods are thin recorders: each resolves its loop arguments, calls a
pure primitive (schedule/primitives.py) and appends a frozen step record. Replaying
the records on a fresh schedule of the same program gives the same loop nest.
"""
import json
from dataclasses import asdict, dataclass

from tex.errors import ScheduleError
import sympy as sp

from tex.expr import Access, AutoParts, Index, Param, walk as walk_expr
from tex.program import as_program

from . import host as host_info
from . import primitives as P
from .ir import Guard, Kernel, LoopKind, Scope, Stage
from .lower import buffers_for
from .printer import format_nest
from .stage import initial_state, lower_stage


# ---------------------------------------------------------------- step records

@dataclass(frozen=True)
class Split:
    stage: str
    loop: str
    factor: int
    tail: str = "peel"


@dataclass(frozen=True)
class Reorder:
    stage: str
    loops: tuple


@dataclass(frozen=True)
class SplitK:
    stage: str
    loop: str
    parts: object             # an int, "param:NAME" for a call-time tex.param, or
    #                           "auto:NAME|rows|length" for the auto schedule's AutoParts


@dataclass(frozen=True)
class Privatize:
    stage: str
    loop: str


@dataclass(frozen=True)
class Pack:
    stage: str
    tensor: str
    at: str
    layout: str = "box"


@dataclass(frozen=True)
class ComputeAt:
    stage: str              # the producer
    consumer: str
    at: str


@dataclass(frozen=True)
class SetKind:
    stage: str
    loop: str
    kind: str
    tail: str = "peel"


@dataclass(frozen=True)
class Specialize:
    stage: str
    condition: str          # a relation of sizes and params, as sympy prints it


STEPS = {cls.__name__: cls for cls in (Split, Reorder, SplitK, Privatize, Pack, ComputeAt,
                                         SetKind, Specialize)}


class LoopHandle:
    """A loop of one stage of one schedule: `.name`, `.is_reduction`."""
    __slots__ = ("stage", "var")

    def __init__(self, stage, var):
        self.stage, self.var = stage, var

    @property
    def name(self):
        return self.var.name

    @property
    def is_reduction(self):
        axis = self.stage.state.axis(self.var)
        return bool(axis and axis.reduction)

    @property
    def kind(self):
        axis = self.stage.state.axis(self.var)
        return axis.kind.value if axis else None

    def __repr__(self):
        red = ", reduction" if self.is_reduction else ""
        return f"<loop {self.name} of {self.stage.name}{red}>"

    def __reduce__(self):
        return (_loop_of, (self.stage, self.name))


class StageHandle:
    """`s[C]`: the schedule of one definition."""

    def __init__(self, sched, defn):
        self.sched, self.definition = sched, defn
        self.name = defn.name
        self.origin = {}           # user's tex.indices object -> this stage's loop variable
        self.specializations = []  # Specialization handles, tried in order at run time

    @property
    def state(self):
        return self.sched._states[self.definition]

    def _store(self, value):
        self.sched._states[self.definition] = value

    @state.setter
    def state(self, value):
        old = self.state
        same_nest = [(a.var, a.extent) for a in old.axes] == \
            [(a.var, a.extent) for a in value.axes] and old.packs == value.packs and \
            old.hosted == value.hosted and old.private is value.private
        if (value.packs or value.hosted) and not same_nest:
            # the boxes of local copies depend on the loop order: refuse a state that
            # no longer lowers (the error names the primitive and the tensor)
            lower_stage(value, self.sched._buffers(), self.sched._states)
        self._store(value)

    @property
    def loops(self):
        return [LoopHandle(self, a.var) for a in self.state.axes]

    def _var(self, prim, loop):
        """A loop argument -> this stage's loop variable (refusing other stages' loops)."""
        if isinstance(loop, LoopHandle):
            if loop.stage is not self:
                raise ScheduleError(f"{prim}: loop {loop.name} belongs to stage "
                                    f"{loop.stage.name} of "
                                    f"{'another schedule' if loop.stage.sched is not self.sched else 'this schedule'}"
                                    f", not to stage {self.name}")
            var = loop.var
        elif isinstance(loop, Index):
            var = self.state.subst.get(loop)
            if var is None or self.state.axis(var) is None:
                raise ScheduleError(f"{prim}: index {loop.name} is not a loop of stage "
                                    f"{self.name} (already split, or not one of its indices)")
        elif isinstance(loop, str):
            matches = [a.var for a in self.state.axes if a.name == loop]
            if not matches:
                names = ", ".join(a.name for a in self.state.axes)
                raise ScheduleError(f"{prim}: stage {self.name} has no loop named {loop!r} "
                                    f"(loops: {names})")
            var = matches[0]
        else:
            raise ScheduleError(f"{prim}: {loop!r} is not a loop handle, index or name")
        if self.state.axis(var) is None:
            raise ScheduleError(f"{prim}: loop {var.name} is no longer a loop of stage "
                                f"{self.name} (it was split)")
        return var

    # ------------------------------------------------------------ primitives
    def split(self, loop, factor, tail="peel"):
        var = self._var("split", loop)
        name = var.name
        self.state, outer, inner = P.split(self.state, var, factor, P.Tail.parse(tail))
        self.sched._record(Split(self.name, name, factor, P.Tail.parse(tail).value))
        return LoopHandle(self, outer), LoopHandle(self, inner)

    def split_k(self, loop, parts):
        """Split a reduction loop into `parts` parallel chunks with private partial
        results and a merge; `parts` may be `tex.param("P")` (chosen at call time)."""
        var = self._var("split_k", loop)
        name = var.name
        self.state, outer, inner = P.split_k(self.state, var, parts)
        if isinstance(parts, AutoParts):
            recorded = f"auto:{parts}|{parts.rows}|{parts.length}"
        else:
            recorded = f"param:{parts}" if isinstance(parts, Param) else parts
        self.sched._record(SplitK(self.name, name, recorded))
        return LoopHandle(self, outer), LoopHandle(self, inner)

    def privatize(self, loop):
        """Keep the partial results of reduction loop `loop` apart and merge them after."""
        var = self._var("privatize", loop)
        self.state = P.privatize(self.state, var)
        self.sched._record(Privatize(self.name, var.name))

    def pack(self, tensor, at, layout="box"):
        """Copy what the loops below `at` read of `tensor` into a contiguous buffer:
        `layout="box"` keeps the tensor's dimensions, `layout="loops"` lays it out in the
        order the loops read it (BLIS's packed micro-panels, zero-padded)."""
        if isinstance(tensor, str):
            tensor = self.sched.program.tensor(tensor)
        var = self._var("pack", at)
        self.state = P.pack(self.state, tensor, var, layout)
        self.sched._record(Pack(self.name, tensor.name, var.name, layout))

    def compute_at(self, consumer, at):
        """Compute this definition inside loop `at` of `consumer`, only over the part the
        consumer reads below `at`, into a local buffer (never written to memory whole)."""
        sched = self.sched
        cons = consumer if isinstance(consumer, StageHandle) else sched[consumer]
        d = self.definition
        if d in sched.program.outputs:
            raise ScheduleError(f"compute_at: {d.name} is an output of the program; it must be "
                                "computed whole")
        if d in sched._hosted_by:
            raise ScheduleError(f"compute_at: {d.name} is already computed inside "
                                f"{sched._hosted_by[d].name}")
        var = cons._var("compute_at", at)
        if cons.specializations or isinstance(cons, Specialization):
            base = cons.parent if isinstance(cons, Specialization) else cons
            raise ScheduleError(f"compute_at: stage {base.name} has specialized schedules "
                                "(specialize, or the auto schedule of a contraction); "
                                f"{d.name} can be computed inside one nest only: fuse "
                                "before specializing")
        cons.state = P.host(cons.state, d, var)
        sched._hosted_by[d] = cons.definition
        sched._record(ComputeAt(self.name, cons.name, var.name))

    def reduction_strategy(self, name, tail="peel", accumulators=None):
        """How the innermost reduction loop uses vector registers (seeds/004), built from
        the primitives, which stay in `s.history`:

        - "inner_reduction": split the reduction loop by the vector width W and
          vectorize the inner part: a horizontal reduction after every vector.
        - "vector_accumulator": split it by W*U, privatize and vectorize the inner
          part: U vector accumulators run through the loop, one horizontal reduction
          at the end (U = `accumulators`, default 4 registers' worth).
        - "inner_parallel": split the innermost output loop by W and move its inner
          part inside the reduction loops, vectorized: each lane owns a row and no
          horizontal reduction happens at all.
        `tail` is the vector loops' tail: "peel" or "mask". A refused strategy leaves
        the schedule as it was."""
        state, steps = self.state, len(self.sched.history)
        try:
            self._reduction_strategy(name, tail, accumulators)
        except ScheduleError:
            self._store(state)
            del self.sched.history[steps:]
            raise

    def _reduction_strategy(self, name, tail, accumulators):
        d = self.definition
        red = d.reduction
        if red is None:
            raise ScheduleError(f"reduction_strategy: stage {self.name} has no reduction")
        strategies = ("inner_parallel", "inner_reduction", "vector_accumulator")
        if name not in strategies:
            raise ScheduleError(f"reduction_strategy: {name!r} is not one of "
                                f"{', '.join(map(repr, strategies))}")
        loads = [a.tensor.dtype for a in walk_expr(red.body) if isinstance(a, Access)]
        narrow = min(loads, key=lambda dt: dt.itemsize) if loads else red.dtype
        width = host_info.lanes(narrow)
        reductions = [h for h in self.loops if h.is_reduction]
        if name == "inner_parallel":
            outputs = [h for h in self.loops if not h.is_reduction]
            if not outputs:
                raise ScheduleError(f"reduction_strategy: stage {self.name} has no output "
                                    "loop to spread over the vector lanes")
            oo, oi = self.split(outputs[-1], width)
            order = [h for h in self.loops if h.var is not oi.var] + [oi]
            self.reorder(*order)
            self.vectorize(oi, tail)
            return
        r = reductions[-1]
        if self.loops[-1].var is not r.var:
            raise ScheduleError(f"reduction_strategy: the innermost loop of stage {self.name} "
                                f"is not the reduction loop {r.name}")
        if name == "inner_reduction":
            ro, ri = self.split(r, width)
            self.vectorize(ri, tail)
            return
        if accumulators is None:      # four registers of accumulators, at least one vector
            accumulators = max(1, 4 * narrow.itemsize // red.dtype.itemsize)
        if isinstance(accumulators, bool) or not isinstance(accumulators, int) \
                or accumulators < 1:
            raise ScheduleError(f"reduction_strategy: accumulators= must be an integer >= 1, "
                                f"got {accumulators!r}")
        ro, ri = self.split(r, width * int(accumulators))
        self.privatize(ri)
        self.vectorize(ri, tail)

    def specialize(self, condition):
        """A specialization of this stage (Halide's `specialize`): a handle whose
        schedule starts as this one's and is used, at run time, for calls where
        `condition` -- a relation of sizes and call-time parameters, such as
        `(M >= 6) & (N >= 16)` -- holds. Specializations are tried in the order they
        were made; calls where none holds run this stage's own schedule. Both nests
        are compiled into the one kernel."""
        cond = sp.sympify(condition)
        if cond is sp.true or cond is sp.false or not isinstance(cond, sp.logic.boolalg.Boolean):
            raise ScheduleError(f"specialize: in stage {self.name}, {condition!r} is not a "
                                "condition on sizes (a relation such as M >= 64)")
        known = set(self.sched.program.sizes) | set(self.sched.program.params)
        unknown = [str(x) for x in cond.free_symbols if x not in known]
        if unknown:
            raise ScheduleError(f"specialize: in stage {self.name}, the condition {cond} uses "
                                f"{', '.join(sorted(unknown))}, which are not sizes or "
                                "parameters of the program")
        spec = Specialization(self, cond, len(self.specializations) + 1)
        self.specializations.append(spec)
        self.sched._record(Specialize(self.name, str(cond)))
        return spec

    def lower(self, buffers, states):
        """This stage's Stage node: its own nest, or `if c1: spec1 elif c2: ... else:
        own` when it has specializations."""
        own = lower_stage(self.state, buffers, states)
        if not self.specializations:
            return own
        body, taken = [], []
        for spec in self.specializations:
            cond = sp.And(spec.condition, *[sp.Not(c) for c in taken])
            body.append(Guard(cond, lower_stage(spec.state, buffers, states).body))
            taken.append(spec.condition)
        body.append(Guard(sp.And(*[sp.Not(c) for c in taken]), own.body))
        return Stage(self.definition, tuple(body))

    def tile(self, *loops_and_factors, tail="peel"):
        """`tile(i, 64, j, 64)`: split each, then order the outer loops before the inner."""
        pairs = list(zip(loops_and_factors[::2], loops_and_factors[1::2]))
        outs, ins = [], []
        for loop, factor in pairs:
            o, i = self.split(loop, factor, tail)
            outs.append(o)
            ins.append(i)
        self.reorder(*outs, *ins)
        return tuple(outs + ins)

    def reorder(self, *loops):
        vars_ = [self._var("reorder", x) for x in loops]
        self.state = P.reorder(self.state, vars_)
        self.sched._record(Reorder(self.name, tuple(v.name for v in vars_)))

    def _kind(self, loop, kind, tail="peel"):
        var = self._var(kind.value, loop)
        self.state = P.set_kind(self.state, var, kind, tail)
        self.sched._record(SetKind(self.name, var.name, kind.value, tail))

    def parallel(self, loop):
        self._kind(loop, LoopKind.PARALLEL)

    def vectorize(self, loop, tail="peel"):
        """Run the innermost loop on the host's vector registers; `tail` is "peel" (a
        scalar remainder loop) or "mask" (masked loads and stores for the last vector)."""
        self._kind(loop, LoopKind.VECTOR, tail)

    def unroll(self, loop):
        self._kind(loop, LoopKind.UNROLLED)

    def __str__(self):
        return format_nest(self.lower(self.sched._buffers(), self.sched._states))

    def __repr__(self):
        loops = ", ".join(f"{h.name}{' (reduction)' if h.is_reduction else ''}"
                          for h in self.loops)
        return f"<stage {self.name} of a schedule of " \
               f"{', '.join(o.name for o in self.sched.program.outputs)}: loops {loops}>"

    def _repr_html_(self):
        from tex.display import stage_html
        return stage_html(self)

    def __reduce__(self):
        return (_stage_of, (self.sched, self.name))


class Specialization(StageHandle):
    """`s[C].specialize(cond)`: the schedule of C for calls where `cond` holds. It has
    the primitives of a stage; its steps are recorded under the name `C#n`."""

    def __init__(self, parent, condition, number):
        super().__init__(parent.sched, parent.definition)
        self.parent, self.condition = parent, condition
        self.name = f"{parent.name}#{number}"
        self._state = parent.state
        self.origin = dict(parent.origin)

    @property
    def state(self):
        return self._state

    @state.setter
    def state(self, value):
        StageHandle.state.fset(self, value)

    def _store(self, value):
        self._state = value

    def specialize(self, condition):
        raise ScheduleError(f"specialize: {self.name} is a specialization already; "
                            f"specialize {self.parent.name} with a combined condition")

    def lower(self, buffers, states):
        return lower_stage(self.state, buffers, states)


class Schedule:
    """The schedule of every definition a program's outputs read."""

    def __init__(self, out, fast_math=True):
        self.program = as_program(out)
        self._buffer_map = buffers_for(self.program)
        self.fast_math = fast_math
        self._states = {d: initial_state(d, fast_math) for d in self.program.definitions}
        self._stages = {d: StageHandle(self, d) for d in self.program.definitions}
        self._hosted_by = {}        # producer definition -> consumer that computes it
        self.history = []

    def __getitem__(self, defn):
        if isinstance(defn, str) and "#" in defn:          # a specialization: "C#1"
            base, _, number = defn.partition("#")
            specs = self[base].specializations
            if not number.isdigit() or not 1 <= int(number) <= len(specs):
                raise ScheduleError(f"{defn} is not a specialization of {base}")
            return specs[int(number) - 1]
        if isinstance(defn, str):
            defn = self.program.tensor(defn)
        if defn not in self._stages:
            name = getattr(defn, "name", defn)
            raise ScheduleError(f"{name} is not a definition of this schedule's program")
        return self._stages[defn]

    @property
    def stages(self):
        return [self._stages[d] for d in self.program.definitions]

    def _record(self, step):
        self.history.append(step)

    def _buffers(self):
        return self._buffer_map

    def kernel(self, fast_math=None):
        """The scheduled loop nest (tex.scheduler.ir.Kernel)."""
        p, buffers = self.program, self._buffers()
        body = tuple(self._stages[d].lower(buffers, self._states)
                     for d in p.definitions if d not in self._hosted_by)
        params = set(p.params)
        states = list(self._states.values()) + [spec.state for st in self._stages.values()
                                                for spec in st.specializations]
        for state in states:
            for a in state.axes:
                params |= {x for x in sp.sympify(a.extent).free_symbols if isinstance(x, Param)}
        return Kernel(body, inputs=tuple(buffers[t] for t in p.inputs),
                      outputs=tuple(buffers[d] for d in p.outputs), sizes=p.sizes,
                      params=tuple(sorted(params, key=str)), bindings=p.size_bindings())

    def fuse(self, consumer, at=None):
        """Fuse `consumer` with the definition it reads: the producer is computed inside
        the consumer's loop `at` (default: its outermost loop), tile by tile, so the
        producer's full result is never written to memory."""
        cons = self[consumer]
        producers = [t for t in cons.definition.reads()
                     if t in self._stages and t not in self._hosted_by]
        if len(producers) != 1:
            names = ", ".join(t.name for t in producers) or "none"
            raise ScheduleError(f"fuse: {cons.name} must read exactly one definition to fuse "
                                f"with (it reads: {names})")
        if at is None:
            if not cons.loops:
                raise ScheduleError(f"fuse: {cons.name} has no loop to fuse into")
            at = cons.loops[0]
        self[producers[0]].compute_at(cons, at)
        return self

    def auto(self):
        from .auto import auto_schedule
        auto_schedule(self)
        return self

    def __str__(self):
        return format_nest(self.kernel())

    __repr__ = __str__

    def _repr_html_(self):
        from tex.display import schedule_html
        return schedule_html(self)

    def __reduce__(self):
        """A schedule pickles (and copies) as its program and its history, replayed."""
        return (_replayed, (self.program, self.fast_math, tuple(self.history)))

    # ------------------------------------------------------------ history
    def history_json(self):
        return json.dumps([{"step": type(s).__name__, **asdict(s)} for s in self.history])

    def replay(self, steps):
        """Apply step records (or their JSON) to this schedule, resolving loops by name."""
        if isinstance(steps, str):
            steps = [STEPS[d.pop("step")](**d) for d in json.loads(steps)]
        for st in steps:
            stage = self[st.stage]
            if isinstance(st, Split):
                stage.split(st.loop, st.factor, st.tail)
            elif isinstance(st, Reorder):
                stage.reorder(*st.loops)
            elif isinstance(st, SplitK):
                parts = st.parts
                if isinstance(parts, str) and parts.startswith("param:"):
                    parts = Param(parts[len("param:"):])
                elif isinstance(parts, str) and parts.startswith("auto:"):
                    name, rows, length = parts[len("auto:"):].split("|")
                    names = {str(x): x for x in self.program.sizes}
                    parts = AutoParts(name, sp.sympify(rows, locals=names),
                                      sp.sympify(length, locals=names))
                stage.split_k(st.loop, parts)
            elif isinstance(st, Privatize):
                stage.privatize(st.loop)
            elif isinstance(st, Pack):
                stage.pack(st.tensor, st.at, st.layout)
            elif isinstance(st, ComputeAt):
                stage.compute_at(st.consumer, st.at)
            elif isinstance(st, SetKind):
                stage._kind(st.loop, LoopKind(st.kind), st.tail)
            elif isinstance(st, Specialize):
                names = {str(x): x for x in list(self.program.sizes) + list(self.program.params)}
                stage.specialize(sp.sympify(st.condition, locals=names))
        return self

    @property
    def buffers(self):
        return [b for b in self._buffers().values() if b.scope is Scope.TEMP]


def _replayed(program, fast_math, history):
    return Schedule(program, fast_math).replay(history)


def _stage_of(sched, name):
    return sched[name]


def _loop_of(stage, name):
    return LoopHandle(stage, stage._var("unpickle", name))


def schedule(out, fast_math=True):
    """`tex.schedule(out)`: a schedule over the whole DAG that `out` reads."""
    return Schedule(out, fast_math)


def default_schedule(program, fast_math=True):
    """What `tex.compile(out)` uses: the built-in heuristics."""
    return Schedule(program, fast_math).auto()
