/* The lm_head's autocast products on gemm_bf16 (kernels/cpu/fused_logprob_autocast.c) against
 * their definition computed here in double: logits = bf16(hidden) · bf16(W)^T not rounded,
 * logp = z[target] - logsumexp(z); dz = dlogp (onehot - softmax) rounded to bf16, dhidden =
 * bf16(dz) · bf16(W), dW += bf16(dz)^T · bf16(hidden). Shapes with a row tail past one row
 * block (1024), a vocabulary tail past one tile (4096, not a multiple of 32) and an odd hidden
 * size, targets in the last tile and on the last column; every bf16 GEMM path this CPU has. W
 * in bf16 gives bit for bit what its (bf16-exact) fp32 values give. The forward's LogitStats (mean
 * logit, entropy, argmax) within the logits' own bound.
 *
 * Bounds (derived, not tuned): an fp32 sum of n terms is within n 2^-24 sum |terms| of the exact
 * sum, in any order; the fp32 dz may round to the bf16 neighbour of the exact dz's rounding
 * where the exact dz lies within 1e-5 relative (+ 1e-6 dlogp) of a rounding boundary (the
 * logits' fp32 error and fast_expf's 3e-7), which each term's bound carries.
 *
 * Then the same through the CPU autocast backend's table (backend_cpu_autocast: what training
 * calls) on every path, the sgemm one included, which a CPU without AMX takes by default: there
 * the rounded factors are multiplied by sgemm (fused_logprob.c), and dz must still be rounded to
 * bf16 (backend_autocast.c rule 4), as on gemm_bf16 and on the device. Log-probs and dW within
 * the bounds above; dhidden, which the backend rounds to bf16, within its bound plus that
 * rounding (2^-9 of its value). The backend's hand-over of the log-sum-exp (logprob_lse,
 * logprob_backward_lse) gives that pass's bits, on every path. */
#include "common/float16.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cpu/autocast.h"
#include "kernels/cpu/gemm_bf16.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 1030, H = 45, V = 4141 };

static double b16(double x) {
    return bf16_to_f32(f32_to_bf16((float)x));
}

static void fill(float *x, size_t n, unsigned *seed) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(rand_r(seed) / (double)RAND_MAX - 0.5) * 2.0f;
}

/* The largest change of b16(dz) over dz's uncertainty (see the bounds above). */
static double dz_spread(double dz, double g) {
    double e = 1e-5 * fabs(dz) + 1e-6 * fabs(g);
    double lo = fabs(b16(dz - e) - b16(dz)), hi = fabs(b16(dz + e) - b16(dz));
    return lo > hi ? lo : hi;
}

typedef struct {
    double *logp, *logp_tol;       /* N */
    double *mean, *entropy, *zmax; /* N: LogitStats' mean logit and entropy, the largest logit */
    double **z;                    /* N x V: the logits (the argmax is checked against them) */
    double *dz, *dz_err;           /* N x V: b16 of the exact dz, and its spread */
    double *dh, *dh_tol;           /* N x H */
    double *dw, *dw_tol;           /* V x H (dW starts at 0.25) */
} Reference;

