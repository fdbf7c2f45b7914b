"""Kernel temporaries kept between calls: a packed panel, a split-K partial or an
intermediate of a few hundred KiB or more, which a kernel allocates on each call.

Why: glibc serves an allocation of 128 KiB or more with a fresh mmap, unless an earlier
free of a larger mapped block has raised that threshold, and every 4 KiB page of it
faults on its first write. A kernel whose temporaries were mapped anew on each call paid
that on each call: the softmax of a 512 x 512 attention score matrix (two 1 MiB
buffers) took 0.8 ms on one thread instead of 0.21 ms, in any process where no larger
block had been freed first, so the same kernel ran 4x slower or not from one process to
the next.

    tex_rt_take(n)     memory for n bytes, 64-byte aligned: a kept block of exactly n
                       bytes if there is one, else aligned_alloc; under POOL_MIN bytes,
                       malloc's, aligned here (null when either fails)
    tex_rt_give(p)     takes back what tex_rt_take gave: kept when it is at least
                       POOL_MIN bytes, in one of POOL_SLOTS slots (when all are taken,
                       the slots are replaced in turn), and the kept blocks stay within
                       POOL_BYTES in all (slots emptied in order until it fits); else
                       freed

Each block carries its size in a 64-byte header in front of it (a small one also the
address malloc gave, 8 bytes after the size). The slots are shared by
every kernel and thread of the process under a lock of their own (two calls never hold
one block); a forked child re-initialises the lock (tex_rt_reset) and keeps the blocks.
Exactly n bytes: a kernel called again with the same sizes asks for the same sizes.
"""
POOL_SLOTS = 8
POOL_MIN = 64 << 10          # smaller blocks come from malloc's own bins, fast already
POOL_BYTES = 64 << 20        # at most this much kept in all

