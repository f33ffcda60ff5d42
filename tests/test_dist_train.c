/* Data-parallel training over MPI (src/dist, issue 11): `rlhf train --nproc 2` (two ranks on
 * this machine) against one process on the same global batch, i.e. with twice the gradient
 * accumulation: per-step losses, grad norms and metrics, and the final weights, agree to 1e-5
 * relative for SFT (full and LoRA with dropout), DPO and KTO, with and without ZeRO-1, over data
 * whose last window and last micro-batch are short (or leave a rank nothing to run), and so do
 * the eval_ lines of held-out sets split over the ranks. A 2-rank run resumed from its checkpoint
 * ends bit for bit where the uninterrupted one does, and a 2-rank checkpoint resumes in one
 * process. A rank killed with SIGKILL takes the job down with a message and no hang, leaving whole
 * checkpoints that resume to the uninterrupted weights; SIGTERM to one rank stops every rank
 * after the same step with a checkpoint. A config error is refused before any rank starts.
 * GRPO over several ranks is tested in test_dist_grpo. Skipped (exit 77) in a build without
 * MPI. */
#include "common/fileio.h"
#include "dist_harness.h"
#include "harness.h"
#include "io/model_dir.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A config in the temporary directory for the model in `base`: `body` after base_model and the
 * data line. */
static void write_model_config(const char *base, const char *name, const char *data,
                               const char *body) {
    char text[8192];
    snprintf(text, sizeof text,
             "base_model: %s\ndatasets:\n  - path: %s\n%ssequence_len: 64\nseed: 3\n"
             "dataset_prepared_path: %s\nlogging_steps: 1\n",
             base, harness_tmp_path(data), body, harness_tmp_path("prepared"));
    harness_write_file(harness_tmp_path(name), text, strlen(text));
}

/* The same for the llama_text fixture. */
static void write_config(const char *name, const char *data, const char *body) {
    write_model_config(harness_source_path("tests/fixtures/models/llama_text"), name, data, body);
}

static void write_data(void) {
    char rows[16384];
    size_t n = 0;
    /* 21 texts in micro-batches of 2: the last micro-batch has one, and windows of 4
     * micro-batches leave a last window of 3 (rank 0 runs two of it, rank 1 one) */
    for (int i = 0; i < 21; i++)
        n += (size_t)snprintf(rows + n, sizeof rows - n,
                              "{\"text\": \"The number %d comes after %d.%.*s\"}\n", i + 1, i,
                              i % 4, " and so on");
    harness_write_file(harness_tmp_path("text.jsonl"), rows, n);
    harness_write_arith_pairs("pairs.jsonl", 18);
    harness_write_arith_kto_rows("rows.jsonl", 18);
}

static void test_parity(void) {
    write_config("sft.yaml", "text.jsonl",
                 "    type: completion\nmicro_batch_size: 2\nmax_steps: 6\nlearning_rate: 3e-3\n"
                 "warmup_steps: 1\n");
    /* 3 held out: 18 to train are 9 micro-batches, so every epoch ends with a window of one,
     * which leaves rank 1 nothing to run; evaluation splits 2 + 1 examples over the ranks */
    write_config("sft-eval.yaml", "text.jsonl",
                 "    type: completion\nmicro_batch_size: 2\nmax_steps: 6\nlearning_rate: 3e-3\n"
                 "warmup_steps: 1\nval_set_size: 3\neval_steps: 2\n");
    write_config("lora.yaml", "text.jsonl",
                 "    type: completion\nmicro_batch_size: 2\nmax_steps: 4\nlearning_rate: 1e-2\n"
                 "warmup_steps: 0\nadapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_dropout: 0.1\n"
                 "lora_target_linear: true\n");
    write_config("dpo.yaml", "pairs.jsonl",
                 "rl: dpo\nrl_beta: 0.1\nmicro_batch_size: 2\nnum_epochs: 2\n"
                 "learning_rate: 2e-3\nlr_scheduler: constant\nwarmup_steps: 0\nval_set_size: 5\n"
                 "eval_steps: 2\n");
    write_config("kto.yaml", "rows.jsonl",
                 "rl: kto\nrl_beta: 0.1\nmicro_batch_size: 3\nnum_epochs: 2\n"
                 "learning_rate: 2e-3\nlr_scheduler: constant\nwarmup_steps: 0\n"
                 "remove_unused_columns: false\n");
    const char *zero0[] = {NULL}, *zero1[] = {"--zero_stage", "1", NULL};
    dist_one_vs_two("sft", "sft.yaml", "4", "2", zero0);
    dist_one_vs_two("sft-zero1", "sft.yaml", "4", "2", zero1);
    dist_one_vs_two("sft-eval", "sft-eval.yaml", "4", "2", zero0);
    dist_one_vs_two("sft-lora-dropout-zero1", "lora.yaml", "2", "1", zero1);
    dist_one_vs_two("dpo", "dpo.yaml", "4", "2", zero0);
    dist_one_vs_two("dpo-zero1", "dpo.yaml", "4", "2", zero1);
    dist_one_vs_two("kto", "kto.yaml", "2", "1", zero0);
}

/* SIGTERM to rank 1 alone: every rank stops after the same step, rank 0 saves that step's
 * checkpoint, the job exits 143, and resuming ends at the uninterrupted weights. */
