/* Sample packing (data/sample_packing.h) against Axolotl (tests/fixtures/packing, made by
 * tools/reference/make_packing_fixtures.py from Axolotl's own MultipackBatchSampler and collator
 * with transformers on the llama_text fixture model):
 *  1. the bins of first-fit, bin_size 3, group_size 7 and next-fit (sample_packing_sequentially)
 *     are Axolotl's, member for member;
 *  2. one optimizer window of two packed rows: the loss, its label-token count
 *     (num_items_in_batch) and the gradient norm are transformers' (1e-4 relative);
 *  2b. multipack_real_batches: bins of sequence_len are Axolotl's batches of micro_batch_size
 *     bins, a micro-batch of 2 such rows has transformers' loss, count and gradient norm, and
 *     evaluation in batches of 2 rows (the last of 1) is HF's evaluation loop;
 *  3. evaluation (eval_sample_packing): the held-out examples packed in dataset order as
 *     Axolotl's eval sampler packs them, and eval_loss = HF's mean of the rows' mean losses;
 *  4. invariant, on every packed row: each token's log-prob equals that of its example run
 *     alone, and an example's first token is predicted from the example before it alone (its
 *     last position's logits), so the packed loss is the unpacked examples' losses plus those
 *     boundary terms, over the same label-token count;
 *  5. a run record tells packed rows of another size apart (micro_batch_size 2 x accumulation 1
 *     and 1 x 2 train the same examples per step unpacked, not packed);
 *  6. `rlhf train` with sample_packing: true end to end: the start-up log's rows are the epoch's
 *     micro-batches (steps per epoch = rows / accumulation), the rows hold every token and fewer
 *     rows than examples, every step is logged, and evaluation runs packed. */
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "data/sample_packing.h"
#include "harness.h"
#include "train/run_record.h"
#include "train/sft_packed.h"
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void read_examples(const json_t *arr, SftDataset *ds) {
    memset(ds, 0, sizeof *ds);
    ds->n = json_array_size(arr);
    ds->items = calloc(ds->n, sizeof *ds->items);
    for (size_t i = 0; i < ds->n; i++) {
        const json_t *ids = json_object_get(json_array_get(arr, i), "input_ids");
        const json_t *lab = json_object_get(json_array_get(arr, i), "label_mask");
        SftExample *e = &ds->items[i];
        e->len = (int)json_array_size(ids);
        e->ids = malloc((size_t)e->len * sizeof *e->ids);
        e->labels = malloc((size_t)e->len);
        for (int t = 0; t < e->len; t++) {
            e->ids[t] = (int32_t)json_integer_value(json_array_get(ids, (size_t)t));
            e->labels[t] = (uint8_t)json_integer_value(json_array_get(lab, (size_t)t));
        }
    }
}

static bool same_bins(const PackedBins *bins, const json_t *want) {
    bool same = bins->n_bins == json_array_size(want);
    for (size_t b = 0; same && b < bins->n_bins; b++) {
        const json_t *wb = json_array_get(want, b);
        same = bins->start[b + 1] - bins->start[b] == json_array_size(wb);
        for (size_t k = 0; same && k < json_array_size(wb); k++)
            same = bins->members[bins->start[b] + k] ==
                   (size_t)json_integer_value(json_array_get(wb, k));
    }
    return same;
}

