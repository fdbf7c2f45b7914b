"""Where tex's workers run: the thread runtime's (threads.py) placement of a worker that
joins a region on its caller's CPU (or another worker's) on a CPU of its own, and the
rescue of a worker a waiting caller finds held behind another thread. LLVM IR, a part of
threads.RUNTIME_IR (formatted with it: `{{ }}` are its braces); the module docstring of
threads.py says why placement matters on a crowded machine."""

PLACEMENT_IR = r"""
; moves the calling worker to the CPU `id` places after `home` (the caller's CPU) in
; the process's CPU list, if it runs elsewhere: pinned there, which migrates it, then
; free again (pinned, it could not leave a core that a spinning thread shares with it
; when the caller's core goes idle at the join)
define internal void @tex_rt_place(i64 %id, i64 %home) {{
entry:
  %mask = alloca [{mask_words} x i64]
  %n = load i64, ptr @tex_rt_ncpus
  %i = call i64 @tex_rt_cpu_slot(i64 %home)
  %missing = icmp slt i64 %i, 0
  ; home is not among the CPUs listed at load (the affinity changed since)
  br i1 %missing, label %stay, label %found
found:
  %slot = add i64 %i, %id
  %wrapped = urem i64 %slot, %n
  %tp = getelementptr [{slots} x i32], ptr @tex_rt_cpus, i64 0, i64 %wrapped
  %target = load i32, ptr %tp
  %now = call i32 @sched_getcpu()
  %there = icmp eq i32 %now, %target
  br i1 %there, label %stay, label %hop
stay:
  ret void
hop:
  call void @llvm.memset.p0.i64(ptr %mask, i8 0, i64 {mask_bytes}, i1 false)
  %target64 = sext i32 %target to i64
  call void @tex_rt_mask_set(ptr %mask, i64 %target64)
  call i32 @sched_setaffinity(i32 0, i64 {mask_bytes}, ptr %mask)
  call void @tex_rt_free_self()
  %hops = atomicrmw add ptr @tex_rt_hops, i64 1 monotonic
  ret void
}}

; the position of `cpu` in the CPU list read at load, or -1
define internal i64 @tex_rt_cpu_slot(i64 %cpu) {{
entry:
  %n = load i64, ptr @tex_rt_ncpus
  br label %find
find:
  %i = phi i64 [ 0, %entry ], [ %i.next, %find.next ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %find.body, label %missing
find.body:
  %cp = getelementptr [{slots} x i32], ptr @tex_rt_cpus, i64 0, i64 %i
  %c = load i32, ptr %cp
  %c64 = sext i32 %c to i64
  %hit = icmp eq i64 %c64, %cpu
  br i1 %hit, label %found, label %find.next
find.next:
  %i.next = add i64 %i, 1
  br label %find
missing:
  ret i64 -1
found:
  ret i64 %i
}}

; lets the calling thread run on every CPU of the process's list again
define internal void @tex_rt_free_self() {{
entry:
  %mask = alloca [{mask_words} x i64]
  %n = load i64, ptr @tex_rt_ncpus
  call void @llvm.memset.p0.i64(ptr %mask, i8 0, i64 {mask_bytes}, i1 false)
  br label %all
all:
  %k = phi i64 [ 0, %entry ], [ %k.next, %all.body ]
  %again = icmp slt i64 %k, %n
  br i1 %again, label %all.body, label %free
all.body:
  %ap = getelementptr [{slots} x i32], ptr @tex_rt_cpus, i64 0, i64 %k
  %a = load i32, ptr %ap
  %a64 = sext i32 %a to i64
  call void @tex_rt_mask_set(ptr %mask, i64 %a64)
  %k.next = add i64 %k, 1
  br label %all
free:
  call i32 @sched_setaffinity(i32 0, i64 {mask_bytes}, ptr %mask)
  ret void
}}

; with the lock held, at a join that waits: moves the first member of the team still in
; its share of the region to the caller's CPU, which the caller is about to leave idle
; (the scheduler would not move a thread that ran a moment ago: it keeps it waiting
; behind whatever took its CPU, for the rest of that thread's time slice); the worker
; frees itself when done
define internal void @tex_rt_rescue(i64 %team) {{
entry:
  %mask = alloca [{mask_words} x i64]
  %home = load i64, ptr @tex_rt_home
  %placed = icmp sge i64 %home, 0
  br i1 %placed, label %where, label %done
where:
  ; the CPU the caller runs on now (it may have moved since the region opened), if it
  ; is among those listed at load (else the worker could not be freed to them)
  %cpu32 = call i32 @sched_getcpu()
  %cpu = sext i32 %cpu32 to i64
  %slot = call i64 @tex_rt_cpu_slot(i64 %cpu)
  %listed = icmp sge i64 %slot, 0
  br i1 %listed, label %scan, label %done
scan:
  %id = phi i64 [ 1, %where ], [ %id.next, %next ]
  %more = icmp slt i64 %id, %team
  br i1 %more, label %look, label %done
look:
  %wp = getelementptr i32, ptr @tex_rt_working, i64 %id
  %w = load i32, ptr %wp
  %rp = getelementptr i32, ptr @tex_rt_rescued, i64 %id
  %r = load i32, ptr %rp
  %tp = getelementptr i64, ptr @tex_rt_tids, i64 %id
  %tid = load i64, ptr %tp
  %busy = icmp ne i32 %w, 0
  %fresh = icmp eq i32 %r, 0
  %known = icmp sgt i64 %tid, 0
  %candidate.1 = and i1 %busy, %fresh
  %candidate = and i1 %candidate.1, %known
  br i1 %candidate, label %move, label %next
next:
  %id.next = add i64 %id, 1
  br label %scan
move:
  call void @llvm.memset.p0.i64(ptr %mask, i8 0, i64 {mask_bytes}, i1 false)
  call void @tex_rt_mask_set(ptr %mask, i64 %cpu)
  %tid32 = trunc i64 %tid to i32
  %err = call i32 @sched_setaffinity(i32 %tid32, i64 {mask_bytes}, ptr %mask)
  %moved = icmp eq i32 %err, 0
  br i1 %moved, label %mark, label %done
mark:
  store i32 1, ptr %rp
  atomicrmw add ptr @tex_rt_rescues, i64 1 monotonic
  br label %done
done:
  ret void
}}

define internal void @tex_rt_mask_set(ptr %mask, i64 %cpu) {{
entry:
  %fits = icmp ult i64 %cpu, {mask_bits}
  br i1 %fits, label %set, label %done
set:
  %word = lshr i64 %cpu, 6
  %bit = and i64 %cpu, 63
  %wp = getelementptr i64, ptr %mask, i64 %word
  %w = load i64, ptr %wp
  %one = shl i64 1, %bit
  %w2 = or i64 %w, %one
  store i64 %w2, ptr %wp
  br label %done
done:
  ret void
}}
"""
