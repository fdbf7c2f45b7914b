"""tex's thread runtime: a pool of worker threads for parallel loops, and the flag that
makes long kernels stop on Ctrl-C. Machine code, built once per process from the LLVM
IR below and linked into every kernel by symbol name.

Why not libgomp: a libgomp team does not survive `fork()` (the child's first parallel
region waits forever for threads that were not copied), libgomp may be missing, and an
oversized team kills the process. This pool is small enough to own:

    tex_rt_parallel(fn, ctx, threads)   runs fn(ctx, t, team) on the caller (t = 0) and
                                        on each worker t < team = min(threads, workers
                                        + 1) that joins before the caller's own fn
                                        returns, then waits for those that joined. fn
                                        must therefore take its work from a shared
                                        counter (parallel.py's chunks), never assume
                                        that every t runs: a worker whose core is busy
                                        (numpy's BLAS threads spin for ~0.1 s after
                                        each call) is not waited for, where it used to
                                        hold up every region (a 512 x 512 x 64 product
                                        on 2 threads, 16 regions: 3.2 ms right after a
                                        numpy call, 0.19 ms alone). A region entered
                                        while another runs (a nested parallel loop, a
                                        second Python thread) runs on the caller alone:
                                        fn(ctx, 0, 1).
    tex_rt_reset()                      forgets the workers: called in the child after
                                        a fork (they were not copied), and at load.
    tex_rt_arm()                        puts tex_rt_on_sigint in front of the process's
                                        SIGINT handler (Python's), which it then calls:
                                        a Ctrl-C sets tex_rt_interrupt, which kernels
                                        poll, and Python still sees the signal.
    tex_rt_interrupt                    the flag (i32): each kernel clears it on entry
                                        and its outer loops check it.
    tex_rt_team_pays(threads)           1 if a team pays for a region of middling work
                                        (parallel.py): a worker is awake, spinning
                                        after the last region, or the last two such
                                        questions each came within SPIN_TICKS of the
                                        end of a region (tex_rt_parallel's, of any
                                        kernel: calls in a loop; the third wakes
                                        the workers, the next finds them awake; two
                                        calls after a pause stay alone, a wake-up
                                        costs them more than it saves); never while
                                        crowded, nor for more threads than the
                                        process may use CPUs (3 threads on 2 CPUs:
                                        a 512 x 512 softmax 0.11 -> 0.27 ms).
    tex_rt_take(n), tex_rt_give(p)      kernels' temporaries, kept between calls
                                        (pool.py).

Workers are created on demand (at most MAX_WORKERS). A worker that joins a region on
the caller's CPU (the caller's CPU is the team's `home`, read when the region opens)
moves to a CPU of its own (`tex_rt_place`, Runtime.place_workers says why). Between
regions they spin for SPIN_TICKS (a fraction of a millisecond: the next region of the
same kernel, or the next call from a Python loop, finds them awake), then sleep on a
condition variable, so they do not hold a core from numpy's BLAS threads for long (a
pool that keeps spinning does, ANCHORS.md workload 10). The caller waits for the team's
end the same way. Unless the CPUs are crowded: more threads want them than there are
(numpy's BLAS thread spinning after a call, another process), a spinning tex thread
keeps a CPU from the tex thread that has the work, and a thread that ran without pause
has used up its fair share against the spinner, so the scheduler's next time slice (4 ms
on this 250 Hz kernel) goes to the spinner, often while the tex thread holds a chunk
that the region then waits for. A thread that sleeps at once and is woken for the next
region gets the CPU back first. So when a tex thread notices it lost its CPU (a jump of
the clock between two reads in a spin loop, or a caller waiting for its team far longer
than its own share took), no tex thread spins for the next few milliseconds
(`tex_rt_robbed`, `tex_rt_crowded`); and a caller that then waits for a worker moves
it to the caller's own CPU before sleeping (`tex_rt_rescue`: Linux does not move a
thread that ran a moment ago to an idle CPU, it keeps it waiting behind the thread that
took its CPU for the rest of that one's slice); the worker frees itself when done.
Measured on 2 cores (Zen 5), right after a numpy matmul, a fused 1024^3 matmul + row max
(16 regions): 8.6-16 ms -> 5.6-7.2 ms; alone 4.6 ms, unchanged. The struct sizes are glibc's on x86-64 Linux (the only target tex
runs on): pthread_mutex_t 40 bytes, pthread_cond_t 48 (64-byte slots here),
struct sigaction 152.
"""
import ctypes
import os