/* 1. The C packer's bins are Axolotl's for each case. */
static void check_bins(const json_t *j, const SftDataset *ds, const size_t *order,
                       PackedBins *first_fit) {
    int64_t capacity = json_integer_value(json_object_get(j, "micro_batch_size")) *
                       json_integer_value(json_object_get(j, "sequence_len"));
    const json_t *cases = json_object_get(j, "cases");
    for (size_t c = 0; c < json_array_size(cases); c++) {
        const json_t *cs = json_array_get(cases, c);
        const char *name = json_string_value(json_object_get(cs, "name"));
        PackingOptions opt = {.capacity = capacity,
                              .bin_size = json_integer_value(json_object_get(cs, "bin_size")),
                              .group_size = json_integer_value(json_object_get(cs, "group_size")),
                              .sequential = json_is_true(json_object_get(cs, "sequential"))};
        PackedBins bins;
        sample_packing_pack(ds, order, ds->n, &opt, &bins);
        const json_t *want = json_object_get(cs, "bins");
        CHECK(same_bins(&bins, want),
              "%s: %zu bins, Axolotl's MultipackBatchSampler made %zu (or other members)", name,
              bins.n_bins, json_array_size(want));
        printf("%s: %zu bins as Axolotl's, efficiency %.3f\n", name, bins.n_bins,
               sample_packing_efficiency(&bins, capacity));
        if (c == 0)
            *first_fit = bins;
        else
            sample_packing_free(&bins);
    }
}

static MicroBatch packed_micro_batch(const PackedRows *r) {
    return (MicroBatch){{.batch = r->rows,
                         .t_len = r->t_len,
                         .tokens = r->tokens,
                         .attn_mask = r->attn,
                         .positions = r->positions,
                         .packed = true},
                        r->labels};
}

/* 2. One optimizer window of the first two first-fit rows against transformers. */
static void check_window(const json_t *j, Model *m, const SftDataset *ds, const PackedBins *bins) {
    const json_t *w = json_object_get(j, "window");
    TrainerOptions opt = {.learning_rate = 1e-3,
                          .max_grad_norm = 0,
                          .adamw = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
                          .total_steps = 1};
    CHECK(lr_schedule_parse("constant", &opt.schedule) == 0, "schedule");
    Trainer tr;
    CHECK(trainer_init(&tr, m, NULL, &opt) == 0, "%s", err_msg());
    PackedRows rows[2];
    MicroBatch mbs[2];
    for (int r = 0; r < 2; r++) {
        sample_packing_rows(ds, bins, (size_t)r, 1, 0, &rows[r]);
        mbs[r] = packed_micro_batch(&rows[r]);
    }
    StepStats st;
    CHECK(trainer_sft_step(&tr, mbs, 2, &st) == 0, "step: %s", err_msg());
    double want_loss = json_number_value(json_object_get(w, "loss"));
    double want_norm = json_number_value(json_object_get(w, "grad_norm"));
    size_t want_items = (size_t)json_integer_value(json_object_get(w, "num_items_in_batch"));
    CHECK(st.tokens == want_items, "label tokens %zu, HF's num_items_in_batch %zu", st.tokens,
          want_items);
    CHECK(harness_close(st.loss, want_loss, 1e-4, 0), "packed loss %.7f, transformers %.7f",
          st.loss, want_loss);
    CHECK(harness_close(st.grad_norm, want_norm, 1e-4, 0), "grad_norm %.6f, transformers %.6f",
          st.grad_norm, want_norm);
    printf("window of 2 packed rows: loss %.6f (transformers %.6f), grad_norm %.6f (%.6f), "
           "%zu label tokens\n",
           st.loss, want_loss, st.grad_norm, want_norm, st.tokens);
    for (int r = 0; r < 2; r++)
        sample_packing_rows_free(&rows[r]);
    trainer_free(&tr);
}

