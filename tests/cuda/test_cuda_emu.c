/* cuda-emu itself (src/kernels/cuda/emu/cuda_emu.h), through the probe kernels of emu/probes.cu:
 *  - warp shuffles give what the CUDA Programming Guide defines (source lane, width segments,
 *    out-of-segment lanes keeping their own value, ballot), also for two halves of a warp at
 *    separate collectives, and poison for a source lane outside the mask;
 *  - shared memory starts poisoned; a read that no barrier orders after the write sees the
 *    poison under some seed, and never with the barrier;
 *  - blocks start, and the threads of a block run, in a seeded random order: a permutation,
 *    the same for the same seed, another for another seed;
 *  - a block of 1025 threads is cudaErrorInvalidConfiguration; blocks of 32, 256 and 1024
 *    threads (launched in that order, so the fiber pool grows twice) reduce with shuffles and a
 *    barrier to the sums computed here;
 *  - a divergent barrier, a mask naming a lane that returned or that the block does not have, a
 *    caller outside its mask, lanes disagreeing about the mask and a launch asking for dynamic
 *    shared memory each abort the process with a message naming the case;
 *  - kernels/cuda/mma.cuh: the fragment helpers give the PTX ISA's layouts for mma.m16n8k16 with
 *    .bf16 (transcribed register by register here, and the figures' entries for lanes 0, 5 and
 *    31), each covering its matrix once; the emulated mma_bf16_16816 gives D = A B + C with the
 *    exact sum rounded once to fp32 (a long double triple loop in another order, on inputs whose
 *    sums are exact in it), and small integers exactly; an mma that half the warp never reaches
 *    aborts as a shuffle does. */
#include "harness.h"
#include "emu/probes.h"
#include "kernels/cuda/emu/cuda_emu.h"

#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void check_shuffles(void) {
    int *out;
    cudaMalloc((void **)&out, 64 * PROBE_SLOTS * sizeof *out);
    CHECK(probe_shuffles(out) == cudaSuccess, "launch");
    for (int t = 0; t < 64; t++) {
        int lane = t % 32, base = t - lane; /* thread of lane 0 of this warp */
        int seg8 = lane & ~7;
        const int *o = out + t * PROBE_SLOTS;
        int want[PROBE_SLOTS];
        want[0] = 1000 + base + 5;
        want[1] = 1000 + base + seg8 + 5;
        want[2] = 1000 + base + (lane ^ 3);
        /* lane ^ 12 leaves the 8-lane segment: an earlier segment may be read, a later one
         * gives the caller its own value */
        want[3] = (lane ^ 12) < seg8 + 8 ? 1000 + base + (lane ^ 12) : 1000 + t;
        want[4] = lane + 3 < 32 ? 1000 + t + 3 : 1000 + t;
        want[5] = lane + 3 < seg8 + 8 ? 1000 + t + 3 : 1000 + t;
        want[6] = lane - 2 >= seg8 ? 1000 + t - 2 : 1000 + t;
        unsigned ballot = 0;
        for (int l = 0; l < 32; l++)
            if (l % 3 == 0) ballot |= 1u << l;
        want[7] = (int)ballot;
        want[8] = 1000 + base + (lane ^ 1);
        want[9] = -1; /* lane ^ 16 is in the other half: outside the mask */
        for (int k = 0; k < PROBE_SLOTS; k++)
            CHECK(o[k] == want[k], "thread %d, shuffle %d: got %d, want %d", t, k, o[k], want[k]);
    }
    cudaFree(out);
}

static void check_race_and_poison(void) {
    enum { T = 96 };
    float *out;
    unsigned *bits;
    cudaMalloc((void **)&out, T * sizeof *out);
    cudaMalloc((void **)&bits, T * sizeof *bits);
    int poisoned_runs = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        cuda_emu_set_seed(seed);
        CHECK(probe_race(out, T, 1) == cudaSuccess, "launch");
        int bad = 0;
        for (int t = 0; t < T; t++)
            bad += out[t] != 42.0f;
        CHECK(bad == 0, "seed %d: %d threads missed thread 0's write after the barrier", (int)seed,
              bad);
        CHECK(probe_race(out, T, 0) == cudaSuccess, "launch");
        int nan = 0;
        for (int t = 0; t < T; t++)
            nan += isnan(out[t]);
        poisoned_runs += nan > 0;
    }
    CHECK(poisoned_runs > 0, "a read no barrier orders never saw the poison in 8 seeds");
    CHECK(probe_unwritten_shared(bits, T) == cudaSuccess, "launch");
    for (int t = 0; t < T; t++)
        CHECK(bits[t] == 0xffffffffu, "unwritten shared memory read as 0x%08x", bits[t]);
    cudaFree(out), cudaFree(bits);
}

