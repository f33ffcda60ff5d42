/* DPO training-step throughput, as `rlhf train` with rl: dpo runs a step: a micro-batch of B
 * pairs is collated into 2B rows (pref_batch_build), the policy goes forward, the reference's
 * summed completion log-probs come from a frozen copy of the model (or, with a LoRA adapter,
 * from the same network with the adapter switched off), the sigmoid DPO loss gives dL/dlogp
 * (pref_method.c), then backward, clipping and AdamW (trainer_step). Timed over several steps
 * after a warm-up step, whose loss is printed too: policy = reference there, so it is ln 2.
 * Prints one JSON line.
 *
 * Usage: bench_dpo_step MODEL_DIR BATCH_JSON [steps] [lora_r] [gradient_checkpointing 0|1]
 *                       [bf16_reference 0|1] [adamw_8bit 0|1] [unshared 0|1] [autocast 0|1]
 *                       [gemm auto|openblas|own]
 *   bf16_reference: the frozen reference kept in bf16 (bf16: true); the run then also reports
 *   how far its summed completion log-probs are from the fp32 model's.
 *   adamw_8bit: bitsandbytes' 8-bit AdamW (optimizer: adamw_bnb_8bit).
 *   unshared: both rows of a pair compute the prompt (as TRL does); by default the prompt is
 *   computed once (model/token_layout.h).
 *   autocast: bf16 mixed precision as `bf16: true` trains (policy and reference on
 *   backend_cpu_autocast; with it the reference is kept in bf16 too, as bf16: true does).
 *   cpu_s_per_step in its JSON: user + system CPU seconds of a timed step (all threads), the
 *   figure a loaded machine does not inflate the way it does wall-clock time.
 *   gemm: which fp32 GEMM multiplies (gemm_f32_set_policy): auto (the default, as training
 *   runs: ours where the CPU has AVX2/AVX-512), measured (each shape class on the faster by
 *   timing at its first product; the choices go to stderr at the end), or always OpenBLAS, or
 *   always our own kernel, for a side by side.
 *   BATCH_JSON: {"prompt": [[ids]...], "chosen": [[ids]...], "rejected": [[ids]...]}, one
 *   entry per pair (dpo_step_bench.py writes it, and gives the same pairs to TRL).
 *        bench_dpo_step --sgemm ROWS HIDDEN INTERMEDIATE [reps]
 *   OpenBLAS sgemm GFLOP/s on the model's GEMM shapes (ROWS tokens), best of reps: the
 *   ceiling the step's GFLOP/s are compared with; our own GEMM's beside it (own_gflops). */
#include "common/error.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_f32.h"
#include "model/forward.h"
#include "train/pref_batch.h"
#include "train/pref_method.h"
#include "train/trainer.h"

#include <cblas.h>
#include <jansson.h>
#include <math.h>
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

static int fail(void) {
    fprintf(stderr, "%s\n", err_msg());
    return 1;
}

/* ---- sgemm ceiling ---- */

typedef struct {
    const char *name;
    bool trans_a, trans_b; /* A stored (K x M) / B stored (N x K): as the training products */
    int m, n, k;
} GemmShape;

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds of one product on `path`: wall clock, and this process's CPU time in *cpu (all its
 * threads; on a shared machine the figure that other processes' load hardly changes). */
static double time_gemm(GemmF32Path path, const GemmShape *s, float *a, float *b, float *c,
                        double *cpu) {
    double t0 = now_seconds(), c0 = cpu_seconds();
    gemm_f32_on(path, s->trans_a, s->trans_b, s->m, s->n, s->k, 1.0f, a, s->trans_a ? s->m : s->k,
                b, s->trans_b ? s->k : s->n, 0.0f, c, s->n);
    *cpu = cpu_seconds() - c0;
    return now_seconds() - t0;
}

/* OpenBLAS's sgemm and our own GEMM (gemm_f32.h, the path this CPU has) on the model's GEMM
 * shapes, alternated rep by rep so that both see the same machine; GFLOP/s of each one's best. */