/* 3. Packed evaluation against HF's evaluation loop. */
static void check_evaluation(const json_t *j, Model *m, const SftDataset *ds) {
    const json_t *ev = json_object_get(j, "evaluation");
    TrainConfig cfg = {.micro_batch_size =
                           json_integer_value(json_object_get(j, "micro_batch_size")),
                       .sequence_len = json_integer_value(json_object_get(j, "sequence_len")),
                       .sample_packing = true,
                       .sample_packing_bin_size = 200,
                       .sample_packing_group_size = 100000,
                       .eval_sample_packing = true};
    PackedBins bins;
    sft_packed_plan(&cfg, ds, false, &bins, stdout);
    CHECK(same_bins(&bins, json_object_get(ev, "bins")),
          "evaluation rows differ from Axolotl's eval sampler's");
    double loss = 0, want = json_number_value(json_object_get(ev, "eval_loss"));
    CHECK(sft_packed_evaluate(m, ds, &bins, 1, 0, &loss) == 0, "%s", err_msg());
    CHECK(harness_close(loss, want, 1e-4, 0), "packed eval_loss %.7f, HF's evaluation loop %.7f",
          loss, want);
    printf("evaluation: %zu rows, eval_loss %.6f (HF %.6f)\n", bins.n_bins, loss, want);
    sample_packing_free(&bins);
}

/* 2b. */
static void check_real_batches(const json_t *j, Model *m, const SftDataset *ds,
                               const size_t *order) {
    const json_t *rb = json_object_get(j, "real_batches");
    TrainConfig cfg = {.micro_batch_size =
                           json_integer_value(json_object_get(j, "micro_batch_size")),
                       .sequence_len = json_integer_value(json_object_get(j, "sequence_len")),
                       .sample_packing = true,
                       .multipack_real_batches = true,
                       .sample_packing_bin_size = 200,
                       .sample_packing_group_size = 100000};
    CHECK(sft_packed_row_tokens(&cfg) == cfg.sequence_len &&
              sft_packed_rows_per_micro_batch(&cfg) == cfg.micro_batch_size,
          "real batches: rows of sequence_len, micro_batch_size of them a micro-batch");
    PackingOptions opt = {
        .capacity = sft_packed_row_tokens(&cfg), .bin_size = 200, .group_size = 100000};
    PackedBins bins;
    sample_packing_pack(ds, order, ds->n, &opt, &bins);
    /* Axolotl's batches, flattened: its sampler drops an incomplete last batch, rlhf.c keeps it */
    json_t *flat = json_array();
    const json_t *batches = json_object_get(rb, "batches");
    for (size_t k = 0; k < json_array_size(batches); k++)
        json_array_extend(flat, json_array_get(batches, k));
    size_t kept = json_array_size(flat);
    PackedBins head = bins;
    head.n_bins = kept <= bins.n_bins ? kept : bins.n_bins;
    CHECK(same_bins(&head, flat) && bins.n_bins - kept < (size_t)cfg.micro_batch_size,
          "real batches: %zu bins, Axolotl's batches hold %zu", bins.n_bins, kept);
    json_decref(flat);

    /* evaluation before the step below changes the weights */
    PackedBins ebins;
    sft_packed_plan(&cfg, ds, false, &ebins, stdout);
    CHECK(same_bins(&ebins, json_object_get(rb, "eval_bins")),
          "real batches: evaluation rows differ from Axolotl's");
    double eval_loss = 0, want_eval = json_number_value(json_object_get(rb, "eval_loss"));
    CHECK(sft_packed_evaluate(m, ds, &ebins, cfg.micro_batch_size, 0, &eval_loss) == 0, "%s",
          err_msg());
    CHECK(harness_close(eval_loss, want_eval, 1e-4, 0),
          "real batches: eval_loss %.7f, HF's evaluation loop %.7f", eval_loss, want_eval);
    printf("real batches: evaluation of %zu rows in batches of %lld: eval_loss %.6f (HF %.6f)\n",
           ebins.n_bins, (long long)cfg.micro_batch_size, eval_loss, want_eval);
    sample_packing_free(&ebins);

    TrainerOptions topt = {.learning_rate = 1e-3,
                           .adamw = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
                           .total_steps = 1};
    CHECK(lr_schedule_parse("constant", &topt.schedule) == 0, "schedule");
    Trainer tr;
    CHECK(trainer_init(&tr, m, NULL, &topt) == 0, "%s", err_msg());
    size_t all[2] = {0, 1}, tokens;
    PackedRows rows;
    MicroBatch mb = sft_packed_micro_batch(ds, &bins, all, 0, 2, 0, &rows, &tokens);
    StepStats st;
    CHECK(trainer_sft_step(&tr, &mb, 1, &st) == 0, "step: %s", err_msg());
    double want_loss = json_number_value(json_object_get(rb, "loss"));
    double want_norm = json_number_value(json_object_get(rb, "grad_norm"));
    size_t want_items = (size_t)json_integer_value(json_object_get(rb, "num_items_in_batch"));
    CHECK(st.tokens == want_items && harness_close(st.loss, want_loss, 1e-4, 0) &&
              harness_close(st.grad_norm, want_norm, 1e-4, 0),
          "a micro-batch of 2 rows: loss %.7f (%.7f), grad_norm %.6f (%.6f), %zu labels (%zu)",
          st.loss, want_loss, st.grad_norm, want_norm, st.tokens, want_items);
    printf("real batches: %zu rows of %lld tokens; a micro-batch of 2: loss %.6f (transformers "
           "%.6f), grad_norm %.6f (%.6f)\n",
           bins.n_bins, (long long)opt.capacity, st.loss, want_loss, st.grad_norm, want_norm);
    sample_packing_rows_free(&rows);
    trainer_free(&tr);
    sample_packing_free(&bins);
}