static void check_block_order(void) {
    enum { B = 16 };
    int *order, *counter;
    cudaMalloc((void **)&order, B * sizeof *order);
    cudaMalloc((void **)&counter, sizeof *counter);
    int shuffled = 0;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        cuda_emu_set_seed(seed);
        cudaMemset(counter, 0, sizeof *counter);
        CHECK(probe_block_order(order, counter, B) == cudaSuccess, "launch");
        int seen[B] = {0};
        for (int k = 0; k < B; k++) {
            CHECK(order[k] >= 0 && order[k] < B && !seen[order[k]],
                  "block order is no permutation");
            if (order[k] >= 0 && order[k] < B) seen[order[k]] = 1;
            shuffled += order[k] != k;
        }
    }
    CHECK(shuffled > 0, "blocks always started in index order");
    enum { T = 64 };
    int *threads[3];
    for (int k = 0; k < 3; k++) {
        cuda_emu_set_seed(k < 2 ? 7 : 8);
        cudaMalloc((void **)&threads[k], T * sizeof(int));
        cudaMemset(counter, 0, sizeof *counter);
        CHECK(probe_thread_order(threads[k], counter, T) == cudaSuccess, "launch");
        int seen[T] = {0}, ok = 1;
        for (int i = 0; i < T; i++) {
            int t = threads[k][i];
            ok &= t >= 0 && t < T && !seen[t];
            if (t >= 0 && t < T) seen[t] = 1;
        }
        CHECK(ok, "thread order is no permutation");
    }
    CHECK(memcmp(threads[0], threads[1], T * sizeof(int)) == 0, "one seed gave two thread orders");
    CHECK(memcmp(threads[0], threads[2], T * sizeof(int)) != 0, "two seeds gave one thread order");
    for (int k = 0; k < 3; k++)
        cudaFree(threads[k]);
    CHECK(probe_bad_block() == cudaErrorInvalidConfiguration, "a 1025-thread block launched");
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "the launch error was not kept");
    CHECK(cudaGetLastError() == cudaSuccess, "the launch error was not cleared");
    cudaFree(order), cudaFree(counter);
}

/* Full-size blocks (issue 29: a 1024-thread block crashed in swapcontext once the fiber pool had
 * grown). Each size runs twice, with two seeds; the sums are checked against a loop here. */
static void check_block_sizes(void) {
    enum { B = 2, MAX_T = 1024 };
    long long *sums, *neighbour;
    cudaMalloc((void **)&sums, B * sizeof *sums);
    cudaMalloc((void **)&neighbour, B * MAX_T * sizeof *neighbour);
    static const int sizes[] = {32, 256, 1024, 1024};
    for (int k = 0; k < 4; k++) {
        int T = sizes[k], warps = T / 32;
        cuda_emu_set_seed(11 + (uint64_t)k);
        CHECK(probe_block_sum(sums, neighbour, B, T) == cudaSuccess, "launch of %d threads", T);
        for (int b = 0; b < B; b++) {
            long long want = 0;
            for (int t = 0; t < T; t++)
                want += 1000LL * b + t;
            CHECK(sums[b] == want, "%d threads, block %d: sum %lld, want %lld", T, b, sums[b],
                  want);
            for (int t = 0; t < T; t++) {
                int w = (t / 32 + 1) % warps;
                long long nb = 0;
                for (int l = 0; l < 32; l++)
                    nb += 1000LL * b + w * 32 + l;
                if (neighbour[b * T + t] != nb) {
                    CHECK(0, "%d threads, block %d thread %d: neighbour warp sum %lld, want %lld",
                          T, b, t, neighbour[b * T + t], nb);
                    break;
                }
            }
        }
    }
    cudaFree(sums), cudaFree(neighbour);
}

/* Runs probe() in a child process; it must abort with `message` in its stderr. */
static void expect_abort(const char *name, int (*probe)(void), const char *message) {
    char path[512];
    snprintf(path, sizeof path, "%s", harness_tmp_path(name));
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) _exit(3);
        probe();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "%s: the launch did not abort", name);
    char text[1024] = {0};
    FILE *f = fopen(path, "r");
    if (f) {
        size_t got = fread(text, 1, sizeof text - 1, f);
        text[got] = 0;
        fclose(f);
    }
    CHECK(strstr(text, message) != NULL, "%s: no \"%s\" in its message: %s", name, message, text);
}

