/* The rollout's bf16 products on AMX tiles (gemm_bf16's AMX path): decoding and prefilling with
 * a model kept in bf16 (rlhf generate --bf16) or with fp32 weights under bf16 autocast (GRPO's
 * generation with bf16: true).
 *
 * Why: on the AMX Xeon here vdpbf16ps (packed_matmul_bf16.c's panels) runs at half the fp32 FMA
 * rate, 108 against 224 GFLOP/s a core, while tdpbf16ps does ~3200 (bench/README.md, peak_flops).
 * A batch-64 decode step multiplies 64 rows by every W and is bound by arithmetic on the panels;
 * on tiles it is bound by reading W again.
 *
 * The weights: no copy of the PackedModel's own. Each product reads the packing gemm_bf16's
 * cache keeps of W (gemm_bf16_cache.c): made once per optimizer step for the policy's fp32
 * weights (the same packing the training forward under autocast reads, dropped by the AdamW
 * step) and once per model for weights stored in bf16 (dropped at model_free). A cached packing
 * is valid only until the next drop, so it is looked up per product, never kept: with its
 * fingerprint (512 values of W) once, when the PackedModel is built at the start of a generate()
 * call, and without it at each product of the call (the weights do not change during one).
 *
 * Rounding: as packed_matmul_bf16.c's, the inputs rounded to bf16 (nearest, ties to even), each
 * product of two bf16 values exact in fp32, fp32 sums; the sums run 32 depth values at a time in
 * the tile unit's order, so they differ from the panels' in the last bits. */
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/kernels.h"

bool packed_amx_available(void) {
    return gemm_bf16_path() == GEMM_BF16_AMX;
}

bool packed_weight_is_amx(const PackedWeight *p) {
    return p->amx.f32 != NULL || p->amx.bf16 != NULL;
}

void packed_weight_amx(PackedWeight *p, WeightRef w, int in_dim, int out_dim) {
    *p = (PackedWeight){
        .amx = {.f32 = w.f32, .bf16 = w.f32 ? NULL : w.bf16}, .in_dim = in_dim, .out_dim = out_dim};
    (void)bf16_weight_packed(p->amx.f32, p->amx.bf16, out_dim, in_dim, true); /* checked */
}

/* x packed as gemm_bf16's A; the cache's packing of W, checked by packed_weight_amx at the start
 * of this generate() call (nothing writes the weights during it). */
static const Bf16PackedB *pack_product(Bf16PackedA *a, const float *in, const PackedWeight *w,
                                       int n) {
    bf16_pack_a(a, (Bf16Source){.f32 = in, .row_stride = (size_t)w->in_dim, .col_stride = 1}, n,
                w->in_dim);
    return bf16_weight_packed_unchanged(w->amx.f32, w->amx.bf16, w->out_dim, w->in_dim, true);
}

void packed_matmul_amx_forward(float *out, const float *in, const PackedWeight *w,
                               const float *bias, int n) {
    if (n == 0) return;
    Bf16PackedA a;
    const Bf16PackedB *b = pack_product(&a, in, w, n);
    gemm_bf16(out, (size_t)w->out_dim, false, &a, b);
    bf16_packed_a_free(&a);
    bias_add_rows(out, bias, n, w->out_dim);
}

void packed_matmul_amx_forward_rounded(float *out, const float *in, const PackedWeight *w,
                                       const float *bias, int n) {
    if (n == 0) return;
    Bf16PackedA a;
    const Bf16PackedB *b = pack_product(&a, in, w, n);
    gemm_bf16_rounded(out, (size_t)w->out_dim, &a, b, bias);
    bf16_packed_a_free(&a);
}
