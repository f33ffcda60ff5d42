/* cuda-emu: the CUDA kernels of src/kernels/cuda/ compiled with the host C++ compiler and run on
 * the CPU, so that CI checks them without a GPU (issue 29). A .cu file includes
 * kernels/cuda/cuda_device.h, which under RLHF_CUDA_EMU includes this header instead of
 * <cuda_runtime.h>; the kernel source is the same text nvcc builds.
 *
 * Execution model (cuda_emu.c):
 *  1. A launch runs its blocks one after another on the calling OS thread, in a random (seeded)
 *     order; each CUDA thread of a block is a fiber (ucontext) with a stack of its own.
 *  2. A fiber runs until it reaches a synchronisation point (__syncthreads, a warp collective)
 *     or returns; the scheduler then resumes a random runnable fiber. So threads interleave in a
 *     random order between barriers, and a read of shared memory that a missing barrier left
 *     unordered sees the writer's value or the poison, whichever ran first.
 *  3. All __shared__ variables live in one linker section, filled with 0xff bytes (NaN floats)
 *     at the start of every block: shared memory is never zero or left over from a block before.
 *  4. __syncthreads releases when every thread of the block waits at it. If some wait while the
 *     others have returned (a divergent barrier), the launch aborts with a message.
 *  5. A warp collective (__shfl*_sync, __syncwarp, __ballot_sync..., mma.cuh's emulated
 *     mma.sync) completes when every lane its mask names has reached a collective with the same
 *     mask and kind. A caller outside its own mask, a mask naming a lane that does not exist,
 *     returns or waits elsewhere, or two lanes disagreeing about the mask abort the launch with
 *     a message naming the lanes. A shuffle that reads a lane outside the mask gets all-ones
 *     bits (NaN), as undefined on a GPU.
 *  6. atomicAdd and friends are plain read-modify-writes: fibers switch only at the points of
 *     rule 2, so nothing interleaves inside one.
 *  7. Device memory is host memory: cudaMalloc poisons what it returns (0xff bytes), cudaMemcpy
 *     and cudaMemset are memcpy and memset; work is done when a launch returns.
 * Under AddressSanitizer the fiber switches are annotated (__sanitizer_start_switch_fiber), so
 * ASan follows each fiber's own stack and the kernels stay checked for memory errors.
 * Dynamic shared memory (extern __shared__) is not emulated: a launch asking for it aborts. */
#ifndef RLHF_KERNELS_CUDA_EMU_CUDA_EMU_H
#define RLHF_KERNELS_CUDA_EMU_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#define CUDA_EMU_TLS thread_local
#else
#define CUDA_EMU_TLS _Thread_local
#endif

/* ---- the runtime API subset that the kernels' host wrappers and the tests use ---- */
typedef int cudaError_t;
enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
};
typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;
typedef struct CudaEmuStream *cudaStream_t; /* streams are accepted and ignored (rule 7) */

/* bytes of emulated device memory, every byte 0xff; cudaErrorMemoryAllocation when none. */
cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void *dst, int value, size_t bytes);
cudaError_t cudaDeviceSynchronize(void);
/* The error of the last launch (a bad configuration), then cudaSuccess again. */
cudaError_t cudaGetLastError(void);
/* One device: the emulation. */
cudaError_t cudaGetDeviceCount(int *count);
const char *cudaGetErrorString(cudaError_t err);

/* ---- what a kernel sees ---- */
typedef struct {
    unsigned x, y, z;
} uint3;

/* The current fiber's coordinates; set by the scheduler before it resumes a fiber. */
typedef struct {
    uint3 thread_idx, block_idx, block_dim, grid_dim;
} CudaEmuCoords;
extern CUDA_EMU_TLS const CudaEmuCoords *cuda_emu_now;

/* Warp collectives of rule 5. */
typedef enum {
    CUDA_EMU_SHFL_IDX,
    CUDA_EMU_SHFL_XOR,
    CUDA_EMU_SHFL_DOWN,
    CUDA_EMU_SHFL_UP,
    CUDA_EMU_SYNCWARP,
    CUDA_EMU_BALLOT,
    CUDA_EMU_COMBINE,
} CudaEmuWarpOp;

/* The calling fiber's part in a warp collective: value is its operand's bits, arg the source
 * lane / lane mask / delta, width the shuffle segment (a power of two <= 32). Returns the bits
 * the lane receives (the ballot for CUDA_EMU_BALLOT). Aborts as rule 5 says. */
uint64_t cuda_emu_warp_op(CudaEmuWarpOp op, unsigned mask, uint64_t value, int arg, int width);
/* The warp-collective part of an emulated tensor-core instruction (kernels/cuda/mma.cuh): every
 * lane of mask posts its operands `in` and the place `out` of its result; when the last lane
 * arrives, combine(in, out) runs once with every lane's pointers (NULL for lanes outside mask)
 * while all of them wait, then each lane goes on with its out written. Completes, and aborts,
 * as a shuffle with the same mask does (rule 5); lanes passing another combine abort. */
typedef void (*CudaEmuCombine)(const void *const in[32], void *const out[32]);
void cuda_emu_warp_combine(unsigned mask, const void *in, void *out, CudaEmuCombine combine);
/* __syncthreads for the calling fiber (rule 4). */
void cuda_emu_syncthreads(void);

/* Runs body(arg) once per thread of a grid x block launch as rules 1-4 say; `kernel` names it in
 * messages. Returns cudaSuccess, or cudaErrorInvalidConfiguration (also kept for
 * cudaGetLastError) for a block of more than 1024 threads, a zero or too large dimension. */
