/* Forward-pass throughput: per-token log-probs of a B x T batch of random tokens (every
 * position scored, as a DPO/GRPO log-prob pass does), timed over several repetitions.
 * Prints one JSON line. Usage: bench_forward MODEL_DIR [batch] [seq_len] [reps] [bf16 0|1]
 * (bf16: the weights kept in bf16, as a `bf16: true` reference holds them). */
#include "common/error.h"
#include "model/forward.h"

#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [batch] [seq_len] [reps] [bf16]\n", argv[0]);
        return 2;
    }
    int batch = argc > 2 ? atoi(argv[2]) : 4;
    int t_len = argc > 3 ? atoi(argv[3]) : 512;
    int reps = argc > 4 ? atoi(argv[4]) : 3;
    bool bf16 = argc > 5 && atoi(argv[5]) != 0;
    double t0 = now_seconds();
    Model m;
    if (model_load(&m, argv[1]) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    if (bf16 && model_store_bf16(&m) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    double load_s = now_seconds() - t0;
    size_t n = (size_t)batch * t_len;
    int32_t *tokens = malloc(n * sizeof *tokens);
    float *logp = malloc(n * sizeof *logp);
    unsigned seed = 1234;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        tokens[i] = (int32_t)((seed >> 8) % (unsigned)m.cfg.vocab_size);
    }
    TokenBatch b = {.batch = batch, .t_len = t_len, .tokens = tokens};
    if (model_token_logprobs(&m, &b, NULL, logp) != 0) { /* warm-up */
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    double best = 1e30, total = 0;
    for (int r = 0; r < reps; r++) {
        double s = now_seconds();
        model_token_logprobs(&m, &b, NULL, logp);
        double dt = now_seconds() - s;
        total += dt;
        if (dt < best) best = dt;
    }
    double checksum = 0;
    for (size_t i = 0; i < n; i++)
        checksum += logp[i];
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"impl\": \"rlhf.c\", \"batch\": %d, \"seq_len\": %d, \"threads\": %d, \"reps\": %d, "
           "\"best_s\": %.4f, \"mean_s\": %.4f, \"tokens_per_s\": %.1f, \"load_s\": %.2f, "
           "\"peak_rss_mb\": %.0f, \"n_params\": %zu, \"sum_logp\": %.6g}\n",
           batch, t_len, omp_get_max_threads(), reps, best, total / reps, n / best, load_s,
           ru.ru_maxrss / 1024.0, m.n_params, checksum);
    free(tokens);
    free(logp);
    model_free(&m);
    return 0;
}
