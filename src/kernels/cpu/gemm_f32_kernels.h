/* The register micro-kernels of gemm_f32 (gemm_f32.h) and the blocking each is driven with;
 * private to gemm_f32*.c.
 *
 * A micro-kernel multiplies one packed micro-panel of A (kc x mr: for each k the mr values of
 * op(A)'s rows, adjacent) by one of B (kc x nr: for each k the nr values of op(B)'s columns,
 * adjacent), k ascending, into an mr x nr tile of registers, and then updates the tile's first
 * `rows` x `cols` elements of C as gemm_f32_tile_update says. Packing pads both panels with
 * zeros, so the kernel always runs the full tile. */
#ifndef RLHF_KERNELS_CPU_GEMM_F32_KERNELS_H
#define RLHF_KERNELS_CPU_GEMM_F32_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

typedef void (*GemmF32MicroKernel)(int kc, const float *pa, const float *pb, float *c, int ldc,
                                   int rows, int cols, float alpha, float beta);

/* Packs one micro-panel: items first .. first + count - 1 (count <= width; zeros in the panel
 * past them) at depths k0 .. k0 + kc - 1, stored depth by depth, `width` floats each. along_k:
 * an item's depths are adjacent in src (item i at src + i ld + k0: A not transposed, B
 * transposed); else a depth's items are adjacent (depth d at src + d ld + first). A's panels
 * are mr wide, B's nr. Pure copies: any packer gives the same panel. */
typedef void (*GemmF32Pack)(float *dst, const float *src, int ld, bool along_k, int first,
                            int count, int k0, int kc, int width);

typedef struct {
    int mr, nr; /* register tile: rows of C x columns of C */
    int kc;     /* depth of a packed block: A's micro-panel (mr x kc) stays in L1 */
    int mb;     /* rows of A packed at once (a multiple of mr) */
    int nb_max; /* columns of B packed at once per thread (kc x nb in L2; a multiple of nr) */
    GemmF32MicroKernel kernel;
    GemmF32Pack pack; /* NULL: gemm_f32.c's scalar packing */
} GemmF32Kernel;

/* The kernels; the SIMD ones exist on x86-64 only (compiled for their instructions with target
 * attributes, whatever the build's -march) and must only be called where cpuid has them. */
extern const GemmF32Kernel gemm_f32_kernel_portable;
#if defined(__x86_64__)
extern const GemmF32Kernel gemm_f32_kernel_avx2;
extern const GemmF32Kernel gemm_f32_kernel_avx512;
void gemm_f32_pack_avx512(float *dst, const float *src, int ld, bool along_k, int first, int count,
                          int k0, int kc, int width);
#endif

/* The update every kernel makes, element by element: t = alpha * acc, then C = t where beta is
 * 0 (C not read), C = C + t where beta is 1, else C = beta * C + t. The SIMD kernels do the same
 * with vector multiplies and adds (no fused multiply-add here), so that a tile is updated alike
 * on every path; this scalar form serves their partial tiles. `tile` is mr x nr, row stride nr. */
static inline void gemm_f32_tile_update(float *c, int ldc, const float *tile, int nr, int rows,
                                        int cols, float alpha, float beta) {
    for (int i = 0; i < rows; i++) {
        float *row = c + (size_t)i * ldc;
        const float *acc = tile + (size_t)i * nr;
        if (beta == 0.0f)
            for (int j = 0; j < cols; j++)
                row[j] = alpha * acc[j];
        else if (beta == 1.0f)
            for (int j = 0; j < cols; j++)
                row[j] = row[j] + alpha * acc[j];
        else
            for (int j = 0; j < cols; j++)
                row[j] = beta * row[j] + alpha * acc[j];
    }
}

#endif
