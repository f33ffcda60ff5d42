/* bf16: true against torch's own CPU autocast (tests/fixtures/autocast/dpo_sigmoid.json, made by
 * tools/reference/make_autocast_fixtures.py with TRL 1.9): TRL's DPOTrainer ran the same 3 steps
 * twice, bf16=False and bf16=True. rlhf.c runs them in fp32 and with bf16: true (the session and
 * reference a real run opens). Each logged value's error against torch's fp32 run, summed over
 * the steps, must be within twice torch's own autocast error plus the fp32 parity tolerance, and
 * the bf16 run must differ from rlhf.c's own fp32 run by a good share of torch's autocast error
 * (so that bf16 is really on). */
#include "common/error.h"
#include "common/json_util.h"
#include "config/train_config.h"
#include "data/pref_dataset.h"
#include "harness.h"
#include "kernels/backend.h"
#include "model/reference_policy.h"
#include "train/pref_method.h"
#include "train/reference.h"
#include "train/session.h"
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The logged values compared; "learning_rate", "num_tokens", "epoch" and "step" do not depend on
 * the precision, and mean_token_accuracy is a count of argmax hits that either run may flip. */
static const char *const KEYS[] = {"loss",
                                   "grad_norm",
                                   "logps/chosen",
                                   "logps/rejected",
                                   "rewards/chosen",
                                   "rewards/rejected",
                                   "rewards/margins",
                                   "logits/chosen",
                                   "logits/rejected",
                                   "entropy"};
#define N_KEYS  (sizeof KEYS / sizeof *KEYS)
#define N_STEPS 3

/* CHECK(cond), and on failure on to `label` (the clean-up of what is open so far). */
#define CHECK_OR(label, cond, ...)                                                                 \
    do {                                                                                           \
        bool held_ = (cond);                                                                       \
        CHECK(held_, __VA_ARGS__);                                                                 \
        if (!held_) goto label;                                                                    \
    } while (0)

static const char *write_config(const json_t *c, bool bf16) {
    char text[8192], model[2048], pairs[2048];
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    snprintf(pairs, sizeof pairs, "%s",
             harness_source_path("tests/fixtures/pref_train/pairs.jsonl"));
    snprintf(text, sizeof text,
             "base_model: %s\nrl: dpo\nrl_beta: %.17g\ndatasets:\n  - path: %s\n"
             "sequence_len: %lld\nmicro_batch_size: %lld\ngradient_accumulation_steps: %lld\n"
             "max_steps: %lld\nlearning_rate: %.17g\nlr_scheduler: %s\nwarmup_steps: 0\n"
             "dpo_loss_type: [sigmoid]\nbf16: %s\n",
             model, json_number_value(json_object_get(c, "beta")), pairs,
             (long long)json_integer_value(json_object_get(c, "max_length")),
             (long long)json_integer_value(json_object_get(c, "per_device_train_batch_size")),
             (long long)json_integer_value(json_object_get(c, "gradient_accumulation_steps")),
             (long long)json_integer_value(json_object_get(c, "max_steps")),
             json_number_value(json_object_get(c, "learning_rate")),
             json_string_value(json_object_get(c, "lr_scheduler_type")), bf16 ? "true" : "false");
    const char *path = harness_tmp_path(bf16 ? "autocast_bf16.yaml" : "autocast_fp32.yaml");
    harness_write_file(path, text, strlen(text));
    return path;
}

/* Runs the fixture's 3 steps in rlhf.c, examples in dataset order as TRL's SequentialSampler
 * took them; got[step][key] receives each logged value. Returns false on a failure (reported). */
