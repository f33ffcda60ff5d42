/* QLoRA's NF4 base on the CUDA backend (issue 29; kernels/cuda/nf4.cu, backend_cuda.h invariant
 * 7), on cuda-emu:
 *  - cuda_nf4_dequantize of a device copy (nf4_backend.h) of matrices that kernels/cpu/nf4.c
 *    quantised gives nf4_dequantize's fp32 values bit for bit, over the whole matrix and over a
 *    range starting at an odd value, and in bf16 the CPU's rounding of them (autocast.h's
 *    bf16_narrow) bit for bit; the shapes cover a partial last block, an odd count, and more than
 *    one block of absmax scales (16384 values each);
 *  - the backend's linear and linear_backward with that NF4 weight agree with backend_cpu's on
 *    the host NF4 weight to 1e-5 relative (test_backend_ops' fp32 bound: only the order of the
 *    products' sums differs), fp32 and, against backend_cpu_autocast, under bf16 autocast. */
#include "common/error.h"
#include "harness.h"
#include "kernels/backend.h"
#include "kernels/cpu/autocast.h"
#include "kernels/cpu/nf4.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/emu/cuda_emu.h"
#include "kernels/nf4_backend.h"
#include "kernels/cpu/adamw8bit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *host_random(size_t n, float scale) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * frand();
    return x;
}

static void *up(const Backend *be, const void *host, size_t bytes) {
    void *d = be->alloc(be, bytes ? bytes : 1, "test");
    be->copy(be, d, host, bytes, BACKEND_HOST_TO_DEVICE);
    return d;
}

static void *down(const Backend *be, const void *d, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    be->copy(be, h, d, bytes, BACKEND_DEVICE_TO_HOST);
    return h;
}

/* The kernel against nf4_dequantize: values first .. first+count-1 of q (dev: its device copy). */
static void check_dequantize(const char *name, const Backend *be, const Nf4Weight *q,
                             const Nf4Weight *dev, const float *map, size_t first, size_t count) {
    float *want = malloc(count * sizeof *want);
    uint16_t *want16 = malloc(count * sizeof *want16);
    nf4_dequantize(want, q, first, count);
    bf16_narrow(want16, want, count);
    float *d32 = be->alloc(be, count * sizeof(float), "out");
    uint16_t *d16 = be->alloc(be, count * sizeof(uint16_t), "out16");
    CHECK(cuda_nf4_dequantize(d32, NULL, dev->packed, dev->qabsmax, dev->absmax2, dev->offset, map,
                              nf4_values, first, count, NULL) == 0,
          "%s: fp32 launch", name);
    CHECK(cuda_nf4_dequantize(NULL, d16, dev->packed, dev->qabsmax, dev->absmax2, dev->offset, map,
                              nf4_values, first, count, NULL) == 0,
          "%s: bf16 launch", name);
    float *got = down(be, d32, count * sizeof(float));
    uint16_t *got16 = down(be, d16, count * sizeof(uint16_t));
    size_t bad = 0, bad16 = 0, at = 0;
    for (size_t k = 0; k < count; k++) {
        if (memcmp(&got[k], &want[k], sizeof(float)) != 0 && bad++ == 0) at = k;
        bad16 += got16[k] != want16[k];
    }
    CHECK(bad == 0,
          "%s: %zu of %zu fp32 values differ from nf4_dequantize (first at %zu: %.9g, "
          "want %.9g)",
          name, bad, count, first + at, got[at], want[at]);
    CHECK(bad16 == 0, "%s: %zu of %zu bf16 values differ from the CPU's rounding", name, bad16,
          count);
    be->free(be, d32), be->free(be, d16);
    free(want), free(want16), free(got), free(got16);
}

static double worst_rel;

static void check_close(const char *what, const float *got, const float *want, size_t n) {
    double largest = 0, gap = 0;
    for (size_t i = 0; i < n; i++)
        largest = fmax(largest, fabs(want[i])), gap = fmax(gap, fabs((double)got[i] - want[i]));
    CHECK(gap <= 1e-5 * largest, "%s: differs by %.3g (largest %.3g)", what, gap, largest);
    if (largest > 0 && gap / largest > worst_rel) worst_rel = gap / largest;
}

/* linear and linear_backward through the NF4 weight: be against cpu (both fp32 or both under
 * autocast). */
