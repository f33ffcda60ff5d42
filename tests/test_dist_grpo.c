/* GRPO over MPI (issue 11): `rlhf train --nproc 2` against one process on the same global batch
 * (twice the gradient accumulation, so the same generation batches): the per-step losses, grad
 * norms and every logged metric (rewards, completions, KL, clip ratios, the replay buffer's,
 * eval_), and the final weights, agree to 1e-5 relative for the loss types grpo, dapo, bnpo and
 * dr_grpo, GDPO, and GRPO with the replay buffer, each with and without ZeRO-1, an adapter
 * among them. Completions come from the RLHF_TEST_SCRIPTED_COMPLETIONS hook (each completion
 * drawn from its own stream alone), so they cannot differ between the runs; one pair of runs
 * samples from the model as usual and agrees as well. A 2-rank run resumed from its checkpoint
 * (replay buffer included) ends bit for bit where the uninterrupted one does, and its
 * checkpoint resumes in one process. A rank killed with SIGKILL takes the job down with a
 * message and no hang, leaving whole checkpoints that resume to the uninterrupted weights. A
 * reward function failing on every rank, or on one, and a generation batch that does not fit
 * the ranks end the job with one error line. Skipped (exit 77) in a build without MPI. */
#include "common/fileio.h"
#include "dist/dist.h"
#include "dist_harness.h"
#include "harness.h"
#include "train/checkpoint.h"
#include "train/model_dir.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* <tmp>/name: a GRPO config on the llama_text fixture, 12 prompts, G = 4, micro-batches of 4
 * completions, 6 tokens at most per completion. `trl` goes into the trl: block (reward_funcs
 * included), `body` after it. */
static void write_config(const char *name, const char *trl, const char *body) {
    char text[8192];
    snprintf(text, sizeof text,
             "base_model: %s\nrl: grpo\ndatasets:\n  - path: %s\n"
             "trl:\n  num_generations: 4\n  max_completion_length: 6\n%s"
             "micro_batch_size: 4\nmax_steps: 4\nlearning_rate: 2e-3\nlr_scheduler: constant\n"
             "warmup_steps: 0\nseed: 5\nlogging_steps: 1\n%s",
             harness_source_path("tests/fixtures/models/llama_text"),
             harness_tmp_path("prompts.jsonl"), trl, body);
    harness_write_file(harness_tmp_path(name), text, strlen(text));
}

static void write_data(void) {
    char rows[4096];
    size_t n = 0;
    for (int i = 0; i < 12; i++)
        n += (size_t)snprintf(rows + n, sizeof rows - n,
                              "{\"prompt\": \"Q%d: add %d and %d\", \"answer\": \"%d\"}\n", i, i,
                              i + 2, 2 * i + 2);
    harness_write_file(harness_tmp_path("prompts.jsonl"), rows, n);
}

/* A dense reward (every group has spread), and a sparse one (many groups have none: the replay
 * buffer's case). */
#define LENGTH_REWARD "    - {function: builtin.length, target: 3}\n"
#define FORMAT_REWARD "    - {function: builtin.format, pattern: '^[a-m]', match: search}\n"

static const char *const zero0[] = {NULL}, *const zero1[] = {"--zero_stage", "1", NULL};

/* The sum of a metric over a run's log lines. */
static double metric_total(const char *run, const char *key) {
    json_t *rows = harness_read_metrics(harness_tmp_path(run));
    double total = 0;
    for (size_t i = 0; i < json_array_size(rows); i++)
        total += harness_metric(rows, i, key);
    json_decref(rows);
    return total;
}

