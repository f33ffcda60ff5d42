/* The CUDA rmsnorm kernel against the CPU backend's (kernels/backend.h), on random rows of
 * several widths, outputs poisoned before the call; twice, bitwise equal (no atomics). Exits 77
 * (skipped) where no CUDA device is present, so CI without a GPU still builds it. */
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_kernels.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

static void check_width(int n, int c) {
    uint64_t seed = (uint64_t)c * 7919u + (uint64_t)n;
    size_t nc = (size_t)n * c;
    float *x = malloc(nc * sizeof *x), *w = malloc((size_t)c * sizeof *w);
    float *want = malloc(nc * sizeof *want), *got = malloc(nc * sizeof *got);
    float *again = malloc(nc * sizeof *again);
    for (size_t i = 0; i < nc; i++)
        x[i] = frand(&seed);
    for (int j = 0; j < c; j++)
        w[j] = frand(&seed);
    backend_cpu()->rmsnorm(backend_cpu(), want, x, w, n, c, 1e-6f);
    float *dx, *dw, *dy;
    CHECK(cudaMalloc((void **)&dx, nc * sizeof *dx) == cudaSuccess &&
              cudaMalloc((void **)&dw, (size_t)c * sizeof *dw) == cudaSuccess &&
              cudaMalloc((void **)&dy, nc * sizeof *dy) == cudaSuccess,
          "cudaMalloc");
    cudaMemcpy(dx, x, nc * sizeof *x, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w, (size_t)c * sizeof *w, cudaMemcpyHostToDevice);
    for (int run = 0; run < 2; run++) {
        cudaMemset(dy, 0xff, nc * sizeof *dy); /* NaN */
        CHECK(cuda_rmsnorm_forward(dy, dx, dw, n, c, 1e-6f, NULL) == 0, "launch");
        cudaMemcpy(run ? again : got, dy, nc * sizeof *dy, cudaMemcpyDeviceToHost);
    }
    int bad = 0;
    for (size_t i = 0; i < nc; i++)
        bad += !harness_close(got[i], want[i], 1e-5, 1e-6);
    CHECK(bad == 0, "rmsnorm %d x %d: %d values off the CPU's", n, c, bad);
    CHECK(memcmp(got, again, nc * sizeof *got) == 0, "rmsnorm %d x %d: two runs differ", n, c);
    cudaFree(dx), cudaFree(dw), cudaFree(dy);
    free(x), free(w), free(want), free(got), free(again);
}

int main(void) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fprintf(stderr, "test_cuda_rmsnorm: no CUDA device, skipped\n");
        return 77;
    }
    int widths[] = {16, 64, 100, 896, 1536, 4096};
    for (size_t i = 0; i < sizeof widths / sizeof *widths; i++)
        check_width(37, widths[i]);
    return harness_finish("test_cuda_rmsnorm");
}
