/* GRPO's training phase alone (issue 33): what `rlhf train` runs between two generations, on a
 * synthetic generation batch, so that its cost can be measured without the rollout in front of
 * it. Per step, as grpo_run.c does it: trainer_release_activations (the rollout's KV cache takes
 * the activations' place), grpo_trainer_logprobs (old / reference log-probs when needed: none at
 * beta 0, num_iterations 1), grpo_trainer_add, grpo_trainer_step (loss dapo, beta 0: TRL 1.9's
 * defaults). The batch: ROWS completions in groups of G sharing one prompt of PROMPT tokens, each
 * completion COMPLETION random tokens, advantages drawn at random (a zero advantage would still
 * run the full forward and backward, as TRL's does).
 *
 *   bench_grpo_train MODEL_DIR [ROWS G PROMPT COMPLETION MICRO_BATCH STEPS [AUTOCAST]]
 *
 * AUTOCAST 1: bf16 mixed precision as `bf16: true` trains (the policy on backend_cpu_autocast).
 *
 * One JSON line per step: wall and CPU seconds (user, system), minor page faults, voluntary and
 * involuntary context switches of the process (getrusage), the step's loss and grad norm. */
#include "common/clock.h"
#include "common/error.h"
#include "config/grpo_config.h"
#include "grpo/grpo_trainer.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "train/trainer.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static double tv_s(struct timeval t) {
    return (double)t.tv_sec + 1e-6 * (double)t.tv_usec;
}

/* Pseudo-random draws (splitmix64): any fixed stream does. */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void synthetic_batch(GrpoBatch *b, int rows, int G, int P, int C, int vocab, uint64_t *rng) {
    grpo_batch_alloc(b, rows, G, P, C, 0, false, false);
    for (int r = 0; r < rows; r++) {
        b->prompt_len[r] = P, b->completion_len[r] = C;
        b->advantages[r] = (float)((double)(next_u64(rng) >> 11) * 0x1p-53 - 0.5);
        for (int t = 0; t < P; t++) { /* the group's shared prompt */
            uint64_t s = (uint64_t)(r / G) * 1000003u + (uint64_t)t;
            b->prompt_ids[(size_t)r * P + t] = (int32_t)(next_u64(&s) % (uint64_t)vocab);
            b->prompt_mask[(size_t)r * P + t] = 1;
        }
        for (int t = 0; t < C; t++) {
            b->completion_ids[(size_t)r * C + t] = (int32_t)(next_u64(rng) % (uint64_t)vocab);
            b->completion_mask[(size_t)r * C + t] = 1;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 8 && argc != 9) {
        fprintf(stderr,
                "usage: %s MODEL_DIR [ROWS G PROMPT COMPLETION MICRO_BATCH STEPS [AUTOCAST 0|1]]\n"
                "  (defaults 16 8 130 64 4 2 0)\n",
                argv[0]);
        return 2;
    }
    int rows = 16, G = 8, P = 130, C = 64, mb = 4, steps = 2;
    bool autocast = argc == 9 && atoi(argv[8]) != 0;
    if (argc >= 8) {
        rows = atoi(argv[2]), G = atoi(argv[3]), P = atoi(argv[4]), C = atoi(argv[5]);
        mb = atoi(argv[6]), steps = atoi(argv[7]);
    }
    if (rows <= 0 || G <= 0 || P <= 0 || C <= 0 || mb <= 0 || steps <= 0 || rows % G || rows % mb) {
        fprintf(stderr, "bench_grpo_train: sizes must be positive, ROWS a multiple of G and of "
                        "MICRO_BATCH\n");
        return 2;
    }
    Model m;
    if (model_load(&m, argv[1]) != 0) {
        fprintf(stderr, "bench_grpo_train: %s\n", err_msg());
        return 1;
    }
    if (autocast) m.backend = backend_cpu_autocast();
    int ga = rows / mb;
    json_t *trl = json_pack("{s:i, s:i, s:s, s:[s]}", "num_generations", G, "max_completion_length",
                            C, "loss_type", "dapo", "reward_funcs", "builtin.accuracy");
    GrpoConfig g;
    GrpoBatchShape shape = {mb, ga, false, 1};
    if (grpo_config_read(&g, trl, false, NAN, &shape, "bench", 1, NULL) != 0) {
        fprintf(stderr, "bench_grpo_train: %s\n", err_msg());
        return 1;
    }
    TrainerOptions opt = {.learning_rate = 1e-6,
                          .max_grad_norm = 1.0,
                          .adamw = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
                          .schedule = LR_CONSTANT,
                          .total_steps = steps,
                          .disable_dropout = true};
    Trainer tr;
    if (trainer_init(&tr, &m, NULL, &opt) != 0) {
        fprintf(stderr, "bench_grpo_train: %s\n", err_msg());
        return 1;
    }
    GrpoTrainer gt;
    grpo_trainer_init(&gt, &g, &tr, NULL, mb, ga, 1);
    uint64_t rng = 1;
    int rc = 0;
    for (int step = 1; step <= steps && rc == 0; step++) {
        GrpoBatch b;
        synthetic_batch(&b, rows, G, P, C, m.cfg.vocab_size, &rng);
        trainer_release_activations(&tr); /* as grpo_run before each generation */
        struct rusage r0, r1;
        getrusage(RUSAGE_SELF, &r0);
        double t0 = clock_seconds();
        rc = grpo_trainer_logprobs(&gt, &b);
        if (rc == 0) grpo_trainer_add(&gt, &b);
        StepStats st;
        if (rc == 0) rc = grpo_trainer_step(&gt, &st) < 0 ? -1 : 0;
        double wall = clock_seconds() - t0;
        getrusage(RUSAGE_SELF, &r1);
        if (rc != 0) {
            fprintf(stderr, "bench_grpo_train: step %d: %s\n", step, err_msg());
            break;
        }
        printf("{\"bench\": \"grpo_train\", \"step\": %d, \"rows\": %d, \"autocast_bf16\": %s, "
               "\"wall_s\": %.3f, "
               "\"user_s\": %.3f, \"sys_s\": %.3f, \"minflt\": %ld, \"nvcsw\": %ld, "
               "\"nivcsw\": %ld, \"loss\": %.9g, \"grad_norm\": %.9g}\n",
               step, rows, autocast ? "true" : "false", wall, tv_s(r1.ru_utime) - tv_s(r0.ru_utime),
               tv_s(r1.ru_stime) - tv_s(r0.ru_stime), r1.ru_minflt - r0.ru_minflt,
               r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw, st.loss, st.grad_norm);
        fflush(stdout);
    }
    grpo_trainer_free(&gt);
    trainer_free(&tr);
    grpo_config_free(&g);
    json_decref(trl);
    model_free(&m);
    return rc == 0 ? 0 : 1;
}