static int sgemm_peak(int rows, int hidden, int inter, int reps) {
    /* The products of a layer: x W^T for the projections (weights stored out x in, as the
     * model keeps them), dX = dY W, and dW = dY^T X for the weight gradients. */
    GemmShape shapes[] = {{"x W_up^T", false, true, rows, inter, hidden},
                          {"x W_down^T", false, true, rows, hidden, inter},
                          {"x W_q^T", false, true, rows, hidden, hidden},
                          {"dX = dY_up W_up", false, false, rows, hidden, inter},
                          {"dX = dY_down W_down", false, false, rows, inter, hidden},
                          {"dW_up = dY^T X", true, false, inter, hidden, rows},
                          {"dW_down = dY^T X", true, false, hidden, inter, rows}};
    int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    size_t most = 0;
    for (int i = 0; i < n_shapes; i++) {
        size_t sizes[3] = {(size_t)shapes[i].m * shapes[i].k, (size_t)shapes[i].n * shapes[i].k,
                           (size_t)shapes[i].m * shapes[i].n};
        for (int j = 0; j < 3; j++)
            if (sizes[j] > most) most = sizes[j];
    }
    float *a = malloc(most * sizeof *a), *b = malloc(most * sizeof *b);
    float *c = malloc(most * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    unsigned seed = 7;
    for (size_t i = 0; i < most; i++) {
        seed = seed * 1103515245u + 12345u;
        a[i] = (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
        b[i] = (float)((seed >> 3) & 0xffff) / 65536.0f - 0.5f;
    }
    GemmF32Path own = gemm_f32_own_path();
    double peak = 0, own_peak = 0, flops_all = 0, blas_s = 0, own_s = 0, blas_cpu = 0, own_cpu = 0;
    printf("{\"impl\": \"openblas sgemm\", \"blas_core\": \"%s\", \"own_path\": \"%s\", "
           "\"threads\": %d, \"shapes\": [",
           openblas_get_corename(), gemm_f32_path_name(own), omp_get_max_threads());
    for (int i = 0; i < n_shapes; i++) {
        double best[2] = {1e30, 1e30}, best_cpu[2] = {1e30, 1e30};
        for (int r = 0; r <= reps; r++) /* r = 0 is a warm-up */
            for (int p = 0; p < 2; p++) {
                double cpu, dt = time_gemm(p ? own : GEMM_F32_OPENBLAS, &shapes[i], a, b, c, &cpu);
                if (r > 0 && dt < best[p]) best[p] = dt;
                if (r > 0 && cpu < best_cpu[p]) best_cpu[p] = cpu;
            }
        double flops = 2.0 * shapes[i].m * shapes[i].n * shapes[i].k;
        double g = flops / best[0] * 1e-9, g_own = flops / best[1] * 1e-9;
        flops_all += flops, blas_s += best[0], own_s += best[1];
        blas_cpu += best_cpu[0], own_cpu += best_cpu[1];
        if (g > peak) peak = g;
        if (g_own > own_peak) own_peak = g_own;
        printf("%s{\"name\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"gflops\": %.2f, "
               "\"own_gflops\": %.2f, \"gflop_per_cpu_s\": %.2f, \"own_gflop_per_cpu_s\": %.2f}",
               i ? ", " : "", shapes[i].name, shapes[i].m, shapes[i].n, shapes[i].k, g, g_own,
               flops / best_cpu[0] * 1e-9, flops / best_cpu[1] * 1e-9);
    }
    /* all: the shapes' FLOPs over their summed best times, each library's; per CPU-second: over
     * their summed best CPU times (OpenMP's spinning threads count) */
    printf("], \"peak_gflops\": %.2f, \"own_peak_gflops\": %.2f, \"all_gflops\": %.2f, "
           "\"own_all_gflops\": %.2f, \"all_gflop_per_cpu_s\": %.2f, "
           "\"own_all_gflop_per_cpu_s\": %.2f}\n",
           peak, own_peak, flops_all / blas_s * 1e-9, flops_all / own_s * 1e-9,
           flops_all / blas_cpu * 1e-9, flops_all / own_cpu * 1e-9);
    free(a), free(b), free(c);
    return 0;
}

/* ---- the batch ---- */

static int read_ids(json_t *list, int32_t **ids, int *n) {
    if (!json_is_array(list)) return err_set("expected a list of token ids");
    *n = (int)json_array_size(list);
    *ids = xmalloc((size_t)(*n ? *n : 1) * sizeof **ids);
    for (int i = 0; i < *n; i++) {
        json_t *v = json_array_get(list, (size_t)i);
        if (!json_is_integer(v)) return err_set("expected a token id at %d", i);
        (*ids)[i] = (int32_t)json_integer_value(v);
    }
    return 0;
}

/* The pairs of BATCH_JSON as a PrefDataset (what pref_dataset_load makes from a file). */
static int load_pairs(const char *path, PrefDataset *ds) {
    memset(ds, 0, sizeof *ds);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) return err_set("%s:%d: %s", path, jerr.line, jerr.text);
    json_t *p = json_object_get(root, "prompt"), *c = json_object_get(root, "chosen");
    json_t *r = json_object_get(root, "rejected");
    int rc = 0;
    if (!json_is_array(p) || !json_is_array(c) || !json_is_array(r) ||
        json_array_size(p) != json_array_size(c) || json_array_size(p) != json_array_size(r) ||
        json_array_size(p) == 0)
        rc = err_set("%s: needs prompt, chosen and rejected lists of the same length", path);
    if (rc == 0) {
        ds->n_pairs = json_array_size(p);
        ds->pairs = xcalloc(ds->n_pairs, sizeof *ds->pairs);
    }
    for (size_t i = 0; i < ds->n_pairs && rc == 0; i++) {
        PrefPair *q = &ds->pairs[i];
        rc = read_ids(json_array_get(p, i), &q->prompt, &q->n_prompt);
        if (rc == 0) rc = read_ids(json_array_get(c, i), &q->chosen, &q->n_chosen);
        if (rc == 0) rc = read_ids(json_array_get(r, i), &q->rejected, &q->n_rejected);
        if (rc != 0) rc = err_prefix("%s: pair %zu", path, i);
    }
    json_decref(root);
    return rc;
}

static void free_pairs(PrefDataset *ds) {
    for (size_t i = 0; i < ds->n_pairs; i++) {
        free(ds->pairs[i].prompt);
        free(ds->pairs[i].chosen);
        free(ds->pairs[i].rejected);
    }
    free(ds->pairs);
    memset(ds, 0, sizeof *ds);
}

/* Peak RSS of this process in MB: VmHWM, the high-water mark of this program's own address space.
 * (getrusage's ru_maxrss would also take in the RSS of the process that spawned it, which Linux
 * carries across exec: a Python parent with torch loaded would set its floor.) */
static double peak_rss_mb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = atof(line + 6);
    if (f) fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = (double)ru.ru_maxrss;
    }
    return kb / 1024.0;
}