static Reference reference(const float *hid, const float *w, const int32_t *target,
                           const float *dlogp) {
    size_t nv = (size_t)N * V, nh = (size_t)N * H, vh = (size_t)V * H;
    Reference r = {.logp = malloc(N * sizeof(double)),
                   .logp_tol = malloc(N * sizeof(double)),
                   .mean = malloc(N * sizeof(double)),
                   .entropy = malloc(N * sizeof(double)),
                   .zmax = malloc(N * sizeof(double)),
                   .z = malloc(N * sizeof(double *)),
                   .dz = malloc(nv * sizeof(double)),
                   .dz_err = malloc(nv * sizeof(double)),
                   .dh = calloc(nh, sizeof(double)),
                   .dh_tol = calloc(nh, sizeof(double)),
                   .dw = malloc(vh * sizeof(double)),
                   .dw_tol = calloc(vh, sizeof(double))};
    double gamma_h = H * ldexp(1.0, -24);
    for (int i = 0; i < N; i++) {
        double zmax = -INFINITY, zerr = 0, sum = 0, zsum = 0, pz = 0;
        double *z = r.z[i] = malloc(V * sizeof *z);
        for (int j = 0; j < V; j++) {
            double s = 0, sabs = 0;
            for (int k = 0; k < H; k++) {
                double t = b16(hid[(size_t)i * H + k]) * b16(w[(size_t)j * H + k]);
                s += t, sabs += fabs(t);
            }
            z[j] = s;
            zerr = fmax(zerr, gamma_h * sabs);
            zmax = fmax(zmax, s);
        }
        for (int j = 0; j < V; j++)
            sum += exp(z[j] - zmax), zsum += z[j];
        double lse = zmax + log(sum);
        for (int j = 0; j < V; j++)
            pz += exp(z[j] - lse) * z[j];
        r.logp[i] = z[target[i]] - lse;
        r.mean[i] = zsum / V;
        r.entropy[i] = lse - pz;
        r.zmax[i] = zmax;
        /* z[t] and lse each off by at most zerr; the fp32 exps, their sums and the final
         * subtraction by a few ulps of lse */
        r.logp_tol[i] = 2 * zerr + 1e-6 * (1 + fabs(lse));
        for (int j = 0; j < V; j++) {
            double dz = dlogp[i] * ((j == target[i]) - exp(z[j] - lse));
            r.dz[(size_t)i * V + j] = b16(dz);
            r.dz_err[(size_t)i * V + j] = dz_spread(dz, dlogp[i]);
        }
    }
    double gamma_v = V * ldexp(1.0, -24), gamma_n = N * ldexp(1.0, -24);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < V; j++) {
            double d = r.dz[(size_t)i * V + j], e = r.dz_err[(size_t)i * V + j];
            for (int k = 0; k < H; k++) {
                double wk = b16(w[(size_t)j * H + k]);
                r.dh[(size_t)i * H + k] += d * wk;
                r.dh_tol[(size_t)i * H + k] += e * fabs(wk) + gamma_v * fabs(d * wk);
            }
        }
    for (size_t a = 0; a < (size_t)V * H; a++)
        r.dw[a] = 0.25;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < V; j++) {
            double d = r.dz[(size_t)i * V + j], e = r.dz_err[(size_t)i * V + j];
            for (int k = 0; k < H; k++) {
                double hk = b16(hid[(size_t)i * H + k]);
                r.dw[(size_t)j * H + k] += d * hk;
                r.dw_tol[(size_t)j * H + k] += e * fabs(hk) + gamma_n * fabs(d * hk);
            }
        }
    for (size_t a = 0; a < (size_t)N * H; a++) /* the fp32 result's own rounding */
        r.dh_tol[a] += ldexp(fabs(r.dh[a]), -23) + 1e-30;
    for (size_t a = 0; a < (size_t)V * H; a++)
        r.dw_tol[a] += ldexp(fabs(r.dw[a]), -22) + 1e-30;
    return r;
}

static int count_off(const float *got, const double *want, const double *tol, size_t n,
                     double *worst) {
    int bad = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]);
        bad += !(err <= tol[i]);
        if (tol[i] > 0) *worst = fmax(*worst, err / tol[i]);
    }
    return bad;
}