POOL_IR = r"""
@tex_rt_pool = internal global [{slots} x ptr] zeroinitializer
@tex_rt_pool_bytes = global i64 0          ; read by tests (Runtime.pool_bytes)
@tex_rt_pool_next = internal global i64 0
@tex_rt_pool_lock = internal global [64 x i8] zeroinitializer, align 64

declare ptr @aligned_alloc(i64, i64)
declare ptr @malloc(i64)
declare void @free(ptr)

define void @tex_rt_pool_reset() {{
entry:
  call i32 @pthread_mutex_init(ptr @tex_rt_pool_lock, ptr null)
  ret void
}}

define ptr @tex_rt_take(i64 %n) {{
entry:
  %big = icmp uge i64 %n, {min}
  br i1 %big, label %search, label %fresh
search:
  call i32 @pthread_mutex_lock(ptr @tex_rt_pool_lock)
  br label %loop
loop:
  %i = phi i64 [0, %search], [%next, %cont]
  %done = icmp eq i64 %i, {slots}
  br i1 %done, label %miss, label %body
body:
  %slot = getelementptr [{slots} x ptr], ptr @tex_rt_pool, i64 0, i64 %i
  %p = load ptr, ptr %slot
  %have = icmp ne ptr %p, null
  br i1 %have, label %check, label %cont
check:
  %hdr = getelementptr i8, ptr %p, i64 -64
  %size = load i64, ptr %hdr
  %same = icmp eq i64 %size, %n
  br i1 %same, label %hit, label %cont
hit:
  store ptr null, ptr %slot
  %kept = load i64, ptr @tex_rt_pool_bytes
  %left = sub i64 %kept, %n
  store i64 %left, ptr @tex_rt_pool_bytes
  call i32 @pthread_mutex_unlock(ptr @tex_rt_pool_lock)
  ret ptr %p
cont:
  %next = add i64 %i, 1
  br label %loop
miss:
  call i32 @pthread_mutex_unlock(ptr @tex_rt_pool_lock)
  br label %fresh
fresh:
  br i1 %big, label %aligned, label %small
aligned:
  %whole = add i64 %n, 64
  %raw = call ptr @aligned_alloc(i64 64, i64 %whole)
  %ok = icmp ne ptr %raw, null
  br i1 %ok, label %header, label %none
header:
  store i64 %n, ptr %raw
  %user = getelementptr i8, ptr %raw, i64 64
  ret ptr %user
small:
  ; malloc's own bins, aligned here: aligned_alloc bypasses malloc's per-thread cache
  ; and splits and merges chunks (a tiny product's packed panel, taken once a product:
  ; 45% of the time in malloc_consolidate, _int_free and memalign)
  %padded = add i64 %n, 128
  %base = call ptr @malloc(i64 %padded)
  %got = icmp ne ptr %base, null
  br i1 %got, label %small.header, label %none
small.header:
  %addr = ptrtoint ptr %base to i64
  %up = add i64 %addr, 127
  %aligned.addr = and i64 %up, -64
  %offset = sub i64 %aligned.addr, %addr
  %suser = getelementptr i8, ptr %base, i64 %offset
  %shdr = getelementptr i8, ptr %suser, i64 -64
  store i64 %n, ptr %shdr
  %sraw = getelementptr i8, ptr %suser, i64 -56
  store ptr %base, ptr %sraw
  ret ptr %suser
none:
  ret ptr null
}}

define void @tex_rt_give(ptr %p) {{
entry:
  %null = icmp eq ptr %p, null
  br i1 %null, label %out, label %sized
sized:
  %hdr = getelementptr i8, ptr %p, i64 -64
  %n = load i64, ptr %hdr
  %small = icmp ult i64 %n, {min}
  %huge = icmp ugt i64 %n, {cap}
  br i1 %small, label %release.small, label %large
release.small:
  %rawp = getelementptr i8, ptr %p, i64 -56
  %base = load ptr, ptr %rawp
  call void @free(ptr %base)
  br label %out
large:
  br i1 %huge, label %release, label %keep
release:
  call void @free(ptr %hdr)
  br label %out
keep:
  call i32 @pthread_mutex_lock(ptr @tex_rt_pool_lock)
  br label %evict
evict:
  %i = phi i64 [0, %keep], [%inext, %evict.next]
  %kept = load i64, ptr @tex_rt_pool_bytes
  %need = add i64 %kept, %n
  %over = icmp ugt i64 %need, {cap}
  %more = icmp ult i64 %i, {slots}
  %go = and i1 %over, %more
  br i1 %go, label %evict.one, label %find
evict.one:
  %eslot = getelementptr [{slots} x ptr], ptr @tex_rt_pool, i64 0, i64 %i
  %q = load ptr, ptr %eslot
  %has = icmp ne ptr %q, null
  br i1 %has, label %evict.free, label %evict.next
evict.free:
  %qhdr = getelementptr i8, ptr %q, i64 -64
  %qn = load i64, ptr %qhdr
  store ptr null, ptr %eslot
  %less = sub i64 %kept, %qn
  store i64 %less, ptr @tex_rt_pool_bytes
  call void @free(ptr %qhdr)
  br label %evict.next
evict.next:
  %inext = add i64 %i, 1
  br label %evict
find:
  %j = phi i64 [0, %evict], [%jnext, %find.next]
  %full = icmp eq i64 %j, {slots}
  br i1 %full, label %rotate, label %find.body
find.body:
  %fslot = getelementptr [{slots} x ptr], ptr @tex_rt_pool, i64 0, i64 %j
  %f = load ptr, ptr %fslot
  %empty = icmp eq ptr %f, null
  br i1 %empty, label %put, label %find.next
find.next:
  %jnext = add i64 %j, 1
  br label %find
put:
  store ptr %p, ptr %fslot
  %before = load i64, ptr @tex_rt_pool_bytes
  %after = add i64 %before, %n
  store i64 %after, ptr @tex_rt_pool_bytes
  call i32 @pthread_mutex_unlock(ptr @tex_rt_pool_lock)
  br label %out
rotate:
  %r = load i64, ptr @tex_rt_pool_next
  %rn = urem i64 %r, {slots}
  %rslot = getelementptr [{slots} x ptr], ptr @tex_rt_pool, i64 0, i64 %rn
  %old = load ptr, ptr %rslot
  %ohdr = getelementptr i8, ptr %old, i64 -64
  %on = load i64, ptr %ohdr
  store ptr %p, ptr %rslot
  %b0 = load i64, ptr @tex_rt_pool_bytes
  %b1 = sub i64 %b0, %on
  %b2 = add i64 %b1, %n
  store i64 %b2, ptr @tex_rt_pool_bytes
  %r1 = add i64 %r, 1
  store i64 %r1, ptr @tex_rt_pool_next
  call i32 @pthread_mutex_unlock(ptr @tex_rt_pool_lock)
  call void @free(ptr %ohdr)
  br label %out
out:
  ret void
}}
""".format(slots=POOL_SLOTS, min=POOL_MIN, cap=POOL_BYTES)
