/* The CUDA backend under bf16 autocast (backend_cuda.h invariant 6) against the CPU backend under
 * bf16 autocast (backend_cpu_autocast), op by op through the table: linear (fp32 W with a bias,
 * frozen bf16 W), linear_backward (din, dW and dbias accumulated onto nonzero values), attention
 * and its backward (a shared prefix, GQA, a sliding window), the lm_head's log-probs with their
 * statistics and the backward (fp32 W with dlm_head accumulated, frozen bf16 W), on fresh random
 * inputs with written outputs poisoned (0xff bytes, NaN) before each call.
 *
 * Bound. Both sides round the same inputs to bf16 with the same rule, and a product of two bf16
 * values is exact in fp32, so the two differ only in the order of their fp32 sums:
 * |got - want| <= 1e-5 max|want| per tensor. An output that is rounded to bf16 after its sums
 * (a linear's out and din, attention's outputs, dhidden) can land on the neighbouring bf16 value
 * where the fp32 sum lies within its rounding noise of a midpoint; such a flip (got and want
 * adjacent bf16 values) is counted, and at most 1 in 500 values of a tensor (at least 2) may
 * flip. A wrong rounding rule (toward zero: about half the values one bf16 step off, and
 * the rounded inputs differ) or a wrong operand fails both.
 * Attention runs on the tensor cores on the device (attention_mma.h): its probabilities and
 * score gradients enter the bf16 products as three bf16 parts, their fp32 values exactly, so the
 * same bound holds against the CPU's attention with P and dS exact (autocast_attention_exact(true):
 * by default the CPU rounds them to one bf16 part, torch's rounding points); the longer segments
 * give it several query and key tiles. Each op runs twice (under cuda-emu with another scheduler
 * seed) and the two results must be bitwise equal.
 *
 * Built twice from this source: test_backend_autocast on cuda-emu (label gpu-emu, every CI run;
 * the lm_head's vocabulary spans several chunks there), and test_backend_autocast_cuda on the
 * device (label gpu), which exits 77 where no device is present. */
#include "common/error.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cpu/autocast.h"
#include "kernels/cuda/backend_cuda.h"

#ifdef RLHF_CUDA_EMU
#include "kernels/cuda/emu/cuda_emu.h"
#endif

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static Backend *dev_be;
static const Backend *cpu;

static uint64_t rng = 0x452821e638d01377ull;

static float frand(void) { /* uniform in [-2, 2) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

static float *host_random(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = frand();
    return x;
}

/* bf16 bits of x, rounded to nearest even (x finite): a frozen bf16 weight. */
static uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bytes of device memory: a copy of host, or poisoned (0xff bytes) when host is NULL. */
static void *up(const void *host, size_t bytes) {
    void *d = dev_be->alloc(dev_be, bytes, "test tensor");
    if (!d) {
        fprintf(stderr, "test_backend_autocast: %s\n", err_msg());
        exit(1);
    }
    if (host)
        dev_be->copy(dev_be, d, host, bytes, BACKEND_HOST_TO_DEVICE);
    else
        dev_be->memset(dev_be, d, 0xff, bytes);
    return d;
}

static float *down(const void *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    dev_be->copy(dev_be, h, d, n * sizeof *h, BACKEND_DEVICE_TO_HOST);
    return h;
}

/* Run `run` of two: under cuda-emu each with its own scheduler seed. */
static void start_run(int run) {
#ifdef RLHF_CUDA_EMU
    cuda_emu_set_seed(7 + (uint64_t)run);
#else
    (void)run;
#endif
}

/* Whether a and b are neighbouring bf16 values (a flip of the final rounding). */
static bool adjacent_bf16(float a, float b) {
    uint32_t ua, ub;
    memcpy(&ua, &a, sizeof ua), memcpy(&ub, &b, sizeof ub);
    if ((ua & 0xffffu) || (ub & 0xffffu) || ((ua ^ ub) & 0x80000000u)) return false;
    return ua - ub == 0x10000u || ub - ua == 0x10000u;
}

static double worst; /* the largest |got - want| / max|want| outside flips, for the log */
static size_t flips_seen;

/* got (two runs) against want (the CPU's), n floats, as the header says; rounded: the output
 * is rounded to bf16 after its sums, so flips are allowed. */
static void expect(const char *what, const float *got, const float *again, const float *want,
                   size_t n, bool rounded) {
    double scale = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    size_t bad = 0, flips = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d <= 1e-5 * scale) {
            worst = fmax(worst, scale > 0 ? d / scale : 0);
        } else if (rounded && adjacent_bf16(got[i], want[i])) {
            flips++;
        } else if (bad++ == 0) {
            first = i;
        }
    }
    size_t allowed = n / 500 > 2 ? n / 500 : 2;
    CHECK(bad == 0, "%s: %zu of %zu values off the CPU's (first [%zu]: %.9g, want %.9g)", what, bad,
          n, first, bad ? got[first] : 0.0, bad ? want[first] : 0.0);
    CHECK(flips <= allowed, "%s: %zu of %zu values one bf16 step off the CPU's (at most %zu)", what,
          flips, n, allowed);
    CHECK(memcmp(got, again, n * sizeof *got) == 0, "%s: two runs differ", what);
    flips_seen += flips;
}

