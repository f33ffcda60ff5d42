/* The device backends this program can train on (train/train_device.h): the CUDA backend
 * (rlhf_cuda) where the build has nvcc and cuBLASLt, else the same code emulated on the CPU
 * (rlhf_cuda_emu, `device: cuda-emu`, which CI trains on). Only one of the two libraries can be
 * linked: they are the same sources and define the same symbols. */
#include "train/train_device.h"

#if defined(RLHF_WITH_CUDA) || defined(RLHF_WITH_CUDA_EMU)
#include "kernels/cuda/backend_cuda.h"
#endif

#if defined(RLHF_WITH_CUDA)
static const TrainDeviceProvider cuda = {"cuda", backend_cuda_new, backend_cuda_free,
                                         backend_cuda_status};
#elif defined(RLHF_WITH_CUDA_EMU)
static const TrainDeviceProvider cuda_emu = {"cuda-emu", backend_cuda_emu_new, backend_cuda_free,
                                             backend_cuda_status};
#endif

void train_device_register_linked(void) {
#if defined(RLHF_WITH_CUDA)
    train_device_register(&cuda);
#elif defined(RLHF_WITH_CUDA_EMU)
    train_device_register(&cuda_emu);
#endif
}
