/* The CUDA backend's bf16 weight cache under autocast (kernels/cuda/weight_cache.h, backend_cuda.h
 * invariant 7) on cuda-emu: a linear's fp32 W is narrowed once and reused by the next products
 * (forward and backward), and every way the backend writes weights (the AdamW update, a copy
 * from the host, memset, a free whose block the pool hands out again) drops the kept copy: after
 * each, the cached backend's output equals, bit for bit, a fresh backend's (no cache history) on
 * the same W, which it can only if the copy was narrowed again. A W stored in bf16 is used as it
 * is (nothing narrowed). The counters (backend_cuda_memory) show how many narrowings were made.
 * Label gpu-emu. */
#include "common/error.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cuda/backend_cuda.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N   4
#define IN  32
#define OUT 16

static uint64_t rng = 0x243f6a8885a308d3ull;

static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (2.0 / 16777216.0) - 1.0);
}

static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = frand();
}

static float *up(const Backend *be, const float *host, size_t n) {
    float *d = be->alloc(be, n * sizeof *d, "test");
    CHECK(d != NULL, "alloc: %s", err_msg());
    be->copy(be, d, host, n * sizeof *d, BACKEND_HOST_TO_DEVICE);
    return d;
}

/* out (host, N x OUT) = the linear of x by W (device memory of be) on be. */
static void linear_on(const Backend *be, const float *x_dev, const float *w_dev, float *out) {
    float *o = be->alloc(be, N * OUT * sizeof *o, "out");
    be->linear(be, o, x_dev, (WeightRef){.f32 = w_dev}, NULL, NULL, N, IN, OUT);
    be->copy(be, out, o, N * OUT * sizeof *o, BACKEND_DEVICE_TO_HOST);
    be->free(be, o);
    CHECK(backend_cuda_status(be) == 0, "%s", err_msg());
}

/* The same linear on a fresh backend, from W's current values (read back from be). */
static void linear_fresh(const Backend *be, const float *w_dev, const float *x, float *out) {
    float w[OUT * IN];
    be->copy(be, w, w_dev, sizeof w, BACKEND_DEVICE_TO_HOST);
    Backend *f = backend_cuda_emu_autocast_new();
    float *fw = up(f, w, OUT * IN), *fx = up(f, x, N * IN);
    linear_on(f, fx, fw, out);
    f->free(f, fw), f->free(f, fx);
    backend_cuda_free(f);
}

static size_t narrowings(const Backend *be) {
    BackendCudaMemory m;
    backend_cuda_memory(be, &m);
    return m.weight_narrowings;
}

/* After a write to W: the cached backend's linear equals a fresh backend's, and W's copy was
 * narrowed once more. */
static void fresh_after(const char *what, const Backend *be, const float *x_dev, const float *x,
                        const float *w_dev, const float *before) {
    float got[N * OUT], want[N * OUT];
    size_t n0 = narrowings(be);
    linear_on(be, x_dev, w_dev, got);
    linear_fresh(be, w_dev, x, want);
    CHECK(memcmp(want, before, sizeof want) != 0,
          "%s: W's change does not show in the output (the test would prove nothing)", what);
    CHECK(memcmp(got, want, sizeof got) == 0, "%s: the output is the stale copy's", what);
    CHECK(narrowings(be) == n0 + 1, "%s: %zu narrowings, expected %zu", what, narrowings(be),
          n0 + 1);
}