/* A linear and its backward, W fp32 (bias, dW, dbias) or frozen bf16 (din only). */
static void check_linear(int n, int in_dim, int out_dim, bool bf16_w) {
    char what[96];
    size_t nx = (size_t)n * in_dim, ny = (size_t)n * out_dim, nw = (size_t)out_dim * in_dim;
    float *x = host_random(nx), *w = host_random(nw), *bias = host_random((size_t)out_dim);
    float *dy = host_random(ny), *dw0 = host_random(nw), *db0 = host_random((size_t)out_dim);
    uint16_t *w16 = malloc(nw * sizeof *w16);
    for (size_t i = 0; i < nw; i++)
        w16[i] = to_bf16(w[i]);
    WeightRef hw = bf16_w ? (WeightRef){.bf16 = w16} : (WeightRef){.f32 = w};
    const float *hb = bf16_w ? NULL : bias;
    float *want = malloc(ny * 4), *want_dx = malloc(nx * 4), *want_dw = malloc(nw * 4),
          *want_db = malloc((size_t)out_dim * 4);
    memcpy(want_dw, dw0, nw * 4), memcpy(want_db, db0, (size_t)out_dim * 4);
    cpu->linear(cpu, want, x, hw, NULL, hb, n, in_dim, out_dim);
    cpu->linear_backward(cpu, want_dx, bf16_w ? NULL : want_dw, bf16_w ? NULL : want_db, dy, x, hw,
                         n, in_dim, out_dim);

    float *x_d = up(x, nx * 4), *w_d = up(w, nw * 4), *b_d = up(bias, (size_t)out_dim * 4);
    uint16_t *w16_d = up(w16, nw * 2);
    float *dy_d = up(dy, ny * 4);
    WeightRef dw = bf16_w ? (WeightRef){.bf16 = w16_d} : (WeightRef){.f32 = w_d};
    float *got[2], *got_dx[2], *got_dw[2], *got_db[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *out = up(NULL, ny * 4), *dx = up(NULL, nx * 4);
        float *dwacc = up(dw0, nw * 4), *dbacc = up(db0, (size_t)out_dim * 4);
        dev_be->linear(dev_be, out, x_d, dw, NULL, bf16_w ? NULL : b_d, n, in_dim, out_dim);
        dev_be->linear_backward(dev_be, dx, bf16_w ? NULL : dwacc, bf16_w ? NULL : dbacc, dy_d, x_d,
                                dw, n, in_dim, out_dim);
        got[run] = down(out, ny), got_dx[run] = down(dx, nx);
        got_dw[run] = down(dwacc, nw), got_db[run] = down(dbacc, (size_t)out_dim);
        dev_be->free(dev_be, out), dev_be->free(dev_be, dx);
        dev_be->free(dev_be, dwacc), dev_be->free(dev_be, dbacc);
    }
    const char *kind = bf16_w ? "bf16 W" : "fp32 W";
    snprintf(what, sizeof what, "linear %s %d x %d -> %d", kind, n, in_dim, out_dim);
    expect(what, got[0], got[1], want, ny, true);
    snprintf(what, sizeof what, "linear_backward din %s %d x %d -> %d", kind, n, in_dim, out_dim);
    expect(what, got_dx[0], got_dx[1], want_dx, nx, true);
    if (!bf16_w) {
        snprintf(what, sizeof what, "linear_backward dW %d x %d -> %d", n, in_dim, out_dim);
        expect(what, got_dw[0], got_dw[1], want_dw, nw, false);
        snprintf(what, sizeof what, "linear_backward dbias %d x %d -> %d", n, in_dim, out_dim);
        expect(what, got_db[0], got_db[1], want_db, (size_t)out_dim, false);
    }
    for (int run = 0; run < 2; run++)
        free(got[run]), free(got_dx[run]), free(got_dw[run]), free(got_db[run]);
    dev_be->free(dev_be, x_d), dev_be->free(dev_be, w_d), dev_be->free(dev_be, b_d);
    dev_be->free(dev_be, w16_d), dev_be->free(dev_be, dy_d);
    free(x), free(w), free(bias), free(dy), free(dw0), free(db0), free(w16);
    free(want), free(want_dx), free(want_dw), free(want_db);
}

