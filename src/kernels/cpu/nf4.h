/* bitsandbytes' NF4 4-bit weights (QLoRA; transformers' BitsAndBytesConfig(load_in_4bit=True,
 * bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True), what bnb.nn.Params4bit does at load
 * on the CPU, bitsandbytes 0.50):
 *  - the matrix, flattened, in blocks of NF4_BLOCK values: each block's absmax (largest
 *    magnitude), each value scaled by it (times 1/absmax; the last block, when partial, divided by
 *    it) and clamped to [-1, 1], then the index of the nearest of the 16 NF4 values (ties to the
 *    lower), two to a byte, the first value in the high nibble;
 *  - double quantisation of the absmax: minus their mean (the offset), in blocks of
 *    NF4_ABSMAX_BLOCK, each to a byte of the 8-bit signed dynamic map with an fp32 absmax of its
 *    own, by bitsandbytes' CPU library (a value snapped to a 65536-step grid of [-1, 1], then a
 *    table);
 *  - dequantisation: NF4 value x (map value x absmax2 + offset), each product and sum one fp32
 *    rounding, as bitsandbytes' dequantize_blockwise and dequantize_4bit compute it. */
#ifndef RLHF_KERNELS_CPU_NF4_H
#define RLHF_KERNELS_CPU_NF4_H

#include <stddef.h>
#include <stdint.h>

#define NF4_BLOCK        64
#define NF4_ABSMAX_BLOCK 256

/* The 16 NF4 values, ascending (bitsandbytes' table). */
extern const float nf4_values[16];

/* One quantised matrix (out_dim, in_dim), numel values; host memory, owned. */
typedef struct Nf4Weight {
    size_t numel;
    uint8_t *packed;  /* (numel + 1) / 2 */
    uint8_t *qabsmax; /* one code per block of NF4_BLOCK */
    float *absmax2;   /* one per NF4_ABSMAX_BLOCK blocks */
    float offset;
    float *absmax; /* the blocks' absmax, dequantised once (what every product reads) */
} Nf4Weight;

size_t nf4_blocks(size_t numel);

/* Quantises n values: packed ((n + 1) / 2 bytes) and absmax (nf4_blocks(n) floats) written,
 * without double quantisation. */
void nf4_quantize_plain(const float *x, size_t n, uint8_t *packed, float *absmax);

/* bitsandbytes' quantize_blockwise on the CPU with the signed dynamic map (map, 256 values
 * ascending): codes (n) and absmax (one per block of `block` values) written. */
void q8_dynamic_quantize(const float *map, const float *x, size_t n, int block, uint8_t *codes,
                         float *absmax);

/* torch's float32 mean of n contiguous values (the double quantisation's offset): ATen's cascaded
 * sum on one thread, divided by n. */
float torch_mean_f32(const float *x, size_t n);

/* Quantises n values into q, with double quantisation. Returns 0, or -1 with an error when it does
 * not fit in memory (q is then empty). */
int nf4_quantize(Nf4Weight *q, const float *x, size_t n);

/* dst[i] = value first + i of the matrix, dequantised, for count values. */
void nf4_dequantize(float *dst, const Nf4Weight *q, size_t first, size_t count);

void nf4_free(Nf4Weight *q);

/* Bytes q holds. */
size_t nf4_bytes(size_t numel);

#endif