/* The largest relative difference, over the batch's rows, between the summed completion log-probs
 * of the fp32 model and of its bf16-stored copy: what keeping the reference in bf16 changes. */
static double bf16_logp_deviation(const Model *fp32, const Model *bf16, const PrefDataset *ds,
                                  const size_t *order, int64_t max_len) {
    PrefMicroBatch pmb;
    pref_batch_build(&pmb, ds, order, 0, (int)ds->n_pairs, max_len, 0, false);
    const TokenBatch *b = &pmb.mb.batch;
    size_t cells = (size_t)b->batch * b->t_len;
    float *a = xmalloc(cells * sizeof *a), *c = xmalloc(cells * sizeof *c);
    double worst = -1;
    if (model_token_logprobs(fp32, b, pmb.mb.label_mask, a) == 0 &&
        model_token_logprobs(bf16, b, pmb.mb.label_mask, c) == 0) {
        worst = 0;
        for (int r = 0; r < b->batch; r++) {
            double sa = 0, sc = 0;
            for (int t = 0; t < b->t_len; t++) {
                size_t i = (size_t)r * b->t_len + t;
                if (pmb.mb.label_mask[i]) sa += a[i], sc += c[i];
            }
            if (fabs(sc - sa) / fabs(sa) > worst) worst = fabs(sc - sa) / fabs(sa);
        }
    }
    free(a), free(c);
    pref_batch_free(&pmb);
    return worst;
}