/* Attention over a shared prefix and two sequences continuing it, one sequence of its own, and
 * padding rows no segment names (their out and dq stay unwritten: compared on the rows written). */
static void check_attention(int nh, int nkv, int hd, int window, int stretch) {
    char what[112];
    enum { NSEG = 4 };
    const int P = 5 * stretch, A = 9 * stretch, B = 7 * stretch, C = 11 * stretch, PAD = 3,
              N = P + A + B + C + PAD;
    AttnSegment segs[NSEG] = {{.start = 0, .len = P},
                              {.start = P, .len = A, .prefix_start = 0, .prefix_len = P},
                              {.start = P + A, .len = B, .prefix_start = 0, .prefix_len = P},
                              {.start = P + A + B, .len = C}};
    int32_t *seq_index = malloc((size_t)N * sizeof *seq_index);
    for (int r = 0; r < N; r++)
        seq_index[r] = r < P + A ? r : r < P + A + B ? r - A : r - (P + A + B);
    int written = P + A + B + C; /* rows 0 .. written-1 belong to a segment */
    size_t nq = (size_t)N * nh * hd, nk = (size_t)N * nkv * hd, nw = (size_t)written * nh * hd;
    float *q = host_random(nq), *k = host_random(nk), *v = host_random(nk), *dy = host_random(nq);
    float *want = malloc(nq * 4), *want_dq = malloc(nq * 4), *want_dk = malloc(nk * 4),
          *want_dv = malloc(nk * 4);
    cpu->attention(cpu, want, q, k, v, segs, NSEG, seq_index, nh, nkv, hd, window);
    cpu->attention_backward(cpu, want_dq, want_dk, want_dv, dy, q, k, v, segs, NSEG, seq_index, N,
                            nh, nkv, hd, window);
    float *q_d = up(q, nq * 4), *k_d = up(k, nk * 4), *v_d = up(v, nk * 4), *dy_d = up(dy, nq * 4);
    AttnSegment *segs_d = up(segs, sizeof segs);
    int32_t *si_d = up(seq_index, (size_t)N * sizeof *seq_index);
    float *got[2], *got_dq[2], *got_dk[2], *got_dv[2];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *out = up(NULL, nq * 4), *dq = up(NULL, nq * 4), *dk = up(NULL, nk * 4),
              *dv = up(NULL, nk * 4);
        dev_be->attention(dev_be, out, q_d, k_d, v_d, segs_d, NSEG, si_d, nh, nkv, hd, window);
        dev_be->attention_backward(dev_be, dq, dk, dv, dy_d, q_d, k_d, v_d, segs_d, NSEG, si_d, N,
                                   nh, nkv, hd, window);
        got[run] = down(out, nq), got_dq[run] = down(dq, nq);
        got_dk[run] = down(dk, nk), got_dv[run] = down(dv, nk);
        dev_be->free(dev_be, out), dev_be->free(dev_be, dq);
        dev_be->free(dev_be, dk), dev_be->free(dev_be, dv);
    }
    /* the padding rows: still the poison (nothing written there) */
    bool untouched = true;
    for (size_t i = nw; i < nq; i++)
        untouched &= isnan(got[0][i]) && isnan(got_dq[0][i]);
    CHECK(untouched, "attention wrote rows of no segment");
#define NAME(s)                                                                                    \
    (snprintf(what, sizeof what, "%s nh %d nkv %d hd %d window %d rows %d", s, nh, nkv, hd,        \
              window, N),                                                                          \
     what)
    expect(NAME("attention"), got[0], got[1], want, nw, true);
    expect(NAME("attention_backward dq"), got_dq[0], got_dq[1], want_dq, nw, true);
    expect(NAME("attention_backward dk"), got_dk[0], got_dk[1], want_dk, nk, true);
    expect(NAME("attention_backward dv"), got_dv[0], got_dv[1], want_dv, nk, true);