from .placement import PLACEMENT_IR
from .pool import POOL_IR
from ... import forksafe

MAX_WORKERS = 255           # worker threads at most: tex.set_num_threads allows 256
SA_SIGINFO = 4
SYS_GETTID = 186             # x86-64 Linux
# how long a worker (and the caller, at the join) spins before sleeping, in time-stamp
# counter ticks (the TSC runs at the nominal clock, 1.5-4 GHz: about 0.1-0.35 ms).
# A kernel's parallel regions follow each other within microseconds, and so do calls
# from a Python loop; a thread that slept must be woken through the kernel, which on a
# virtual machine whose vCPU went idle costs tens of microseconds to milliseconds. The
# spin is short enough that numpy's BLAS threads, which spin far longer after each of
# their calls, lose at most that much of a core.
SPIN_TICKS = 1 << 19
# A tex thread that finds it lost its CPU for longer than GAP_TICKS (about 30-90 us:
# a wake-up costs less, a scheduler time slice is milliseconds) marks the process's CPUs
# crowded, and for CROWDED_TICKS (about 15-45 ms) no tex thread spins: each sleeps at
# once when it runs out of work (the module docstring says why).
GAP_TICKS = 1 << 17
CROWDED_TICKS = 1 << 26
# the CPU numbers a worker can be placed on (a cpu_set_t of glibc's default size)
MASK_BITS = 1024
# the flags of the handler we replace that we keep (the others are the kernel's or
# libc's business: SA_RESTORER is filled in by glibc)
SA_KEEP = 0x08000000 | 0x10000000 | 0x40000000      # SA_ONSTACK | SA_RESTART | SA_NODEFER

