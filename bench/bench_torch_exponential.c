/* torch's exponential draws (what torch.multinomial divides by; GRPO's sampling under
 * grpo_rng: torch), per CPU-second and per wall-second: the serial path (one random64 and one
 * libm log1p per element, the code before issue 33) and each vectorised path this CPU has, in the
 * same run, on the same seed. CPU time is getrusage's user + system of the whole process (all
 * threads), so a loaded machine does not flatter a path. Usage: bench_torch_exponential
 * [draws, default 151936 x 64] [repeats, default 3]. Prints one JSON line. */
#include "common/torch_exponential.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
           u.ru_stime.tv_usec * 1e-6;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)151936 * 64;
    int repeats = argc > 2 ? atoi(argv[2]) : 3;
    float *out = malloc(n * sizeof *out);
    const DrawPath paths[] = {DRAW_PATH_SCALAR, DRAW_PATH_AVX2, DRAW_PATH_AVX512};
    const char *names[] = {"serial", "avx2", "avx512"};
    printf("{\"draws\": %zu, \"threads\": %d", n, omp_get_max_threads());
    for (int p = 0; p < 3; p++) {
        if (!draw_path_supported(paths[p])) continue;
        TorchGenerator g;
        torch_generator_seed(&g, 42);
        torch_exponential_f32_path(&g, out, n, paths[p]); /* pages touched, code warm */
        double c0 = cpu_seconds(), w0 = omp_get_wtime();
        for (int r = 0; r < repeats; r++)
            torch_exponential_f32_path(&g, out, n, paths[p]);
        double cpu = cpu_seconds() - c0, wall = omp_get_wtime() - w0;
        printf(", \"%s\": {\"draws_per_cpu_s\": %.4g, \"draws_per_s\": %.4g, \"ns_per_draw_cpu\": "
               "%.3g}",
               names[p], n * (double)repeats / cpu, n * (double)repeats / wall,
               cpu * 1e9 / (n * (double)repeats));
    }
    printf("}\n");
    free(out);
    return 0;
}
