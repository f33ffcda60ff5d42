/* The CUDA backend's own kernels (kernels/cuda/cuda_kernels.h) against the CPU backend
 * (kernels/backend.h), every op x a few shapes, on fresh random inputs with outputs poisoned
 * (0xff bytes, NaN) before each call: a value the kernel does not write shows as NaN.
 * fp32 bound: |got - want| <= 1e-5 |want| + 1e-6 max|want| per tensor (the second term for
 * values that cancel to near zero, where a relative bound alone means nothing).
 * Each op runs twice and the two results must be bitwise equal (no float atomics); under cuda-emu
 * the second run uses another scheduler seed, so another interleaving of the threads.
 *
 * Built twice from this source: test_backend_ops against cuda-emu (RLHF_CUDA_EMU, label
 * gpu-emu, every CI run), and test_backend_ops_cuda against the real device with -DRLHF_CUDA
 * (label gpu), which exits 77 (skipped) where no device is present. */
#include "common/error.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_kernels.h"

#ifdef RLHF_CUDA_EMU
#include "kernels/cuda/emu/cuda_emu.h"
#define BACKEND_NAME "cuda-emu"
#else
#include <cuda_runtime_api.h>
#define BACKEND_NAME "cuda"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CPU backend_cpu()

static uint64_t rng = 0x243f6a8885a308d3ull;

static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

static float *host_random(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = frand();
    return x;
}

static int *host_ids(size_t n, int below) {
    int *ids = malloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int)((rng >> 33) % (uint64_t)below);
    }
    return ids;
}

/* Device memory holding a copy of host (NULL: poisoned, every byte 0xff). */
static void *dev(const void *host, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) {
        fprintf(stderr, "test_backend_ops: cudaMalloc of %zu bytes failed\n", bytes);
        exit(1);
    }
    if (host)
        cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    else
        cudaMemset(d, 0xff, bytes);
    return d;
}

/* A host copy of bytes of device memory (caller frees). */
static void *fetch(const void *d, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    cudaDeviceSynchronize();
    cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
    return h;
}

/* Run `run` of two: under cuda-emu each with its own scheduler seed, from CUDA_EMU_SEED (1 when
 * unset) and that plus one. */
static void start_run(int run) {
#ifdef RLHF_CUDA_EMU
    const char *env = getenv("CUDA_EMU_SEED");
    cuda_emu_set_seed((env ? strtoull(env, NULL, 0) : 1) + (uint64_t)run);
#else
    (void)run;
#endif
}

/* got against want (the CPU's), n floats, as the header says; got_again: the second run. */
static void expect(const char *what, const float *got, const float *got_again, const float *want,
                   size_t n) {
    double scale = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (!harness_close(got[i], want[i], 1e-5, 1e-6 * scale)) {
            if (!bad) first = i;
            bad++;
        }
    CHECK(bad == 0, "%s: %zu of %zu values off the CPU's (first [%zu]: %.9g, want %.9g)", what, bad,
          n, first, bad ? got[first] : 0.0, bad ? want[first] : 0.0);
    CHECK(memcmp(got, got_again, n * sizeof *got) == 0, "%s: two runs differ", what);
}

static void check_rmsnorm(int n, int c) {
    char what[64];
    size_t nc = (size_t)n * c;
    float *x = host_random(nc), *w = host_random((size_t)c), *dy = host_random(nc);
    float *dw0 = host_random((size_t)c);
    float *want = malloc(nc * sizeof *want), *want_dx = malloc(nc * sizeof *want_dx);
    float *want_dw = malloc((size_t)c * sizeof *want_dw);
    CPU->rmsnorm(CPU, want, x, w, n, c, 1e-6f);
    memcpy(want_dw, dw0, (size_t)c * sizeof *dw0);
    CPU->rmsnorm_backward(CPU, want_dx, want_dw, dy, x, w, n, c, 1e-6f);

    float *dx_dev = dev(x, nc * 4), *dw_dev = dev(w, (size_t)c * 4), *dy_dev = dev(dy, nc * 4);
    float *got[2], *got_dx[2], *got_dw[2], *got_alias[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *out = dev(NULL, nc * 4), *din = dev(NULL, nc * 4), *rstd = dev(NULL, (size_t)n * 4);
        float *dwacc = dev(dw0, (size_t)c * 4), *alias = dev(dy, nc * 4);
        CHECK(cuda_rmsnorm_forward(out, dx_dev, dw_dev, n, c, 1e-6f, NULL) == 0, "launch");
        CHECK(cuda_rmsnorm_backward(din, dwacc, dy_dev, dx_dev, dw_dev, n, c, 1e-6f, rstd, NULL) ==
                  0,
              "launch");
        /* din aliasing dout, no dw */
        CHECK(cuda_rmsnorm_backward(alias, NULL, alias, dx_dev, dw_dev, n, c, 1e-6f, rstd, NULL) ==
                  0,
              "launch");
        got[run] = fetch(out, nc * 4), got_dx[run] = fetch(din, nc * 4);
        got_dw[run] = fetch(dwacc, (size_t)c * 4), got_alias[run] = fetch(alias, nc * 4);
        cudaFree(out), cudaFree(din), cudaFree(rstd), cudaFree(dwacc), cudaFree(alias);
    }
    snprintf(what, sizeof what, "rmsnorm %d x %d", n, c);
    expect(what, got[0], got[1], want, nc);
    snprintf(what, sizeof what, "rmsnorm_backward dx %d x %d", n, c);
    expect(what, got_dx[0], got_dx[1], want_dx, nc);
    snprintf(what, sizeof what, "rmsnorm_backward dw %d x %d", n, c);
    expect(what, got_dw[0], got_dw[1], want_dw, (size_t)c);
    snprintf(what, sizeof what, "rmsnorm_backward dx=dout %d x %d", n, c);
    expect(what, got_alias[0], got_alias[1], want_dx, nc);
    for (int run = 0; run < 2; run++)
        free(got[run]), free(got_dx[run]), free(got_dw[run]), free(got_alias[run]);
    cudaFree(dx_dev), cudaFree(dw_dev), cudaFree(dy_dev);
    free(x), free(w), free(dy), free(dw0), free(want), free(want_dx), free(want_dw);
}

