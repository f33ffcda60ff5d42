// Tensor-core products for the CUDA kernels (issue 29): the warp-wide bf16 product
//     mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   D (16x8) = A (16x16) B (16x8) + C
// as one small wrapper, inline PTX under nvcc (sm_80 and later; we build sm_90a), and under
// cuda-emu (emu/cuda_emu.h) a warp-collective emulation written from the same fragment layouts.
//
// Fragment layouts: PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type", for
// .bf16. With groupID = lane >> 2 and tig (threadID_in_group) = lane % 4, a lane holds
//  - A, row-major, 8 elements a0..a7 in 4 registers (a0 the low half of register 0):
//        row = groupID for a0, a1, a4, a5, else groupID + 8;
//        col = tig * 2 + (i & 1), plus 8 for a4..a7;
//  - B, "col" (k x n, element (k, n)), 4 elements b0..b3 in 2 registers:
//        k = tig * 2 + (i & 1), plus 8 for b2, b3;  n = groupID;
//  - C and D, fp32, 4 elements c0..c3:
//        row = groupID for c0, c1, else groupID + 8;  col = tig * 2 + (i & 1).
// mma_a_coord, mma_b_coord and mma_c_coord below are these formulas; tests/cuda/test_cuda_emu.c
// checks them against the ISA's figures entry by entry, and the emulated product against a plain
// triple loop.
//
// Numerics (what the emulation does, and what is documented of the hardware): the bf16 products
// are exact in fp32 (8 + 8 significant bits). NVIDIA does not specify the order or the
// intermediate precision of the k = 16 sum with C; the emulation adds the 16 exact products and c
// in double in k order, then rounds once to fp32 (nearest): the exact sum, rounded, except where
// the terms' magnitudes span more than double's 53 bits. The hardware is known to align and
// truncate inside that sum, so a device result may differ from the emulation's in the last bit
// of fp32; the kernels' tests bound results, never compare device bits to emulated bits.
//
// Contract of the kernels using this header: blocks are one-dimensional (a warp is 32
// consecutive threadIdx.x) and every lane of a warp calls mma_bf16_16816 together (.aligned:
// cuda-emu aborts when a lane is missing, as for a shuffle).
#ifndef RLHF_KERNELS_CUDA_MMA_CUH
#define RLHF_KERNELS_CUDA_MMA_CUH

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/cuda_device.h"

#include <stdint.h>

// A fragment element's place in its matrix.
struct MmaCoord {
    int row, col;
};

// Element i (0..7) of lane's A fragment: (row, col) of the 16x16 A.
__host__ __device__ __forceinline__ MmaCoord mma_a_coord(int lane, int i) {
    int group = lane >> 2, tig = lane & 3;
    return MmaCoord{group + ((i >> 1) & 1) * 8, tig * 2 + (i & 1) + (i >> 2) * 8};
}
// Element i (0..3) of lane's B fragment: (k, n) of the 16x8 B.
__host__ __device__ __forceinline__ MmaCoord mma_b_coord(int lane, int i) {
    int group = lane >> 2, tig = lane & 3;
    return MmaCoord{tig * 2 + (i & 1) + (i >> 1) * 8, group};
}
// Element i (0..3) of lane's C or D fragment: (row, col) of the 16x8 C.
__host__ __device__ __forceinline__ MmaCoord mma_c_coord(int lane, int i) {
    int group = lane >> 2, tig = lane & 3;
    return MmaCoord{group + (i >> 1) * 8, tig * 2 + (i & 1)};
}

// ---- fragments from bf16 tiles in shared memory (row `stride` elements apart) ----
// Elements 2r and 2r + 1 of every fragment are neighbours in the matrix (A, C: the next column;
// B: the next k), so a register is the pair at its even element's place.

