/* The device backends this program can train on (train/train_device.h): the CUDA backend
 * (rlhf_cuda) where the build has nvcc and cuBLASLt, else the same code emulated on the CPU
 * (rlhf_cuda_emu, `device: cuda-emu`, which CI trains on). Only one of the two libraries can be
 * linked: they are the same sources and define the same symbols. */
#include "train/train_device.h"

#if defined(RLHF_WITH_CUDA) || defined(RLHF_WITH_CUDA_EMU)
#include "kernels/cuda/backend_cuda.h"
#endif

#if defined(RLHF_WITH_NCCL)
#include "dist/dist_nccl.h"
#endif
#include "dist/dist_device.h"

#if defined(RLHF_WITH_CUDA) || defined(RLHF_WITH_CUDA_EMU)
static void peak_memory(const Backend *be, size_t *in_use, size_t *reserved) {
    BackendCudaMemory m;
    backend_cuda_memory(be, &m);
    *in_use = m.peak_in_use, *reserved = m.peak_reserved;
}
#endif

#if defined(RLHF_WITH_CUDA)
/* Several ranks: NCCL where the build found it, else refused by name (train_device.h inv. 4). */
static const TrainDeviceProvider cuda = {
    .name = "cuda",
    .open = backend_cuda_new,
    .open_bf16 = backend_cuda_autocast_new,
    .close = backend_cuda_free,
    .status = backend_cuda_status,
    .peak_memory = peak_memory,
#if defined(RLHF_WITH_NCCL)
    .dist_open = dist_nccl_open,
#else
    .no_dist = "this build has no NCCL (nccl.h and libnccl were not found next to the CUDA "
               "toolkit when it was configured): install NCCL and rebuild, or use device: cpu",
#endif
};
#elif defined(RLHF_WITH_CUDA_EMU)
/* Several ranks: cuda-emu's device memory is host memory, so dist.h's MPI collectives move it. */
static const DistDeviceComm *cuda_emu_dist_open(void) {
    return &dist_mpi_comm;
}
static const TrainDeviceProvider cuda_emu = {
    .name = "cuda-emu",
    .open = backend_cuda_emu_new,
    .open_bf16 = backend_cuda_emu_autocast_new,
    .close = backend_cuda_free,
    .status = backend_cuda_status,
    .peak_memory = peak_memory,
    .dist_open = cuda_emu_dist_open,
};
#endif

void train_device_register_linked(void) {
#if defined(RLHF_WITH_CUDA)
    train_device_register(&cuda);
#elif defined(RLHF_WITH_CUDA_EMU)
    train_device_register(&cuda_emu);
#endif
}