static void test_parity(void) {
    /* grpo: per-sequence normalisation; beta (reference log-probs) and 2 iterations (old
     * log-probs, clipped ratios), 2 micro-batches per rank */
    write_config(
        "grpo.yaml",
        "  loss_type: grpo\n  beta: 0.05\n  num_iterations: 2\n  reward_funcs:\n" LENGTH_REWARD,
        "");
    dist_one_vs_two("grpo", "grpo.yaml", "4", "2", zero0);
    dist_one_vs_two("grpo-zero1", "grpo.yaml", "4", "2", zero1);
    /* dapo: the whole generation batch's tokens; truncated rows masked; held-out prompts
     * evaluated, whole batches per rank */
    write_config("dapo.yaml",
                 "  loss_type: dapo\n  epsilon_high: 0.28\n  mask_truncated_completions: true\n"
                 "  reward_funcs:\n" LENGTH_REWARD,
                 "val_set_size: 4\neval_steps: 2\n");
    dist_one_vs_two("dapo", "dapo.yaml", "2", "1", zero0);
    dist_one_vs_two("dapo-zero1", "dapo.yaml", "2", "1", zero1);
    /* bnpo with batch-scaled rewards; dr_grpo on an adapter, its reference the adapter off */
    write_config("bnpo.yaml",
                 "  loss_type: bnpo\n  scale_rewards: batch\n  reward_funcs:\n" LENGTH_REWARD, "");
    dist_one_vs_two("bnpo", "bnpo.yaml", "4", "2", zero0);
    write_config("dr_grpo.yaml",
                 "  loss_type: dr_grpo\n  scale_rewards: none\n  beta: 0.05\n"
                 "  reward_funcs:\n" LENGTH_REWARD,
                 "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n");
    dist_one_vs_two("dr_grpo-lora-zero1", "dr_grpo.yaml", "4", "2", zero1);
    /* GDPO: each reward z-scored per group, then the sum standardised over the whole batch */
    write_config("gdpo.yaml",
                 "  reward_funcs:\n" LENGTH_REWARD FORMAT_REWARD "  reward_weights: [1.0, 0.5]\n",
                 "rl: gdpo\n");
    dist_one_vs_two("gdpo", "gdpo.yaml", "4", "2", zero0);
    dist_one_vs_two("gdpo-zero1", "gdpo.yaml", "4", "2", zero1);
    /* the replay buffer: groups without spread replaced by stored ones, the same on each rank */
    write_config("replay.yaml", "  replay_buffer_size: 3\n  reward_funcs:\n" FORMAT_REWARD,
                 "max_steps: 6\n");
    dist_one_vs_two("replay", "replay.yaml", "2", "1", zero0);
    dist_one_vs_two("replay-zero1", "replay.yaml", "2", "1", zero1);
    CHECK(metric_total("replay", "replay/num_replaced") > 0,
          "groups were replaced from the buffer (else the test shows nothing)");
    /* sampled from the model: each completion's draws are its own, whichever rank makes them,
     * so the completions are the same unless a draw falls within the policies' last-bit
     * difference of a boundary (about 1e-7 of the probability mass per draw). The fixture
     * model never samples its EOS, so the length reward would have no spread here: with a zero
     * gradient, AdamW's first step would follow the rounding noise */
    write_config(
        "sampled.yaml",
        "  loss_type: grpo\n  beta: 0.05\n  num_iterations: 2\n  reward_funcs:\n" FORMAT_REWARD,
        "");
    unsetenv("RLHF_TEST_SCRIPTED_COMPLETIONS");
    dist_one_vs_two("grpo-sampled", "sampled.yaml", "4", "2", zero0);
    setenv("RLHF_TEST_SCRIPTED_COMPLETIONS", "1", 1);
}

static void same_file(const char *a_dir, const char *b_dir, const char *file, const char *what) {
    char a[4400], b[4400];
    snprintf(a, sizeof a, "%s/%s", a_dir, file);
    snprintf(b, sizeof b, "%s/%s", b_dir, file);
    CHECK(harness_same_file(a, b), "%s: %s and %s", what, a, b);
}

