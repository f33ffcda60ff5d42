/* The fp32 AdamW update of a weight matrix fused with the repacking of its cached bf16 packings
 * (kernels.h, adamw_f32_update_repacking; gemm_bf16_cache.c, invariant 7). */
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernels.h"

void adamw_f32_update_repacking(float *p, float *m, float *v, const float *g, size_t numel,
                                const AdamWStepCoefs *c, float step_size, float inv_bc2_sqrt) {
    Bf16WeightRepack r;
    if (bf16_weight_repack_begin(&r, p, numel) == 0) {
        adamw_f32_update(p, m, v, g, numel, c, step_size, inv_bc2_sqrt);
        return;
    }
    /* blocks of 16 rows (bf16_repack_b_rows' unit): one 16-column panel of the forward's layout,
     * 8 pair steps of dX's, so that no two threads write one packed word */
    const int block = 16;
    int blocks = (r.out_dim + block - 1) / block;
    size_t in = (size_t)r.in_dim;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; b++) {
        int r0 = b * block, r1 = r.out_dim - r0 < block ? r.out_dim : r0 + block;
        size_t at = (size_t)r0 * in, count = (size_t)(r1 - r0) * in;
        adamw_f32_update_serial(p + at, m + at, v + at, g + at, count, c, step_size, inv_bc2_sqrt);
        bf16_weight_repack_rows(&r, r0, r1);
    }
    bf16_weight_repack_done(&r);
}