RUNTIME_IR = (r"""
%sigaction = type {{ ptr, [16 x i64], i32, ptr }}

@tex_rt_lock = internal global [64 x i8] zeroinitializer, align 64
@tex_rt_wake = internal global [64 x i8] zeroinitializer, align 64
@tex_rt_done = internal global [64 x i8] zeroinitializer, align 64
@tex_rt_park = internal global [64 x i8] zeroinitializer, align 64
@tex_rt_generation = internal global i64 0
@tex_rt_task = internal global ptr null
@tex_rt_context = internal global ptr null
@tex_rt_team = internal global i64 0
@tex_rt_active = internal global i64 0
@tex_rt_open = internal global i64 0
@tex_rt_workers = internal global i64 0
@tex_rt_spinning = internal global i64 0, align 64
@tex_rt_last_end = internal global i64 0, align 64
@tex_rt_streak = internal global i64 0, align 8
@tex_rt_allowed = global i64 0
@tex_rt_busy = internal global i32 0
@tex_rt_interrupt = global i32 0
@tex_rt_previous = internal global %sigaction zeroinitializer
@tex_rt_ids = internal global [{slots} x i64] zeroinitializer
@tex_rt_start = internal global [{slots} x i64] zeroinitializer
@tex_rt_home = internal global i64 -1
@tex_rt_ncpus = global i64 0
@tex_rt_hops = global i64 0
@tex_rt_teams = global i64 0
@tex_rt_skips = global i64 0
@tex_rt_crowded_until = internal global i64 0
@tex_rt_crowdings = global i64 0
@tex_rt_rescues = global i64 0
@tex_rt_tids = internal global [{slots} x i64] zeroinitializer
@tex_rt_working = internal global [{slots} x i32] zeroinitializer
@tex_rt_rescued = internal global [{slots} x i32] zeroinitializer
@tex_rt_cpus = global [{slots} x i32] zeroinitializer

declare i32 @pthread_mutex_init(ptr, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_init(ptr, ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_signal(ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @sigaction(i32, ptr, ptr)
declare i32 @sched_getcpu()
declare i32 @sched_setaffinity(i32, i64, ptr)
declare i64 @syscall(i64, ...)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare i64 @llvm.readcyclecounter()
declare void @llvm.x86.sse2.pause()

; a worker: wait until the generation changes (spinning for a short while, then asleep),
; run the task if it is a member of the team, count itself done, wait again
define internal ptr @tex_rt_worker(ptr %arg) {{
entry:
  %seen = alloca i64
  %id = load i64, ptr %arg
  %startp = getelementptr i64, ptr @tex_rt_start, i64 %id
  %start = load i64, ptr %startp
  store i64 %start, ptr %seen
  %tid = call i64 (i64, ...) @syscall(i64 {sys_gettid})
  %tidp = getelementptr i64, ptr @tex_rt_tids, i64 %id
  store i64 %tid, ptr %tidp
  %workp = getelementptr i32, ptr @tex_rt_working, i64 %id
  %rescuedp = getelementptr i32, ptr @tex_rt_rescued, i64 %id
  br label %idle
idle:
  %t0 = call i64 @llvm.readcyclecounter()
  %crowded = call i1 @tex_rt_crowded(i64 %t0)
  br i1 %crowded, label %locked, label %spin.begin
spin.begin:
  atomicrmw add ptr @tex_rt_spinning, i64 1 monotonic
  br label %spin
spin:
  %prev = phi i64 [ %t0, %spin.begin ], [ %now, %spin.pause ]
  %now = call i64 @llvm.readcyclecounter()
  %robbed = call i1 @tex_rt_robbed(i64 %prev, i64 %now)
  %g = load atomic i64, ptr @tex_rt_generation monotonic, align 8
  %s = load i64, ptr %seen
  %news = icmp ne i64 %g, %s
  br i1 %news, label %spin.end, label %spin.time
spin.time:
  %spent = sub i64 %now, %t0
  %long = icmp ugt i64 %spent, {spin_ticks}
  %stop = or i1 %long, %robbed
  br i1 %stop, label %spin.end, label %spin.pause
spin.pause:
  call void @llvm.x86.sse2.pause()
  br label %spin
spin.end:
  atomicrmw sub ptr @tex_rt_spinning, i64 1 monotonic
  br label %locked
locked:
  call i32 @pthread_mutex_lock(ptr @tex_rt_lock)
  br label %wait
wait:
  %gen = load atomic i64, ptr @tex_rt_generation monotonic, align 8
  %last = load i64, ptr %seen
  %same = icmp eq i64 %gen, %last
  br i1 %same, label %sleep, label %run
sleep:
  call i32 @pthread_cond_wait(ptr @tex_rt_wake, ptr @tex_rt_lock)
  br label %wait
run:
  store i64 %gen, ptr %seen
  %team = load i64, ptr @tex_rt_team
  %fn = load ptr, ptr @tex_rt_task
  %ctx = load ptr, ptr @tex_rt_context
  %open = load i64, ptr @tex_rt_open
  %member = icmp slt i64 %id, %team
  %outsider = xor i1 %member, true
  %outsiders = zext i1 %outsider to i64
  atomicrmw add ptr @tex_rt_skips, i64 %outsiders monotonic
  %isopen = icmp ne i64 %open, 0
  %joins = and i1 %member, %isopen
  br i1 %joins, label %join, label %skip
skip:
  ; not in this team (a worker made for a larger thread count): parked until a region's
  ; team includes it, on a condition of its own, so that the regions of a smaller team
  ; wake only their members (after set_num_threads(256) and back to 2, each region woke
  ; 254 idle workers: a loop of small products 1.2 -> 6 ms an iteration)
  br label %park
park:
  %cur = load i64, ptr @tex_rt_team
  %called = icmp slt i64 %id, %cur
  br i1 %called, label %wait, label %park.sleep
park.sleep:
  call i32 @pthread_cond_wait(ptr @tex_rt_park, ptr @tex_rt_lock)
  br label %park
join:
  atomicrmw add ptr @tex_rt_active, i64 1 monotonic
  store i32 1, ptr %workp
  %home = load i64, ptr @tex_rt_home
  call i32 @pthread_mutex_unlock(ptr @tex_rt_lock)
  %homed = icmp sge i64 %home, 0
  br i1 %homed, label %place, label %work
place:
  call void @tex_rt_place(i64 %id, i64 %home)
  br label %work
work:
  call void %fn(ptr %ctx, i64 %id, i64 %team)
  call i32 @pthread_mutex_lock(ptr @tex_rt_lock)
  store i32 0, ptr %workp
  %rescued = load i32, ptr %rescuedp
  store i32 0, ptr %rescuedp
  %left = atomicrmw sub ptr @tex_rt_active, i64 1 acq_rel
  %final = icmp eq i64 %left, 1
  %still = load i64, ptr @tex_rt_open
  %closed = icmp eq i64 %still, 0
  %all = and i1 %final, %closed
  br i1 %all, label %signal, label %unlock
signal:
  call i32 @pthread_cond_signal(ptr @tex_rt_done)
  br label %unlock
unlock:
  call i32 @pthread_mutex_unlock(ptr @tex_rt_lock)
  %was.rescued = icmp ne i32 %rescued, 0
  br i1 %was.rescued, label %unpin, label %idle
unpin:
  call void @tex_rt_free_self()
  br label %idle
}}

; a thread that lost its CPU for a while between two of its reads of the clock (more
; than GAP_TICKS from %prev to %now) shares the CPU with a thread that wants it: the
; CPUs are crowded for the next CROWDED_TICKS
define internal i1 @tex_rt_robbed(i64 %prev, i64 %now) {{
entry:
  %gap = sub i64 %now, %prev
  %robbed = icmp sgt i64 %gap, {gap_ticks}
  br i1 %robbed, label %mark, label %done
mark:
  %until = add i64 %now, {crowded_ticks}
  store atomic i64 %until, ptr @tex_rt_crowded_until monotonic, align 8
  atomicrmw add ptr @tex_rt_crowdings, i64 1 monotonic
  br label %done
done:
  ret i1 %robbed
}}

define internal i1 @tex_rt_crowded(i64 %now) {{
entry:
  %until = load atomic i64, ptr @tex_rt_crowded_until monotonic, align 8
  %crowded = icmp ult i64 %now, %until
  ret i1 %crowded
}}

; for a parallel region of middling work on a team of %threads: is a worker awake, or
; did the last two such questions each come moments after a region ended (the module
; docstring's tex_rt_team_pays)? Never while crowded, nor for more threads than the
; process's CPUs
define i32 @tex_rt_team_pays(i64 %threads) {{
entry:
  %now = call i64 @llvm.readcyclecounter()
  %last = load atomic i64, ptr @tex_rt_last_end monotonic, align 8
  %since = sub i64 %now, %last
  %recent = icmp ult i64 %since, {spin_ticks}
  %streak.0 = load atomic i64, ptr @tex_rt_streak monotonic, align 8
  %streak.1 = add i64 %streak.0, 1
  %streak = select i1 %recent, i64 %streak.1, i64 0
  store atomic i64 %streak, ptr @tex_rt_streak monotonic, align 8
  %often = icmp uge i64 %streak, 2
  %spinning = load atomic i64, ptr @tex_rt_spinning monotonic, align 8
  %awake = icmp sgt i64 %spinning, 0
  %either = or i1 %awake, %often
  %crowded = call i1 @tex_rt_crowded(i64 %now)
  %calm = xor i1 %crowded, true
  %allowed = load i64, ptr @tex_rt_allowed
  %unknown = icmp eq i64 %allowed, 0
  %within = icmp sle i64 %threads, %allowed
  %fits = or i1 %unknown, %within
  %room = and i1 %calm, %fits
  %pays = and i1 %either, %room
  %flag = zext i1 %pays to i32
  ret i32 %flag
}}

; for a call path choosing its parallel plan: 1 while the CPUs are crowded
define i32 @tex_rt_is_crowded() {{
entry:
  %now = call i64 @llvm.readcyclecounter()
  %crowded = call i1 @tex_rt_crowded(i64 %now)
  %flag = zext i1 %crowded to i32
  ret i32 %flag
}}

define void @tex_rt_parallel(ptr %fn, ptr %ctx, i64 %threads) {{
entry:
  %handle = alloca i64
  %many = icmp sgt i64 %threads, 1
  br i1 %many, label %claim, label %alone
claim:
  %pair = cmpxchg ptr @tex_rt_busy, i32 0, i32 1 acquire monotonic
  %claimed = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %claimed, label %locked, label %alone
alone:
  call void %fn(ptr %ctx, i64 0, i64 1)
  %alone.end = call i64 @llvm.readcyclecounter()
  store atomic i64 %alone.end, ptr @tex_rt_last_end monotonic, align 8
  ret void
locked:
  call i32 @pthread_mutex_lock(ptr @tex_rt_lock)
  %teams = load i64, ptr @tex_rt_teams
  %teams.1 = add i64 %teams, 1
  store i64 %teams.1, ptr @tex_rt_teams
  %helpers = sub i64 %threads, 1
  %cap = icmp slt i64 %helpers, {max_workers}
  %want = select i1 %cap, i64 %helpers, i64 {max_workers}
  br label %spawn.test
spawn.test:
  %have = load i64, ptr @tex_rt_workers
  %more = icmp slt i64 %have, %want
  br i1 %more, label %spawn, label %start
spawn:
  %id = add i64 %have, 1
  %idp = getelementptr i64, ptr @tex_rt_ids, i64 %id
  store i64 %id, ptr %idp
  %gen0 = load i64, ptr @tex_rt_generation
  %startp = getelementptr i64, ptr @tex_rt_start, i64 %id
  store i64 %gen0, ptr %startp
  %err = call i32 @pthread_create(ptr %handle, ptr null, ptr @tex_rt_worker, ptr %idp)
  %failed = icmp ne i32 %err, 0
  br i1 %failed, label %start, label %spawned
spawned:
  %h = load i64, ptr %handle
  call i32 @pthread_detach(i64 %h)
  store i64 %id, ptr @tex_rt_workers
  br label %spawn.test
start:
  %workers = load i64, ptr @tex_rt_workers
  %size = add i64 %workers, 1
  %fits = icmp slt i64 %threads, %size
  %team = select i1 %fits, i64 %threads, i64 %size
  store ptr %fn, ptr @tex_rt_task
  store ptr %ctx, ptr @tex_rt_context
  %last.team = load i64, ptr @tex_rt_team
  store i64 %team, ptr @tex_rt_team
  ; a larger team than the last region's: the parked workers it includes join too
  %grown = icmp sgt i64 %team, %last.team
  br i1 %grown, label %unpark, label %placed
unpark:
  call i32 @pthread_cond_broadcast(ptr @tex_rt_park)
  br label %placed
placed:
  %ncpus = load i64, ptr @tex_rt_ncpus
  %room = icmp sle i64 %team, %ncpus
  br i1 %room, label %where, label %announce
where:
  %cpu = call i32 @sched_getcpu()
  %cpu64 = sext i32 %cpu to i64
  br label %announce
announce:
  %home = phi i64 [ -1, %placed ], [ %cpu64, %where ]
  store i64 %home, ptr @tex_rt_home
  store atomic i64 0, ptr @tex_rt_active monotonic, align 8
  store i64 1, ptr @tex_rt_open
  %gen = load i64, ptr @tex_rt_generation
  %next = add i64 %gen, 1
  store atomic i64 %next, ptr @tex_rt_generation release, align 8
  call i32 @pthread_cond_broadcast(ptr @tex_rt_wake)
  call i32 @pthread_mutex_unlock(ptr @tex_rt_lock)
  %opened = call i64 @llvm.readcyclecounter()
  call void %fn(ptr %ctx, i64 0, i64 %team)
  ; every chunk is taken: close the region (a worker that has not joined by now skips
  ; it) and wait only for those that joined
  call i32 @pthread_mutex_lock(ptr @tex_rt_lock)
  store i64 0, ptr @tex_rt_open
  call i32 @pthread_mutex_unlock(ptr @tex_rt_lock)
  br label %unlock.open
unlock.open:
  %t0 = call i64 @llvm.readcyclecounter()
  br label %spin
spin:
  %prev = phi i64 [ %t0, %unlock.open ], [ %now, %spin.pause ]
  %left = load atomic i64, ptr @tex_rt_active acquire, align 8
  %all = icmp eq i64 %left, 0
  br i1 %all, label %finish, label %spin.time
spin.time:
  %now = call i64 @llvm.readcyclecounter()
  %spent = sub i64 %now, %t0
  %long = icmp ugt i64 %spent, {spin_ticks}
  %robbed = call i1 @tex_rt_robbed(i64 %prev, i64 %now)
  %crowded = call i1 @tex_rt_crowded(i64 %now)
  %gapped = icmp ugt i64 %spent, {gap_ticks}
  %hurry = and i1 %crowded, %gapped
  %stop.1 = or i1 %long, %robbed
  %stop = or i1 %stop.1, %hurry
  br i1 %stop, label %locked.join, label %spin.pause
spin.pause:
  call void @llvm.x86.sse2.pause()
  br label %spin
locked.join:
  call i32 @pthread_mutex_lock(ptr @tex_rt_lock)
  %lnow = call i64 @llvm.readcyclecounter()
  %lcrowded = call i1 @tex_rt_crowded(i64 %lnow)
  %pending.now = load atomic i64, ptr @tex_rt_active acquire, align 8
  %waiting = icmp ne i64 %pending.now, 0
  %rescue = and i1 %lcrowded, %waiting
  br i1 %rescue, label %rescue.one, label %join
rescue.one:
  call void @tex_rt_rescue(i64 %team)
  br label %join
join:
  %pending = load atomic i64, ptr @tex_rt_active acquire, align 8
  %done = icmp eq i64 %pending, 0
  br i1 %done, label %unlock, label %await
await:
  call i32 @pthread_cond_wait(ptr @tex_rt_done, ptr @tex_rt_lock)
  br label %join
unlock:
  call i32 @pthread_mutex_unlock(ptr @tex_rt_lock)
  br label %finish
finish:
  ; a wait for the team longer than half the caller's own share of the work (and than
  ; GAP_TICKS): a worker lost its CPU in the middle of a chunk
  %end = call i64 @llvm.readcyclecounter()
  %worked = sub i64 %t0, %opened
  %half = lshr i64 %worked, 1
  %since = add i64 %t0, %half
  call i1 @tex_rt_robbed(i64 %since, i64 %end)
  store atomic i64 %end, ptr @tex_rt_last_end monotonic, align 8
  store atomic i32 0, ptr @tex_rt_busy release, align 4
  ret void
}}

define void @tex_rt_reset() {{
entry:
  call i32 @pthread_mutex_init(ptr @tex_rt_lock, ptr null)
  call void @tex_rt_pool_reset()
  call i32 @pthread_cond_init(ptr @tex_rt_wake, ptr null)
  call i32 @pthread_cond_init(ptr @tex_rt_done, ptr null)
  call i32 @pthread_cond_init(ptr @tex_rt_park, ptr null)
  store i64 0, ptr @tex_rt_workers
  store i64 0, ptr @tex_rt_spinning
  store i64 0, ptr @tex_rt_streak
  store i64 0, ptr @tex_rt_last_end
  store i64 0, ptr @tex_rt_active
  store i64 0, ptr @tex_rt_open
  store i64 0, ptr @tex_rt_team
  store i64 0, ptr @tex_rt_crowded_until
  call void @llvm.memset.p0.i64(ptr @tex_rt_tids, i8 0, i64 {tid_bytes}, i1 false)
  call void @llvm.memset.p0.i64(ptr @tex_rt_working, i8 0, i64 {flag_bytes}, i1 false)
  call void @llvm.memset.p0.i64(ptr @tex_rt_rescued, i8 0, i64 {flag_bytes}, i1 false)
  store i32 0, ptr @tex_rt_busy
  ret void
}}

; sets the flag, then runs the handler it replaced (Python's), so Python still raises
; KeyboardInterrupt when the kernel returns
define internal void @tex_rt_on_sigint(i32 %sig, ptr %info, ptr %uc) {{
entry:
  store atomic i32 1, ptr @tex_rt_interrupt monotonic, align 4
  %handler = load ptr, ptr @tex_rt_previous
  %flagsp = getelementptr %sigaction, ptr @tex_rt_previous, i32 0, i32 2
  %flags = load i32, ptr %flagsp
  %siginfo = and i32 %flags, {sa_siginfo}
  %three = icmp ne i32 %siginfo, 0
  br i1 %three, label %with.info, label %plain
with.info:
  call void %handler(i32 %sig, ptr %info, ptr %uc)
  ret void
plain:
  call void %handler(i32 %sig)
  ret void
}}

; chain tex_rt_on_sigint in front of the current SIGINT handler, unless it is there
; already or there is no handler to chain to (SIG_DFL, SIG_IGN: Ctrl-C keeps its meaning)
define void @tex_rt_arm() {{
entry:
  %current = alloca %sigaction
  %new = alloca %sigaction
  call i32 @sigaction(i32 2, ptr null, ptr %current)
  %handler = load ptr, ptr %current
  %ours = icmp eq ptr %handler, @tex_rt_on_sigint
  %default = icmp eq ptr %handler, null
  %ignored = icmp eq ptr %handler, inttoptr (i64 1 to ptr)
  %skip1 = or i1 %ours, %default
  %skip = or i1 %skip1, %ignored
  br i1 %skip, label %done, label %install
install:
  call void @llvm.memcpy.p0.p0.i64(ptr @tex_rt_previous, ptr %current, i64 152, i1 false)
  call void @llvm.memcpy.p0.p0.i64(ptr %new, ptr %current, i64 152, i1 false)
  store ptr @tex_rt_on_sigint, ptr %new
  %flagsp = getelementptr %sigaction, ptr %new, i32 0, i32 2
  %flags = load i32, ptr %flagsp
  %kept = and i32 %flags, {sa_keep}
  %with = or i32 %kept, {sa_siginfo}
  store i32 %with, ptr %flagsp
  %restorer = getelementptr %sigaction, ptr %new, i32 0, i32 3
  store ptr null, ptr %restorer
  call i32 @sigaction(i32 2, ptr %new, ptr null)
  br label %done
done:
  ret void
}}
""" + PLACEMENT_IR).format(
    slots=MAX_WORKERS + 1, max_workers=MAX_WORKERS, sa_siginfo=SA_SIGINFO, sa_keep=SA_KEEP,
    spin_ticks=SPIN_TICKS, gap_ticks=GAP_TICKS, sys_gettid=SYS_GETTID,
    tid_bytes=8 * (MAX_WORKERS + 1), flag_bytes=4 * (MAX_WORKERS + 1),
    crowded_ticks=CROWDED_TICKS, mask_words=MASK_BITS // 64, mask_bytes=MASK_BITS // 8,
    mask_bits=MASK_BITS) + POOL_IR