/* A 2-rank run with the replay buffer stopped after checkpoint-2 and resumed: on 2 ranks it
 * ends bit for bit where the uninterrupted run does (weights, and the buffer in each later
 * checkpoint); in one process with twice the accumulation, within 1e-5. */
static void test_resume(void) {
    char straight[4096], resumed[4096], single[4096], from[4200], to[4200];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("resume-straight"));
    snprintf(resumed, sizeof resumed, "%s", harness_tmp_path("resume-2ranks"));
    snprintf(single, sizeof single, "%s", harness_tmp_path("resume-1proc"));
    const char *run[] = {
        "--nproc", "2", "--gradient_accumulation_steps", "1", "--zero_stage", "1", "--save_steps",
        "2",       NULL};
    CHECK(dist_train("replay.yaml", straight, run) == 0, "uninterrupted 2-rank run");
    snprintf(from, sizeof from, "%s/checkpoint-2", straight);
    CHECK(make_dirs(resumed) == 0 && make_dirs(single) == 0, "dirs");
    snprintf(to, sizeof to, "%s/checkpoint-2", resumed);
    dist_copy_tree(from, to);
    snprintf(to, sizeof to, "%s/checkpoint-2", single);
    dist_copy_tree(from, to);
    const char *again[] = {"--nproc",
                           "2",
                           "--gradient_accumulation_steps",
                           "1",
                           "--zero_stage",
                           "1",
                           "--save_steps",
                           "2",
                           "--resume_from_checkpoint",
                           "true",
                           NULL};
    CHECK(dist_train("replay.yaml", resumed, again) == 0, "resumed 2-rank run");
    same_file(straight, resumed, "model.safetensors", "resumed on 2 ranks: the same weights");
    same_file(straight, resumed, "checkpoint-6/optimizer.safetensors", "the same moments");
    same_file(straight, resumed, "checkpoint-4/replay_buffer.safetensors", "the same buffer");
    same_file(straight, resumed, "checkpoint-6/replay_buffer.safetensors", "the same buffer");
    const char *one[] = {"--gradient_accumulation_steps",
                         "2",
                         "--save_steps",
                         "2",
                         "--resume_from_checkpoint",
                         "true",
                         NULL};
    CHECK(dist_train("replay.yaml", single, one) == 0, "2-rank checkpoint resumed in 1 process");
    dist_compare_outputs("resume-in-1-process", straight, single);
}

/* Rank 1 SIGKILLed after checkpoint-2 of a longer run: mpirun ends the job with a message naming
 * the rank, in seconds; the checkpoints left are whole, with their replay buffer, and resume to
 * the uninterrupted run's weights. */
static void test_rank_dies(void) {
    write_config("long.yaml", "  replay_buffer_size: 3\n  reward_funcs:\n" FORMAT_REWARD,
                 "max_steps: 150\nsave_steps: 1\nsave_total_limit: 2\n");
    char straight[4096], out[4096], log[4096], ckpt[4400], found[4200];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("long-straight"));
    snprintf(out, sizeof out, "%s", harness_tmp_path("die"));
    snprintf(log, sizeof log, "%s", harness_tmp_path("die.log"));
    const char *run[] = {"--nproc", "2", "--gradient_accumulation_steps", "1", NULL};
    CHECK(dist_train("long.yaml", straight, run) == 0, "uninterrupted 2-rank run");
    pid_t pid = harness_spawn_train(harness_tmp_path("long.yaml"), out, log, run);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-2", out);
    double start = dist_now();
    while (!dir_exists(ckpt) && dist_now() - start < 60)
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    pid_t victim = dist_rank_pid(pid, 1);
    CHECK(victim > 0, "rank 1 found among mpirun's children");
    if (victim > 0) kill(victim, SIGKILL);
    double killed = dist_now();
    int rc = dist_wait_at_most(pid, 60);
    printf("rank 1 killed at %.2f s; mpirun exited %d after %.2f s\n", killed - start, rc,
           dist_now() - killed);
    CHECK(rc > 0, "the job ends with a failure status, not a hang (%d)", rc);
    CHECK(dist_log_mentions(log, "rank 1") && dist_log_mentions(log, "signal 9"),
          "the log says rank 1 was killed (see %s)", log);
    snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", out);
    CHECK(!file_exists(ckpt), "no final model from the killed job");
    CHECK(harness_check_checkpoints(out, NULL) >= 1 &&
              checkpoint_find_latest(out, found, sizeof found) == 1,
          "checkpoints left whole");
    snprintf(ckpt, sizeof ckpt, "%s/replay_buffer.safetensors", found);
    CHECK(file_exists(ckpt), "the last checkpoint holds the replay buffer");
    const char *again[] = {
        "--nproc", "2", "--gradient_accumulation_steps", "1", "--resume_from_checkpoint",
        "true",    NULL};
    CHECK(dist_train("long.yaml", out, again) == 0, "resumed after the kill");
    same_file(straight, out, "model.safetensors", "resumed to the uninterrupted weights");
}

