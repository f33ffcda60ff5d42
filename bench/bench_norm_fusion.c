/* The residual add and its RMSNorm, fused (backend.h's add_rmsnorm, rmsnorm_backward_add) and
 * apart (add then rmsnorm; rmsnorm_backward into a scratch then add), and SwiGLU's backward with
 * the kept tape's act regenerated in its pass (swiglu_backward_act) or by swiglu before it, on
 * one layer's rows, in one process: the forms alternated rep by rep, each timed in this
 * process's CPU-seconds (all threads), which a loaded machine inflates far less than wall-clock
 * time. Prints one JSON line.
 *
 * Usage: bench_norm_fusion [rows hidden intermediate [reps]]   (default 1024 576 1536 200: one
 * DPO pair of 512 tokens on SmolLM2-135M; OMP_NUM_THREADS as the step runs) */
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
    int n = argc > 3 ? atoi(argv[1]) : 1024, c = argc > 3 ? atoi(argv[2]) : 576;
    int inter = argc > 3 ? atoi(argv[3]) : 1536, reps = argc > 4 ? atoi(argv[4]) : 200;
    if (n <= 0 || c <= 0 || inter <= 0 || reps <= 0) {
        fprintf(stderr, "usage: bench_norm_fusion [rows hidden intermediate [reps]]\n");
        return 2;
    }
    size_t nc = (size_t)n * c;
    const Backend *be = backend_cpu();
    float *x = filled(nc, 4.0f), *proj = filled(nc, 1.0f), *xn = filled(nc, 1.0f);
    float *dx = filled(nc, 0.1f), *dout = filled(nc, 1.0f), *tmp = filled(nc, 1.0f);
    float *w = filled((size_t)c, 2.0f), *dw = filled((size_t)c, 0.0f);
    size_t ni = (size_t)n * inter;
    float *gate = filled(ni, 8.0f), *up = filled(ni, 2.0f), *act = filled(ni, 1.0f);
    float *dact = filled(ni, 1.0f), *dact0 = filled(ni, 1.0f), *dup = filled(ni, 1.0f);
    float eps = 1e-5f;
    double t[6] = {0}; /* forward apart, fused; backward apart, fused; SwiGLU apart, fused */
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
        be->copy(be, dact, dact0, ni * sizeof(float), BACKEND_DEVICE_TO_DEVICE);
        double t5 = cpu_seconds();
        be->swiglu(be, act, gate, up, ni);
        be->swiglu_backward(be, dact, dup, dact, gate, up, ni);
        double t6 = cpu_seconds();
        be->copy(be, dact, dact0, ni * sizeof(float), BACKEND_DEVICE_TO_DEVICE);
        double t7 = cpu_seconds();
        be->swiglu_backward_act(be, act, dact, dup, dact, gate, up, ni);
        double t8 = cpu_seconds();
        t[0] += t1 - t0, t[1] += t2 - t1, t[2] += t3 - t2, t[3] += t4 - t3;
        t[4] += t6 - t5, t[5] += t8 - t7;
        /* keep x bounded: it grows by proj each rep */
        if (r % 16 == 15) be->scale(be, x, 0.5f, nc);
    }
    printf("{\"bench\": \"norm_fusion\", \"rows\": %d, \"hidden\": %d, \"reps\": %d, "
           "\"fwd_apart_ms\": %.4f, \"fwd_fused_ms\": %.4f, \"bwd_apart_ms\": %.4f, "
           "\"bwd_fused_ms\": %.4f, \"intermediate\": %d, \"swiglu_apart_ms\": %.4f, "
           "\"swiglu_fused_ms\": %.4f, \"checksum\": %g}\n",
           n, c, reps, 1e3 * t[0] / reps, 1e3 * t[1] / reps, 1e3 * t[2] / reps, 1e3 * t[3] / reps,
           inter, 1e3 * t[4] / reps, 1e3 * t[5] / reps,
           (double)xn[nc / 2] + dx[nc / 3] + dw[c / 2] + act[ni / 2] + dact[ni / 3] + dup[ni / 5]);
    free(x), free(proj), free(xn), free(dx), free(dout), free(tmp), free(w), free(dw);
    free(gate), free(up), free(act), free(dact), free(dact0), free(dup);
    return 0;
}