static double metric(json_t *entry, const char *key) {
    json_t *v = json_object_get(entry, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

int main(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[1], "--sgemm") == 0)
        return sgemm_peak(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]),
                          argc > 5 ? atoi(argv[5]) : 5);
    if (argc < 3) {
        fprintf(stderr,
                "usage: %s MODEL_DIR BATCH_JSON [steps] [lora_r] [gradient_checkpointing] "
                "[bf16_reference] [adamw_8bit] [unshared]\n"
                "       %s --sgemm ROWS HIDDEN INTERMEDIATE [reps]\n",
                argv[0], argv[0]);
        return 2;
    }
    int steps = argc > 3 ? atoi(argv[3]) : 3, lora_r = argc > 4 ? atoi(argv[4]) : 0;
    bool checkpointing = argc > 5 && atoi(argv[5]) != 0;
    bool bf16_reference = argc > 6 && atoi(argv[6]) != 0 && lora_r == 0;
    bool adamw_8bit = argc > 7 && atoi(argv[7]) != 0;
    bool unshared = argc > 8 && atoi(argv[8]) != 0; /* each row computes its whole prompt */
    bool autocast = argc > 9 && atoi(argv[9]) != 0;
    const char *gemm = argc > 10 ? argv[10] : "auto";
    if (strcmp(gemm, "openblas") == 0)
        gemm_f32_set_policy(GEMM_F32_OPENBLAS);
    else if (strcmp(gemm, "own") == 0)
        gemm_f32_set_policy(gemm_f32_own_path());
    else if (strcmp(gemm, "measured") == 0)
        gemm_f32_set_policy(GEMM_F32_MEASURED);
    else if (strcmp(gemm, "auto") != 0) {
        fprintf(stderr, "gemm: expected auto, measured, openblas or own, got \"%s\"\n", gemm);
        return 2;
    }
    if (autocast && lora_r == 0) bf16_reference = true;
    if (steps < 1) steps = 1;
    PrefDataset ds;
    if (load_pairs(argv[2], &ds) != 0) return fail();
    Model m;
    if (model_load(&m, argv[1]) != 0) return fail();
    if (autocast) m.backend = backend_cpu_autocast();

    /* What run_preference does for `rl: dpo` with the defaults (beta 0.1, sigmoid). */
    char *loss_type = "sigmoid";
    double loss_weight = 1.0;
    TrainConfig cfg = {.source = "bench_dpo_step",
                       .rl = RL_DPO,
                       .beta = 0.1,
                       .dpo_loss_type = &loss_type,
                       .n_dpo_loss_type = 1,
                       .dpo_loss_weight_values = &loss_weight,
                       .rpo_alpha = NAN};
    PrefMethod pm;
    if (pref_method_init(&pm, &cfg) != 0) return fail();
    LoraAdapter lora = {0};
    Model frozen;
    ReferencePolicy ref;
    if (lora_r > 0) {
        const char *all_linear = "all-linear";
        if (lora_create(&lora, &m.cfg, lora_r, 2.0 * lora_r, false, 0.0, &all_linear, 1, 1) != 0)
            return fail();
        m.lora = &lora;
        reference_policy_from_adapter(&ref, &m, &lora);
    } else {
        if (model_load(&frozen, argv[1]) != 0) return fail();
        if (bf16_reference && model_store_bf16(&frozen) != 0) return fail();
        /* as train_reference_open declares a bf16 reference's weights frozen */
        if (bf16_reference && autocast)
            gemm_bf16_keep_packed(frozen.params16, frozen.n_params * sizeof *frozen.params16);
        if (autocast) frozen.backend = backend_cpu_autocast();
        reference_policy_from_model(&ref, &frozen);
    }
    pm.ref = &ref;
    TrainerOptions opt = {.learning_rate = 1e-6,
                          .max_grad_norm = 1.0,
                          .adamw = {0.9, 0.999, 1e-8, 0.0, adamw_8bit},
                          .schedule = LR_CONSTANT,
                          .total_steps = steps + 1,
                          .gradient_checkpointing = checkpointing,
                          .disable_dropout = true,
                          .seed = 42};
    Trainer tr;
    if (trainer_init(&tr, &m, lora_r > 0 ? &lora : NULL, &opt) != 0) return fail();

    size_t *order = xmalloc(ds.n_pairs * sizeof *order);
    int64_t max_len = 0;
    for (size_t i = 0; i < ds.n_pairs; i++) {
        order[i] = i;
        int64_t a = (int64_t)ds.pairs[i].n_prompt + ds.pairs[i].n_chosen;
        int64_t b = (int64_t)ds.pairs[i].n_prompt + ds.pairs[i].n_rejected;
        if (a > max_len) max_len = a;
        if (b > max_len) max_len = b;
    }
    double bf16_rel = bf16_reference ? bf16_logp_deviation(&m, &frozen, &ds, order, max_len) : 0;
    TrainMethod method = pref_method_train_method(&pm);
    StepStats st;
    /* Page faults and kernel time inside the timed steps: memory first touched in the step
     * (buffers allocated and freed per step) shows up here, not in the GEMMs. */
    double faults = 0, sys_s = 0, user_s = 0, best_cpu = 1e30; /* over the timed steps */
    double best = 1e30, total = 0, loss0 = 0, logps_chosen0 = NAN, logps_rejected0 = NAN;
    size_t tokens = 0;
    for (int s = 0; s <= steps; s++) { /* s = 0: the warm-up step */
        PrefMicroBatch pmb; /* collated outside the timed step, as the trainer's loop does */
        pref_batch_build(&pmb, &ds, order, 0, (int)ds.n_pairs, max_len, 0, false);
        pmb.mb.batch.unshared = unshared;
        tokens = 0;
        for (size_t i = 0; i < (size_t)pmb.mb.batch.batch * pmb.mb.batch.t_len; i++)
            tokens += pmb.attn[i];
        pm.window = &pmb;
        pm.n_window = 1;
        struct rusage ru0, ru1;
        getrusage(RUSAGE_SELF, &ru0);
        double t0 = now_seconds();
        int rc = trainer_step(&tr, &pmb.mb, 1, &method, &st);
        double dt = now_seconds() - t0;
        getrusage(RUSAGE_SELF, &ru1);
        pref_batch_free(&pmb);
        if (rc != 0) return fail();
        json_t *entry = json_object();
        pref_method_flush_metrics(&pm, entry, "");
        if (s == 0) {
            loss0 = st.loss;
            logps_chosen0 = metric(entry, "logps/chosen");
            logps_rejected0 = metric(entry, "logps/rejected");
        } else {
            total += dt;
            if (dt < best) best = dt;
            faults += (double)(ru1.ru_minflt - ru0.ru_minflt);
            double sys = (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                         1e-6 * (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec);
            double user = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                          1e-6 * (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec);
            sys_s += sys;
            user_s += user;
            /* CPU time of all threads (OpenMP's spinning included): on a shared machine the
             * figure that other processes' load changes least */
            if (user + sys < best_cpu) best_cpu = user + sys;
        }
        json_decref(entry);
    }
    printf(
        "{\"impl\": \"rlhf.c\", \"pairs\": %zu, \"rows\": %zu, \"seq_len\": %lld, \"threads\": %d, "
        "\"steps\": %d, \"best_s\": %.4f, \"mean_s\": %.4f, \"tokens\": %zu, "
        "\"tokens_per_s\": %.3f, \"peak_rss_mb\": %.0f, \"gradient_checkpointing\": %s, "
        "\"lora_r\": %d, \"reference\": \"%s\", \"trained_params\": %zu, "
        "\"loss_step0\": %.9g, \"logps_chosen_step0\": %.9g, \"logps_rejected_step0\": %.9g, "
        "\"loss_last\": %.9g, \"minor_faults_per_step\": %.0f, \"sys_s_per_step\": %.3f, "
        "\"cpu_s_per_step\": %.3f, \"best_cpu_s\": %.3f, \"bf16_reference\": %s, "
        "\"bf16_ref_logps_max_rel_diff\": %.3g, \"optimizer\": \"%s\", "
        "\"shared_prompt\": %s, \"autocast_bf16\": %s, \"gemm\": \"%s\"}\n",
        ds.n_pairs, 2 * ds.n_pairs, (long long)max_len, omp_get_max_threads(), steps, best,
        total / steps, tokens, tokens / best, peak_rss_mb(), checkpointing ? "true" : "false",
        lora_r, lora_r > 0 ? "adapter switched off" : "frozen copy of the model", tr.n_params,
        loss0, logps_chosen0, logps_rejected0, st.loss, faults / steps, sys_s / steps,
        (user_s + sys_s) / steps, best_cpu, bf16_reference ? "true" : "false", bf16_rel,
        adamw_8bit ? "adamw_bnb_8bit" : "adamw_torch", unshared ? "false" : "true",
        autocast ? "true" : "false", gemm);
    gemm_f32_report(stderr);
    trainer_free(&tr);
    free(order);
    if (lora_r > 0)
        lora_free(&lora);
    else
        model_free(&frozen);
    model_free(&m);
    free_pairs(&ds);
    return 0;
}