static void check_path(const Reference *ref, const float *hid, const float *w, const uint16_t *w16,
                       const int32_t *target, const float *dlogp) {
    const char *path = gemm_bf16_path_name(gemm_bf16_path());
    LogitCap plain = {0.0f, 1.0f};
    float *logp = malloc(N * sizeof *logp), *logp16 = malloc(N * sizeof *logp16);
    float *dh = malloc((size_t)N * H * sizeof *dh), *dh16 = malloc((size_t)N * H * sizeof *dh16);
    float *dw = malloc((size_t)V * H * sizeof *dw);
    for (size_t a = 0; a < (size_t)V * H; a++)
        dw[a] = 0.25f; /* accumulated onto */
    gemm_bf16_cache_clear();
    LogitStats *stats = malloc(N * sizeof *stats);
    autocast_logprob_forward(logp, stats, hid, target, (WeightRef){.f32 = w}, N, H, V, plain);
    autocast_logprob_forward(logp16, NULL, hid, target, (WeightRef){.bf16 = w16}, N, H, V, plain);
    autocast_logprob_backward(dh, dw, dlogp, hid, target, (WeightRef){.f32 = w}, N, H, V, plain);
    autocast_logprob_backward(dh16, NULL, dlogp, hid, target, (WeightRef){.bf16 = w16}, N, H, V,
                              plain);
    double worst;
    int bad = count_off(logp, ref->logp, ref->logp_tol, N, &worst);
    CHECK(bad == 0, "%s: %d of %d log-probs off (worst %.2f of its bound)", path, bad, N, worst);
    printf("%s: log-probs at most %.3f of their bound", path, worst);
    /* each logit within logp_tol / 2 of its exact value (the bound's zerr), so are their mean,
     * the entropy within the log-prob's bound, and the argmax's logit within 2 zerr of the top */
    int bad_stats = 0;
    for (int i = 0; i < N; i++) {
        double zerr = ref->logp_tol[i] / 2;
        bad_stats += !(fabs(stats[i].mean_logit - ref->mean[i]) <= zerr + 1e-6);
        bad_stats += !(fabs(stats[i].entropy - ref->entropy[i]) <= ref->logp_tol[i] + 1e-5);
        bad_stats += !(stats[i].argmax >= 0 && stats[i].argmax < V &&
                       ref->z[i][stats[i].argmax] >= ref->zmax[i] - 2 * zerr);
    }
    CHECK(bad_stats == 0, "%s: %d LogitStats values off", path, bad_stats);
    bad = count_off(dh, ref->dh, ref->dh_tol, (size_t)N * H, &worst);
    CHECK(bad == 0, "%s: %d of %d dhidden off (worst %.2f of its bound)", path, bad, N * H, worst);
    printf(", dhidden %.3f", worst);
    bad = count_off(dw, ref->dw, ref->dw_tol, (size_t)V * H, &worst);
    CHECK(bad == 0, "%s: %d of %d dW off (worst %.2f of its bound)", path, bad, V * H, worst);
    printf(", dW %.3f\n", worst);
    CHECK(memcmp(logp, logp16, N * sizeof *logp) == 0, "%s: log-probs differ with W in bf16", path);
    CHECK(memcmp(dh, dh16, (size_t)N * H * sizeof *dh) == 0, "%s: dhidden differs with W in bf16",
          path);
    free(stats), free(logp), free(logp16), free(dh), free(dh16), free(dw);
}