/* A 2-rank run that must fail: it ends (no hang) with a failure status and exactly one
 * "rlhf: error:" line holding `want` (and `also`, when given). */
static void expect_failure(const char *name, const char *config, const char *want,
                           const char *also) {
    char log[4096];
    snprintf(log, sizeof log, "%s.log", harness_tmp_path(name));
    const char *run[] = {"--nproc", "2", "--gradient_accumulation_steps", "1", NULL};
    pid_t pid = harness_spawn_train(harness_tmp_path(config), harness_tmp_path(name), log, run);
    int rc = dist_wait_at_most(pid, 60);
    CHECK(rc > 0 && rc < 128, "%s: the job fails without hanging (%d)", name, rc);
    CHECK(dist_error_lines(log) == 1 && dist_log_mentions(log, want) &&
              (!also || dist_log_mentions(log, also)),
          "%s: one error line naming \"%s\" (see %s)", name, want, log);
}

static void test_failures(void) {
    /* every rank's reward command fails on its first batch: rank 0 reports it */
    write_config("broken.yaml", "  reward_funcs:\n    - {command: 'exit 3', name: broken}\n", "");
    expect_failure("broken", "broken.yaml", "broken", NULL);
    /* rank 1's alone: rank 1 reports it, rank 0 stops at the same point */
    write_config("rank1.yaml",
                 "  reward_funcs:\n    - {command: '[ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && exit 3; "
                 "while read l; do echo \"[0,1,0,1]\"; done', name: only_rank1}\n",
                 "");
    expect_failure("rank1", "rank1.yaml", "only_rank1", "rank 1 of 2");
    /* a generation batch of 4 completions is one micro-batch, which 2 ranks cannot share: the
     * one-process check --nproc makes passes, the ranks' own refuses it */
    write_config("gbs.yaml", "  generation_batch_size: 4\n  reward_funcs:\n" LENGTH_REWARD, "");
    expect_failure("gbs", "gbs.yaml", "must be divisible by the global batch size (8)", NULL);
}

int main(void) {
    const char *launcher = dist_launcher();
    if (!dist_compiled() || !launcher || access(launcher, X_OK) != 0) {
        printf("test_dist_grpo: skipped: this build has no MPI (install libopenmpi-dev "
               "openmpi-bin and rebuild)\n");
        return 77;
    }
    /* one thread per process, as test_dist_train: the order in which the ranks' gradients are
     * summed is then the only difference between the runs */
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("RLHF_TEST_SCRIPTED_COMPLETIONS", "1", 1);
    write_data();
    test_parity();
    test_resume();
    test_rank_dies();
    test_failures();
    printf("worst over the 1-vs-2 comparisons: metrics %.2g, weights %.2g relative\n",
           dist_worst.metric, dist_worst.weight);
    return harness_finish("test_dist_grpo");
}
