/* The residual add and its RMSNorm, fused (backend.h's add_rmsnorm, rmsnorm_backward_add) and
 * apart (add then rmsnorm; rmsnorm_backward into a scratch then add), on one layer's rows, in one
 * process: the two forms alternated rep by rep, each timed in this process's CPU-seconds (all
 * threads), which a loaded machine inflates far less than wall-clock time. Prints one JSON line.
 *
 * Usage: bench_norm_fusion [rows hidden [reps]]   (default 1024 576 200: one DPO pair of 512
 * tokens on SmolLM2-135M; OMP_NUM_THREADS as the step runs) */
#include "kernels/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *filled(size_t n, float scale) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * (float)((i * 2654435761u) % 1000) / 1000.0f - scale / 2;
    return p;
}

int main(int argc, char **argv) {
    int n = argc > 2 ? atoi(argv[1]) : 1024, c = argc > 2 ? atoi(argv[2]) : 576;
    int reps = argc > 3 ? atoi(argv[3]) : 200;
    if (n <= 0 || c <= 0 || reps <= 0) {
        fprintf(stderr, "usage: bench_norm_fusion [rows hidden [reps]]\n");
        return 2;
    }
    size_t nc = (size_t)n * c;
    const Backend *be = backend_cpu();
    float *x = filled(nc, 4.0f), *proj = filled(nc, 1.0f), *xn = filled(nc, 1.0f);
    float *dx = filled(nc, 0.1f), *dout = filled(nc, 1.0f), *tmp = filled(nc, 1.0f);
    float *w = filled((size_t)c, 2.0f), *dw = filled((size_t)c, 0.0f);
    float eps = 1e-5f;
    double t[4] = {0}; /* forward apart, fused; backward apart, fused */
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_seconds();
        be->add(be, x, x, proj, nc);
        be->rmsnorm(be, xn, x, w, n, c, eps);
        double t1 = cpu_seconds();
        be->add_rmsnorm(be, x, xn, x, proj, w, n, c, eps);
        double t2 = cpu_seconds();
        be->rmsnorm_backward(be, tmp, dw, dout, x, w, n, c, eps);
        be->add(be, dx, dx, tmp, nc);
        double t3 = cpu_seconds();
        be->rmsnorm_backward_add(be, dx, dw, dout, x, w, n, c, eps);
        double t4 = cpu_seconds();
        t[0] += t1 - t0, t[1] += t2 - t1, t[2] += t3 - t2, t[3] += t4 - t3;
        /* keep x bounded: it grows by proj each rep */
        if (r % 16 == 15) be->scale(be, x, 0.5f, nc);
    }
    printf("{\"bench\": \"norm_fusion\", \"rows\": %d, \"hidden\": %d, \"reps\": %d, "
           "\"fwd_apart_ms\": %.4f, \"fwd_fused_ms\": %.4f, \"bwd_apart_ms\": %.4f, "
           "\"bwd_fused_ms\": %.4f, \"checksum\": %g}\n",
           n, c, reps, 1e3 * t[0] / reps, 1e3 * t[1] / reps, 1e3 * t[2] / reps, 1e3 * t[3] / reps,
           (double)xn[nc / 2] + dx[nc / 3] + dw[c / 2]);
    free(x), free(proj), free(xn), free(dx), free(dout), free(tmp), free(w), free(dw);
    return 0;
}