EXPORTS = ("tex_rt_parallel", "tex_rt_reset", "tex_rt_arm", "tex_rt_take", "tex_rt_give",
           "tex_rt_team_pays")


class Runtime:
    """The loaded runtime: its image (kept mapped for the process) and entry points."""

    def __init__(self, image):
        self.image = image
        self.addresses = {name: image.address(name) for name in EXPORTS + ("tex_rt_interrupt",)}
        proto = ctypes.CFUNCTYPE(None)
        self.reset = proto(self.addresses["tex_rt_reset"])
        self.arm = proto(self.addresses["tex_rt_arm"])
        self.interrupt = ctypes.c_int32.from_address(self.addresses["tex_rt_interrupt"])
        self.ncpus = ctypes.c_int64.from_address(image.address("tex_rt_ncpus"))
        # the CPUs this process may use (tex_rt_team_pays: no middling team beyond them)
        self.allowed = ctypes.c_int64.from_address(image.address("tex_rt_allowed"))
        # how many times a worker moved off its caller's CPU (a count for tests)
        self.hops = ctypes.c_int64.from_address(image.address("tex_rt_hops"))
        # how many regions were opened to a team (a count for tests)
        self.teams = ctypes.c_int64.from_address(image.address("tex_rt_teams"))
        # how many times a worker outside a region's team woke for it (a count for tests;
        # a member that comes after its region closed is not counted)
        self.skips = ctypes.c_int64.from_address(image.address("tex_rt_skips"))
        # how many times a thread found the CPUs crowded (a count for tests)
        self.crowdings = ctypes.c_int64.from_address(image.address("tex_rt_crowdings"))
        # how many times a caller moved a worker it waited for to its own CPU
        self.rescues = ctypes.c_int64.from_address(image.address("tex_rt_rescues"))
        # 1 while the CPUs are crowded (a call path's choice of plan: calls.thread_parts;
        # no GIL release for a call of a few instructions)
        self.is_crowded = ctypes.PYFUNCTYPE(ctypes.c_int32)(image.address("tex_rt_is_crowded"))
        # tex_rt_team_pays(threads) for a call path (runtime.STREAM_PARTS: whether calls
        # come as in a loop, when a part count needs to know; it counts as a question)
        self.team_pays = ctypes.PYFUNCTYPE(ctypes.c_int32, ctypes.c_int64)(
            image.address("tex_rt_team_pays"))
        # bytes of temporaries kept for the next call (pool.py)
        self.pool_bytes = ctypes.c_int64.from_address(image.address("tex_rt_pool_bytes"))
        self.cpus = (ctypes.c_int32 * (MAX_WORKERS + 1)).from_address(
            image.address("tex_rt_cpus"))

    def place_workers(self, enabled):
        """Move each worker of a team, as it joins a region, to its own CPU counted from
        the caller's (or leave placement to the OS). Nothing stays pinned: a worker on
        the wrong CPU is pinned to its own, which migrates it, then freed. Why: with as
        many threads as cores and one core busy (numpy's BLAS threads spin for ~0.1 s
        after each call), Linux put the caller and its worker on the same core, where
        each ran half the time."""
        allowed = sorted(os.sched_getaffinity(0))
        self.allowed.value = len(allowed)
        cpus = [c for c in allowed if c < MASK_BITS][:MAX_WORKERS + 1] if enabled else []
        for k, c in enumerate(cpus):
            self.cpus[k] = c
        self.ncpus.value = len(cpus)