// A (16x16) = tile rows r0.., columns k0.. (row-major: the pair is two adjacent bf16).
__device__ __forceinline__ void mma_load_a(unsigned a[4], const uint16_t *tile, int stride, int r0,
                                           int k0, int lane) {
#pragma unroll
    for (int r = 0; r < 4; r++) {
        MmaCoord at = mma_a_coord(lane, 2 * r);
        const uint16_t *p = tile + (r0 + at.row) * stride + k0 + at.col;
        a[r] = (unsigned)p[0] | (unsigned)p[1] << 16;
    }
}
// B (16x8) with B(k, n) = tile[n0 + n][k0 + k]: tile rows are B's columns (K as the B of Q K^T).
__device__ __forceinline__ void mma_load_b_rows(unsigned b[2], const uint16_t *tile, int stride,
                                                int n0, int k0, int lane) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        MmaCoord at = mma_b_coord(lane, 2 * r);
        const uint16_t *p = tile + (n0 + at.col) * stride + k0 + at.row;
        b[r] = (unsigned)p[0] | (unsigned)p[1] << 16;
    }
}
// B (16x8) with B(k, n) = tile[k0 + k][n0 + n]: tile rows are B's rows (V as the B of P V).
__device__ __forceinline__ void mma_load_b_cols(unsigned b[2], const uint16_t *tile, int stride,
                                                int k0, int n0, int lane) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        MmaCoord at = mma_b_coord(lane, 2 * r);
        const uint16_t *p = tile + (k0 + at.row) * stride + n0 + at.col;
        b[r] = (unsigned)p[0] | (unsigned)p[stride] << 16;
    }
}
// The A fragment (16x16) of two fp32 C fragments side by side, rounded to bf16: lo holds columns
// 0-7, hi columns 8-15. By the layouts, A's element i < 4 sits where C's element i does and
// element i >= 4 where C's element i - 4 does, 8 columns on: the product of one mma feeds the
// next from registers (flash attention's P V).
__device__ __forceinline__ void mma_a_from_c(unsigned a[4], const float lo[4], const float hi[4]) {
    a[0] = bf16x2_rounded(lo[0], lo[1]);
    a[1] = bf16x2_rounded(lo[2], lo[3]);
    a[2] = bf16x2_rounded(hi[0], hi[1]);
    a[3] = bf16x2_rounded(hi[2], hi[3]);
}

#ifdef RLHF_CUDA_EMU
// A lane's operand registers as it posts them to the warp (cuda_emu_warp_combine).
struct MmaPosted {
    unsigned a[4], b[2];
    float c[4];
};

// The element i of a bf16x2 fragment array (element 2r the low half of register r).
static inline float mma_element(const unsigned *regs, int i) {
    return bf16_value((regs[i >> 1] >> ((i & 1) * 16)) & 0xffffu);
}

// The warp's product, once, when the last lane arrives: A and B rebuilt from every lane's
// registers by the documented layouts, each lane's 4 elements of D written to its out.
static void mma_bf16_16816_combine(const void *const in[32], void *const out[32]) {
    float am[16][16], bm[16][8];
    for (int l = 0; l < 32; l++) {
        const MmaPosted *p = (const MmaPosted *)in[l];
        for (int i = 0; i < 8; i++) {
            MmaCoord at = mma_a_coord(l, i);
            am[at.row][at.col] = mma_element(p->a, i);
        }
        for (int i = 0; i < 4; i++) {
            MmaCoord at = mma_b_coord(l, i);
            bm[at.row][at.col] = mma_element(p->b, i);
        }
    }
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            MmaCoord at = mma_c_coord(l, i);
            double sum = ((const MmaPosted *)in[l])->c[i];
            for (int k = 0; k < 16; k++)
                sum += (double)am[at.row][k] * bm[k][at.col];
            ((float *)out[l])[i] = (float)sum;
        }
}

// d = A B + c for this lane's fragments (d may be c): one warp collective (cuda-emu's rule 5:
// a missing lane aborts) in which the product is formed from every lane's registers.
static inline void mma_bf16_16816(float d[4], const unsigned a[4], const unsigned b[2],
                                  const float c[4]) {
    MmaPosted mine = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}, {c[0], c[1], c[2], c[3]}};
    float out[4];
    cuda_emu_warp_combine(0xffffffffu, &mine, out, mma_bf16_16816_combine);
    CUDA_EMU_COMPILER_BARRIER();
    for (int i = 0; i < 4; i++)
        d[i] = out[i];
}
#else
// d = A B + c on the tensor cores (d may be c).
__device__ __forceinline__ void mma_bf16_16816(float d[4], const unsigned a[4], const unsigned b[2],
                                               const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
                   "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
#endif

#endif