static void check_rope(int n, int heads, int hd, int rot, int max_pos, bool with_positions) {
    char what[80];
    size_t nx = (size_t)n * heads * hd, nt = (size_t)max_pos * (rot / 2);
    float *x = host_random(nx), *cos_t = host_random(nt), *sin_t = host_random(nt);
    int *pos = with_positions ? host_ids((size_t)n, max_pos) : NULL;
    float *want = malloc(nx * 4), *want_back = malloc(nx * 4);
    memcpy(want, x, nx * 4), memcpy(want_back, x, nx * 4);
    CPU->rope(CPU, want, pos, cos_t, sin_t, n, heads, hd, rot);
    CPU->rope_backward(CPU, want_back, pos, cos_t, sin_t, n, heads, hd, rot);
    float *cos_d = dev(cos_t, nt * 4), *sin_d = dev(sin_t, nt * 4);
    int *pos_d = pos ? dev(pos, (size_t)n * 4) : NULL;
    float *got[2], *got_back[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *a = dev(x, nx * 4), *b = dev(x, nx * 4);
        CHECK(cuda_rope_forward(a, pos_d, cos_d, sin_d, n, heads, hd, rot, NULL) == 0, "launch");
        CHECK(cuda_rope_backward(b, pos_d, cos_d, sin_d, n, heads, hd, rot, NULL) == 0, "launch");
        got[run] = fetch(a, nx * 4), got_back[run] = fetch(b, nx * 4);
        cudaFree(a), cudaFree(b);
    }
    snprintf(what, sizeof what, "rope %d x %d x %d rot %d%s", n, heads, hd, rot,
             pos ? " positions" : "");
    expect(what, got[0], got[1], want, nx);
    snprintf(what, sizeof what, "rope_backward %d x %d x %d rot %d%s", n, heads, hd, rot,
             pos ? " positions" : "");
    expect(what, got_back[0], got_back[1], want_back, nx);
    for (int run = 0; run < 2; run++)
        free(got[run]), free(got_back[run]);
    cudaFree(cos_d), cudaFree(sin_d), cudaFree(pos_d);
    free(x), free(cos_t), free(sin_t), free(pos), free(want), free(want_back);
}

/* cuda_rope_qk on q (n, qh, hd) and k (n, kh, hd), laid out in one buffer as q, a gap, k, a gap:
 * against the CPU's rope on each (the header's bound) and bitwise against cuda_rope_forward /
 * cuda_rope_backward on each (its contract), the gaps untouched. */
static void check_rope_qk(int n, int qh, int kh, int hd, int rot, int max_pos) {
    char what[96];
    size_t nq = (size_t)n * qh * hd, nk = (size_t)n * kh * hd, nt = (size_t)max_pos * (rot / 2);
    size_t k_at = nq + 11, total = k_at + nk + 13;
    float *x = host_random(total), *cos_t = host_random(nt), *sin_t = host_random(nt);
    int *pos = host_ids((size_t)n, max_pos);
    float *cos_d = dev(cos_t, nt * 4), *sin_d = dev(sin_t, nt * 4);
    int *pos_d = dev(pos, (size_t)n * 4);
    for (int backward = 0; backward < 2; backward++) {
        float *want = malloc(total * 4);
        memcpy(want, x, total * 4);
        if (backward) {
            CPU->rope_backward(CPU, want, pos, cos_t, sin_t, n, qh, hd, rot);
            CPU->rope_backward(CPU, want + k_at, pos, cos_t, sin_t, n, kh, hd, rot);
        } else {
            CPU->rope(CPU, want, pos, cos_t, sin_t, n, qh, hd, rot);
            CPU->rope(CPU, want + k_at, pos, cos_t, sin_t, n, kh, hd, rot);
        }
        float *single_d = dev(x, total * 4);
        int (*one)(float *, const int *, const float *, const float *, int, int, int, int, void *) =
            backward ? cuda_rope_backward : cuda_rope_forward;
        CHECK(one(single_d, pos_d, cos_d, sin_d, n, qh, hd, rot, NULL) == 0, "launch");
        CHECK(one(single_d + k_at, pos_d, cos_d, sin_d, n, kh, hd, rot, NULL) == 0, "launch");
        float *single = fetch(single_d, total * 4);
        float *got[2];
        for (int run = 0; run < 2; run++) {
            start_run(run);
            float *xd = dev(x, total * 4);
            CHECK(cuda_rope_qk(xd, xd + k_at, pos_d, cos_d, sin_d, n, qh, kh, hd, rot, backward,
                               NULL) == 0,
                  "launch");
            got[run] = fetch(xd, total * 4);
            cudaFree(xd);
        }
        snprintf(what, sizeof what, "rope_qk%s %d x (%d + %d) x %d rot %d",
                 backward ? " backward" : "", n, qh, kh, hd, rot);
        expect(what, got[0], got[1], want, total);
        CHECK(memcmp(got[0], single, total * 4) == 0, "%s: not the bits of two single launches",
              what);
        for (int run = 0; run < 2; run++)
            free(got[run]);
        free(single), free(want), cudaFree(single_d);
    }
    cudaFree(cos_d), cudaFree(sin_d), cudaFree(pos_d);
    free(x), free(cos_t), free(sin_t), free(pos);
}