/* log p(token | the logits of example e alone at its last position), in double */
static double boundary_logp(const Model *m, const SftExample *e, int32_t token) {
    int V = m->cfg.vocab_size;
    float *logits = malloc((size_t)V * sizeof *logits);
    TokenBatch b = {.batch = 1, .t_len = e->len, .tokens = e->ids};
    CHECK(model_logits(m, &b, 0, e->len - 1, e->len, logits) == 0, "%s", err_msg());
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++)
        mx = fmax(mx, logits[v]);
    for (int v = 0; v < V; v++)
        sum += exp((double)logits[v] - mx);
    double lp = (double)logits[token] - mx - log(sum);
    free(logits);
    return lp;
}

/* 4. Packed rows against their examples run alone. */
static void check_invariant(const Model *m, const SftDataset *ds, const PackedBins *bins) {
    double packed_sum = 0, combined_sum = 0, worst = 0;
    size_t packed_n = 0, combined_n = 0, boundaries = 0;
    for (size_t b = 0; b < bins->n_bins; b++) {
        PackedRows r;
        sample_packing_rows(ds, bins, b, 1, 0, &r);
        MicroBatch mb = packed_micro_batch(&r);
        float *logp = calloc((size_t)r.t_len, sizeof *logp);
        CHECK(model_token_logprobs(m, &mb.batch, NULL, logp) == 0, "%s", err_msg());
        for (int t = 0; t < r.t_len; t++)
            if (r.labels[t]) packed_sum += logp[t], packed_n++;
        int at = 0;
        for (size_t k = bins->start[b]; k < bins->start[b + 1]; k++) {
            const SftExample *e = &ds->items[bins->members[k]];
            float *alone = calloc((size_t)e->len, sizeof *alone);
            TokenBatch one = {.batch = 1, .t_len = e->len, .tokens = e->ids};
            CHECK(model_token_logprobs(m, &one, NULL, alone) == 0, "%s", err_msg());
            for (int t = 1; t < e->len; t++) {
                worst = fmax(worst, fabs(logp[at + t] - alone[t]));
                if (e->labels[t]) combined_sum += alone[t], combined_n++;
            }
            if (k > bins->start[b]) {
                const SftExample *prev = &ds->items[bins->members[k - 1]];
                double lp = boundary_logp(m, prev, e->ids[0]);
                worst = fmax(worst, fabs(logp[at] - lp));
                if (e->labels[0]) combined_sum += lp, combined_n++, boundaries++;
            }
            at += e->len;
            free(alone);
        }
        free(logp);
        sample_packing_rows_free(&r);
    }
    CHECK(worst < 2e-5, "a packed token's log-prob differs from its example's alone by %.2e",
          worst);
    CHECK(packed_n == combined_n, "label tokens: packed %zu, unpacked + boundaries %zu", packed_n,
          combined_n);
    double packed = -packed_sum / (double)packed_n, combined = -combined_sum / (double)combined_n;
    CHECK(harness_close(packed, combined, 1e-5, 0),
          "packed loss %.7f, unpacked examples + boundary terms %.7f", packed, combined);
    printf("%zu packed rows: loss %.6f = unpacked + %zu boundary terms %.6f (worst token %.1e)\n",
           bins->n_bins, packed, boundaries, combined, worst);
}

