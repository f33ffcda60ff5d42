/* What every kernel source (.cu) of src/kernels/cuda/ includes first: the CUDA runtime under
 * nvcc, or the emulation of emu/cuda_emu.h when the same source is compiled by the host C++
 * compiler for cuda-emu (RLHF_CUDA_EMU, tests' gpu-emu label). A launch is written
 *     CUDA_LAUNCH(kernel, grid, block, shared_bytes, stream, args...)
 * for kernel<<<grid, block, shared_bytes, stream>>>(args...), which only nvcc parses; the
 * launch's value is the launch error (cudaGetLastError) under both. */
#ifndef RLHF_KERNELS_CUDA_CUDA_DEVICE_H
#define RLHF_KERNELS_CUDA_CUDA_DEVICE_H

#ifdef RLHF_CUDA_EMU
#include "kernels/cuda/emu/cuda_emu.h"
#else
#include <cuda_runtime.h>
#define CUDA_LAUNCH(kernel, grid, block, smem, stream, ...)                                        \
    (kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__), cudaGetLastError())
#endif

#endif