static void test_signal_one_rank(const char *straight) {
    char out[4096], log[4096];
    snprintf(out, sizeof out, "%s", harness_tmp_path("term"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("term.log"));
    const char *run[] = {"--nproc", "2", "--save_steps", "0", NULL};
    pid_t pid = harness_spawn_train(harness_tmp_path("long.yaml"), out, log, run);
    double start = dist_now();
    json_t *rows = NULL;
    do { /* a few steps in */
        nanosleep(&(struct timespec){0, 5000000}, NULL);
        json_decref(rows);
        rows = harness_read_metrics(out);
    } while (json_array_size(rows) < 3 && dist_now() - start < 60);
    json_decref(rows);
    pid_t victim = dist_rank_pid(pid, 1);
    CHECK(victim > 0, "rank 1 found");
    if (victim > 0) kill(victim, SIGTERM);
    int rc = dist_wait_at_most(pid, 60);
    CHECK(rc == 143, "the job stops with 128 + SIGTERM (%d)", rc);
    rows = harness_read_metrics(out);
    long long last = (long long)harness_metric(rows, json_array_size(rows) - 1, "step");
    json_decref(rows);
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-%lld", out, last);
    CHECK(harness_check_checkpoints(out, NULL) == 1 && dir_exists(ckpt),
          "one whole checkpoint, of the last step logged (%lld)", last);
    const char *again[] = {"--nproc", "2", "--save_steps", "0", "--resume_from_checkpoint",
                           "true",    NULL};
    CHECK(dist_train("long.yaml", out, again) == 0, "resumed after SIGTERM");
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/model.safetensors", straight);
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    CHECK(harness_same_file(a, b), "resumed to the uninterrupted weights");
}

/* A config error is refused by --nproc before any rank starts. (Failures the ranks meet while
 * training are in test_dist_grpo: a reward function failing on every rank, or on one.) */
static void test_failures(void) {
    char log[4096];
    snprintf(log, sizeof log, "%s", harness_tmp_path("fail.log"));
    const char *bad[] = {"--nproc", "2", "--zero_stage", "3", NULL};
    int rc = harness_wait_child(
        harness_spawn_train(harness_tmp_path("sft.yaml"), harness_tmp_path("bad"), log, bad));
    CHECK(rc == 1 && dist_log_mentions(log, "key 'zero_stage'") &&
              !dist_log_mentions(log, "mpirun"),
          "zero_stage 3: refused before launching, naming the key (%d)", rc);
}

/* 8-bit AdamW on 2 ranks (every rank keeps the whole 8-bit state): a run resumed from its
 * checkpoint-2 on 2 ranks ends bit for bit where the uninterrupted one does, which needs rank 0's
 * codes and scales handed to rank 1. */
static void test_eight_bit_resume(void) {
    write_model_config(harness_write_untied_llama_text(), "adam8.yaml", "text.jsonl",
                       "    type: completion\nmicro_batch_size: 2\ngradient_accumulation_steps: 2\n"
                       "max_steps: 4\nlearning_rate: 3e-3\nwarmup_steps: 1\n"
                       "optimizer: adamw_8bit\nsave_steps: 2\n");
    char straight[4096], resumed[4096], from[4200], to[4200], a[4300], b[4300];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("adam8-straight"));
    snprintf(resumed, sizeof resumed, "%s", harness_tmp_path("adam8-resumed"));
    const char *two[] = {"--nproc", "2", NULL},
               *again[] = {"--nproc", "2", "--resume_from_checkpoint", "true", NULL};
    CHECK(dist_train("adam8.yaml", straight, two) == 0, "8-bit AdamW on 2 ranks");
    snprintf(from, sizeof from, "%s/checkpoint-2", straight);
    snprintf(to, sizeof to, "%s/checkpoint-2", resumed);
    CHECK(make_dirs(resumed) == 0, "dir");
    dist_copy_tree(from, to);
    CHECK(dist_train("adam8.yaml", resumed, again) == 0, "8-bit AdamW resumed on 2 ranks");
    const char *files[] = {"model.safetensors", "checkpoint-4/optimizer.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/%s", straight, files[i]);
        snprintf(b, sizeof b, "%s/%s", resumed, files[i]);
        CHECK(harness_same_file(a, b), "8-bit AdamW, 2 ranks resumed: the same %s", files[i]);
    }
}

int main(void) {
    if (!dist_tests_can_run("test_dist_train")) return 77;
    write_data();
    test_parity();
    /* a 2-rank run stopped after its checkpoint-2 and resumed, on 2 ranks or in one process */
    dist_check_resume("sft.yaml", "2", "4", NULL);
    test_eight_bit_resume();
    write_config("long.yaml", "text.jsonl",
                 "    type: completion\nmicro_batch_size: 1\nmax_steps: 30\nlearning_rate: 1e-3\n"
                 "warmup_steps: 0\nsave_steps: 1\nsave_total_limit: 2\n");
    char straight[4096];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("long-straight"));
    const char *run[] = {"--nproc", "2", NULL};
    CHECK(dist_train("long.yaml", straight, run) == 0, "uninterrupted 2-rank run");
    dist_check_rank_dies("long.yaml", NULL, straight, NULL);
    test_signal_one_rank(straight);
    test_failures();
    return harness_finish("test_dist_train");
}
