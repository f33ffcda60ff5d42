/* cuda-emu's runtime: the block scheduler, barriers, warp collectives and device memory of
 * cuda_emu.h (rules 1-7 there).
 *
 * Scheduler invariants, for the block being run:
 *  1. Each fiber is in exactly one state: READY (in ready[], to be resumed), BARRIER (waiting
 *     at __syncthreads, counted in at_barrier), WARP (waiting at a warp collective, its bit set
 *     in its warp's `waiting`), or DONE (returned, counted in done).
 *  2. Only the scheduler resumes fibers, and a fiber only ever switches back to the scheduler.
 *  3. When ready[] is empty, no fiber can move without the scheduler: then a warp waiter means a
 *     mask naming a lane that will not arrive (abort), barrier waiters with a returned thread
 *     mean a divergent barrier (abort), barrier waiters alone are released together, and
 *     otherwise every fiber is DONE and the block is over. */
#include "kernels/cuda/emu/cuda_emu.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDA_EMU_ASAN 1
#endif
#endif
#ifdef CUDA_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
/* Our kernels' frames are shallow; a few KiB go to printf in a failure message. Not more: ASan's
 * swapcontext clears the shadow of the whole stack switched to, at every switch. A guard page
 * below each stack turns an overflow into a fault. */
#define FIBER_STACK_BYTES (64u << 10)

#define MAX_BLOCK_THREADS 1024
#define MAX_WARPS         (MAX_BLOCK_THREADS / 32)

CUDA_EMU_TLS const CudaEmuCoords *cuda_emu_now;

/* The linker's bounds of the __shared__ section (rule 3); weak: a program with no __shared__
 * variable has no such section. */
extern char __start_cuda_emu_shared[] __attribute__((weak));
extern char __stop_cuda_emu_shared[] __attribute__((weak));

typedef enum { READY, BARRIER, WARP, DONE } FiberState;

typedef struct {
    ucontext_t ctx;
    char *stack; /* FIBER_STACK_BYTES above a guard page */
    CudaEmuCoords coords;
    FiberState state;
    int lane, warp;
    /* this fiber's part of the collective it waits at (state WARP) */
    CudaEmuWarpOp op;
    unsigned mask;
    uint64_t value, result;
    int arg, width;
    void *asan_fake_stack;
} Fiber;

typedef struct {
    unsigned waiting; /* lanes that wait at a collective (invariant 1) */
    int lanes;        /* lanes that exist: a last warp may be partial */
} Warp;

/* The block being run (one launch at a time per OS thread). */
typedef struct {
    Fiber *fibers; /* the pool: grows to the largest block launched */
    int capacity;
    int n; /* threads of this block */
    Warp warps[MAX_WARPS];
    int ready[MAX_BLOCK_THREADS], n_ready;
    int at_barrier, done;
    ucontext_t scheduler;
    Fiber *running;
    void (*body)(void *);
    void *arg;
    const char *kernel;
    const void *sched_stack_bottom; /* ASan: the scheduler's stack, for switches back to it */
    size_t sched_stack_size;
} Block;

static CUDA_EMU_TLS Block blk;
/* Launches under way in the process: one __shared__ section serves them all (rule 3). */
static atomic_int launches_running;
static CUDA_EMU_TLS cudaError_t last_error;
static uint64_t seed = 1;
static bool seed_from_env_done;
static CUDA_EMU_TLS uint64_t rng;

void cuda_emu_set_seed(uint64_t s) {
    seed = s;
    seed_from_env_done = true;
}

