/* SFT training-step throughput: forward + backward + AdamW on a B x T batch of random tokens
 * (every position a label), timed over several steps after a warm-up step. Prints one JSON line.
 * Usage: bench_sft_step MODEL_DIR [batch] [seq_len] [steps] [gradient_checkpointing 0|1] [lora_r]
 * With lora_r > 0 a LoRA adapter on every linear layer (alpha 2r) is trained instead of the
 * weights: the base is frozen, with no gradient or optimizer state. */
#include "common/error.h"
#include "train/trainer.h"

#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [batch] [seq_len] [steps]\n", argv[0]);
        return 2;
    }
    int batch = argc > 2 ? atoi(argv[2]) : 1, t_len = argc > 3 ? atoi(argv[3]) : 512;
    int steps = argc > 4 ? atoi(argv[4]) : 3;
    bool checkpointing = argc > 5 && atoi(argv[5]) != 0;
    int lora_r = argc > 6 ? atoi(argv[6]) : 0;
    Model m;
    if (model_load(&m, argv[1]) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    size_t n = (size_t)batch * t_len;
    int32_t *tokens = malloc(n * sizeof *tokens);
    uint8_t *labels = malloc(n);
    unsigned seed = 99;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        tokens[i] = (int32_t)((seed >> 8) % (unsigned)m.cfg.vocab_size);
        labels[i] = 1;
    }
    TrainerOptions opt = {.learning_rate = 1e-5,
                          .max_grad_norm = 1.0,
                          .adamw = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0},
                          .schedule = LR_CONSTANT,
                          .total_steps = steps + 1,
                          .gradient_checkpointing = checkpointing};
    LoraAdapter lora = {0};
    const char *all_linear = "all-linear";
    if (lora_r > 0 &&
        lora_create(&lora, &m.cfg, lora_r, 2.0 * lora_r, false, 0.0, &all_linear, 1, 1) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    Trainer tr;
    if (trainer_init(&tr, &m, lora_r > 0 ? &lora : NULL, &opt) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    MicroBatch mb = {{.batch = batch, .t_len = t_len, .tokens = tokens}, labels};
    StepStats st;
    if (trainer_sft_step(&tr, &mb, 1, &st) != 0) { /* warm-up */
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    double best = 1e30, total = 0;
    for (int s = 0; s < steps; s++) {
        double t0 = now_seconds();
        trainer_sft_step(&tr, &mb, 1, &st);
        double dt = now_seconds() - t0;
        total += dt;
        if (dt < best) best = dt;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"impl\": \"rlhf.c\", \"batch\": %d, \"seq_len\": %d, \"threads\": %d, \"steps\": %d, "
           "\"best_s\": %.3f, \"mean_s\": %.3f, \"tokens_per_s\": %.2f, \"peak_rss_mb\": %.0f, "
           "\"gradient_checkpointing\": %s, \"lora_r\": %d, \"trained_params\": %zu, "
           "\"loss\": %.6g}\n",
           batch, t_len, omp_get_max_threads(), steps, best, total / steps, n / best,
           ru.ru_maxrss / 1024.0, checkpointing ? "true" : "false", lora_r, tr.n_params, st.loss);
    trainer_free(&tr);
    lora_free(&lora);
    free(tokens);
    free(labels);
    model_free(&m);
    return 0;
}