static bool run(const json_t *c, bool bf16, double got[N_STEPS][N_KEYS]) {
    TrainConfig cfg;
    FILE *log = fopen("/dev/null", "w");
    bool ok = false;
    CHECK_OR(out_log, train_config_load(&cfg, write_config(c, bf16), NULL, 0) == 0, "%s",
             err_msg());
    TrainSession s;
    PrefDataset ds;
    PrefMethod pm;
    ReferencePolicy refp;
    CHECK_OR(out_cfg, train_session_open(&s, &cfg, log) == 0, "%s", err_msg());
    CHECK(bf16 == (s.model.backend == backend_cpu_autocast()),
          "bf16: %d, but the session computes on %s", bf16, model_backend(&s.model)->name);
    CHECK_OR(out_session, pref_dataset_load(&ds, &cfg, &s.tok, log) == 0 && ds.n_pairs == 12, "%s",
             err_msg());
    CHECK_OR(out_data,
             pref_method_init(&pm, &cfg) == 0 &&
                 train_reference_open(&refp, &cfg, &s.model, NULL, log) == 0,
             "%s", err_msg());
    pm.ref = &refp;
    TrainerOptions opt = {.learning_rate = cfg.learning_rate,
                          .max_grad_norm = cfg.max_grad_norm,
                          .adamw = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0},
                          .schedule = LR_LINEAR,
                          .warmup_steps = 0,
                          .total_steps = cfg.max_steps,
                          .disable_dropout = true};
    Trainer tr;
    CHECK_OR(out_ref, trainer_init(&tr, &s.model, NULL, &opt) == 0, "%s", err_msg());
    size_t order[12];
    for (size_t i = 0; i < 12; i++)
        order[i] = i;
    int gas = (int)cfg.gradient_accumulation_steps, bs = (int)cfg.micro_batch_size;
    TrainMethod method = pref_method_train_method(&pm);
    ok = true;
    for (int step = 0; step < N_STEPS && ok; step++) {
        PrefMicroBatch window[8];
        MicroBatch mb[8];
        for (int k = 0; k < gas; k++) {
            pref_batch_build(&window[k], &ds, order, (size_t)(step * gas + k) * bs, bs,
                             cfg.sequence_len, 3019, pref_method_all_positions(&pm));
            mb[k] = window[k].mb;
        }
        pm.window = window;
        pm.n_window = gas;
        StepStats st;
        ok = trainer_step(&tr, mb, gas, &method, &st) == 0;
        CHECK(ok, "%s", err_msg());
        json_t *entry = json_object();
        json_object_set_new(entry, "loss", json_real(st.loss));
        json_object_set_new(entry, "grad_norm", json_real(st.grad_norm));
        pref_method_flush_metrics(&pm, entry, "");
        for (size_t k = 0; k < N_KEYS; k++)
            got[step][k] = json_number_value(json_object_get(entry, KEYS[k]));
        json_decref(entry);
        for (int k = 0; k < gas; k++)
            pref_batch_free(&window[k]);
    }
    trainer_free(&tr);
out_ref:
    reference_policy_close(&refp);
out_data:
    pref_dataset_free(&ds);
out_session:
    train_session_close(&s);
out_cfg:
    train_config_free(&cfg);
out_log:
    fclose(log);
    return ok;
}

int main(void) {
    json_t *ref;
    if (json_load_path(harness_source_path("tests/fixtures/autocast/dpo_sigmoid.json"), &ref) !=
        0) {
        CHECK(0, "%s", err_msg());
        return harness_finish("test_autocast_parity");
    }
    const json_t *c = json_object_get(ref, "config");
    const json_t *h32 = json_object_get(ref, "log_history_fp32"),
                 *h16 = json_object_get(ref, "log_history_bf16");
    double ours32[N_STEPS][N_KEYS], ours16[N_STEPS][N_KEYS];
    if (run(c, false, ours32) && run(c, true, ours16)) {
        double moved_ours = 0, moved_torch = 0; /* the log-probs' distance from fp32 */
        for (size_t k = 0; k < N_KEYS; k++) {
            /* Summed over the steps, so that one step where torch's rounding happened to land
             * near fp32 does not make the bound vanish. The floor is test_pref_train's fp32
             * parity tolerance (1e-4 relative, 2e-6 absolute) per step. */
            double ours = 0, torch = 0, floor = 0, self = 0;
            for (int s = 0; s < N_STEPS; s++) {
                double f32 = json_number_value(json_object_get(json_array_get(h32, s), KEYS[k]));
                double b16 = json_number_value(json_object_get(json_array_get(h16, s), KEYS[k]));
                ours += fabs(ours16[s][k] - f32);
                torch += fabs(b16 - f32);
                floor += 1e-4 * fabs(f32) + 2e-6;
                self += fabs(ours16[s][k] - ours32[s][k]);
                CHECK(harness_close(ours32[s][k], f32, 1e-4, 2e-6),
                      "fp32 step %d: %s = %.9g, TRL %.9g", s + 1, KEYS[k], ours32[s][k], f32);
            }
            printf("%-16s bf16 vs torch fp32: ours %.3e, torch autocast %.3e (ours vs our fp32 "
                   "%.3e)\n",
                   KEYS[k], ours, torch, self);
            CHECK(ours <= 2.0 * torch + floor,
                  "%s: bf16 is %.3e from torch's fp32 run over %d steps, more than twice torch's "
                  "own autocast (%.3e) + %.1e",
                  KEYS[k], ours, N_STEPS, torch, floor);
            if (strncmp(KEYS[k], "logps/", 6) == 0) moved_ours += self, moved_torch += torch;
        }
        /* torch's autocast moves the summed log-probs ~1e-4 relative; fp32 reorderings move
         * them ~1e-6: a run that rounded nothing would sit far below a fifth of torch's move */
        CHECK(moved_ours >= 0.2 * moved_torch,
              "bf16 is not on: the log-probs moved %.3e from rlhf.c's fp32 run, torch's autocast "
              "%.3e",
              moved_ours, moved_torch);
    }
    json_decref(ref);
    return harness_finish("test_autocast_parity");
}