static uint64_t next_random(void) {
    /* splitmix64: well spread even from small seeds */
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Prints "cuda-emu: kernel K: block (..) thread (..): message" (the fiber part when f is not
 * NULL) and aborts: a kernel bug the emulation caught. */
static _Noreturn void fail(const Fiber *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static _Noreturn void fail(const Fiber *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda-emu: kernel %s: ", blk.kernel ? blk.kernel : "?");
    if (f) {
        const CudaEmuCoords *c = &f->coords;
        fprintf(stderr, "block (%u,%u,%u) thread (%u,%u,%u): ", c->block_idx.x, c->block_idx.y,
                c->block_idx.z, c->thread_idx.x, c->thread_idx.y, c->thread_idx.z);
    }
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* ---- fiber switches (ASan annotated) ---- */

/* From the running fiber back to the scheduler (invariant 2); returns when resumed. */
static void to_scheduler(Fiber *f, bool exiting) {
#ifdef CUDA_EMU_ASAN
    __sanitizer_start_switch_fiber(exiting ? NULL : &f->asan_fake_stack, blk.sched_stack_bottom,
                                   blk.sched_stack_size);
#else
    (void)exiting;
#endif
    swapcontext(&f->ctx, &blk.scheduler);
#ifdef CUDA_EMU_ASAN
    __sanitizer_finish_switch_fiber(f->asan_fake_stack, NULL, NULL);
#endif
}

static void resume(Fiber *f) {
#ifdef CUDA_EMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, f->stack, FIBER_STACK_BYTES);
#endif
    blk.running = f;
    cuda_emu_now = &f->coords;
    swapcontext(&blk.scheduler, &f->ctx);
    cuda_emu_now = NULL;
    blk.running = NULL;
#ifdef CUDA_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

static void fiber_main(int index) {
    Fiber *f = &blk.fibers[index];
#ifdef CUDA_EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &blk.sched_stack_bottom, &blk.sched_stack_size);
#endif
    blk.body(blk.arg);
    f->state = DONE;
    blk.done++;
    to_scheduler(f, true); /* never resumed */
    abort();
}

static Fiber *self(const char *what) {
    if (!blk.running) {
        fprintf(stderr, "cuda-emu: %s called outside a kernel\n", what);
        abort();
    }
    return blk.running;
}

/* ---- barriers and warp collectives ---- */

void cuda_emu_syncthreads(void) {
    Fiber *f = self("__syncthreads");
    f->state = BARRIER;
    blk.at_barrier++;
    to_scheduler(f, false);
}

static void make_ready(int i) {
    blk.fibers[i].state = READY;
    blk.ready[blk.n_ready++] = i;
}

/* What a lane posts to CUDA_EMU_COMBINE (on its fiber's stack, valid while it waits). */
typedef struct {
    const void *in;
    void *out;
    CudaEmuCombine combine;
} CombinePost;

/* A CUDA_EMU_COMBINE completed by f: the combine function once, over every lane's posts. */
static void combine_now(const Fiber *f, const Fiber *warp0, unsigned mask) {
    const void *in[32] = {0};
    void *out[32] = {0};
    CudaEmuCombine combine = ((const CombinePost *)(uintptr_t)f->value)->combine;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1)) continue;
        const CombinePost *p = (const CombinePost *)(uintptr_t)warp0[l].value;
        if (p->combine != combine)
            fail(f, "mma.sync: lane %d runs another warp-collective instruction than lane %d", l,
                 f->lane);
        in[l] = p->in, out[l] = p->out;
    }
    combine(in, out);
}

/* The bits lane `lane` of a completed collective receives (rule 5). */
static uint64_t collective_result(const Fiber *warp0, const Fiber *f, unsigned mask) {
    const uint64_t poison = ~(uint64_t)0;
    int lane = f->lane, seg = lane & ~(f->width - 1), src;
    switch (f->op) {
    case CUDA_EMU_SYNCWARP:
    case CUDA_EMU_COMBINE: /* its results are written by the combine function */
        return 0;
    case CUDA_EMU_BALLOT: {
        uint64_t bits = 0;
        for (int l = 0; l < 32; l++)
            if (mask >> l & 1 && warp0[l].value) bits |= 1ull << l;
        return bits;
    }
    case CUDA_EMU_SHFL_IDX:
        src = seg + (f->arg & (f->width - 1));
        break;
    case CUDA_EMU_SHFL_XOR:
        src = lane ^ f->arg;
        if (src >= seg + f->width || src < 0 || src > 31) return f->value; /* a later segment */
        break;
    case CUDA_EMU_SHFL_DOWN:
        src = lane + f->arg;
        if (src >= seg + f->width) return f->value;
        break;
    case CUDA_EMU_SHFL_UP:
        src = lane - f->arg;
        if (src < seg) return f->value;
        break;
    default:
        return poison;
    }
    return mask >> src & 1 ? warp0[src].value : poison;
}

static const char *op_name(CudaEmuWarpOp op) {
    static const char *const names[] = {"__shfl_sync",    "__shfl_xor_sync", "__shfl_down_sync",
                                        "__shfl_up_sync", "__syncwarp",      "__ballot_sync",
                                        "mma.sync"};
    return names[op];
}

uint64_t cuda_emu_warp_op(CudaEmuWarpOp op, unsigned mask, uint64_t value, int arg, int width) {
    Fiber *f = self(op_name(op));
    Warp *w = &blk.warps[f->warp];
    Fiber *warp0 = &blk.fibers[f->warp * 32];
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail(f, "%s width %d is not a power of two <= 32", op_name(op), width);
    if (!(mask >> f->lane & 1))
        fail(f, "%s with mask 0x%08x that leaves out the calling lane %d", op_name(op), mask,
             f->lane);
    if (w->lanes < 32 && mask >> w->lanes)
        fail(f, "%s mask 0x%08x names lanes >= %d, which warp %d of this block does not have",
             op_name(op), mask, w->lanes, f->warp);
    for (int l = 0; l < 32; l++)
        if (w->waiting >> l & 1 && mask >> l & 1 && (warp0[l].mask != mask || warp0[l].op != op))
            fail(f, "%s with mask 0x%08x, but lane %d of its mask waits at %s with mask 0x%08x",
                 op_name(op), mask, l, op_name(warp0[l].op), warp0[l].mask);
    f->op = op, f->mask = mask, f->value = value, f->arg = arg, f->width = width;
    f->state = WARP;
    w->waiting |= 1u << f->lane;
    if ((w->waiting & mask) == mask) { /* the last lane of the mask: complete it */
        if (op == CUDA_EMU_COMBINE) combine_now(f, warp0, mask);
        for (int l = 0; l < 32; l++)
            if (mask >> l & 1) warp0[l].result = collective_result(warp0, &warp0[l], mask);
        w->waiting &= ~mask;
        for (int l = 0; l < 32; l++)
            if (mask >> l & 1) make_ready(f->warp * 32 + l);
    }
    to_scheduler(f, false);
    return f->result;
}

void cuda_emu_warp_combine(unsigned mask, const void *in, void *out, CudaEmuCombine combine) {
    CombinePost post = {in, out, combine};
    cuda_emu_warp_op(CUDA_EMU_COMBINE, mask, (uint64_t)(uintptr_t)&post, 0, 32);
}

/* Invariant 3's first case: the message for a collective that cannot complete. */
static _Noreturn void stuck_collective(int warp) {
    Fiber *warp0 = &blk.fibers[warp * 32];
    unsigned waiting = blk.warps[warp].waiting;
    int l0 = __builtin_ctz(waiting);
    unsigned mask = warp0[l0].mask, missing = mask & ~waiting;
    int m = __builtin_ctz(missing);
    const char *state = warp0[m].state == DONE      ? "has returned"
                        : warp0[m].state == BARRIER ? "waits at __syncthreads"
                                                    : "waits at another collective";
    fail(&warp0[l0],
         "%s with mask 0x%08x never completes: lanes 0x%08x of the mask do not arrive "
         "(lane %d %s)",
         op_name(warp0[l0].op), mask, missing, m, state);
}

/* ---- blocks and launches ---- */

/* Rule 3, past ASan: the section may hold the redzones of a sanitizer that instruments it. */
__attribute__((no_sanitize_address)) static void poison_shared(void) {
    if (!__start_cuda_emu_shared) return;
    for (volatile char *p = __start_cuda_emu_shared; p < __stop_cuda_emu_shared; p++)
        *p = (char)0xff;
}

/* getcontext returns twice in principle: kept out of the callers' frames (-Wclobbered). */
__attribute__((noinline)) static void init_context(Fiber *f) {
    getcontext(&f->ctx);
}

/* Grows the pool to n fibers (between launches: no fiber is running or suspended).
 * A ucontext_t points into itself (glibc's uc_mcontext.fpregs -> __fpregs_mem, set by
 * getcontext), so a context moved by realloc would make swapcontext save and restore the FPU
 * state through the old, freed array: a crash in swapcontext once the pool had grown (issue 29,
 * first seen on a 1024-thread block). So every context that was in the array is initialised
 * again in place (the old pointer may not even be compared once realloc has freed it). */
static bool grow_pool(int n) {
    if (n <= blk.capacity) return true;
    Fiber *fibers = realloc(blk.fibers, (size_t)n * sizeof *fibers);
    if (!fibers) return false;
    blk.fibers = fibers;
    for (int i = 0; i < blk.capacity; i++)
        init_context(&fibers[i]);
    long page = sysconf(_SC_PAGESIZE);
    for (int i = blk.capacity; i < n; i++) {
        Fiber *f = &fibers[i];
        memset(f, 0, sizeof *f);
        char *map = mmap(NULL, FIBER_STACK_BYTES + (size_t)page, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (map == MAP_FAILED) return false;
        mprotect(map, (size_t)page, PROT_NONE); /* a stack overflow faults, not corrupts */
        f->stack = map + page;
        init_context(f);
        blk.capacity = i + 1;
    }
    return true;
}

static void run_block(uint3 block_idx, uint3 block_dim, uint3 grid_dim) {
    poison_shared();
    blk.n_ready = blk.at_barrier = blk.done = 0;
    int n = blk.n;
    for (int w = 0; w < (n + 31) / 32; w++)
        blk.warps[w] = (Warp){.waiting = 0, .lanes = n - w * 32 < 32 ? n - w * 32 : 32};
    for (int i = 0; i < n; i++) {
        Fiber *f = &blk.fibers[i];
        f->coords = (CudaEmuCoords){.thread_idx = {(unsigned)i % block_dim.x,
                                                   (unsigned)i / block_dim.x % block_dim.y,
                                                   (unsigned)i / (block_dim.x * block_dim.y)},
                                    .block_idx = block_idx,
                                    .block_dim = block_dim,
                                    .grid_dim = grid_dim};
        f->lane = i % 32, f->warp = i / 32;
        f->value = ~(uint64_t)0;
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = FIBER_STACK_BYTES;
        f->ctx.uc_link = NULL;
        makecontext(&f->ctx, (void (*)(void))fiber_main, 1, i);
        make_ready(i);
    }
    for (;;) {
        if (blk.n_ready == 0) { /* invariant 3 */
            for (int w = 0; w < (n + 31) / 32; w++)
                if (blk.warps[w].waiting) stuck_collective(w);
            if (blk.at_barrier == 0) break; /* all DONE */
            if (blk.done > 0) {
                int waiter = 0, gone = 0;
                while (blk.fibers[waiter].state != BARRIER)
                    waiter++;
                while (blk.fibers[gone].state != DONE)
                    gone++;
                const CudaEmuCoords *g = &blk.fibers[gone].coords;
                fail(&blk.fibers[waiter],
                     "divergent __syncthreads: this and %d more of the block's %d threads wait "
                     "at it while %d have returned (first thread (%u,%u,%u))",
                     blk.at_barrier - 1, n, blk.done, g->thread_idx.x, g->thread_idx.y,
                     g->thread_idx.z);
            }
            blk.at_barrier = 0;
            for (int i = 0; i < n; i++)
                make_ready(i);
        }
        int pick = (int)(next_random() % (uint64_t)blk.n_ready);
        int i = blk.ready[pick];
        blk.ready[pick] = blk.ready[--blk.n_ready];
        resume(&blk.fibers[i]);
    }
}

static bool bad_dim(uint3 d, unsigned max_x, unsigned max_y, unsigned max_z) {
    return d.x == 0 || d.y == 0 || d.z == 0 || d.x > max_x || d.y > max_y || d.z > max_z;
}

cudaError_t cuda_emu_launch(uint3 grid, uint3 block, size_t dynamic_smem, void (*body)(void *),
                            void *arg, const char *kernel) {
    if (blk.running) {
        fprintf(stderr,
                "cuda-emu: kernel %s launched from inside kernel %s (dynamic parallelism "
                "is not emulated)\n",
                kernel, blk.kernel);
        abort();
    }
    blk.kernel = kernel;
    if (atomic_fetch_add(&launches_running, 1) != 0)
        fail(NULL, "launched while another host thread's launch runs; cuda-emu runs one launch "
                   "at a time (one __shared__ memory for the process)");
    if (dynamic_smem > 0)
        fail(NULL,
             "launch asks for %zu bytes of dynamic shared memory, which cuda-emu does not "
             "emulate (use a fixed __shared__ array)",
             dynamic_smem);
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (bad_dim(block, 1024, 1024, 64) || threads > MAX_BLOCK_THREADS ||
        bad_dim(grid, 0x7fffffffu, 65535, 65535)) {
        atomic_fetch_sub(&launches_running, 1);
        return last_error = cudaErrorInvalidConfiguration;
    }
    if (!seed_from_env_done) {
        const char *env = getenv("CUDA_EMU_SEED");
        if (env) seed = strtoull(env, NULL, 0);
        seed_from_env_done = true;
    }
    if (!grow_pool((int)threads)) fail(NULL, "no memory for %" PRIu64 " fiber stacks", threads);
    rng = seed;
    blk.n = (int)threads;
    blk.body = body, blk.arg = arg;
    /* rule 1: the blocks in a random order (a Fisher-Yates shuffle of their linear indices) */
    uint64_t n_blocks = (uint64_t)grid.x * grid.y * grid.z;
    uint64_t *order = malloc(n_blocks * sizeof *order);
    if (!order) fail(NULL, "no memory for the order of %" PRIu64 " blocks", n_blocks);
    for (uint64_t b = 0; b < n_blocks; b++)
        order[b] = b;
    for (uint64_t b = n_blocks; b > 1; b--) {
        uint64_t j = next_random() % b, t = order[b - 1];
        order[b - 1] = order[j], order[j] = t;
    }
    for (uint64_t b = 0; b < n_blocks; b++) {
        uint64_t o = order[b];
        uint3 idx = {(unsigned)(o % grid.x), (unsigned)(o / grid.x % grid.y),
                     (unsigned)(o / ((uint64_t)grid.x * grid.y))};
        run_block(idx, block, grid);
    }
    free(order);
    blk.kernel = NULL;
    atomic_fetch_sub(&launches_running, 1);
    return cudaSuccess;
}

/* ---- device memory (rule 7) ---- */

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    *ptr = malloc(bytes ? bytes : 1);
    if (!*ptr) return last_error = cudaErrorMemoryAllocation;
    memset(*ptr, 0xff, bytes);
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    (void)kind;
    if (bytes) memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
    if (bytes) memset(dst, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t err) {
    switch (err) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    default:
        return "unknown error";
    }
}
