/* The CUDA backend (issue 29): kernels/backend.h's table over the own kernels (cuda_kernels.h)
 * and the cuBLASLt-semantics products (gemm_ops.h). Written once, in backend_cuda.cu, which nvcc
 * builds into rlhf_cuda (the device: cuBLASLt) and the host compiler builds against cuda-emu into
 * rlhf_cuda_emu (the emulation: gemm.h's host reference), so the emulated backend that CI runs is
 * the device backend's own code.
 *
 * Invariants:
 *  1. Memory is CUDA memory (host_memory false): alloc hands out cudaMalloc blocks through a
 *     caching pool (device_pool.h: a freed block is kept and reused, not given back, until the
 *     backend is freed or the device runs out), copy is cudaMemcpy, and every op runs in call
 *     order on the default stream (backend.h rule 5), which is what makes reuse without a wait
 *     safe.
 *  2. Scratch (rmsnorm's rstd, attention's statistics, LoRA's intermediates, the lm_head's
 *     vocabulary chunk) is owned by the backend and grows on demand; it is never returned.
 *  3. The lm_head never holds more than one chunk of (rows, cols) logits: the forward folds each
 *     chunk into a per-row running log-sum-exp; the backward recomputes each chunk and turns it
 *     into dlogits in place before its two products.
 *  4. Ops cannot return errors (backend.h rule 6). A failure inside one (a launch, a GEMM, scratch
 *     that does not fit) is kept as the backend's first error; every later op is skipped, and
 *     backend_cuda_status reports it. Nothing else is written after a failure.
 *  5. No 8-bit AdamW: the table's adamw8bit is NULL (adamw_check_backend refuses it).
 *  6. bf16 autocast (bf16: true; the *_autocast_new constructors) computes what
 *     backend_cpu_autocast computes (kernels/cpu/backend_autocast.c, rules 1-5 there), the same
 *     values to fp32 rounding of the sums: linear, linear_backward and the lm_head's products
 *     take bf16 operands (fp32 activations and weights narrowed into scratch, nearest even; a
 *     frozen bf16 weight as it is) in bf16 cuBLASLt GEMMs with fp32 sums and fp32 outputs, dW and
 *     dbias accumulated in fp32, and round to bf16 values the outputs that are bf16 tensors in
 *     torch (a linear's output and input gradient, the lm_head's dhidden). The lm_head's fp32
 *     dlogits go into the backward products as three bf16 parts (their sum is dlogits to 2^-24),
 *     since cuBLASLt has no fp32 x bf16 product. Attention runs the fp32 kernels on q, k, v (and
 *     dout) rounded to bf16 values and rounds what it writes. LoRA's branch, attention_cached and
 *     everything else are the fp32 backend's. Values stay fp32 in memory throughout.
 *  7. An NF4 weight (WeightRef.nf4, QLoRA's frozen base) is a host Nf4Weight whose arrays
 *     (packed, qabsmax, absmax2) are device memory (nf4_backend.h makes such a copy). Each
 *     product dequantises it into scratch (nf4.cu: fp32 bit for bit as kernels/cpu/nf4.c, or bf16
 *     under autocast) and multiplies that as a stored fp32 / bf16 weight.
 *  8. Under autocast an fp32 weight is narrowed to bf16 once per optimizer step, not per product
 *     (weight_cache.h): the copy is kept until the AdamW update, a copy or memset over it, or its
 *     free drops it; a weight stored in bf16 is read as it is. Its bytes count in the pool.
 *  9. All device memory the backend holds (what alloc hands out, scratch, the weight cache) is
 *     the pool's, so its high-water marks (backend_cuda_memory) are the backend's peak.
 * 10. The multi-tensor optimizer ops (sum_squares_multi, adamw_multi: a few launches for all of
 *     a model's tensors, and one host read for the norm) keep their tensor tables in scratch
 *     slots with a host copy of what each holds; a call copies its table to the device only
 *     where it differs from that (a run's tables repeat every step: one copy, one host sync). */
#ifndef RLHF_KERNELS_CUDA_BACKEND_CUDA_H
#define RLHF_KERNELS_CUDA_BACKEND_CUDA_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend on the current CUDA device (rlhf_cuda, RLHF_WITH_CUDA only), or NULL with an
 * error naming why (no device, no cuBLASLt). */
Backend *backend_cuda_new(void);
/* The same code on cuda-emu (rlhf_cuda_emu): the emulated device and gemm.h's host reference.
 * Its vocabulary chunk is small (CUDA_EMU_LM_HEAD_CHUNK columns) so that tiny test vocabularies
 * span several chunks. NULL with an error only when out of memory. */
Backend *backend_cuda_emu_new(void);
/* backend_cuda_new / backend_cuda_emu_new under bf16 autocast (invariant 6), named
 * "cuda-bf16-autocast" / "cuda-emu-bf16-autocast"; the same errors. */
Backend *backend_cuda_autocast_new(void);
Backend *backend_cuda_emu_autocast_new(void);
/* Frees be, its scratch and every block of its pool, cached or still held by a caller (whose
 * pointers are then dangling); NULL is ignored. */
void backend_cuda_free(Backend *be);
/* What the backend holds in device memory (invariant 9), in bytes: now and at its high-water
 * marks since it was made (in use: blocks handed out, scratch and the weight cache, as
 * torch.cuda.max_memory_allocated counts; reserved: those plus the pool's cached blocks, as
 * torch.cuda.max_memory_reserved), the weight cache's share now, and how many weights the cache
 * has narrowed and how many products it served from a kept copy (invariant 8). */
typedef struct {
    size_t in_use, reserved, peak_in_use, peak_reserved, weight_cache;
    size_t weight_narrowings, weight_reuses;
} BackendCudaMemory;
void backend_cuda_memory(const Backend *be, BackendCudaMemory *out);
/* 0, or -1 with err_set naming the op and the failure of the first op that failed (invariant 4).
 * Waits for the work before it. */
int backend_cuda_status(const Backend *be);

#ifdef __cplusplus
}
#endif

#endif