static void check_swiglu(size_t n) {
    char what[64];
    float *gate = host_random(n), *up = host_random(n), *dout = host_random(n);
    for (size_t i = 0; i < n; i++)
        gate[i] *= 4.0f; /* sigmoid's tails too */
    float *want = malloc(n * 4), *want_dg = malloc(n * 4), *want_du = malloc(n * 4);
    CPU->swiglu(CPU, want, gate, up, n);
    CPU->swiglu_backward(CPU, want_dg, want_du, dout, gate, up, n);
    float *gate_d = dev(gate, n * 4), *up_d = dev(up, n * 4);
    float *got[2], *got_dg[2], *got_du[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *out = dev(NULL, n * 4), *dg = dev(dout, n * 4), *du = dev(NULL, n * 4);
        CHECK(cuda_swiglu_forward(out, gate_d, up_d, n, NULL) == 0, "launch");
        /* dgate aliasing dout, as backward.c calls it */
        CHECK(cuda_swiglu_backward(dg, du, dg, gate_d, up_d, n, NULL) == 0, "launch");
        got[run] = fetch(out, n * 4), got_dg[run] = fetch(dg, n * 4),
        got_du[run] = fetch(du, n * 4);
        cudaFree(out), cudaFree(dg), cudaFree(du);
    }
    snprintf(what, sizeof what, "swiglu %zu", n);
    expect(what, got[0], got[1], want, n);
    snprintf(what, sizeof what, "swiglu_backward dgate %zu", n);
    expect(what, got_dg[0], got_dg[1], want_dg, n);
    snprintf(what, sizeof what, "swiglu_backward dup %zu", n);
    expect(what, got_du[0], got_du[1], want_du, n);
    for (int run = 0; run < 2; run++)
        free(got[run]), free(got_dg[run]), free(got_du[run]);
    cudaFree(gate_d), cudaFree(up_d);
    free(gate), free(up), free(dout), free(want), free(want_dg), free(want_du);
}

static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

static void check_embedding(int vocab, int n, int h, bool bf16) {
    char what[80];
    size_t nt = (size_t)vocab * h, nx = (size_t)n * h;
    float *table = host_random(nt), *dx = host_random(nx), *dtable0 = host_random(nt);
    uint16_t *table16 = malloc(nt * 2);
    for (size_t i = 0; i < nt; i++)
        table16[i] = bf16_bits(table[i]);
    int *ids = host_ids((size_t)n, vocab); /* small vocab: repeated ids */
    int skip = ids[n / 2];
    WeightRef w = bf16 ? (WeightRef){.bf16 = table16} : (WeightRef){.f32 = table};
    float *want = malloc(nx * 4), *want_dt = malloc(nt * 4);
    CPU->embedding_gather(CPU, want, w, ids, n, h);
    memcpy(want_dt, dtable0, nt * 4);
    CPU->embedding_scatter_add(CPU, want_dt, dx, ids, n, h, skip);
    float *table_d = dev(table, nt * 4), *dx_d = dev(dx, nx * 4);
    uint16_t *table16_d = dev(table16, nt * 2);
    int *ids_d = dev(ids, (size_t)n * 4);
    float *got[2], *got_dt[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *out = dev(NULL, nx * 4), *dt = dev(dtable0, nt * 4);
        CHECK(cuda_embedding_gather(out, bf16 ? NULL : table_d, bf16 ? table16_d : NULL, ids_d, n,
                                    h, NULL) == 0,
              "launch");
        CHECK(cuda_embedding_scatter_add(dt, dx_d, ids_d, n, h, skip, NULL) == 0, "launch");
        got[run] = fetch(out, nx * 4), got_dt[run] = fetch(dt, nt * 4);
        cudaFree(out), cudaFree(dt);
    }
    snprintf(what, sizeof what, "embedding_gather %s %d x %d", bf16 ? "bf16" : "f32", n, h);
    expect(what, got[0], got[1], want, nx);
    snprintf(what, sizeof what, "embedding_scatter_add %d x %d skip %d", n, h, skip);
    expect(what, got_dt[0], got_dt[1], want_dt, nt);
    for (int run = 0; run < 2; run++)
        free(got[run]), free(got_dt[run]);
    cudaFree(table_d), cudaFree(dx_d), cudaFree(table16_d), cudaFree(ids_d);
    free(table), free(dx), free(dtable0), free(table16), free(ids), free(want), free(want_dt);
}

static void check_add_scale(size_t n) {
    char what[64];
    float *a = host_random(n), *b = host_random(n), f = frand();
    float *want = malloc(n * 4), *want_s = malloc(n * 4);
    CPU->add(CPU, want, a, b, n);
    memcpy(want_s, a, n * 4);
    CPU->scale(CPU, want_s, f, n);
    float *a_d = dev(a, n * 4), *b_d = dev(b, n * 4);
    float *got[2], *got_alias[2], *got_s[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *out = dev(NULL, n * 4), *alias = dev(a, n * 4), *x = dev(a, n * 4);
        CHECK(cuda_add(out, a_d, b_d, n, NULL) == 0, "launch");
        CHECK(cuda_add(alias, alias, b_d, n, NULL) == 0, "launch"); /* out aliasing a */
        CHECK(cuda_scale(x, f, n, NULL) == 0, "launch");
        got[run] = fetch(out, n * 4), got_alias[run] = fetch(alias, n * 4);
        got_s[run] = fetch(x, n * 4);
        cudaFree(out), cudaFree(alias), cudaFree(x);
    }
    snprintf(what, sizeof what, "add %zu", n);
    expect(what, got[0], got[1], want, n);
    snprintf(what, sizeof what, "add out=a %zu", n);
    expect(what, got_alias[0], got_alias[1], want, n);
    snprintf(what, sizeof what, "scale %zu", n);
    expect(what, got_s[0], got_s[1], want_s, n);
    for (int run = 0; run < 2; run++)
        free(got[run]), free(got_alias[run]), free(got_s[run]);
    cudaFree(a_d), cudaFree(b_d);
    free(a), free(b), free(want), free(want_s);
}