/* The lm_head through backend_cpu_autocast's table on the path forced (file comment). */
static void check_backend(const Reference *ref, const float *hid, const float *w,
                          const int32_t *target, const float *dlogp) {
    const Backend *be = backend_cpu_autocast();
    const char *path = gemm_bf16_path_name(gemm_bf16_path());
    float *logp = malloc(N * sizeof *logp), *dh = malloc((size_t)N * H * sizeof *dh);
    float *dw = malloc((size_t)V * H * sizeof *dw);
    double *dh_tol = malloc((size_t)N * H * sizeof *dh_tol);
    for (size_t a = 0; a < (size_t)V * H; a++)
        dw[a] = 0.25f; /* accumulated onto */
    for (size_t a = 0; a < (size_t)N * H; a++)
        dh_tol[a] = ref->dh_tol[a] + ldexp(fabs(ref->dh[a]) + ref->dh_tol[a], -9);
    gemm_bf16_cache_clear();
    WeightRef wr = {.f32 = w};
    be->logprob(be, logp, NULL, hid, target, wr, N, H, V);
    be->logprob_backward(be, dh, dw, dlogp, hid, target, wr, N, H, V);
    double worst;
    int bad = count_off(logp, ref->logp, ref->logp_tol, N, &worst);
    CHECK(bad == 0, "%s backend: %d of %d log-probs off (worst %.2f of its bound)", path, bad, N,
          worst);
    printf("%s backend: log-probs at most %.3f of their bound", path, worst);
    bad = count_off(dh, ref->dh, dh_tol, (size_t)N * H, &worst);
    CHECK(bad == 0, "%s backend: %d of %d dhidden off (worst %.2f of its bound)", path, bad, N * H,
          worst);
    printf(", dhidden %.3f", worst);
    bad = count_off(dw, ref->dw, ref->dw_tol, (size_t)V * H, &worst);
    CHECK(bad == 0, "%s backend: %d of %d dW off (worst %.2f of its bound)", path, bad, V * H,
          worst);
    printf(", dW %.3f\n", worst);
    /* The log-sum-exp handed over (logprob_lse, then logprob_backward_lse): the same log-probs,
     * statistics and gradients, bit for bit, as the pass above that finds it again; the forward
     * run with and without statistics, which must not change the lse. */
    LogitStats *stats = malloc(N * sizeof *stats), *stats_lse = malloc(N * sizeof *stats_lse);
    float *logp_lse = malloc(N * sizeof *logp_lse), *lse = malloc(N * sizeof *lse);
    float *lse_plain = malloc(N * sizeof *lse_plain), *dh_lse = malloc((size_t)N * H * sizeof *dh);
    float *dw_lse = malloc((size_t)V * H * sizeof *dw);
    be->logprob(be, logp, stats, hid, target, wr, N, H, V);
    be->logprob_lse(be, logp_lse, stats_lse, lse, hid, target, wr, N, H, V);
    CHECK(memcmp(logp, logp_lse, N * sizeof *logp) == 0 &&
              memcmp(stats, stats_lse, N * sizeof *stats) == 0,
          "%s backend: logprob_lse's log-probs or statistics are not logprob's", path);
    be->logprob_lse(be, logp_lse, NULL, lse_plain, hid, target, wr, N, H, V);
    CHECK(memcmp(lse, lse_plain, N * sizeof *lse) == 0,
          "%s backend: the lse depends on whether statistics were asked for", path);
    for (size_t a = 0; a < (size_t)V * H; a++)
        dw_lse[a] = 0.25f;
    be->logprob_backward_lse(be, dh_lse, dw_lse, dlogp, lse, hid, target, wr, N, H, V);
    CHECK(memcmp(dh, dh_lse, (size_t)N * H * sizeof *dh) == 0,
          "%s backend: dhidden with the lse handed over is not the recomputing backward's", path);
    CHECK(memcmp(dw, dw_lse, (size_t)V * H * sizeof *dw) == 0,
          "%s backend: dW with the lse handed over is not the recomputing backward's", path);
    free(stats), free(stats_lse), free(logp_lse), free(lse), free(lse_plain), free(dh_lse);
    free(dw_lse);
    free(logp), free(dh), free(dw), free(dh_tol);
}

int main(void) {
    unsigned seed = 7;
    float *hid = malloc((size_t)N * H * sizeof *hid), *w = malloc((size_t)V * H * sizeof *w);
    float *dlogp = malloc(N * sizeof *dlogp);
    uint16_t *w16 = malloc((size_t)V * H * sizeof *w16);
    int32_t *target = malloc(N * sizeof *target);
    fill(hid, (size_t)N * H, &seed), fill(w, (size_t)V * H, &seed), fill(dlogp, N, &seed);
    for (size_t a = 0; a < (size_t)V * H; a++) { /* bf16-exact, so that both W agree */
        w16[a] = f32_to_bf16(w[a]);
        w[a] = bf16_to_f32(w16[a]);
    }
    for (int i = 0; i < N; i++) /* the last tile and the last column get their share */
        target[i] = i % 3 == 0 ? V - 1 - i % 7 : (int)(rand_r(&seed) % V);
    Reference ref = reference(hid, w, target, dlogp);
    int paths = 0;
    for (int p = GEMM_BF16_NONE + 1; p < GEMM_BF16_PATH_COUNT; p++) {
        if (!gemm_bf16_force((GemmBf16Path)p)) continue;
        check_path(&ref, hid, w, w16, target, dlogp);
        paths++;
    }
    CHECK(paths > 0 || !gemm_bf16_supported(GEMM_BF16_AVX2), "no bf16 GEMM path ran");
    for (int p = GEMM_BF16_NONE; p < GEMM_BF16_PATH_COUNT; p++)
        if (gemm_bf16_force((GemmBf16Path)p)) check_backend(&ref, hid, w, target, dlogp);
    gemm_bf16_cache_clear();
    for (int i = 0; i < N; i++)
        free(ref.z[i]);
    free(ref.z), free(ref.mean), free(ref.entropy), free(ref.zmax);
    free(ref.logp), free(ref.logp_tol), free(ref.dz), free(ref.dz_err), free(ref.dh);
    free(ref.dh_tol), free(ref.dw), free(ref.dw_tol);
    free(hid), free(w), free(dlogp), free(w16), free(target);
    return harness_finish("test_autocast_logprob");
}