/* Element i of lane's fragment of `which` as the PTX ISA's "Matrix Fragments for mma.m16n8k16
 * with floating point type" (.f16/.bf16) states it, register by register (a register holds
 * elements 2r, 2r + 1). */
static void documented_coord(char which, int lane, int i, int *row, int *col) {
    int group = lane >> 2, tig = lane % 4, reg = i / 2, half = i % 2;
    if (which ==
        'a') { /* a0 a1 | a2 a3 | a4 a5 | a6 a7: rows g, g+8, g, g+8; cols +0, +0, +8, +8 */
        static const int row_add[4] = {0, 8, 0, 8}, col_add[4] = {0, 0, 8, 8};
        *row = group + row_add[reg], *col = tig * 2 + half + col_add[reg];
    } else if (which == 'b') { /* b0 b1 | b2 b3: k = tig*2 (+8), n = groupID */
        *row = tig * 2 + half + (reg ? 8 : 0), *col = group;
    } else { /* c0 c1 | c2 c3: rows g, g+8; cols tig*2 + {0, 1} */
        *row = group + (reg ? 8 : 0), *col = tig * 2 + half;
    }
}

static void check_mma_layout(void) {
    const struct {
        char which;
        int n, rows, cols;
    } mats[3] = {{'a', 8, 16, 16}, {'b', 4, 16, 8}, {'c', 4, 16, 8}};
    for (int m = 0; m < 3; m++) {
        int seen[16][16] = {{0}};
        for (int lane = 0; lane < 32; lane++)
            for (int i = 0; i < mats[m].n; i++) {
                int r, c, wr, wc;
                probe_mma_coord(mats[m].which, lane, i, &r, &c);
                documented_coord(mats[m].which, lane, i, &wr, &wc);
                CHECK(r == wr && c == wc, "%c%d of lane %d at (%d, %d), documented (%d, %d)",
                      mats[m].which, i, lane, r, c, wr, wc);
                if (r >= 0 && r < mats[m].rows && c >= 0 && c < mats[m].cols) seen[r][c]++;
            }
        int once = 0;
        for (int r = 0; r < mats[m].rows; r++)
            for (int c = 0; c < mats[m].cols; c++)
                once += seen[r][c] == 1;
        CHECK(once == mats[m].rows * mats[m].cols, "%c: %d of %d elements held exactly once",
              mats[m].which, once, mats[m].rows * mats[m].cols);
    }
    /* mma_a_from_c's premise: A's element i < 4 sits where C's element i does, i >= 4 where
     * C's element i - 4 does, 8 columns on (a product's D is the next product's A) */
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 8; i++) {
            int ar, ac, cr, cc;
            probe_mma_coord('a', lane, i, &ar, &ac);
            probe_mma_coord('c', lane, i & 3, &cr, &cc);
            CHECK(ar == cr && ac == cc + (i >= 4 ? 8 : 0), "a%d of lane %d is not c%d's place", i,
                  lane, i & 3);
        }
    /* the ISA's figures: lane 0 (T0), lane 5 (group 1, tig 1), lane 31 (group 7, tig 3) */
    const struct {
        char which;
        int lane, i, row, col;
    } fig[] = {{'a', 0, 0, 0, 0},  {'a', 0, 1, 0, 1},    {'a', 0, 2, 8, 0}, {'a', 0, 3, 8, 1},
               {'a', 0, 4, 0, 8},  {'a', 0, 7, 8, 9},    {'a', 5, 0, 1, 2}, {'a', 5, 6, 9, 10},
               {'a', 31, 0, 7, 6}, {'a', 31, 7, 15, 15}, {'b', 0, 0, 0, 0}, {'b', 0, 1, 1, 0},
               {'b', 0, 2, 8, 0},  {'b', 0, 3, 9, 0},    {'b', 5, 0, 2, 1}, {'b', 31, 3, 15, 7},
               {'c', 0, 0, 0, 0},  {'c', 0, 1, 0, 1},    {'c', 0, 2, 8, 0}, {'c', 5, 3, 9, 3},
               {'c', 31, 0, 7, 6}, {'c', 31, 3, 15, 7}};
    for (size_t f = 0; f < sizeof fig / sizeof fig[0]; f++) {
        int r, c;
        probe_mma_coord(fig[f].which, fig[f].lane, fig[f].i, &r, &c);
        CHECK(r == fig[f].row && c == fig[f].col,
              "figure: %c%d of lane %d at (%d, %d), not (%d, %d)", fig[f].which, fig[f].i,
              fig[f].lane, r, c, fig[f].row, fig[f].col);
    }
}