#undef NAME
    for (int run = 0; run < 2; run++)
        free(got[run]), free(got_dq[run]), free(got_dk[run]), free(got_dv[run]);
    dev_be->free(dev_be, q_d), dev_be->free(dev_be, k_d), dev_be->free(dev_be, v_d);
    dev_be->free(dev_be, dy_d), dev_be->free(dev_be, segs_d), dev_be->free(dev_be, si_d);
    free(seq_index), free(q), free(k), free(v), free(dy), free(want), free(want_dq), free(want_dk),
        free(want_dv);
}

/* The lm_head's log-probs, their statistics and the backward, W fp32 (dlm_head accumulated) or
 * frozen bf16 (dhidden only). */
static void check_logprob(int n, int h, int vocab, bool bf16_w) {
    char what[96];
    size_t nh = (size_t)n * h, nw = (size_t)vocab * h;
    float *hid = host_random(nh), *w = host_random(nw), *dlogp = host_random((size_t)n);
    float *dw0 = host_random(nw);
    uint16_t *w16 = malloc(nw * sizeof *w16);
    for (size_t i = 0; i < nw; i++)
        w16[i] = to_bf16(w[i]);
    int32_t *target = malloc((size_t)n * sizeof *target);
    for (int r = 0; r < n; r++)
        target[r] = (r * 97 + 11) % vocab; /* in every chunk */
    WeightRef hw = bf16_w ? (WeightRef){.bf16 = w16} : (WeightRef){.f32 = w};
    float *want = malloc((size_t)n * 4), *want_dh = malloc(nh * 4), *want_dw = malloc(nw * 4);
    LogitStats *want_st = malloc((size_t)n * sizeof *want_st);
    memcpy(want_dw, dw0, nw * 4);
    cpu->logprob(cpu, want, want_st, hid, target, hw, n, h, vocab);
    cpu->logprob_backward(cpu, want_dh, bf16_w ? NULL : want_dw, dlogp, hid, target, hw, n, h,
                          vocab);

    float *hid_d = up(hid, nh * 4), *w_d = up(w, nw * 4), *dlogp_d = up(dlogp, (size_t)n * 4);
    uint16_t *w16_d = up(w16, nw * 2);
    int32_t *target_d = up(target, (size_t)n * sizeof *target);
    WeightRef dw = bf16_w ? (WeightRef){.bf16 = w16_d} : (WeightRef){.f32 = w_d};
    float *got[2], *got_dh[2], *got_dw[2];
    LogitStats st[2][64];
    for (int run = 0; run < 2; run++) {
        start_run(run);
        float *lp = up(NULL, (size_t)n * 4), *dh = up(NULL, nh * 4), *dwacc = up(dw0, nw * 4);
        LogitStats *st_d = up(NULL, (size_t)n * sizeof(LogitStats));
        dev_be->logprob(dev_be, lp, st_d, hid_d, target_d, dw, n, h, vocab);
        dev_be->logprob_backward(dev_be, dh, bf16_w ? NULL : dwacc, dlogp_d, hid_d, target_d, dw, n,
                                 h, vocab);
        got[run] = down(lp, (size_t)n), got_dh[run] = down(dh, nh), got_dw[run] = down(dwacc, nw);
        dev_be->copy(dev_be, st[run], st_d, (size_t)n * sizeof(LogitStats), BACKEND_DEVICE_TO_HOST);
        dev_be->free(dev_be, lp), dev_be->free(dev_be, dh), dev_be->free(dev_be, dwacc);
        dev_be->free(dev_be, st_d);
    }
    const char *kind = bf16_w ? "bf16 W" : "fp32 W";
    snprintf(what, sizeof what, "logprob %s %d x %d, vocab %d", kind, n, h, vocab);
    expect(what, got[0], got[1], want, (size_t)n, false);
    for (int r = 0; r < n; r++) {
        float g[2] = {st[0][r].mean_logit, st[0][r].entropy},
              a[2] = {st[1][r].mean_logit, st[1][r].entropy};
        float e[2] = {want_st[r].mean_logit, want_st[r].entropy};
        for (int i = 0; i < 2; i++)
            CHECK(fabsf(g[i] - e[i]) <= 1e-5f * (fabsf(e[i]) + 1.0f) && g[i] == a[i],
                  "%s row %d: %s %.9g (again %.9g), want %.9g", what, r, i ? "entropy" : "mean",
                  g[i], a[i], e[i]);
        CHECK(st[0][r].argmax == want_st[r].argmax && st[1][r].argmax == want_st[r].argmax,
              "%s row %d: argmax %d, want %d", what, r, st[0][r].argmax, want_st[r].argmax);
    }
    snprintf(what, sizeof what, "logprob_backward dhidden %s %d x %d, vocab %d", kind, n, h, vocab);
    expect(what, got_dh[0], got_dh[1], want_dh, nh, true);
    if (!bf16_w) {
        snprintf(what, sizeof what, "logprob_backward dlm_head %d x %d, vocab %d", n, h, vocab);
        expect(what, got_dw[0], got_dw[1], want_dw, nw, false);
    }
    for (int run = 0; run < 2; run++)
        free(got[run]), free(got_dh[run]), free(got_dw[run]);
    dev_be->free(dev_be, hid_d), dev_be->free(dev_be, w_d), dev_be->free(dev_be, dlogp_d);
    dev_be->free(dev_be, w16_d), dev_be->free(dev_be, target_d);
    free(hid), free(w), free(dlogp), free(dw0), free(w16), free(target), free(want), free(want_dh);
    free(want_dw), free(want_st);
}

