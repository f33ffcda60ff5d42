/* Training parity: 5 optimizer steps of SFT (2 micro-batches of accumulation each, padded
 * batches with prompt tokens masked, AdamW with Trainer's decay groups, warm-up + cosine,
 * clipping active) against the same run in PyTorch (tests/fixtures/training, made by
 * tools/reference/make_train_fixtures.py): per-step loss, grad_norm and lr, and final weights.
 * Then one window of completion rows whose label 0 (the BOS) is set, against transformers'
 * Trainer (tools/reference/make_sft_label0_fixture.py): position 0 is no target and is not in
 * num_items_in_batch nor in eval_loss, so loss, grad_norm and eval_loss move if it were
 * counted. */
#include "common/error.h"
#include "common/json_util.h"
#include "harness.h"
#include "io/safetensors.h"
#include "train/sft_task.h"
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    int32_t *tokens;
    uint8_t *attn, *labels;
} MicroBatchData;

static MicroBatch read_micro_batch(json_t *mb, MicroBatchData *data) {
    json_t *ids = json_object_get(mb, "input_ids"), *attn = json_object_get(mb, "attention_mask");
    json_t *lab = json_object_get(mb, "label_mask");
    int B = (int)json_array_size(ids), T = (int)json_array_size(json_array_get(ids, 0));
    data->tokens = malloc((size_t)B * T * sizeof *data->tokens);
    data->attn = malloc((size_t)B * T);
    data->labels = malloc((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            data->tokens[i] =
                (int32_t)json_integer_value(json_array_get(json_array_get(ids, b), t));
            data->attn[i] = (uint8_t)json_integer_value(json_array_get(json_array_get(attn, b), t));
            data->labels[i] =
                (uint8_t)json_integer_value(json_array_get(json_array_get(lab, b), t));
        }
    return (MicroBatch){{.batch = B, .t_len = T, .tokens = data->tokens, .attn_mask = data->attn},
                        data->labels};
}

/* One SFT window of tests/fixtures/training/sft_label0.json: loss, grad_norm and eval_loss (one
 * eval batch, and Trainer.evaluate's batches of eval_batch_size) at 1e-4. */
static void check_label0_window(void) {
    json_t *j;
    if (json_load_path(harness_source_path("tests/fixtures/training/sft_label0.json"), &j) != 0) {
        CHECK(0, "%s", err_msg());
        return;
    }
    char model_rel[256];
    snprintf(model_rel, sizeof model_rel, "tests/fixtures/models/%s",
             json_string_value(json_object_get(j, "model")));
    Model m;
    CHECK(model_load(&m, harness_source_path(model_rel)) == 0, "%s", err_msg());
    TrainerOptions opt = {.learning_rate = 1e-3, .max_grad_norm = 1.0, .total_steps = 1};
    CHECK(lr_schedule_parse("constant", &opt.schedule) == 0, "schedule");
    Trainer tr;
    CHECK(trainer_init(&tr, &m, NULL, &opt) == 0, "%s", err_msg());
    int accum = (int)json_integer_value(json_object_get(j, "accumulation"));
    MicroBatch window[8];
    MicroBatchData data[8];
    for (int a = 0; a < accum; a++)
        window[a] = read_micro_batch(json_array_get(json_object_get(j, "micro_batches"), (size_t)a),
                                     &data[a]);
    /* eval_loss first, on the weights before the step: every row of the window, one batch */
    SftExample rows[16];
    SftDataset val = {.items = rows};
    for (int a = 0; a < accum; a++)
        for (int b = 0; b < window[a].batch.batch && val.n < 16; b++) {
            size_t at = (size_t)b * window[a].batch.t_len;
            SftExample *e = &rows[val.n++];
            e->ids = data[a].tokens + at, e->labels = data[a].labels + at, e->len = 0;
            while (e->len < window[a].batch.t_len && data[a].attn[at + e->len])
                e->len++;
        }
    double eval_loss, want_eval = json_number_value(json_object_get(j, "eval_loss"));
    CHECK(sft_task_evaluate_nll(&m, &val, (int64_t)val.n, 0, &eval_loss) == 0, "%s", err_msg());
    CHECK(harness_close(eval_loss, want_eval, 1e-4, 0), "label-0 eval_loss %.7f vs %.7f", eval_loss,
          want_eval);
    /* the same rows in eval batches of eval_batch_size (3 + 1 rows, unequal label counts): HF's
     * Trainer.evaluate weighs each batch's mean by its rows, not one mean over all tokens */
    double batched, want_batched = json_number_value(json_object_get(j, "eval_loss_batched"));
    int64_t eval_batch = (int64_t)json_integer_value(json_object_get(j, "eval_batch_size"));
    CHECK(eval_batch > 0 && (size_t)eval_batch < val.n, "eval_batch_size %lld",
          (long long)eval_batch);
    CHECK(sft_task_evaluate_nll(&m, &val, eval_batch, 0, &batched) == 0, "%s", err_msg());
    CHECK(harness_close(batched, want_batched, 1e-4, 0),
          "eval_loss in batches of %lld: %.7f vs Trainer.evaluate %.7f", (long long)eval_batch,
          batched, want_batched);
    StepStats st;
    CHECK(trainer_sft_step(&tr, window, accum, &st) == 0, "step: %s", err_msg());
    double want_loss = json_number_value(json_object_get(j, "loss"));
    double want_norm = json_number_value(json_object_get(j, "grad_norm"));
    size_t want_items = (size_t)json_integer_value(json_object_get(j, "num_items_in_batch"));
    CHECK(st.tokens == want_items, "label tokens %zu vs num_items_in_batch %zu", st.tokens,
          want_items);
    CHECK(harness_close(st.loss, want_loss, 1e-4, 0), "label-0 window loss %.7f vs %.7f", st.loss,
          want_loss);
    CHECK(harness_close(st.grad_norm, want_norm, 1e-4, 0), "label-0 window grad_norm %.6f vs %.6f",
          st.grad_norm, want_norm);
    printf("label-0 window: %zu label tokens (transformers %zu) loss %.6f (transformers %.6f) "
           "grad_norm %.5f (transformers %.5f) eval_loss %.6f (transformers %.6f) "
           "batched %.6f (Trainer.evaluate %.6f)\n",
           st.tokens, want_items, st.loss, want_loss, st.grad_norm, want_norm, eval_loss, want_eval,
           batched, want_batched);
    for (int a = 0; a < accum; a++)
        free(data[a].tokens), free(data[a].attn), free(data[a].labels);
    trainer_free(&tr);
    model_free(&m);
    json_decref(j);
}

int main(void) {
    check_label0_window();
    json_t *j;
    if (json_load_path(harness_source_path("tests/fixtures/training/sft_5steps.json"), &j) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    char model_rel[256];
    snprintf(model_rel, sizeof model_rel, "tests/fixtures/models/%s",
             json_string_value(json_object_get(j, "model")));
    Model m;
    CHECK(model_load(&m, harness_source_path(model_rel)) == 0, "%s", err_msg());
    json_t *hp = json_object_get(j, "hyper");
#define HP(k) json_number_value(json_object_get(hp, k))
    int64_t steps = json_integer_value(json_object_get(j, "steps"));
    int accum = (int)json_integer_value(json_object_get(j, "accumulation"));
    TrainerOptions opt = {.learning_rate = HP("learning_rate"),
                          .max_grad_norm = HP("max_grad_norm"),
                          .adamw = {.beta1 = HP("adam_beta1"),
                                    .beta2 = HP("adam_beta2"),
                                    .eps = HP("adam_epsilon"),
                                    .weight_decay = HP("weight_decay")},
                          .warmup_steps = (int64_t)HP("warmup_steps"),
                          .total_steps = steps};
    CHECK(lr_schedule_parse(json_string_value(json_object_get(hp, "lr_scheduler")),
                            &opt.schedule) == 0,
          "schedule");
#undef HP
    Trainer tr;
    CHECK(trainer_init(&tr, &m, NULL, &opt) == 0, "%s", err_msg());

    json_t *mbs = json_object_get(j, "micro_batches");
    for (int64_t s = 0; s < steps; s++) {
        MicroBatch window[8];
        MicroBatchData data[8];
        for (int a = 0; a < accum; a++)
            window[a] = read_micro_batch(json_array_get(mbs, (size_t)(s * accum + a)), &data[a]);
        StepStats st;
        CHECK(trainer_sft_step(&tr, window, accum, &st) == 0, "step: %s", err_msg());
        double want_loss =
            json_number_value(json_array_get(json_object_get(j, "loss_per_step"), (size_t)s));
        double want_norm =
            json_number_value(json_array_get(json_object_get(j, "grad_norm_per_step"), (size_t)s));
        double want_lr =
            json_number_value(json_array_get(json_object_get(j, "lr_per_step"), (size_t)s));
        CHECK(harness_close(st.loss, want_loss, 1e-4, 0), "step %lld loss %.7f vs %.7f",
              (long long)s, st.loss, want_loss);
        CHECK(harness_close(st.grad_norm, want_norm, 1e-4, 0), "step %lld grad_norm %.6f vs %.6f",
              (long long)s, st.grad_norm, want_norm);
        CHECK(fabs(st.lr - want_lr) < 1e-12, "step %lld lr", (long long)s);
        printf("step %lld: loss %.6f (torch %.6f) grad_norm %.4f (torch %.4f) lr %.4g\n",
               (long long)s, st.loss, want_loss, st.grad_norm, want_norm, st.lr);
        for (int a = 0; a < accum; a++)
            free(data[a].tokens), free(data[a].attn), free(data[a].labels);
    }

    SafetensorsFile f;
    CHECK(safetensors_open(
              &f, harness_source_path("tests/fixtures/training/sft_5steps.safetensors")) == 0,
          "%s", err_msg());
    size_t bad = 0;
    double worst = 0;
    for (int p = 0; p < m.n_param_tensors; p++) {
        const SafetensorsTensor *t = safetensors_find(&f, m.param_info[p].name);
        CHECK(t != NULL, "%s in the reference", m.param_info[p].name);
        if (!t) continue;
        float *want = malloc(m.param_info[p].numel * sizeof *want);
        safetensors_to_f32(t, want);
        for (size_t i = 0; i < m.param_info[p].numel; i++) {
            float got = m.params[m.param_info[p].offset + i];
            worst = fmax(worst, fabs(got - want[i]) / fmax(fabs(want[i]), 1e-3));
            bad += !harness_close(got, want[i], 1e-4, 1e-6);
        }
        free(want);
    }
    CHECK(bad == 0, "%zu of %zu final weights differ from PyTorch by more than 1e-4 relative", bad,
          m.n_params);
    printf("final weights: %zu compared, worst relative difference %.2e\n", m.n_params, worst);
    safetensors_close(&f);
    trainer_free(&tr);
    model_free(&m);
    json_decref(j);
    return harness_finish("test_train_parity");
}
