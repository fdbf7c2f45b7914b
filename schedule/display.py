"""Rich display of schedules and their stages (`_repr_html_`): the stages as a table
(what each computes, its loops, what is computed inside it), the loop nest as `print(s)`
shows it, and the replayable history."""
from tex.html import box, code, escape, pre, table


def schedule_html(s):
    p = s.program
    hosted = {}
    for producer, consumer in s._hosted_by.items():
        hosted.setdefault(consumer, []).append(producer.name)
    for consumer, fused in s._fused.items():
        hosted.setdefault(fused.into, []).append(f"{consumer.name} (epilogue)")
    rows = []
    for st in s.stages:
        if st.definition in s._hosted_by or st.definition in s._fused:
            continue
        loops = ", ".join(_loop_text(h) for h in st.loops)
        inside = ", ".join(hosted.get(st.definition, [])) or ""
        specs = len(st.specializations)
        rows.append((st.name, ("html", code(st.definition.notation)), loops, inside,
                     specs or ""))
    history = "".join(f"<li>{code(repr(step))}</li>" for step in s.history)
    return box(f"schedule of {escape(', '.join(o.name for o in p.outputs))} "
               f"{code(p.signature())}",
               table(["kernel stage", "computes", "loops (outermost first)",
                      "computed inside", "specializations"], rows),
               _not_fused(s),
               "<div>loop nest:</div>" + pre(str(s)),
               f"<div>history ({len(s.history)} step{'s' if len(s.history) != 1 else ''},"
               f" replayable on a fresh schedule: "
               f"{code(f'tex.schedule({_outputs(p)}).replay(s.history)')}):</div>" +
               (f"<ol>{history}</ol>" if history else "<div><i>no steps: the default "
                                                      "loop nest</i></div>"))



def _not_fused(s):
    rows = [(c, p, why) for (c, p), why in s.not_fused.items()
            if s[c].definition not in s._fused]
    return table(["not fused", "into", "why"], rows) if rows else ""


def _outputs(p):
    names = ", ".join(o.name for o in p.outputs)
    return names if len(p.outputs) == 1 else f"({names})"



def _loop_text(handle):
    kind = handle.kind
    notes = [kind] if kind and kind != "serial" else []
    if handle.is_reduction:
        notes.append("reduction")
    return handle.name + (f" ({', '.join(notes)})" if notes else "")



def stage_html(stage):
    loops = ", ".join(_loop_text(h) for h in stage.loops)
    return box(f"stage {escape(stage.name)} of a schedule",
               pre(stage.definition.notation),
               f"<div>loops: {escape(loops)}</div>",
               pre(str(stage)))