static void check_products(const char *name, const Backend *be, const Backend *cpu,
                           const Nf4Weight *q, const Nf4Weight *dev, int n, int in_dim,
                           int out_dim) {
    float *in = host_random((size_t)n * in_dim, 1.0f),
          *dout = host_random((size_t)n * out_dim, 1.0f);
    float *want = malloc((size_t)n * out_dim * sizeof *want);
    float *want_din = malloc((size_t)n * in_dim * sizeof *want_din);
    cpu->linear(cpu, want, in, (WeightRef){.nf4 = q}, NULL, NULL, n, in_dim, out_dim);
    cpu->linear_backward(cpu, want_din, NULL, NULL, dout, in, (WeightRef){.nf4 = q}, n, in_dim,
                         out_dim);
    float *d_in = up(be, in, (size_t)n * in_dim * sizeof(float));
    float *d_dout = up(be, dout, (size_t)n * out_dim * sizeof(float));
    float *d_out = be->alloc(be, (size_t)n * out_dim * sizeof(float), "out");
    float *d_din = be->alloc(be, (size_t)n * in_dim * sizeof(float), "din");
    be->linear(be, d_out, d_in, (WeightRef){.nf4 = dev}, NULL, NULL, n, in_dim, out_dim);
    be->linear_backward(be, d_din, NULL, NULL, d_dout, d_in, (WeightRef){.nf4 = dev}, n, in_dim,
                        out_dim);
    CHECK(backend_cuda_status(be) == 0, "%s: %s", name, err_msg());
    float *got = down(be, d_out, (size_t)n * out_dim * sizeof(float));
    float *got_din = down(be, d_din, (size_t)n * in_dim * sizeof(float));
    char what[128];
    snprintf(what, sizeof what, "%s: linear", name);
    check_close(what, got, want, (size_t)n * out_dim);
    snprintf(what, sizeof what, "%s: linear_backward's din", name);
    check_close(what, got_din, want_din, (size_t)n * in_dim);
    be->free(be, d_in), be->free(be, d_dout), be->free(be, d_out), be->free(be, d_din);
    free(in), free(dout), free(want), free(want_din), free(got), free(got_din);
}

int main(void) {
    Backend *be = backend_cuda_emu_new(), *ac = backend_cuda_emu_autocast_new();
    CHECK(be && ac, "cuda-emu backends: %s", err_msg());
    if (!be || !ac) return harness_finish("test_nf4_emu");
    Q8Map map;
    q8_map_dynamic(&map, true);
    float *d_map = up(be, map.value, sizeof map.value);
    /* out x in: 96 x 64 (whole blocks), 33 x 70 (a partial last block, an odd count), 136 x 200
     * (27200 values: two blocks of absmax scales) */
    static const int shapes[][2] = {{96, 64}, {33, 70}, {136, 200}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int out_dim = shapes[s][0], in_dim = shapes[s][1];
        size_t numel = (size_t)out_dim * in_dim;
        float *w = host_random(numel, 0.05f);
        w[numel / 3] = 0.4f; /* blocks of very different absmax */
        Nf4Weight q, dev;
        CHECK(nf4_quantize(&q, w, numel) == 0, "quantise");
        CHECK(nf4_to_backend(be, &q, &dev) == 0, "device copy: %s", err_msg());
        char name[64];
        snprintf(name, sizeof name, "%dx%d", out_dim, in_dim);
        check_dequantize(name, be, &q, &dev, d_map, 0, numel);
        snprintf(name, sizeof name, "%dx%d from value 129", out_dim, in_dim);
        check_dequantize(name, be, &q, &dev, d_map, 129, numel - 129 - 5);
        snprintf(name, sizeof name, "%dx%d fp32", out_dim, in_dim);
        check_products(name, be, backend_cpu(), &q, &dev, 5, in_dim, out_dim);
        Nf4Weight dev_ac;
        CHECK(nf4_to_backend(ac, &q, &dev_ac) == 0, "device copy: %s", err_msg());
        snprintf(name, sizeof name, "%dx%d bf16 autocast", out_dim, in_dim);
        check_products(name, ac, backend_cpu_autocast(), &q, &dev_ac, 5, in_dim, out_dim);
        nf4_backend_free(ac, &dev_ac);
        nf4_backend_free(be, &dev);
        nf4_free(&q);
        free(w);
    }
    printf("products: worst %.2g of the largest value\n", worst_rel);
    be->free(be, d_map);
    backend_cuda_free(be);
    backend_cuda_free(ac);
    return harness_finish("test_nf4_emu");
}