static void check_rows(int src_rows, int n, int width) {
    char what[80];
    size_t ns = (size_t)src_rows * width, nd = (size_t)n * width;
    float *src = host_random(ns), *rows = host_random(nd), *dst0 = host_random(ns);
    int *idx = host_ids((size_t)n, src_rows); /* n > src_rows: repeated rows */
    float *want = malloc(nd * 4), *want_sc = malloc(ns * 4);
    CPU->rows_gather(CPU, want, src, idx, n, width);
    memcpy(want_sc, dst0, ns * 4);
    CPU->rows_scatter_add(CPU, want_sc, rows, idx, n, width);
    float *src_d = dev(src, ns * 4), *rows_d = dev(rows, nd * 4);
    int *idx_d = dev(idx, (size_t)n * 4);
    float *got[2], *got_sc[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *out = dev(NULL, nd * 4), *acc = dev(dst0, ns * 4);
        CHECK(cuda_rows_gather(out, src_d, idx_d, n, width, NULL) == 0, "launch");
        CHECK(cuda_rows_scatter_add(acc, rows_d, idx_d, n, width, NULL) == 0, "launch");
        got[run] = fetch(out, nd * 4), got_sc[run] = fetch(acc, ns * 4);
        cudaFree(out), cudaFree(acc);
    }
    snprintf(what, sizeof what, "rows_gather %d of %d x %d", n, src_rows, width);
    expect(what, got[0], got[1], want, nd);
    snprintf(what, sizeof what, "rows_scatter_add %d into %d x %d", n, src_rows, width);
    expect(what, got_sc[0], got_sc[1], want_sc, ns);
    for (int run = 0; run < 2; run++)
        free(got[run]), free(got_sc[run]);
    cudaFree(src_d), cudaFree(rows_d), cudaFree(idx_d);
    free(src), free(rows), free(dst0), free(idx), free(want), free(want_sc);
}

/* A batch in the shared-prefix layout: a prompt of P rows (its own segment), two responses
 * after it that both see it as their prefix, and one plain sequence of C rows (more than the
 * kernel's 128-key tile: the online softmax's rescaling); two rows at the end belong
 * to no segment. seq_index is each row's position in its sequence. */
static void check_attention(int nh, int nkv, int hd, int window, int C) {
    char what[96];
    enum { P = 6, A = 10, B = 12, PAD = 2 };
    int n = P + A + B + C + PAD;
    AttnSegment segs[4] = {{.start = 0, .len = P},
                           {.start = P, .len = A, .prefix_start = 0, .prefix_len = P},
                           {.start = P + A, .len = B, .prefix_start = 0, .prefix_len = P},
                           {.start = P + A + B, .len = C}};
    int32_t *seq_index = malloc((size_t)n * sizeof *seq_index);
    for (int r = 0; r < n; r++)
        seq_index[r] = r < P ? r : r < P + A ? r : r < P + A + B ? r - A : r - (P + A + B);
    size_t nq = (size_t)n * nh * hd, nk = (size_t)n * nkv * hd;
    float *q = host_random(nq), *k = host_random(nk), *v = host_random(nk);
    float *want = malloc(nq * 4);
    for (size_t i = 0; i < nq; i++)
        want[i] = NAN;
    CPU->attention(CPU, want, q, k, v, segs, 4, seq_index, nh, nkv, hd, window);
    float *q_d = dev(q, nq * 4), *k_d = dev(k, nk * 4), *v_d = dev(v, nk * 4);
    AttnSegment *segs_d = dev(segs, sizeof segs);
    int *si_d = dev(seq_index, (size_t)n * sizeof *seq_index);
    float *dout = host_random(nq);
    float *want_dq = malloc(nq * 4), *want_dk = malloc(nk * 4), *want_dv = malloc(nk * 4);
    CPU->attention_backward(CPU, want_dq, want_dk, want_dv, dout, q, k, v, segs, 4, seq_index, n,
                            nh, nkv, hd, window);
    float *dout_d = dev(dout, nq * 4), *stats = dev(NULL, 2 * (size_t)n * nh * 4);
    float *got_dq[2], *got_dk[2], *got_dv[2];
    float *got[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *dq = dev(NULL, nq * 4), *dk = dev(NULL, nk * 4), *dv = dev(NULL, nk * 4);
        CHECK(cuda_attention_backward(dq, dk, dv, dout_d, q_d, k_d, v_d, segs_d, 4, C > B ? C : B,
                                      si_d, n, nh, nkv, hd, window, stats, NULL) == 0,
              "launch");
        got_dq[run] = fetch(dq, nq * 4), got_dk[run] = fetch(dk, nk * 4);
        got_dv[run] = fetch(dv, nk * 4);
        cudaFree(dq), cudaFree(dk), cudaFree(dv);
        float *out = dev(NULL, nq * 4);
        CHECK(cuda_attention_forward(out, q_d, k_d, v_d, segs_d, 4, C > B ? C : B, si_d, nh, nkv,
                                     hd, window, NULL) == 0,
              "launch");
        got[run] = fetch(out, nq * 4);
        cudaFree(out);
    }
    size_t seg_values = (size_t)(n - PAD) * nh * hd; /* the padding rows are not written */
    snprintf(what, sizeof what, "attention nh %d nkv %d hd %d window %d long %d", nh, nkv, hd,
             window, C);
    expect(what, got[0], got[1], want, seg_values);
    snprintf(what, sizeof what, "attention_backward dq nh %d nkv %d hd %d window %d long %d", nh,
             nkv, hd, window, C);
    expect(what, got_dq[0], got_dq[1], want_dq, seg_values);
    snprintf(what, sizeof what, "attention_backward dk nh %d nkv %d hd %d window %d long %d", nh,
             nkv, hd, window, C);
    expect(what, got_dk[0], got_dk[1], want_dk, nk);
    snprintf(what, sizeof what, "attention_backward dv nh %d nkv %d hd %d window %d long %d", nh,
             nkv, hd, window, C);
    expect(what, got_dv[0], got_dv[1], want_dv, nk);
    for (int run = 0; run < 2; run++)
        free(got[run]), free(got_dq[run]), free(got_dk[run]), free(got_dv[run]);
    cudaFree(dout_d), cudaFree(stats);
    free(dout), free(want_dq), free(want_dk), free(want_dv);
    cudaFree(q_d), cudaFree(k_d), cudaFree(v_d), cudaFree(segs_d), cudaFree(si_d);
    free(q), free(k), free(v), free(want), free(seq_index);
}

