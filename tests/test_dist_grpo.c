/* GRPO over MPI (issue 11): `rlhf train --nproc 2` against one process on the same global batch
 * (twice the gradient accumulation, so the same generation batches): the per-step losses, grad
 * norms and every logged metric (rewards, completions, KL, clip ratios, the replay buffer's,
 * eval_), and the final weights (an adapter to 1e-4 of each tensor's largest: dist_harness.c),
 * agree to 1e-5 relative for the loss types grpo and dapo, GDPO and GRPO with the replay buffer,
 * each with and without ZeRO-1, and for bnpo (without) and dr_grpo on a LoRA adapter (with).
 * Completions come from the RLHF_TEST_SCRIPTED_COMPLETIONS hook (each completion drawn from its own
 * stream alone), so they cannot differ between the runs; one pair of runs samples from the model as
 * usual and agrees as well. A 2-rank run resumed from its checkpoint (replay buffer included) ends
 * bit for bit where the uninterrupted one does, and its checkpoint resumes in one process. A rank
 * killed with SIGKILL takes the job down with a message and no hang, leaving whole checkpoints that
 * resume to the uninterrupted weights. A reward function failing on every rank, or on one, and a
 * generation batch that does not fit the ranks end the job with one error line. A generation batch
 * of one group leaves rank 1 nothing to generate and still agrees. Skipped (exit 77) in a build
 * without MPI. */
#include "dist_harness.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* <tmp>/name: a GRPO config on the llama_text fixture, 12 prompts, G = 4, micro-batches of 4
 * completions, 6 tokens at most per completion, per-completion streams (grpo_rng: streams, the
 * draws that do not depend on the number of ranks). `trl` goes into the trl: block (reward_funcs
 * included), `body` after it. */
static void write_config(const char *name, const char *trl, const char *body) {
    char text[8192];
    snprintf(text, sizeof text,
             "base_model: %s\nrl: grpo\ndatasets:\n  - path: %s\n"
             "trl:\n  num_generations: 4\n  max_completion_length: 6\n%s"
             "micro_batch_size: 4\nmax_steps: 4\nlearning_rate: 2e-3\nlr_scheduler: constant\n"
             "warmup_steps: 0\nseed: 5\nlogging_steps: 1\ngrpo_rng: streams\n%s",
             harness_source_path("tests/fixtures/models/llama_text"),
             harness_tmp_path("prompts.jsonl"), trl, body);
    harness_write_file(harness_tmp_path(name), text, strlen(text));
}

/* A dense reward (every group has spread), and a sparse one (many groups have none: the replay
 * buffer's case). */
#define LENGTH_REWARD "    - {function: builtin.length, target: 3}\n"
#define FORMAT_REWARD "    - {function: builtin.format, pattern: '^[a-m]', match: search}\n"

/* One configuration run in one process (accumulation ga1) and on 2 ranks (ga2, half of it),
 * without ZeRO-1, with it, or both. */
typedef struct {
    const char *name, *trl, *body, *ga1, *ga2;
    enum { ZERO0, ZERO1, BOTH } zero;
} ParityCase;

