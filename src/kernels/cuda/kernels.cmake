# The CUDA backend's own kernels (not the cuBLASLt products): built by nvcc into rlhf_cuda
# (CMakeLists.txt here) and, the same sources, by the host C++ compiler into rlhf_cuda_emu
# (emu/CMakeLists.txt), which test_backend_ops checks on every CI run. Listed, not globbed.
set(RLHF_CUDA_OWN_KERNELS
  adamw.cu
  attention.cu
  attention_mma.cu
  attention_tiled.cu
  device_pool.cu
  elementwise.cu
  embedding.cu
  kv_cache_write.cu
  logprob.cu
  lora_dropout.cu
  narrow.cu
  nf4.cu
  rmsnorm.cu
  rope.cu
  rows.cu
  sum_squares.cu
  swiglu.cu
  weight_cache.cu
  widen.cu
)
# The backend table over them (backend_cuda.h), the same source in both libraries. It calls the
# products of gemm_ops.h and err_set, which live in rlhf_core: both libraries link it.
set(RLHF_CUDA_BACKEND_SOURCES backend_cuda.cu)