/* The KV-cache append (kv_cache_write): n new rows of K and V at their (slot, position) in a
 * cache of 3 slots filled with random values, against the copy per row that model/forward_cached
 * does without the op (the CPU's path); every other cache row must be left as it was. */
static void check_kv_cache_write(int kvd) {
    char what[96];
    enum { SLOTS = 3, MAX_LEN = 40, N = 6 };
    int32_t slot[N] = {1, 0, 2, 1, 1, 0}, pos[N] = {0, 39, 17, 18, 19, 5};
    size_t nc = (size_t)SLOTS * MAX_LEN * kvd, nr = (size_t)N * kvd;
    float *kc = host_random(nc), *vc = host_random(nc), *k = host_random(nr), *v = host_random(nr);
    float *want_k = malloc(nc * 4), *want_v = malloc(nc * 4);
    memcpy(want_k, kc, nc * 4), memcpy(want_v, vc, nc * 4);
    for (int r = 0; r < N; r++) {
        size_t at = ((size_t)slot[r] * MAX_LEN + (size_t)pos[r]) * kvd;
        memcpy(want_k + at, k + (size_t)r * kvd, kvd * 4);
        memcpy(want_v + at, v + (size_t)r * kvd, kvd * 4);
    }
    float *k_d = dev(k, nr * 4), *v_d = dev(v, nr * 4);
    int *slot_d = dev(slot, sizeof slot), *pos_d = dev(pos, sizeof pos);
    float *got_k[2], *got_v[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *kc_d = dev(kc, nc * 4), *vc_d = dev(vc, nc * 4);
        CHECK(cuda_kv_cache_write(kc_d, vc_d, k_d, v_d, slot_d, pos_d, N, MAX_LEN, kvd, NULL) == 0,
              "launch");
        got_k[run] = fetch(kc_d, nc * 4), got_v[run] = fetch(vc_d, nc * 4);
        cudaFree(kc_d), cudaFree(vc_d);
    }
    snprintf(what, sizeof what, "kv_cache_write keys kvd %d", kvd);
    expect(what, got_k[0], got_k[1], want_k, nc);
    snprintf(what, sizeof what, "kv_cache_write values kvd %d", kvd);
    expect(what, got_v[0], got_v[1], want_v, nc);
    for (int run = 0; run < 2; run++)
        free(got_k[run]), free(got_v[run]);
    cudaFree(k_d), cudaFree(v_d), cudaFree(slot_d), cudaFree(pos_d);
    free(kc), free(vc), free(k), free(v), free(want_k), free(want_v);
}

/* Decoding rows over a KV cache of 3 slots: positions in the first tile, past it (two tiles),
 * the first position; the cache rows past each position are poison (never read). */
static void check_attention_cached(int nh, int nkv, int hd, int window) {
    char what[96];
    enum { SLOTS = 3, MAX_LEN = 150, N = 5 };
    int32_t slot[N] = {0, 2, 1, 2, 0}, pos[N] = {7, 140, 0, 129, 64};
    size_t kvd = (size_t)nkv * hd, nc = (size_t)SLOTS * MAX_LEN * kvd, nq = (size_t)N * nh * hd;
    float *kc = host_random(nc), *vc = host_random(nc), *q = host_random(nq);
    for (int sl = 0; sl < SLOTS; sl++) {
        int last = -1;
        for (int r = 0; r < N; r++)
            if (slot[r] == sl && pos[r] > last) last = pos[r];
        for (size_t i = ((size_t)sl * MAX_LEN + (size_t)last + 1) * kvd;
             i < (size_t)(sl + 1) * MAX_LEN * kvd; i++)
            kc[i] = vc[i] = NAN;
    }
    float *want = malloc(nq * 4);
    CPU->attention_cached(CPU, want, q, kc, vc, slot, pos, N, MAX_LEN, nh, nkv, hd, window);
    float *kc_d = dev(kc, nc * 4), *vc_d = dev(vc, nc * 4), *q_d = dev(q, nq * 4);
    int *slot_d = dev(slot, sizeof slot), *pos_d = dev(pos, sizeof pos);
    float *got[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *out = dev(NULL, nq * 4);
        CHECK(cuda_attention_cached(out, q_d, kc_d, vc_d, slot_d, pos_d, N, MAX_LEN, nh, nkv, hd,
                                    window, NULL) == 0,
              "launch");
        got[run] = fetch(out, nq * 4);
        cudaFree(out);
    }
    snprintf(what, sizeof what, "attention_cached nh %d nkv %d hd %d window %d", nh, nkv, hd,
             window);
    expect(what, got[0], got[1], want, nq);
    for (int run = 0; run < 2; run++)
        free(got[run]);
    cudaFree(kc_d), cudaFree(vc_d), cudaFree(q_d), cudaFree(slot_d), cudaFree(pos_d);
    free(kc), free(vc), free(q), free(want);
}