cudaError_t cuda_emu_launch(uint3 grid, uint3 block, size_t dynamic_smem, void (*body)(void *),
                            void *arg, const char *kernel);

/* The seed of the scheduler's random order (rule 1-2): 1 unless set; CUDA_EMU_SEED in the
 * environment overrides it at the first launch. */
void cuda_emu_set_seed(uint64_t seed);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
/* ---- kernel-language keywords and built-ins (C++ only: kernels compile as C++) ---- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
/* Rule 3: one section, poisoned per block; static, so every fiber of a block sees one copy. */
#define __shared__ static __attribute__((section("cuda_emu_shared"), aligned(16)))

#define threadIdx (cuda_emu_now->thread_idx)
#define blockIdx  (cuda_emu_now->block_idx)
#define blockDim  (cuda_emu_now->block_dim)
#define gridDim   (cuda_emu_now->grid_dim)
#define warpSize  32

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
    dim3(uint3 u) : x(u.x), y(u.y), z(u.z) {}
    operator uint3() const {
        return uint3{x, y, z};
    }
};

/* Other fibers run inside these calls, so memory (shared memory above all) may have changed:
 * a compiler barrier keeps no value of it in a register across one, as a GPU's barriers do. */
#define CUDA_EMU_COMPILER_BARRIER() __asm__ __volatile__("" ::: "memory")

static inline void __syncthreads(void) {
    cuda_emu_syncthreads();
    CUDA_EMU_COMPILER_BARRIER();
}
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    cuda_emu_warp_op(CUDA_EMU_SYNCWARP, mask, 0, 0, 32);
    CUDA_EMU_COMPILER_BARRIER();
}

template <class T>
static inline T cuda_emu_shuffle(CudaEmuWarpOp op, unsigned mask, T var, int arg, int width) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffle moves at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &var, sizeof var);
    bits = cuda_emu_warp_op(op, mask, bits, arg, width);
    CUDA_EMU_COMPILER_BARRIER();
    T out;
    memcpy(&out, &bits, sizeof out);
    return out;
}
template <class T> static inline T __shfl_sync(unsigned mask, T var, int src, int width = 32) {
    return cuda_emu_shuffle(CUDA_EMU_SHFL_IDX, mask, var, src, width);
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
    return cuda_emu_shuffle(CUDA_EMU_SHFL_XOR, mask, var, lane_mask, width);
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return cuda_emu_shuffle(CUDA_EMU_SHFL_DOWN, mask, var, (int)delta, width);
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return cuda_emu_shuffle(CUDA_EMU_SHFL_UP, mask, var, (int)delta, width);
}
static inline unsigned __ballot_sync(unsigned mask, int predicate) {
    unsigned ballot = (unsigned)cuda_emu_warp_op(CUDA_EMU_BALLOT, mask, predicate != 0, 0, 32);
    CUDA_EMU_COMPILER_BARRIER();
    return ballot;
}
static inline int __any_sync(unsigned mask, int predicate) {
    return __ballot_sync(mask, predicate) != 0;
}
static inline int __all_sync(unsigned mask, int predicate) {
    return __ballot_sync(mask, predicate) == mask;
}

/* Rule 6. */
template <class T> static inline T atomicAdd(T *address, T val) {
    T old = *address;
    *address = old + val;
    return old;
}
template <class T> static inline T atomicMax(T *address, T val) {
    T old = *address;
    *address = old < val ? val : old;
    return old;
}
template <class T> static inline T atomicExch(T *address, T val) {
    T old = *address;
    *address = val;
    return old;
}

/* Device math the host libm lacks (glibc's math.h declares __expf itself: expf), with the device
 * functions' (correctly rounded or near) results; the intrinsics' reduced precision is not
 * modelled. */
static inline float rsqrtf(float x) {
    return 1.0f / sqrtf(x);
}
static inline double rsqrt(double x) {
    return 1.0 / sqrt(x);
}
/* Correctly rounded single operations. g++ contracts a * b + c into an fma even in ISO C++ mode
 * (-ffp-contract=fast is its default there), so the product goes through memory. */
static inline float __fmul_rn(float a, float b) {
    volatile float product = a * b;
    return product;
}
static inline float __fadd_rn(float a, float b) {
    return a + b;
}
static inline float __fsub_rn(float a, float b) {
    return a - b;
}
static inline float __fdiv_rn(float a, float b) {
    return a / b;
}
static inline float __fsqrt_rn(float a) {
    return sqrtf(a);
}
static inline float __fdividef(float a, float b) {
    return a / b;
}
static inline int min(int a, int b) {
    return a < b ? a : b;
}
static inline int max(int a, int b) {
    return a > b ? a : b;
}
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The <<<grid, block, smem, stream>>> launch of kernels/cuda/cuda_device.h's CUDA_LAUNCH: the
 * arguments are evaluated in each fiber (they are plain values in our kernels' launches). */
template <class F> static void cuda_emu_run_body(void *body) {
    (*(F *)body)();
}
#define CUDA_LAUNCH(kernel, grid, block, smem, stream, ...)                                        \
    ([&]() -> cudaError_t {                                                                        \
        (void)(stream);                                                                            \
        auto cuda_emu_body = [&]() { kernel(__VA_ARGS__); };                                       \
        return cuda_emu_launch(dim3(grid), dim3(block), (smem),                                    \
                               cuda_emu_run_body<decltype(cuda_emu_body)>, &cuda_emu_body,         \
                               #kernel);                                                           \
    }())
#endif

#endif