int main(void) {
    Backend *be = backend_cuda_emu_autocast_new();
    CHECK(be != NULL, "%s", err_msg());
    float x[N * IN], w[OUT * IN], out1[N * OUT], out2[N * OUT];
    fill(x, N * IN), fill(w, OUT * IN);
    float *x_dev = up(be, x, N * IN), *w_dev = up(be, w, OUT * IN);

    /* narrowed once, then kept: a second forward and a backward reuse it */
    linear_on(be, x_dev, w_dev, out1);
    linear_on(be, x_dev, w_dev, out2);
    CHECK(memcmp(out1, out2, sizeof out1) == 0, "the kept copy gives the same output");
    float *g = up(be, out1, N * OUT), *din = be->alloc(be, N * IN * sizeof(float), "din");
    be->linear_backward(be, din, NULL, NULL, g, x_dev, (WeightRef){.f32 = w_dev}, N, IN, OUT);
    BackendCudaMemory mem;
    backend_cuda_memory(be, &mem);
    CHECK(mem.weight_narrowings == 1 && mem.weight_reuses == 2,
          "two forwards and a backward: %zu narrowings, %zu reuses (expected 1 and 2)",
          mem.weight_narrowings, mem.weight_reuses);
    CHECK(mem.weight_cache == OUT * IN * sizeof(uint16_t), "the cache holds W in bf16: %zu bytes",
          mem.weight_cache);

    /* the AdamW update writes W: the next product narrows it again */
    float grad[OUT * IN], zeros[2 * OUT * IN] = {0};
    fill(grad, OUT * IN);
    float *g_dev = up(be, grad, OUT * IN), *mv = up(be, zeros, 2 * OUT * IN);
    AdamWStepCoefs c = {.beta1 = 0.9f,
                        .beta2 = 0.999f,
                        .one_minus_beta1 = 0.1f,
                        .one_minus_beta2 = 0.001f,
                        .eps = 1e-8f,
                        .shrink = 1.0f,
                        .neg_step = -0.05f,
                        .bc2_sqrt = sqrtf(0.001f),
                        .grad_scale = 1.0f};
    be->adamw(be, w_dev, mv, mv + OUT * IN, g_dev, OUT * IN, &c, 0.05f, 1.0f / sqrtf(0.001f));
    fresh_after("adamw", be, x_dev, x, w_dev, out1);

    /* a copy from the host over W (a checkpoint, an upload) */
    float w2[OUT * IN];
    fill(w2, OUT * IN);
    be->copy(be, w_dev, w2, sizeof w2, BACKEND_HOST_TO_DEVICE);
    fresh_after("copy", be, x_dev, x, w_dev, out1);

    /* memset over part of W */
    be->memset(be, w_dev + OUT * IN / 2, 0, OUT * IN / 2 * sizeof(float));
    fresh_after("memset", be, x_dev, x, w_dev, out1);

    /* W freed; the pool hands its block out again for other weights */
    linear_on(be, x_dev, w_dev, out2);
    float *old = w_dev;
    be->free(be, w_dev);
    fill(w2, OUT * IN);
    w_dev = be->alloc(be, sizeof w2, "w again");
    CHECK(w_dev == old, "the pool reuses the freed block (the case this checks)");
    /* written by a kernel, not a copy (so only the free can have dropped the entry) */
    float *w2_dev = up(be, w2, OUT * IN);
    be->add(be, w_dev, w2_dev, w2_dev, OUT * IN);
    fresh_after("free and reuse", be, x_dev, x, w_dev, out2);

    /* a W stored in bf16 is read as it is */
    size_t n0 = narrowings(be);
    uint16_t *w16 = be->alloc(be, OUT * IN * sizeof *w16, "w16");
    be->memset(be, w16, 0x3f, OUT * IN * sizeof *w16);
    float *o = be->alloc(be, N * OUT * sizeof *o, "out");
    be->linear(be, o, x_dev, (WeightRef){.bf16 = w16}, NULL, NULL, N, IN, OUT);
    CHECK(backend_cuda_status(be) == 0 && narrowings(be) == n0, "a bf16 W is not narrowed");

    be->free(be, o), be->free(be, w16), be->free(be, w2_dev), be->free(be, g_dev);
    be->free(be, mv), be->free(be, g), be->free(be, din), be->free(be, x_dev), be->free(be, w_dev);
    backend_cuda_memory(be, &mem);
    CHECK(mem.weight_cache == 0, "every weight freed: the cache holds %zu bytes", mem.weight_cache);
    backend_cuda_free(be);
    return harness_finish("test_weight_cache");
}