static void check_adamw(size_t n) {
    char what[64];
    float *p = host_random(n), *m = host_random(n), *v = host_random(n), *g = host_random(n);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] * v[i]; /* a second moment is >= 0 */
    AdamWStepCoefs c = {.beta1 = 0.9f,
                        .beta2 = 0.999f,
                        .one_minus_beta1 = 0.1f,
                        .one_minus_beta2 = 0.001f,
                        .eps = 1e-8f,
                        .shrink = 1.0f - 1e-3f * 0.01f,
                        .neg_step = 0.0f,
                        .bc2_sqrt = 0.0f,
                        .grad_scale = 0.75f}; /* the clip folded into the read, as the CPU's */
    float step_size = 1e-3f / (1.0f - 0.9f * 0.9f * 0.9f),
          inv_bc2_sqrt = 1.0f / sqrtf(1.0f - 0.997f);
    float *wp = malloc(n * 4), *wm = malloc(n * 4), *wv = malloc(n * 4);
    memcpy(wp, p, n * 4), memcpy(wm, m, n * 4), memcpy(wv, v, n * 4);
    CPU->adamw(CPU, wp, wm, wv, g, n, &c, step_size, inv_bc2_sqrt);
    float *g_d = dev(g, n * 4);
    float *got[2][3];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *pd = dev(p, n * 4), *md = dev(m, n * 4), *vd = dev(v, n * 4);
        CHECK(cuda_adamw(pd, md, vd, g_d, n, &c, step_size, inv_bc2_sqrt, NULL) == 0, "launch");
        got[run][0] = fetch(pd, n * 4), got[run][1] = fetch(md, n * 4);
        got[run][2] = fetch(vd, n * 4);
        cudaFree(pd), cudaFree(md), cudaFree(vd);
    }
    const float *want[3] = {wp, wm, wv};
    const char *names[3] = {"p", "m", "v"};
    for (int k = 0; k < 3; k++) {
        snprintf(what, sizeof what, "adamw %s %zu", names[k], n);
        expect(what, got[0][k], got[1][k], want[k], n);
        /* adamw.cu rounds every operation as the CPU's C11 loop does: no fused product */
        CHECK(memcmp(got[0][k], want[k], n * 4) == 0, "%s: not the CPU's bits", what);
    }
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < 3; k++)
            free(got[run][k]);
    cudaFree(g_d);
    free(p), free(m), free(v), free(g), free(wp), free(wm), free(wv);
}

static void check_sum_squares(size_t n) {
    float *g = host_random(n);
    double want = CPU->sum_squares(CPU, g, n), got[2];
    float *g_d = dev(g, n * 4), *partials = dev(NULL, CUDA_SUM_SQUARES_PARTIALS * 4);
    for (int run = 0; run < 2; run++) {
        start_run(run);
        double *out = dev(NULL, sizeof(double));
        CHECK(cuda_sum_squares(out, g_d, n, partials, NULL) == 0, "launch");
        double *h = fetch(out, sizeof(double));
        got[run] = *h;
        free(h), cudaFree(out);
    }
    CHECK(harness_close(got[0], want, 1e-5, 0.0), "sum_squares %zu: %.12g, want %.12g", n, got[0],
          want);
    CHECK(memcmp(&got[0], &got[1], sizeof got[0]) == 0, "sum_squares %zu: two runs differ", n);
    cudaFree(g_d), cudaFree(partials);
    free(g);
}

/* The multi-tensor kernels' tensors: sizes (0: empty; 1; below, at and above a block of 256;
 * above 128 blocks of 256 values, where cuda_sum_squares' partition stops growing) placed at
 * offsets of one buffer with a gap of GAP values after each, so a value written off its tensor
 * shows in a gap. */
#define GAP 37
static const size_t multi_sizes[] = {300, 1, 0, 256, 257, 40000, 7, 4096 + 5, 100003};
#define N_MULTI ((int)(sizeof multi_sizes / sizeof *multi_sizes))

static size_t multi_layout(size_t *offset) {
    size_t at = 0;
    for (int t = 0; t < N_MULTI; t++)
        offset[t] = at, at += multi_sizes[t] + GAP;
    return at;
}

/* cuda_sum_squares_multi: the CPU's per-tensor sums to 1e-5, and the bits of a host loop over
 * cuda_sum_squares (its contract), twice (another interleaving) with poisoned scratch. */
static void check_sum_squares_multi(void) {
    size_t offset[N_MULTI], total_n = multi_layout(offset);
    float *g = host_random(total_n);
    float *g_d = dev(g, total_n * 4), *partials1 = dev(NULL, CUDA_SUM_SQUARES_PARTIALS * 4);
    double want = 0.0, per_tensor = 0.0;
    CudaSumSqTensor table[N_MULTI];
    for (int t = 0; t < N_MULTI; t++) {
        want += CPU->sum_squares(CPU, g + offset[t], multi_sizes[t]);
        double *one = dev(NULL, sizeof(double));
        CHECK(cuda_sum_squares(one, g_d + offset[t], multi_sizes[t], partials1, NULL) == 0,
              "launch");
        double *h = fetch(one, sizeof(double));
        per_tensor += *h;
        free(h), cudaFree(one);
        table[t] = (CudaSumSqTensor){.g = g_d + offset[t], .n = multi_sizes[t]};
    }
    int partials_n = cuda_sum_squares_multi_plan(table, N_MULTI);
    CHECK(partials_n > N_MULTI && partials_n <= N_MULTI * CUDA_SUM_SQUARES_PARTIALS,
          "sum_squares_multi plan: %d partials for %d tensors", partials_n, N_MULTI);
    CudaSumSqTensor *table_d = dev(table, sizeof table);
    double got[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        double *out = dev(NULL, sizeof(double)), *sums = dev(NULL, N_MULTI * sizeof(double));
        float *partials = dev(NULL, (size_t)partials_n * 4);
        CHECK(cuda_sum_squares_multi(out, table_d, N_MULTI, partials_n, partials, sums, NULL) == 0,
              "launch");
        double *h = fetch(out, sizeof(double));
        got[run] = *h;
        free(h), cudaFree(out), cudaFree(sums), cudaFree(partials);
    }
    CHECK(harness_close(got[0], want, 1e-5, 0.0), "sum_squares_multi: %.12g, want %.12g", got[0],
          want);
    CHECK(memcmp(&got[0], &per_tensor, sizeof got[0]) == 0,
          "sum_squares_multi: %.17g, not the per-tensor kernel's %.17g", got[0], per_tensor);
    CHECK(memcmp(&got[0], &got[1], sizeof got[0]) == 0, "sum_squares_multi: two runs differ");
    cudaFree(table_d), cudaFree(g_d), cudaFree(partials1);
    free(g);
}