static const ParityCase cases[] = {
    /* grpo: per-sequence normalisation; beta (reference log-probs) and 2 iterations (old
     * log-probs, clipped ratios), 2 micro-batches per rank */
    {"grpo",
     "  loss_type: grpo\n  beta: 0.05\n  num_iterations: 2\n  reward_funcs:\n" LENGTH_REWARD, "",
     "4", "2", BOTH},
    /* dapo: the whole generation batch's tokens; truncated rows masked; held-out prompts
     * evaluated, whole batches per rank */
    {"dapo",
     "  loss_type: dapo\n  epsilon_high: 0.28\n  mask_truncated_completions: true\n"
     "  reward_funcs:\n" LENGTH_REWARD,
     "val_set_size: 4\neval_steps: 2\n", "2", "1", BOTH},
    /* bnpo with batch-scaled rewards; dr_grpo on an adapter, its reference the adapter off */
    {"bnpo", "  loss_type: bnpo\n  scale_rewards: batch\n  reward_funcs:\n" LENGTH_REWARD, "", "4",
     "2", ZERO0},
    {"dr_grpo-lora",
     "  loss_type: dr_grpo\n  scale_rewards: none\n  beta: 0.05\n  reward_funcs:\n" LENGTH_REWARD,
     "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n", "4", "2", ZERO1},
    /* GDPO: each reward z-scored per group, then the sum standardised over the whole batch */
    {"gdpo", "  reward_funcs:\n" LENGTH_REWARD FORMAT_REWARD "  reward_weights: [1.0, 0.5]\n",
     "rl: gdpo\n", "4", "2", BOTH},
    /* the replay buffer: groups without spread replaced by stored ones, alike on each rank */
    {"replay", "  replay_buffer_size: 3\n  reward_funcs:\n" FORMAT_REWARD, "max_steps: 6\n", "2",
     "1", BOTH},
};

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
    static const char *const zero0[] = {NULL}, *const zero1[] = {"--zero_stage", "1", NULL};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const ParityCase *c = &cases[i];
        char config[256], name[256];
        snprintf(config, sizeof config, "%s.yaml", c->name);
        write_config(config, c->trl, c->body);
        if (c->zero != ZERO1) dist_one_vs_two(c->name, config, c->ga1, c->ga2, zero0);
        snprintf(name, sizeof name, "%s-zero1", c->name);
        if (c->zero != ZERO0) dist_one_vs_two(name, config, c->ga1, c->ga2, zero1);
    }
    /* a generation batch of one group: rank 1 generates and scores nothing, yet trains its
     * half of the rows */
    const char *const small[] = {"--micro_batch_size", "2", NULL};
    dist_one_vs_two("grpo-one-group", "grpo.yaml", "2", "1", small);
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
    /* a generation batch of 4 completions is one micro-batch, which 2 ranks cannot share:
     * --nproc 2 checks the config for 2 ranks (as one process it would pass) */
    write_config("gbs.yaml", "  generation_batch_size: 4\n  reward_funcs:\n" LENGTH_REWARD, "");
    expect_failure("gbs", "gbs.yaml", "must be divisible by the global batch size (8)", NULL);
}

int main(void) {
    if (!dist_tests_can_run("test_dist_grpo")) return 77;
    setenv("RLHF_TEST_SCRIPTED_COMPLETIONS", "1", 1);
    harness_write_grpo_prompts();
    test_parity();
    /* with the replay buffer: a 2-rank run stopped after its checkpoint-2 and resumed, on 2
     * ranks (the same buffer in every later checkpoint) or in one process */
    const char *buffers[] = {"checkpoint-4/replay_buffer.safetensors",
                             "checkpoint-6/replay_buffer.safetensors", NULL};
    dist_check_resume("replay.yaml", "1", "2", buffers);
    /* a longer run killed at rank 1: its checkpoints hold the buffer and resume to the end */
    write_config("long.yaml", "  replay_buffer_size: 3\n  reward_funcs:\n" FORMAT_REWARD,
                 "max_steps: 150\nsave_steps: 1\nsave_total_limit: 2\n");
    char straight[4096];
    snprintf(straight, sizeof straight, "%s", harness_tmp_path("long-straight"));
    const char *run[] = {"--nproc", "2", "--gradient_accumulation_steps", "1", NULL};
    CHECK(dist_train("long.yaml", straight, run) == 0, "uninterrupted 2-rank run");
    dist_check_rank_dies("long.yaml", run + 2, straight, "replay_buffer.safetensors");
    test_failures();
    printf("worst over the 1-vs-2 comparisons: metrics %.2g, weights %.2g relative\n",
           dist_worst.metric, dist_worst.weight);
    return harness_finish("test_dist_grpo");
}
