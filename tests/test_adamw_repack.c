/* adamw_f32_update_repacking (kernels/cpu/kernels.h; gemm_bf16_cache.c, invariant 7): AdamW on
 * a weight matrix whose bf16 packings gemm_bf16's cache holds, the packings written again row
 * block by row block as the rows are updated. Checked against independent computations:
 *  - p, m and v are, bit for bit, adamw_f32_update's on copies of the same inputs;
 *  - each cached packing's buffer, read as it is right after the update (before any lookup,
 *    which would repack a stale entry itself), is byte for byte a fresh bf16_pack_b of the
 *    updated W (padding included), and a lookup then returns that same buffer as it is;
 *  - the forward's layout alone, dX's alone, or both cached; no packing cached (a plain update);
 *    a span larger than the matrix (its packings are not repacked by the update, and the lookup
 *    repacks them as stale ones);
 * on shapes with rows and columns short of, at and past 16 and 32, odd, over both threads'
 * blocks, at 1 and 2 threads, over three steps each. Values include NaN, infinities, subnormals
 * and ties (the rounding the packing does). */
#include "harness.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernels.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* W (out_dim x in_dim) in the forward's layout (transposed) or dX's, packed afresh. */
static Bf16PackedB fresh_packing(const float *w, int out_dim, int in_dim, bool transposed) {
    Bf16PackedB b;
    if (transposed)
        bf16_pack_b(&b, (Bf16Source){.f32 = w, .row_stride = 1, .col_stride = (size_t)in_dim},
                    in_dim, out_dim);
    else
        bf16_pack_b(&b, (Bf16Source){.f32 = w, .row_stride = (size_t)in_dim, .col_stride = 1},
                    out_dim, in_dim);
    return b;
}

static size_t packed_bytes(const Bf16PackedB *b) {
    return (size_t)b->depth_padded * b->cols_padded * sizeof *b->data;
}

/* One case: W (out_dim x in_dim) at the start of a span of out_dim * in_dim + extra values, the
 * layouts in `cached` (bit 0 the forward's, bit 1 dX's) looked up before each step. */
static void check_case(int out_dim, int in_dim, int extra, int cached, int threads) {
    omp_set_num_threads(threads);
    size_t n = (size_t)out_dim * in_dim + (size_t)extra;
    float *p = malloc(n * sizeof *p), *m = malloc(n * sizeof *m), *v = malloc(n * sizeof *v);
    float *g = malloc(n * sizeof *g), *rp = malloc(n * sizeof *rp), *rm = malloc(n * sizeof *rm);
    float *rv = malloc(n * sizeof *rv);
    uint64_t state = 0x9e3779b97f4a7c15ull ^ (uint64_t)(out_dim * 131 + in_dim * 7 + extra);
    for (size_t i = 0; i < n; i++) {
        p[i] = rp[i] = harness_bf16_edge_value(&state);
        m[i] = rm[i] = (float)(harness_uniform(&state) - 0.5) * 0.1f;
        v[i] = rv[i] = (float)harness_uniform(&state) * 0.01f;
    }
    gemm_bf16_cache_clear();
    for (int step = 1; step <= 3; step++) {
        for (size_t i = 0; i < n; i++)
            g[i] = (float)(harness_uniform(&state) - 0.5);
        AdamWStepCoefs c = {.beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .eps = 1e-8f,
                            .shrink = step == 2 ? 0.999f : 1.0f,
                            .grad_scale = step == 3 ? 0.5f : 1.0f};
        float step_size = 0.05f * (float)step, inv_bc2_sqrt = 1.0f / (float)step;
        Bf16PackedB before[2] = {{0}};
        for (int k = 0; k < 2; k++)
            if (cached >> k & 1) before[k] = *bf16_weight_packed(p, NULL, out_dim, in_dim, k == 0);
        gemm_bf16_weights_updated(p, n * sizeof *p); /* as adamw_step marks them */
        adamw_f32_update_repacking(p, m, v, g, n, &c, step_size, inv_bc2_sqrt);
        adamw_f32_update(rp, rm, rv, g, n, &c, step_size, inv_bc2_sqrt);
        const char *what = "%dx%d+%d cached %d, %d threads, step %d: %s";
        CHECK(memcmp(p, rp, n * sizeof *p) == 0, what, out_dim, in_dim, extra, cached, threads,
              step, "weights differ from adamw_f32_update's");
        CHECK(memcmp(m, rm, n * sizeof *m) == 0 && memcmp(v, rv, n * sizeof *v) == 0, what, out_dim,
              in_dim, extra, cached, threads, step, "moments differ");
        for (int k = 0; k < 2; k++) {
            if (!(cached >> k & 1)) continue;
            Bf16PackedB want = fresh_packing(rp, out_dim, in_dim, k == 0);
            const char *layout = k == 0 ? "the forward's packing" : "dX's packing";
            /* repacked by the update itself, unless W is only part of the span */
            bool by_update = extra == 0;
            CHECK((memcmp(before[k].data, want.data, packed_bytes(&want)) == 0) == by_update,
                  "%dx%d+%d cached %d, %d threads, step %d: %s %s by the update", out_dim, in_dim,
                  extra, cached, threads, step, layout, by_update ? "not repacked" : "repacked");
            const Bf16PackedB *got = bf16_weight_packed(p, NULL, out_dim, in_dim, k == 0);
            CHECK(got->data == before[k].data &&
                      memcmp(got->data, want.data, packed_bytes(&want)) == 0,
                  what, out_dim, in_dim, extra, cached, threads, step,
                  "a lookup after the update does not give the updated W's packing in its buffer");
            bf16_packed_b_free(&want);
        }
    }
    gemm_bf16_cache_clear();
    free(p), free(m), free(v), free(g), free(rp), free(rm), free(rv);
}

int main(void) {
    static const int shapes[][2] = {{1, 2},   {2, 5},   {15, 17}, {16, 16}, {17, 33},
                                    {37, 21}, {48, 64}, {64, 31}, {130, 96}};
    for (int threads = 1; threads <= 2; threads++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int cached = 0; cached < 4; cached++) {
                check_case(shapes[s][0], shapes[s][1], 0, cached, threads);
                if (cached == 3) check_case(shapes[s][0], shapes[s][1], 5, cached, threads);
            }
    return harness_finish("test_adamw_repack");
}