/* 5. */
static const char *record_hash(bool packed, int64_t mbs, int64_t gas, char *buf) {
    TrainConfig cfg = {.sequence_len = 128,
                       .micro_batch_size = mbs,
                       .gradient_accumulation_steps = gas,
                       .sample_packing = packed};
    json_t *r = run_record_make(&cfg);
    snprintf(buf, 17, "%s", json_string_value(json_object_get(r, "config_hash")));
    json_decref(r);
    return buf;
}

static void check_run_record(void) {
    char a[17], b[17];
    CHECK(strcmp(record_hash(false, 2, 1, a), record_hash(false, 1, 2, b)) == 0,
          "unpacked: the same examples per step, the same run");
    CHECK(strcmp(record_hash(true, 2, 1, a), record_hash(true, 1, 2, b)) != 0,
          "packed: rows of 256 and of 128 tokens are different runs");
}

/* 6. */
static void check_train_run(void) {
    char rows[8192];
    size_t n = 0;
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(rows + n, sizeof rows - n,
                              i % 2 ? "{\"text\": \"The number %d comes after %d.\"}\n"
                                    : "{\"instruction\": \"What is %d plus %d?\", \"input\": "
                                      "\"\", \"output\": \"%d\"}\n",
                              i + 1, i, 2 * i + 1);
    /* one file per type: the odd rows are completion rows, the even ones alpaca rows */
    char alpaca[8192], completion[8192];
    size_t na = 0, nc = 0;
    for (char *line = strtok(rows, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\"text\""))
            nc += (size_t)snprintf(completion + nc, sizeof completion - nc, "%s\n", line);
        else
            na += (size_t)snprintf(alpaca + na, sizeof alpaca - na, "%s\n", line);
    }
    harness_write_file(harness_tmp_path("alpaca.jsonl"), alpaca, na);
    harness_write_file(harness_tmp_path("completion.jsonl"), completion, nc);
    char config[4096];
    int len = snprintf(config, sizeof config,
                       "base_model: %s\ndatasets:\n  - path: %s\n    type: alpaca\n"
                       "  - path: %s\n    type: completion\n"
                       "sequence_len: 128\nmicro_batch_size: 2\ngradient_accumulation_steps: 2\n"
                       "num_epochs: 2\nlearning_rate: 1e-3\nlogging_steps: 1\nseed: 3\n"
                       "val_set_size: 6\neval_steps: 2\nsample_packing: true\n"
                       "dataset_prepared_path: %s\n",
                       harness_source_path("tests/fixtures/models/llama_text"),
                       harness_tmp_path("alpaca.jsonl"), harness_tmp_path("completion.jsonl"),
                       harness_tmp_path("prepared"));
    harness_write_file(harness_tmp_path("packed.yaml"), config, (size_t)len);
    const char *log_path = harness_tmp_path("packed.log");
    pid_t pid = harness_spawn_train(harness_tmp_path("packed.yaml"), harness_tmp_path("out"),
                                    log_path, (const char *const[]){NULL});
    CHECK(harness_wait_child(pid) == 0, "rlhf train with sample_packing: true failed (%s)",
          log_path);
    char *log = NULL;
    size_t log_len = 0;
    CHECK(read_file(log_path, &log, &log_len) == 0, "%s", err_msg());
    size_t examples = 0, tokens = 0, n_rows = 0, trained_rows = 0;
    long long capacity = 0, steps = 0, per_epoch = 0;
    const char *packing = log ? strstr(log, "sample packing (first-fit): ") : NULL;
    const char *plan = log ? strstr(log, "\ntraining ") : NULL;
    CHECK(packing && sscanf(packing,
                            "sample packing (first-fit): %zu examples, %zu tokens, into %zu "
                            "rows of up to %lld tokens",
                            &examples, &tokens, &n_rows, &capacity) == 4,
          "the start-up log says what the packing made");
    CHECK(plan && sscanf(plan, "\ntraining %zu packed rows: %lld steps (%lld per epoch)",
                         &trained_rows, &steps, &per_epoch) == 3,
          "the plan counts packed rows");
    CHECK(examples == 34 && capacity == 256,
          "34 training examples (40 - 6 held out) in rows of 256 tokens: %zu, %lld", examples,
          capacity);
    CHECK(trained_rows == n_rows && n_rows < examples && (size_t)capacity * n_rows >= tokens,
          "%zu rows for %zu examples of %zu tokens", n_rows, examples, tokens);
    CHECK(per_epoch == (long long)(n_rows + 1) / 2 && steps == 2 * per_epoch,
          "%lld steps per epoch for %zu rows in windows of 2", per_epoch, n_rows);
    CHECK(strstr(log, "sample packing (first-fit, evaluation): 6 examples") != NULL,
          "evaluation packed");
    json_t *metrics = harness_read_metrics(harness_tmp_path("out"));
    size_t logged = 0, evals = 0;
    for (size_t i = 0; i < json_array_size(metrics); i++) {
        logged += json_object_get(json_array_get(metrics, i), "loss") != NULL;
        evals += json_object_get(json_array_get(metrics, i), "eval_loss") != NULL;
    }
    CHECK(logged == (size_t)steps && evals >= 1, "%zu steps logged of %lld, %zu evaluations",
          logged, steps, evals);
    printf("rlhf train: %zu examples into %zu rows, %lld steps (%lld per epoch), %zu evaluations\n",
           examples, n_rows, steps, per_epoch, evals);
    json_decref(metrics);
    free(log);
}

