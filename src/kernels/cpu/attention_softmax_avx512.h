/* The softmax of one attention score row in AVX-512 (F, BW, VL) and FMA intrinsics, for the AMX
 * attention (attention_amx.c's AttnKernel.softmax): the probabilities normalised, and optionally
 * written rounded to bf16 in ATTN_PACK_STEP's layout (attention_train.h) for P · V.
 *
 * Why its own: attention.c's softmax_columns is portable C that every build must compile to the
 * same bits (fast_exp.h: no contraction, a clamped integer exponent), ~28 vector instructions an
 * exponential, and its maximum and lane sums went through stack arrays. Here the exponential is
 * an FMA polynomial scaled by vscalefps (12 instructions), the maxima and sums stay in registers,
 * and the tail is one masked vector. The AMX attention runs only on CPUs with AVX-512F (every
 * AMX CPU has it), reached by run-time dispatch, so the Release and the sanitizer build run these
 * same instructions and get the same bits.
 *
 * Values: e^(s - max) to a relative error below 2.5e-7 (test_attention_softmax's largest:
 * 2.07e-7), summed in 16 lanes then reduced by _mm512_reduce_add_ps (in GCC's header a fixed
 * halving tree), so every build gives the same sum; they differ from softmax_columns' in the last
 * bits. Scores are finite, soft-capped or not; a NaN score makes its row NaN, as softmax_columns'
 * does. */
#ifndef RLHF_KERNELS_CPU_ATTENTION_SOFTMAX_AVX512_H
#define RLHF_KERNELS_CPU_ATTENTION_SOFTMAX_AVX512_H

#include <stdint.h>

/* softmax_columns' contract (attention.c) with normalise true: the softmax of row[lo..hi]
 * (0 <= lo <= hi), columns before lo getting probability 0. Without `packed` (NULL) row[lo..hi]
 * becomes the probabilities and row[0..lo) zero; the columns past hi must hold 0 already and are
 * not written. With `packed` the probabilities go there rounded to bf16 (nearest, ties to even:
 * narrow_bf16's bits) at columns lo..hi, zeros elsewhere up to `stride` (> hi), and row[lo..hi]
 * is left holding the exponentials. Returns 1 / the sum of the exponentials. Only on a CPU with
 * AVX-512F, BW and VL and FMA: every CPU with AMX has them (attention_amx_usable() checks AMX,
 * AVX-512F, AVX512_BF16 and FMA; BW and VL come with every AVX512_BF16 CPU made). */
float attention_softmax_avx512(float *row, int lo, int hi, uint16_t *packed, int stride);

#endif