static uint64_t mma_rng = 0x2545f4914f6cdd1dull;
static uint32_t next32(void) {
    mma_rng = mma_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(mma_rng >> 33);
}
static float bf16_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
/* A random bf16: sign, exponent in [2^-6, 2^2), 7 random mantissa bits; or a small integer. */
static uint16_t random_bf16(bool integer) {
    float f;
    if (integer) {
        f = (float)((int)(next32() % 9) - 4);
    } else {
        uint32_t u = (uint32_t)(next32() & 1) << 31 | (uint32_t)(127 - 6 + next32() % 8) << 23 |
                     (next32() & 0x7f) << 16;
        memcpy(&f, &u, sizeof f);
    }
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16); /* exact: at most 8 significant bits */
}

static void check_mma(bool integer) {
    uint16_t a[256], b[128];
    float c[128], want[128], got[128];
    for (int i = 0; i < 256; i++)
        a[i] = random_bf16(integer);
    for (int i = 0; i < 128; i++) {
        b[i] = random_bf16(integer);
        c[i] = integer ? (float)((int)(next32() % 21) - 10) : bf16_float(random_bf16(false)) * 3.0f;
    }
    /* the exact sums: 16 products of 8-bit significands (16 bits each) within 2^-12..2^4 and c,
     * added in long double (64 bits) from k = 15 down: no rounding, then one to fp32 */
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            long double s = 0;
            for (int k = 15; k >= 0; k--)
                s += (long double)bf16_float(a[r * 16 + k]) * bf16_float(b[k * 8 + n]);
            want[r * 8 + n] = (float)(s + c[r * 8 + n]);
        }
    uint16_t *a_d, *b_d;
    float *c_d, *d_d;
    cudaMalloc((void **)&a_d, sizeof a), cudaMalloc((void **)&b_d, sizeof b);
    cudaMalloc((void **)&c_d, sizeof c), cudaMalloc((void **)&d_d, sizeof got);
    cudaMemcpy(a_d, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(b_d, b, sizeof b, cudaMemcpyHostToDevice);
    cudaMemcpy(c_d, c, sizeof c, cudaMemcpyHostToDevice);
    CHECK(probe_mma(d_d, a_d, b_d, c_d) == cudaSuccess, "mma launch");
    cudaMemcpy(got, d_d, sizeof got, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < 128; i++)
        if (memcmp(&got[i], &want[i], sizeof got[i]) != 0 && bad++ < 4)
            CHECK(false, "mma (%s) D[%d][%d] = %.9g, want %.9g", integer ? "integers" : "random",
                  i / 8, i % 8, got[i], want[i]);
    CHECK(bad == 0, "mma (%s): %d of 128 elements differ", integer ? "integers" : "random", bad);
    cudaFree(a_d), cudaFree(b_d), cudaFree(c_d), cudaFree(d_d);
}

int main(void) {
    check_mma_layout();
    check_mma(true);
    for (int round = 0; round < 4; round++)
        check_mma(false);
    check_shuffles();
    check_race_and_poison();
    check_block_order();
    check_block_sizes();
    expect_abort("divergent_barrier", probe_divergent_barrier,
                 "kernel divergent_barrier_kernel: block (0,0,0) thread (");
    expect_abort("divergent_barrier_text", probe_divergent_barrier,
                 "divergent __syncthreads: this and 63 more of the block's 128 threads wait at it "
                 "while 64 have returned");
    expect_abort("missing_lane", probe_missing_lane,
                 "__shfl_xor_sync with mask 0xffffffff never completes: lanes 0xffff0000 of the "
                 "mask do not arrive (lane 16 has returned)");
    expect_abort("caller_outside_mask", probe_caller_outside_mask,
                 "__shfl_down_sync with mask 0xfffffffe that leaves out the calling lane 0");
    expect_abort("mask_disagreement", probe_mask_disagreement, "but lane ");
    expect_abort("partial_warp", probe_partial_warp,
                 "__shfl_xor_sync mask 0xffffffff names lanes >= 16, which warp "
                 "1 of this block does not have");
    expect_abort("mma_missing_lane", probe_mma_missing_lane,
                 "mma.sync with mask 0xffffffff never completes: lanes 0xffff0000 of the mask do "
                 "not arrive (lane 16 has returned)");
    expect_abort("dynamic_shared", probe_dynamic_shared,
                 "launch asks for 1024 bytes of dynamic shared memory");
    return harness_finish("test_cuda_emu");
}