/* The autocast really rounds: a linear's output is made of bf16 values, and differs from the
 * fp32 CPU backend's on inputs that bf16 cannot hold. */
static void check_rounds(void) {
    enum { N = 5, IN = 24, OUT = 16 };
    float *x = host_random(N * IN), *w = host_random(OUT * IN);
    float want32[N * OUT];
    backend_cpu()->linear(backend_cpu(), want32, x, (WeightRef){.f32 = w}, NULL, NULL, N, IN, OUT);
    float *x_d = up(x, sizeof(float) * N * IN), *w_d = up(w, sizeof(float) * OUT * IN);
    float *out = up(NULL, sizeof(float) * N * OUT);
    dev_be->linear(dev_be, out, x_d, (WeightRef){.f32 = w_d}, NULL, NULL, N, IN, OUT);
    float *got = down(out, N * OUT);
    size_t bf16_values = 0, differ = 0;
    for (int i = 0; i < N * OUT; i++) {
        bf16_values += from_bf16(to_bf16(got[i])) == got[i];
        differ += got[i] != want32[i];
    }
    CHECK(bf16_values == N * OUT && differ > N * OUT / 2,
          "autocast linear: %zu of %d outputs are bf16 values, %zu differ from fp32's", bf16_values,
          N * OUT, differ);
    free(got), free(x), free(w);
    dev_be->free(dev_be, x_d), dev_be->free(dev_be, w_d), dev_be->free(dev_be, out);
}

int main(void) {
#ifdef RLHF_CUDA_EMU
    dev_be = backend_cuda_emu_autocast_new();
#else
    dev_be = backend_cuda_autocast_new();
    if (!dev_be) {
        printf("test_backend_autocast_cuda: skipped: %s\n", err_msg());
        return 77;
    }
#endif
    CHECK(dev_be != NULL, "backend: %s", err_msg());
    if (!dev_be) return harness_finish("test_backend_autocast");
    cpu = backend_cpu_autocast();
    autocast_attention_exact(true); /* see the header: the device keeps P and dS exact */
    check_rounds();
    check_linear(37, 48, 40, false);
    check_linear(64, 96, 72, false);
    check_linear(19, 40, 56, true);
    check_attention(4, 2, 16, 0, 1);
    check_attention(4, 4, 8, 4, 1);
    check_attention(2, 1, 64, 0, 1); /* a 64-dim head: the HDP 64 kernels */
    check_attention(2, 2, 40, 6, 1); /* 40 dims padded to 64, a window */
    /* segments of 40-88 rows: several query and key tiles a segment, key tiles across the prefix
     * and own rows, under GQA and under a window */
    check_attention(4, 2, 16, 0, 8);
    check_attention(2, 1, 32, 37, 8);
    check_logprob(13, 32, 250, false);
    check_logprob(9, 40, 200, true);
    CHECK(backend_cuda_status(dev_be) == 0, "%s: %s", dev_be->name, err_msg());
    printf("%s: largest |got - want| / max|want| outside flips %.3g; %zu bf16 flips in all\n",
           dev_be->name, worst, flips_seen);
    backend_cuda_free(dev_be);
    return harness_finish("test_backend_autocast");
}