static AdamWStepCoefs test_adamw_coefs(void) {
    return (AdamWStepCoefs){.beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .one_minus_beta1 = 0.1f,
                            .one_minus_beta2 = 0.001f,
                            .eps = 1e-8f,
                            .shrink = 1.0f,
                            .grad_scale = 0.75f};
}

/* cuda_adamw_multi: every tensor with its own shrink against the CPU's adamw (the header's bound)
 * and bitwise against cuda_adamw per tensor; the gaps between tensors keep their values. */
static void check_adamw_multi(void) {
    size_t offset[N_MULTI], n = multi_layout(offset);
    float *p = host_random(n), *m = host_random(n), *v = host_random(n), *g = host_random(n);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] * v[i];
    AdamWStepCoefs c = test_adamw_coefs();
    float step_size = 1e-3f / (1.0f - 0.9f * 0.9f), inv_bc2_sqrt = 1.0f / sqrtf(1.0f - 0.998f);
    float *want[3] = {malloc(n * 4), malloc(n * 4), malloc(n * 4)};
    memcpy(want[0], p, n * 4), memcpy(want[1], m, n * 4), memcpy(want[2], v, n * 4);
    float *g_d = dev(g, n * 4);
    /* the per-tensor kernel's bits, and the CPU's values */
    float *pd = dev(p, n * 4), *md = dev(m, n * 4), *vd = dev(v, n * 4);
    for (int t = 0; t < N_MULTI; t++) {
        c.shrink = t % 2 ? 1.0f : 1.0f - 1e-3f * (float)(t + 1) * 0.01f;
        size_t o = offset[t];
        CPU->adamw(CPU, want[0] + o, want[1] + o, want[2] + o, g + o, multi_sizes[t], &c, step_size,
                   inv_bc2_sqrt);
        CHECK(cuda_adamw(pd + o, md + o, vd + o, g_d + o, multi_sizes[t], &c, step_size,
                         inv_bc2_sqrt, NULL) == 0,
              "launch");
    }
    float *per_tensor[3] = {fetch(pd, n * 4), fetch(md, n * 4), fetch(vd, n * 4)};
    cudaFree(pd), cudaFree(md), cudaFree(vd);
    float *got[2][3];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *d[3] = {dev(p, n * 4), dev(m, n * 4), dev(v, n * 4)};
        CudaAdamWTensor table[N_MULTI];
        for (int t = 0; t < N_MULTI; t++) {
            size_t o = offset[t];
            table[t] =
                (CudaAdamWTensor){.p = d[0] + o,
                                  .m = d[1] + o,
                                  .v = d[2] + o,
                                  .g = g_d + o,
                                  .numel = multi_sizes[t],
                                  .shrink = t % 2 ? 1.0f : 1.0f - 1e-3f * (float)(t + 1) * 0.01f};
        }
        size_t chunks = cuda_adamw_multi_plan(table, N_MULTI);
        CudaAdamWTensor *table_d = dev(table, sizeof table);
        CHECK(cuda_adamw_multi(table_d, N_MULTI, chunks, &c, step_size, inv_bc2_sqrt, NULL) == 0,
              "launch");
        for (int k = 0; k < 3; k++)
            got[run][k] = fetch(d[k], n * 4), cudaFree(d[k]);
        cudaFree(table_d);
    }
    const char *names[3] = {"p", "m", "v"};
    const float *before[3] = {p, m, v};
    for (int k = 0; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "adamw_multi %s", names[k]);
        expect(what, got[0][k], got[1][k], want[k], n);
        CHECK(memcmp(got[0][k], per_tensor[k], n * 4) == 0,
              "adamw_multi %s: not the per-tensor kernel's bits", names[k]);
        size_t moved = 0;
        for (int t = 0; t < N_MULTI; t++)
            for (size_t i = offset[t] + multi_sizes[t]; i < offset[t] + multi_sizes[t] + GAP; i++)
                moved += memcmp(&got[0][k][i], &before[k][i], 4) != 0;
        CHECK(moved == 0, "adamw_multi %s: %zu values between the tensors written", names[k],
              moved);
    }
    for (int k = 0; k < 3; k++) {
        free(want[k]), free(per_tensor[k]);
        for (int run = 0; run < 2; run++)
            free(got[run][k]);
    }
    cudaFree(g_d);
    free(p), free(m), free(v), free(g);
}

/* The backend's entries (backend_cuda.cu, invariant 10) against a loop of its per-tensor ops,
 * bitwise: the same table twice (the second call reuses the uploaded table), the same table over
 * changed gradients, then another table (fewer tensors, another order), which must be uploaded
 * anew. */
