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
import tex.symbolic as sym

from tex.errors import ScheduleError
from tex.expr import AutoParts, Param
from tex.program import as_program, check_fast_math

from .display import schedule_html
from .handles import Deferred, StageHandle
from .ir import Buffer, Kernel, Loop, LoopKind, Scope, walk
from .printer import format_nest
from .stage import initial_state, lower_stage
from .steps import (ComputeAt, Fuse, NotFused, Pack, Privatize, Reorder, Rewrite, SetKind,
                    Specialize, Split, SplitK, SplitParts, Unfuse, as_steps, to_json)
from . import fusion
from .nests import finish, nests_of
from .vectorize import vector_refusal


def buffers_for(program):
    """One Buffer per input and definition: inputs, outputs, and temporaries between."""
    buffers = {t: Buffer(t.name, t.shape, t.dtype, Scope.INPUT) for t in program.inputs}
    for d in program.definitions:
        scope = Scope.OUTPUT if d in program.outputs else Scope.TEMP
        buffers[d] = Buffer(d.name, d.shape, d.dtype, scope)
    return buffers


class Schedule:
    """The schedule of every definition a program's outputs read."""

    def __init__(self, out, fast_math=True):
        self.source = as_program(out)          # the program as the user wrote it
        self.fast_math = fast_math
        self.rewrites = []                     # notes of schedule/rewrite.py's rewrites
        self._adopt(self.source)
        self._hosted_by = {}        # producer definition -> consumer that computes it
        self._fused = {}            # consumer definition -> Fused: run in a root's epilogue
        self._sliced = {}           # root -> fusion.Slicing: computed as its slices
        self.not_fused = {}         # (consumer, producer) names -> why s.auto() did not fuse
        self._history = []          # steps, and handles.Deferred in place of a deferred
        #                             specialization's steps
        self._in_auto = False       # auto_schedule running: its deferred specializations wait
        self._replaying = None      # replay running: {id: stage handle it changed}

    def _adopt(self, program):
        self.program = program
        self._buffer_map = buffers_for(program)
        self._states = {d: initial_state(d, self.fast_math) for d in program.definitions}
        self._stages = {d: StageHandle(self, d) for d in program.definitions}

    def rewrite(self):
        """Apply the program rewrites (schedule/rewrite.py: common definitions computed
        once, sums over a contraction's output moved inside it), before any other step;
        `s.rewrites` says what they did. Part of s.auto()."""
        from .rewrite import rewrite
        if self._history:
            raise ScheduleError("rewrite: the program is rewritten before any other step "
                                f"(this schedule has {len(self._history)})")
        program, notes = rewrite(self.program, self.fast_math)
        self._adopt(program)
        self.rewrites = notes
        self._record(Rewrite())
        return self

    def __getitem__(self, defn):
        if isinstance(defn, StageHandle):
            defn.check_schedule(self)
        if isinstance(defn, str) and "#" in defn:          # a specialization: "C#1"
            base, _, number = defn.partition("#")
            specs = self[base].specializations
            if not number.isdigit() or not 1 <= int(number) <= len(specs):
                raise ScheduleError(f"{defn} is not a specialization of {base}")
            return specs[int(number) - 1]
        if isinstance(defn, str):
            found = [d for d in self._stages if d.name == defn]
            if not found:
                names = ", ".join(d.name for d in self.program.definitions)
                raise ScheduleError(f"{defn!r} is not a definition of this schedule's program "
                                    f"(its definitions: {names})")
            defn = found[0]
        if defn not in self._stages and getattr(defn, "name", None) is not None:
            found = [d for d in self._stages if d.name == defn.name]
            if found:                   # the rewritten definition of that name
                defn = found[0]
            elif defn in self.source.definitions:
                raise ScheduleError(f"{defn.name} is not computed: the program's rewrites "
                                    f"({'; '.join(self.rewrites)}) removed it; "
                                    "tex.schedule(out) without s.auto(), or "
                                    "s.auto(fuse=False), keeps it")
        if defn not in self._stages:
            name = getattr(defn, "name", defn)
            raise ScheduleError(f"{name} is not a definition of this schedule's program")
        return self._stages[defn]

    @property
    def stages(self):
        return [self._stages[d] for d in self.program.definitions]

    @property
    def history(self):
        """The steps so far (a list of step records): replayed on a fresh schedule of
        the program, they give this loop nest."""
        return expand(self._history)

    def _record(self, step):
        if not self._in_auto:       # a step after s.auto(): its deferred schedules first,
            self._run_deferred()    # in the schedule they were made for
        self._history.append(step)

    def _run_deferred(self):
        for entry in list(self._history):
            if isinstance(entry, Deferred):
                entry.run()

    def _buffers(self):
        return self._buffer_map

    def kernel(self):
        """The scheduled loop nest (tex.scheduler.ir.Kernel), its vector plan included."""
        buffers = self._buffers()
        body = tuple(self._stages[d].lower(buffers, self._states, self._epilogue(d))
                     for d in self._stage_order())
        return finish(self._kernel_of(body), self.fast_math)

    def nests(self):
        """The scheduled loop nest as a schedule/nests.Nests: the specializations' nests
        are lowered when a build first needs them (what tex.compile builds from)."""
        return nests_of(self)

    def _stage_order(self):
        root_of = {d: f.into for d, f in self._fused.items()}
        return [d for d in fusion.stage_order(self.program, root_of)
                if d not in self._hosted_by]

    def _kernel_of(self, body):
        """A Kernel of these stages over the program's buffers and parameters."""
        p, buffers = self.program, self._buffers()
        params = set(p.params).union(*(h.params() for st in self._stages.values()
                                        for h in [st, *st.specializations]))
        return Kernel(body, inputs=tuple(buffers[t] for t in p.inputs),
                      outputs=tuple(buffers[d] for d in p.outputs), sizes=p.sizes,
                      params=tuple(sorted(params, key=str)), bindings=p.size_bindings())

    # ------------------------------------------------------------ fusion
    def _epilogue(self, root):
        """The Epilogue of a root with fused consumers (None without)."""
        from .epilogue import Fused, make_epilogue
        members = [f for d, f in self._fused.items() if f.into is root]
        if not members:
            return None
        p = self.program
        order = {d: n for n, d in enumerate(p.definitions)}
        members.sort(key=lambda f: order[f.definition])

        def stored(d):
            return d in p.outputs or bool(fusion.outside_readers(p, self._fused, d))
        members = [Fused(f.definition, f.into, f.to_root, stored(f.definition))
                   for f in members]
        return make_epilogue(root, members, stored(root), self._buffers(),
                             self._sliced.get(root))

    def fuse(self, consumer, into=None, at=None):
        """Run `consumer` in the epilogue of the definition it reads (`into`, when it reads
        several): where the producer's nest has an element's final value -- a blocked
        matmul's register tile after its k loop -- the consumer's code runs on it, and the
        producer's result is not stored unless something else reads it. The producer
        keeps its schedule; a fusion it does not allow is refused with the reason.

        `at=loop` instead computes the producer inside the consumer's loop `at`, tile by
        tile, from its definition (compute_at)."""
        if at is not None:
            return self._compute_inside(consumer, at)
        from .epilogue import Fused
        cons = self[consumer]
        d = cons.definition
        if d in self._fused:
            raise ScheduleError(f"fuse: {d.name} is already fused into "
                                f"{self._fused[d].into.name}")
        riders = [x.name for x, f in self._fused.items() if f.into is d]
        if riders:
            # its epilogue would move into its producer's while its own nest stayed, and
            # that nest read the producer's result, which is then not stored
            raise ScheduleError(f"fuse: {', '.join(riders)} already run(s) in {d.name}'s "
                                f"epilogue; fuse {d.name} first, then them (s.unfuse("
                                f"{riders[0]!r}) to start again)")
        candidates = fusion.fusion_candidates(self.program, self._fused, d)
        if into is not None:
            want = self[into].definition
            want = self._fused[want].into if want in self._fused else want
            if want not in candidates:
                raise ScheduleError(f"fuse: {d.name} does not read {self[into].name}")
            candidates = [want]
        if not candidates:
            raise ScheduleError(f"fuse: {d.name} reads no definition to fuse into")
        if len(candidates) > 1 and into is None:
            names = ", ".join(c.name for c in candidates)
            raise ScheduleError(f"fuse: {d.name} reads several definitions ({names}); "
                                f"say which with into=")
        root = candidates[0]
        own = [st for st in self._history if st.stage.partition("#")[0] == d.name and
               not isinstance(st, (Fuse, Unfuse, NotFused))]
        if own or cons.specializations:
            raise ScheduleError(f"fuse: {d.name} has a schedule of its own ({len(own)} "
                                f"steps); in {root.name}'s epilogue it runs in "
                                f"{root.name}'s loops and those steps would be dropped: "
                                "fuse before scheduling it")
        for x in (d, root):
            if x in self._hosted_by or any(h is x for h in self._hosted_by.values()):
                raise ScheduleError(f"fuse: {x.name} takes part in a compute_at; fuse "
                                    "before computing definitions inside others")
        mapping, why = fusion.try_join(self.program, self._fused, d, root)
        old_state = self._states[root]
        if why is not None:
            mapping = self._slice_for(d, root, why)
        self._fused[d] = Fused(d, root, mapping, False)
        try:
            self._stages[root].lower(self._buffers(), self._states, self._epilogue(root))
        except ScheduleError:
            del self._fused[d]
            self._sliced.pop(root, None)
            self._states[root] = old_state
            raise
        self._record(Fuse(d.name, root.name))
        return self

    def _not_fusing(self, consumer, into, why):
        """Record why `consumer` was not fused into `into` (printed with the nest)."""
        self.not_fused[(consumer, into)] = why
        self._record(NotFused(consumer, into, why))

    def _slice_for(self, consumer, root, why):
        """Horizontal fusion (fusion.Slicing): when `consumer` reads `root` at several
        offsets along one axis, compute root as those slices in one nest. Returns the
        consumer's index map, or raises ScheduleError with why it cannot fuse."""
        def refuse(reason):
            raise ScheduleError(f"fuse: {consumer.name} cannot run in {root.name}'s "
                                f"epilogue: {reason}")
        if "not a plain index" not in why:
            refuse(why)
        plan = fusion.slice_plan(consumer, root)
        if isinstance(plan, str):
            refuse(f"{why}; {plan}")
        others = [r.name for r in self.program.graph.successors(root) if r is not consumer]
        if root in self.program.outputs or others or \
                any(f.into is root for f in self._fused.values()):
            what = "an output" if root in self.program.outputs else \
                "read by " + ", ".join(others) if others else "fused with others"
            refuse(f"{why}; its slices cannot replace {root.name}, which is also {what}")
        if any(st.stage.partition("#")[0] == root.name and
               not isinstance(st, (Fuse, Unfuse, NotFused)) for st in self._history):
            refuse(f"{why}; computing {root.name} as slices changes its loops, and it has "
                   "a schedule already: fuse before scheduling it")
        mapping = fusion.sliced_map(consumer, root, plan)
        if isinstance(mapping, str):
            refuse(mapping)
        self._sliced[root] = plan
        state = initial_state(plan.definition, self.fast_math)
        # the slice loop innermost, inside the reduction: each element's slices complete
        # together (the default order would finish one slice before starting the next)
        first = state.axes[0]
        self._states[root] = state.with_axes(state.axes[1:] + (first,))
        self._buffer_map[plan.definition] = Buffer(root.name, plan.definition.shape,
                                                   root.dtype, Scope.TEMP)
        return mapping

    def unfuse(self, consumer):
        """Compute `consumer` in its own nest again (and the members that read it)."""
        d = self[consumer].definition
        if d not in self._fused:
            raise ScheduleError(f"unfuse: {d.name} is not fused into another definition")
        drop = [d]
        for m, f in list(self._fused.items()):
            if f.into is self._fused[d].into and any(t in drop for t in m.reads()):
                drop.append(m)
        root = self._fused[d].into
        for m in drop:
            self._fused.pop(m, None)
        if root in self._sliced and not any(f.into is root for f in self._fused.values()):
            del self._sliced[root]
            self._states[root] = initial_state(root, self.fast_math)
        self._record(Unfuse(d.name))
        return self

    @property
    def kernels(self):
        """[(root, [fused consumers])]: the kernels of the program, in order."""
        root_of = {d: f.into for d, f in self._fused.items()}
        return [(d, [m for m, f in self._fused.items() if f.into is d])
                for d in fusion.stage_order(self.program, root_of)]

    def _compute_inside(self, consumer, at):
        """fuse(consumer, at=loop): compute the producer inside the consumer's loop."""
        cons = self[consumer]
        producers = [t for t in cons.definition.reads()
                     if t in self._stages and t not in self._hosted_by]
        if len(producers) != 1:
            names = ", ".join(t.name for t in producers) or "none"
            raise ScheduleError(f"fuse: {cons.name} must read exactly one definition to fuse "
                                f"with (it reads: {names})")
        try:
            self[producers[0]].compute_at(cons, at)
        except ScheduleError as err:            # said as the user asked it
            raise ScheduleError("fuse: " + str(err).removeprefix("compute_at: ")) from None
        return self

    def auto(self, fuse=True):
        """The built-in heuristics: kernel formation (each consumer fused into the kernel
        of a definition it reads, where the index maps allow; `fuse=False` leaves every
        definition its own nest), then each kernel's schedule. A stage with steps already
        (yours, or an earlier auto's) keeps them: auto schedules the others, and forms
        kernels only while no stage has steps (its heuristics start from a definition's
        own loops, which those steps replaced)."""
        from .auto import auto_schedule
        scheduled = self._scheduled()
        if fuse and not self._history:
            self.rewrite()
        auto_schedule(self, fuse and not scheduled, keep=scheduled)
        return self

    def _scheduled(self):
        """The definitions that have steps of their own in the history."""
        names = {st.stage.partition("#")[0] for st in self._history
                 if not isinstance(st, (Fuse, Unfuse, NotFused, Rewrite))}
        return [d for d in self.program.definitions if d.name in names]

    def __str__(self):
        text = format_nest(self.kernel())
        rewrites = [f"# rewritten: {note}" for note in self.rewrites]
        why = [f"# not fused: {c} into {p}: {reason}" for (c, p), reason in self.not_fused.items()
               if self[c].definition not in self._fused]
        return "\n".join(rewrites + [text] + why)

    __repr__ = __str__

    def _repr_html_(self):
        return schedule_html(self)

    def __reduce__(self):
        """A schedule pickles (and copies) as its program and its history, replayed."""
        return (_replayed, (self.source, self.fast_math, tuple(self.history)))

    # ------------------------------------------------------------ legality
    def _check(self, old, new):
        """Refuse a stage state whose local copies no longer lower: their boxes depend
        on the loop order (the error names the primitive and the tensor)."""
        same_nest = [(a.var, a.extent) for a in old.axes] == \
            [(a.var, a.extent) for a in new.axes] and old.packs == new.packs and \
            old.hosted == new.hosted and old.private is new.private
        if (new.packs or new.hosted) and not same_nest:
            lower_stage(new, self._buffers(), self._states)

    def _check_vector(self, prim, state, var):
        """Refuse a vector loop `var` of `state` whose body cannot run on vectors."""
        stage = lower_stage(state, self._buffers(), self._states)
        for loop in walk(stage):
            if isinstance(loop, Loop) and loop.var is var and loop.kind is LoopKind.VECTOR:
                why = vector_refusal(loop, state.fast_math)
                if why is not None:
                    raise ScheduleError(f"{prim}: in stage {state.definition.name}, loop "
                                        f"{var.name} cannot run on vector registers: {why}")

    # ------------------------------------------------------------ history
    def history_json(self):
        return to_json(self.history)

    def replay(self, steps):
        """Apply step records (or their JSON) to this schedule, resolving loops by name."""
        self._replaying = changed = {}  # (steps the user saw warnings for once)
        try:
            for st in as_steps(steps):
                self._replay_step(st)
        finally:
            self._replaying = None
        for handle in changed.values():
            self._check_epilogue(handle.definition, handle.state)
        return self

    def _check_epilogue(self, d, state):
        """The consumers fused into `d` must fit its nest in `state` (no race between
        the threads that run it), or ScheduleError."""
        epilogue = self._epilogue(d)
        if epilogue is not None:
            from dataclasses import replace
            from .epilogue import check_races, privatize_parts
            nest = lower_stage(replace(state, epilogue=epilogue), self._buffers(),
                               self._states)
            body, parted = privatize_parts(epilogue, nest.body)
            check_races(epilogue, body, d.name, parted)

    def _replay_step(self, st):
        if isinstance(st, Rewrite):
            self.rewrite()
            return
        if isinstance(st, NotFused):
            self._not_fusing(st.stage, st.into, st.why)
            return
        stage = self[st.stage]
        if isinstance(st, Split):
            stage.split(st.loop, st.factor, st.tail)
        elif isinstance(st, Reorder):
            stage.reorder(*st.loops)
        elif isinstance(st, SplitK):
            stage.split_k(st.loop, self._parts(st.parts))
        elif isinstance(st, SplitParts):
            stage.split_parts(st.loop, self._parts(st.parts))
        elif isinstance(st, Privatize):
            stage.privatize(st.loop)
        elif isinstance(st, Pack):
            stage.pack(st.tensor, st.at, st.layout)
        elif isinstance(st, ComputeAt):
            stage.compute_at(st.consumer, st.at)
        elif isinstance(st, Fuse):
            self.fuse(st.stage, into=st.into)
        elif isinstance(st, Unfuse):
            self.unfuse(st.stage)
        elif isinstance(st, SetKind):
            stage._kind(st.loop, LoopKind(st.kind), st.tail)
        elif isinstance(st, Specialize):
            # the names specialize() takes: sizes, the program's and the steps' parameters
            steps = [x for h in self.stages for x in h.params() if isinstance(x, Param)]
            names = {str(x): x for x in [*self.program.sizes, *self.program.params, *steps]}
            stage.specialize(sym.sympify(st.condition, locals=names))

    def _parts(self, parts):
        """A recorded split_k part count (steps.recorded_parts) as split_k takes it."""
        if isinstance(parts, str) and parts.startswith("param:"):
            return Param(parts[len("param:"):])
        if isinstance(parts, str) and parts.startswith("auto:"):
            name, rows, length, *rule = parts[len("auto:"):].split("|")
            names = {str(x): x for x in self.program.sizes}
            return AutoParts(name, sym.sympify(rows, locals=names),
                             sym.sympify(length, locals=names), *rule[:1], *map(int, rule[1:]))
        return parts

    @property
    def buffers(self):
        return [b for b in self._buffers().values() if b.scope is Scope.TEMP]


def expand(entries):
    """History entries as steps: each Deferred as the steps its schedule records (run
    now if it has not run)."""
    out = []
    for entry in entries:
        out.extend(entry.expanded() if isinstance(entry, Deferred) else (entry,))
    return out


def _replayed(program, fast_math, history):
    return Schedule(program, fast_math).replay(history)


def schedule(out, fast_math=True):
    """`tex.schedule(out)`: a schedule over the whole DAG that `out` reads."""
    check_fast_math(fast_math, "tex.schedule")
    return Schedule(out, fast_math)


def default_schedule(program, fast_math=True, fuse=True):
    """What `tex.compile(out)` uses: the built-in heuristics."""
    return Schedule(program, fast_math).auto(fuse)