int main(void) {
    json_t *j;
    if (json_load_path(harness_source_path("tests/fixtures/packing/multipack.json"), &j) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    SftDataset ds;
    read_examples(json_object_get(j, "examples"), &ds);
    const json_t *ord = json_object_get(j, "order");
    size_t *order = malloc(ds.n * sizeof *order);
    for (size_t i = 0; i < ds.n; i++)
        order[i] = (size_t)json_integer_value(json_array_get(ord, i));
    PackedBins first_fit = {0};
    check_bins(j, &ds, order, &first_fit);
    check_run_record();
    check_train_run();

    char model_rel[256];
    snprintf(model_rel, sizeof model_rel, "tests/fixtures/models/%s",
             json_string_value(json_object_get(j, "model")));
    Model m;
    CHECK(model_load(&m, harness_source_path(model_rel)) == 0, "%s", err_msg());
    check_invariant(&m, &ds, &first_fit);
    check_evaluation(j, &m, &ds);
    /* last: their optimizer steps change the weights, each on a model loaded afresh */
    check_window(j, &m, &ds, &first_fit);
    model_free(&m);
    CHECK(model_load(&m, harness_source_path(model_rel)) == 0, "%s", err_msg());
    check_real_batches(j, &m, &ds, order);

    model_free(&m);
    sample_packing_free(&first_fit);
    free(order);
    sft_dataset_free(&ds);
    json_decref(j);
    return harness_finish("test_sample_packing");
}