static void check_multi_backend(void) {
#ifdef RLHF_CUDA_EMU
    Backend *be = backend_cuda_emu_new();
#else
    Backend *be = backend_cuda_new();
#endif
    CHECK(be != NULL, "backend: %s", err_msg());
    if (!be) return;
    size_t offset[N_MULTI], n = multi_layout(offset);
    float *g = host_random(n), *p = host_random(n), *m = host_random(n), *v = host_random(n);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] * v[i];
    float *g_d = be->alloc(be, n * 4, "g");
    be->copy(be, g_d, g, n * 4, BACKEND_HOST_TO_DEVICE);
    GradTensor all[N_MULTI], some[3];
    for (int t = 0; t < N_MULTI; t++)
        all[t] = (GradTensor){g_d + offset[t], multi_sizes[t]};
    some[0] = all[8], some[1] = all[3], some[2] = all[5];
    const GradTensor *tables[4] = {all, all, all, some};
    int counts[4] = {N_MULTI, N_MULTI, N_MULTI, 3};
    for (int call = 0; call < 4; call++) {
        if (call == 2) { /* new gradients under the same table */
            for (size_t i = 0; i < n; i++)
                g[i] = frand();
            be->copy(be, g_d, g, n * 4, BACKEND_HOST_TO_DEVICE);
        }
        double loop = 0.0;
        for (int t = 0; t < counts[call]; t++)
            loop += be->sum_squares(be, tables[call][t].g, tables[call][t].n);
        double got = be->sum_squares_multi(be, tables[call], counts[call]);
        CHECK(memcmp(&got, &loop, sizeof got) == 0,
              "backend sum_squares_multi, call %d: %.17g, the per-tensor loop %.17g", call, got,
              loop);
    }
    /* adamw_multi against be->adamw per tensor, on the tensors of `some` then of `all` */
    float *state[2][3];
    for (int side = 0; side < 2; side++)
        for (int k = 0; k < 3; k++) {
            state[side][k] = be->alloc(be, n * 4, "state");
            be->copy(be, state[side][k],
                     k == 0   ? p
                     : k == 1 ? m
                              : v,
                     n * 4, BACKEND_HOST_TO_DEVICE);
        }
    AdamWStepCoefs c = test_adamw_coefs();
    int picks[2][N_MULTI] = {{8, 3, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8}};
    int npicks[2] = {3, N_MULTI};
    for (int round = 0; round < 2; round++) {
        AdamWTensor ts[N_MULTI];
        for (int j = 0; j < npicks[round]; j++) {
            int t = picks[round][j];
            size_t o = offset[t];
            ts[j] = (AdamWTensor){state[1][0] + o, state[1][1] + o, state[1][2] + o,
                                  g_d + o,         multi_sizes[t],  j % 2 ? 1.0f : 0.999f};
            c.shrink = ts[j].shrink;
            be->adamw(be, state[0][0] + o, state[0][1] + o, state[0][2] + o, g_d + o,
                      multi_sizes[t], &c, 1e-3f, 1.5f);
        }
        be->adamw_multi(be, ts, npicks[round], &c, 1e-3f, 1.5f);
    }
    for (int k = 0; k < 3; k++) {
        float *a = malloc(n * 4), *b = malloc(n * 4);
        be->copy(be, a, state[0][k], n * 4, BACKEND_DEVICE_TO_HOST);
        be->copy(be, b, state[1][k], n * 4, BACKEND_DEVICE_TO_HOST);
        CHECK(memcmp(a, b, n * 4) == 0, "backend adamw_multi: tensor %d not the per-tensor bits",
              k);
        free(a), free(b);
    }
    CHECK(backend_cuda_status(be) == 0, "backend: %s", err_msg());
    for (int side = 0; side < 2; side++)
        for (int k = 0; k < 3; k++)
            be->free(be, state[side][k]);
    be->free(be, g_d);
    backend_cuda_free(be);
    free(g), free(p), free(m), free(v);
}

int main(void) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fprintf(stderr, "test_backend_ops: no CUDA device, skipped\n");
        return 77;
    }
    fprintf(stderr, "test_backend_ops: backend %s against cpu\n", BACKEND_NAME);
    /* widths below, at and above the block (256), one not a multiple of 32 */
    int rms_shapes[][2] = {{3, 16}, {5, 100}, {4, 256}, {3, 896}, {2, 1536}};
    for (size_t i = 0; i < sizeof rms_shapes / sizeof *rms_shapes; i++)
        check_rmsnorm(rms_shapes[i][0], rms_shapes[i][1]);
    check_rope(5, 2, 8, 8, 9, false);
    check_rope(7, 3, 64, 64, 40, true);
    check_rope(3, 14, 64, 64, 5, true);
    check_rope(6, 3, 32, 24, 11, true);  /* partial rotary: Phi-4-mini's 0.75 */
    check_rope_qk(5, 14, 2, 64, 64, 40); /* Qwen2.5-0.5B's heads */
    check_rope_qk(1, 4, 4, 32, 24, 9);   /* one decode row, partial rotary */
    size_t swiglu_sizes[] = {1, 255, 4864 + 7};
    for (size_t i = 0; i < sizeof swiglu_sizes / sizeof *swiglu_sizes; i++)
        check_swiglu(swiglu_sizes[i]);
    check_embedding(11, 9, 24, false);
    check_embedding(7, 13, 300, true);
    check_embedding(50, 4, 896, false);
    size_t add_sizes[] = {1, 300, 5000};
    for (size_t i = 0; i < sizeof add_sizes / sizeof *add_sizes; i++)
        check_add_scale(add_sizes[i]);
    check_rows(5, 12, 7);
    check_rows(9, 20, 300);
    check_attention(4, 2, 16, 0, 20);
    check_attention(2, 1, 64, 5, 20);
    check_attention(1, 1, 32, 0, 130);
    check_attention(1, 1, 32, 2, 130); /* the last rows' first tile wholly outside the window */
    check_attention(2, 2, 200, 0, 9);  /* hd > the block: two output dims per thread */
    check_attention_cached(4, 2, 16, 0);
    check_attention_cached(2, 1, 64, 3);
    check_kv_cache_write(32);
    check_kv_cache_write(2 * 64 + 3); /* several blocks, a width no block size divides */
    size_t adamw_sizes[] = {3, 1000, 9000};
    for (size_t i = 0; i < sizeof adamw_sizes / sizeof *adamw_sizes; i++)
        check_adamw(adamw_sizes[i]);
    size_t ss_sizes[] = {1, 1000, 100003};
    for (size_t i = 0; i < sizeof ss_sizes / sizeof *ss_sizes; i++)
        check_sum_squares(ss_sizes[i]);
    check_sum_squares_multi();
    check_adamw_multi();
    check_multi_backend();
    return harness_finish("test_backend_ops");
}