_runtime = []
_lock = forksafe.lock()


def prebuild():
    """The runtime's object code compiled ahead of runtime() (jit.prebuild), for the host
    as runtime() loads it; a warm-up thread's work."""
    from ...scheduler.target import host, overriding
    from . import jit
    jit.host_facts(disk=False)      # (host() asks for them: no disk on this thread)
    with overriding(host()):
        jit.prebuild(RUNTIME_IR, "runtime")


def runtime():
    """The process's Runtime, built (or loaded from the disk cache) on first use; its
    symbols are then visible to every kernel the JIT links."""
    if _runtime:
        return _runtime[0]
    with _lock:
        if not _runtime:
            from ...scheduler.target import host, overriding
            from . import elf, jit
            # always for the host: the runtime is shared by every kernel of the process,
            # whatever target a kernel was compiled for (TEX_CPU, overriding)
            with overriding(host()):
                _, image = jit.load(RUNTIME_IR, "tex_rt_parallel", kind="runtime")
            image.keep()
            rt = Runtime(image)
            for name, address in rt.addresses.items():
                elf.define(name, address)
            rt.reset()
            rt.place_workers(os.environ.get("TEX_PIN_THREADS", "1") != "0")
            # the workers are not copied into a forked child: it starts a pool of its own
            os.register_at_fork(after_in_child=rt.reset)
            _runtime.append(rt)
    return _runtime[0]
