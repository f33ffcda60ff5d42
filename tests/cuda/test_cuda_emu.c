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
 *    shared memory each abort the process with a message naming the case. */
#include "harness.h"
#include "emu/probes.h"
#include "kernels/cuda/emu/cuda_emu.h"

#include <fcntl.h>
#include <math.h>
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

int main(void) {
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
    expect_abort("dynamic_shared", probe_dynamic_shared,
                 "launch asks for 1024 bytes of dynamic shared memory");
    return harness_finish("test_cuda_emu");
}
