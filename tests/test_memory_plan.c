/* The start-up memory plan (train/memory_plan.h):
 *  1. its parameter count, from config.json alone, equals what model_load lays out, on every
 *     fixture model family (biases, q/k norms, tied and untied embeddings, GQA);
 *  2. each part of its total is what a real training run adds to its peak RSS (the child's
 *     own ru_maxrss at the end of training, i.e. VmHWM): the difference between two runs that
 *     differ on one axis must be within the bounds below of the plan's difference. In fp32:
 *     micro_batch_size 4 vs 2, full fine-tune vs LoRA, a big vs a small model. Over an untied
 *     bf16 base with autocast: gradient checkpointing off vs on, for LoRA and for QLoRA, and
 *     LoRA vs QLoRA. Differences, because the process itself (its libraries: ~170 MB resident
 *     with the CUDA ones linked, and a start-up transient) is in every run and in no plan, and
 *     the plan is checked against free memory, from which the process is already gone. Not
 *     under the sanitizers, whose shadow memory is counted;
 *  2b. loading a bf16 base adds to the peak RSS no more than the weights, the loader's scratch
 *     and one piece of the mapped file (model_read_checkpoint_range);
 *  3. a run that cannot fit (free memory set low through the test hook) is refused before
 *     anything is loaded or written, naming the numbers and the settings that shrink it. */
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "config/train_config.h"
#include "harness.h"
#include "io/model_dir.h"
#include "model/model.h"
#include "model/model_loading.h"
#include "train/memory_plan.h"
#include "train/session.h"

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void check_param_counts(void) {
    const char *dirs[] = {"models/tiny-arith", "tests/fixtures/models"};
    char path[4096];
    int checked = 0;
    snprintf(path, sizeof path, "%s", harness_source_path(dirs[0]));
    Model m;
    ModelConfig mc;
    CHECK(model_load(&m, path) == 0 && model_config_load(&mc, path) == 0, "%s", err_msg());
    CHECK(memory_plan_model_params(&mc) == m.n_params, "%s: plan %llu, model %zu", path,
          (unsigned long long)memory_plan_model_params(&mc), m.n_params);
    model_free(&m);
    model_config_free(&mc);
    char root[4096];
    snprintf(root, sizeof root, "%s", harness_source_path(dirs[1]));
    DIR *d = opendir(root);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (path_join(path, sizeof path, root, e->d_name) != 0) continue;
        if (model_load(&m, path) != 0) continue; /* not a model directory */
        CHECK(model_config_load(&mc, path) == 0, "%s", err_msg());
        CHECK(memory_plan_model_params(&mc) == m.n_params, "%s: plan %llu, model %zu", path,
              (unsigned long long)memory_plan_model_params(&mc), m.n_params);
        checked++;
        model_free(&m);
        model_config_free(&mc);
    }
    if (d) closedir(d);
    CHECK(checked >= 8, "only %d fixture models checked", checked);
}

/* A random-weight Llama of the given width and depth, tiny-arith's tokenizer, in dir: fp32 with
 * a tied lm_head, or (bf16) a bf16 checkpoint with an untied one. */
static void write_model(const char *dir, int hidden, int inter, int layers, int vocab, bool bf16) {
    json_t *cfg;
    CHECK(json_load_path(harness_source_path("models/tiny-arith/config.json"), &cfg) == 0, "%s",
          err_msg());
    json_object_set_new(cfg, "hidden_size", json_integer(hidden));
    json_object_set_new(cfg, "intermediate_size", json_integer(inter));
    json_object_set_new(cfg, "num_hidden_layers", json_integer(layers));
    json_object_set_new(cfg, "vocab_size", json_integer(vocab));
    json_object_set_new(cfg, "head_dim", json_integer(hidden / 8));
    json_object_set_new(cfg, "num_attention_heads", json_integer(8));
    json_object_set_new(cfg, "num_key_value_heads", json_integer(2));
    json_object_set_new(cfg, "dtype", json_string(bf16 ? "bfloat16" : "float32"));
    json_object_set_new(cfg, "tie_word_embeddings", json_boolean(!bf16));
    CHECK(make_dirs(dir) == 0, "mkdir %s", dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(json_dump_file(cfg, path, JSON_INDENT(2)) == 0, "write %s", path);
    ModelConfig mc;
    CHECK(model_config_from_json(&mc, cfg, path) == 0, "%s", err_msg());
    json_decref(cfg);
    Model m;
    model_init_empty(&m, &mc);
    uint64_t s = 12345;
    for (size_t i = 0; i < m.n_params; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        m.params[i] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f) * 0.04f;
    }
    CHECK(model_dir_write(&m, dir, harness_source_path("models/tiny-arith"), dir,
                          bf16 ? ST_BF16 : ST_F32) == 0,
          "write %s: %s", dir, err_msg());
    model_free(&m);
}

/* A config training `model` on long text rows (cut into full sequence_len pieces). */
static const char *write_config(const char *name, const char *model, const char *out) {
    const char *data = harness_tmp_path("text.jsonl");
    if (!file_exists(data)) {
        FILE *f = fopen(data, "w");
        for (int r = 0; r < 8; r++) {
            fputs("{\"text\": \"", f);
            for (int i = 0; i < 400; i++)
                fprintf(f, "What is %d + %d? %d. ", i, r, i + r);
            fputs("\"}\n", f);
        }
        fclose(f);
    }
    char body[2048];
    int n = snprintf(body, sizeof body,
                     "base_model: %s\ndatasets:\n  - path: %s\n    type: completion\n"
                     "sequence_len: 256\nmicro_batch_size: 4\nmax_steps: 1\n"
                     "learning_rate: 1e-4\noutput_dir: %s\nsave_steps: 0\n"
                     "dataset_prepared_path: %s\n",
                     model, data, out, harness_tmp_path("prepared"));
    const char *path = harness_tmp_path(name);
    CHECK(harness_write_file(path, body, (size_t)n) == 0, "write %s", path);
    return path;
}

/* Runs `rlhf train config` as a child, its output to log. Returns the peak RSS in bytes that it
 * reports when training is done (its own getrusage ru_maxrss, the VmHWM of loading and
 * training: "done: ... peak memory N MB", in MiB), or -1 on failure; *exit_rss receives
 * wait4's ru_maxrss of the whole process. Why not that one: the linked libraries' exit code
 * faults in ~50 MB of their files after training (RssFile 82 -> 130 MB at exit, seen in
 * /proc/PID/status), which is no part of a plan and, on a small model, the process's peak. */
static double train_peak_rss(const char *config, const char *log, double *exit_rss) {
    char rlhf[4096];
    snprintf(rlhf, sizeof rlhf, "%s/rlhf", RLHF_BINARY_DIR);
    char config_copy[4096];
    snprintf(config_copy, sizeof config_copy, "%s", config);
    char *argv[] = {rlhf, "train", config_copy, NULL};
    posix_spawn_file_actions_t io;
    posix_spawn_file_actions_init(&io);
    posix_spawn_file_actions_addopen(&io, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&io, 1, 2);
    pid_t pid;
    int spawned = posix_spawn(&pid, rlhf, &io, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&io);
    if (spawned != 0) return -1;
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    *exit_rss = (double)ru.ru_maxrss * 1024.0;
    char *text = NULL;
    size_t len = 0;
    if (read_file(log, &text, &len) != 0) return -1;
    const char *at = text ? strstr(text, "peak memory ") : NULL;
    double mib = -1;
    if (!at || sscanf(at, "peak memory %lf MB", &mib) != 1) mib = -1;
    free(text);
    return mib < 0 ? -1 : mib * 1024.0 * 1024.0;
}

static MemoryPlan plan_of(const char *config) {
    TrainConfig cfg;
    ModelConfig mc;
    MemoryPlan p = {0};
    CHECK(train_config_load(&cfg, config, NULL, 0) == 0, "%s", err_msg());
    CHECK(model_config_load(&mc, cfg.base_model) == 0, "%s", err_msg());
    p = memory_plan_make(&cfg, &mc);
    model_config_free(&mc);
    train_config_free(&cfg);
    return p;
}

/* Peak RSS of a run of `config` with the overrides, and its plan. */
typedef struct {
    double rss, plan;
} Measured;

static Measured measure(const char *config, const char *tag, const char *overrides) {
    /* the config with the overrides appended (later keys win in train_config_load) */
    char *text = NULL;
    size_t len = 0;
    CHECK(read_file(config, &text, &len) == 0, "read %s", config);
    char path[4096];
    snprintf(path, sizeof path, "%s", harness_tmp_path(tag));
    /* each run its own output_dir: another run's directory would be refused (output_dir.h) */
    char out[4096];
    snprintf(out, sizeof out, "%s", harness_tmp_path(tag));
    for (char *c = out + strlen(out) - strlen(tag); *c; c++)
        if (*c == ' ') *c = '_';
    strncat(out, ".out", sizeof out - strlen(out) - 1);
    FILE *f = fopen(path, "w");
    fprintf(f, "%s%soutput_dir: %s\n", text ? text : "", overrides, out);
    fclose(f);
    free(text);
    MemoryPlan p = plan_of(path);
    char log[4096 + 8];
    snprintf(log, sizeof log, "%s.log", out);
    double exit_rss = 0;
    Measured m = {.rss = train_peak_rss(path, log, &exit_rss), .plan = p.total};
    CHECK(m.rss > 0, "%s: the training run failed (its output: %s)", tag, log);
    printf("%-18s peak RSS %6.1f MB (%6.1f MB at exit), planned %6.1f MB\n", tag, m.rss / 1e6,
           exit_rss / 1e6, m.plan / 1e6);
    return m;
}

/* One axis: measured and planned differences of two runs, and the bounds on their ratio. */
static void check_axis(const char *axis, Measured a, Measured b, double low, double high) {
    double measured = a.rss - b.rss, planned = a.plan - b.plan, ratio = measured / planned;
    printf("%s: measured %.1f MB, planned %.1f MB (%.2f)\n", axis, measured / 1e6, planned / 1e6,
           ratio);
    CHECK(ratio > low && ratio < high, "%s: measured %.1f MB, planned %.1f MB (bounds %.2f-%.2f)",
          axis, measured / 1e6, planned / 1e6, low, high);
}

/* Each part of the plan against what it costs a real process, one axis at a time. The plan is
 * an upper bound (full-length rows, every buffer at its largest at once): a difference may
 * fall short of the plan's by the bounds' margin, and exceed it by less. */
static void check_against_peak_rss(void) {
#if defined(__SANITIZE_ADDRESS__)
    puts("peak RSS check skipped: the sanitizers' shadow memory is counted in RSS");
    return;
#endif
    char big[4096], small[4096], big_cfg[4096], small_cfg[4096];
    snprintf(big, sizeof big, "%s", harness_tmp_path("big"));
    snprintf(small, sizeof small, "%s", harness_tmp_path("small"));
    write_model(big, 512, 1536, 6, 4096, false);
    /* the small model's run (~355 MB) above the start-up floor described below, as the big's */
    write_model(small, 384, 1152, 6, 4096, false);
    /* copied: harness_tmp_path's buffers are reused after four calls (measure makes two) */
    snprintf(big_cfg, sizeof big_cfg, "%s",
             write_config("big.yaml", big, harness_tmp_path("out_big")));
    snprintf(small_cfg, sizeof small_cfg, "%s",
             write_config("small.yaml", small, harness_tmp_path("out_small")));
    Measured full4 = measure(big_cfg, "full mbs 4", "");
    Measured full2 = measure(big_cfg, "full mbs 2", "micro_batch_size: 2\n");
    Measured lora4 = measure(big_cfg, "lora mbs 4", "adapter: lora\nlora_r: 8\n");
    Measured small4 = measure(small_cfg, "small mbs 4", "");
    check_axis("activations (micro_batch_size 4 vs 2)", full4, full2, 0.85, 1.15);
    check_axis("gradients + optimizer (full vs LoRA)", full4, lora4, 0.85, 1.15);
    check_axis("the whole run (big vs small model)", full4, small4, 0.75, 1.05);

    /* over a frozen bf16 base (untied lm_head, the embedding left in its file), autocast on:
     * LoRA on every linear layer and QLoRA, each with and without gradient checkpointing. Only
     * differences between these four runs of one model: a smaller model's run would peak at
     * the process's start-up floor (200-235 MB here, with the load of the machine: the GEMM
     * choice's timings), not at its training. Sized (12 layers, micro-batches of 8) so that the
     * smallest run, checkpointed QLoRA, peaks at ~285 MB, above that floor also in a build
     * without CUDA's libraries (whose ~170 MB lift every run above it); at 4 layers and
     * micro-batches of 2 the four runs all read the floor there (207 MB) and every difference 0 */
    char big16[4096], big16_cfg[4096];
    snprintf(big16, sizeof big16, "%s", harness_tmp_path("big16"));
    write_model(big16, 512, 1536, 12, 4096, true);
    snprintf(big16_cfg, sizeof big16_cfg, "%s",
             write_config("big16.yaml", big16, harness_tmp_path("out_big16")));
    const char *modes[2][2] = {
        {"lora", "bf16: true\nadapter: lora\nlora_r: 8\nlora_target_linear: true\n"},
        {"qlora", "bf16: true\nadapter: qlora\nload_in_4bit: true\nlora_r: 8\n"
                  "lora_target_linear: true\n"}};
    Measured runs[2][2]; /* [lora, qlora][checkpointing off, on] */
    for (int k = 0; k < 2; k++)
        for (int gc = 0; gc < 2; gc++) {
            char overrides[512], tag[64];
            snprintf(overrides, sizeof overrides,
                     "%smicro_batch_size: 8\ngradient_checkpointing: %s\n", modes[k][1],
                     gc ? "true" : "false");
            snprintf(tag, sizeof tag, "%s gc %d", modes[k][0], gc);
            runs[k][gc] = measure(big16_cfg, tag, overrides);
        }
    char axis[128];
    for (int k = 0; k < 2; k++) {
        /* the checkpointed tape (each layer's saved input, one layer's activations recomputed)
         * against the whole tape: measured 0.98-1.02 */
        snprintf(axis, sizeof axis, "%s, what checkpointing saves (off vs on)", modes[k][0]);
        check_axis(axis, runs[k][0], runs[k][1], 0.9, 1.1);
    }
    for (int gc = 0; gc < 2; gc++) {
        /* the bf16 layer matrices against NF4, and QLoRA's dequantised matrix: measured
         * 0.98-1.05 */
        snprintf(axis, sizeof axis, "bf16 base vs NF4 (LoRA vs QLoRA), checkpointing %s",
                 gc ? "on" : "off");
        check_axis(axis, runs[0][gc], runs[1][gc], 0.85, 1.15);
    }
}

/* A "Key: N kB" line of /proc/self/status, in bytes (-1 when absent). */
static double status_bytes(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double v = -1;
    size_t klen = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') v = strtod(line + klen + 1, NULL);
    if (f) fclose(f);
    return v < 0 ? -1 : v * 1024.0;
}

/* Loading a bf16 checkpoint over a frozen base keeps no more of its file mapping resident than
 * one piece being converted: in a child (its VmHWM reset through clear_refs), the peak that
 * model_load_frozen adds is at most what it allocates (the bf16 weights, its fp32 scratch of
 * MODEL_LOAD_CHUNK_VALUES floats) plus one piece of the file (2 bytes a value) and 2 MB. A
 * vocabulary of 262144 x 64 makes the embedding (checked, left in its file) and the lm_head
 * 33.5 MB each, four pieces: with a tensor's pages dropped only once it is whole, the lm_head's
 * file pages (four pieces) would be resident beside the weights. */
static void check_load_peak(void) {
#if defined(__SANITIZE_ADDRESS__)
    puts("load peak check skipped: the sanitizers' shadow memory is counted in RSS");
    return;
#endif
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", harness_tmp_path("wide16"));
    write_model(dir, 64, 128, 1, 262144, true);
    ModelConfig mc;
    CHECK(model_config_load(&mc, dir) == 0, "%s", err_msg());
    double table = 2.0 * (double)mc.vocab_size * mc.hidden_size;
    /* every 2-D tensor but the embedding in bf16, the rest fp32 (a few KB: in the slack) */
    double weights = 2.0 * (double)memory_plan_model_params(&mc) - table;
    model_config_free(&mc);
    double bound = weights + 4.0 * MODEL_LOAD_CHUNK_VALUES + 2.0 * MODEL_LOAD_CHUNK_VALUES + 2e6;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = fopen("/proc/self/clear_refs", "w");
        if (!f || fputs("5", f) < 0 || fclose(f) != 0) _exit(2);
        double before = status_bytes("VmRSS");
        Model m;
        if (model_load_frozen(&m, dir, false, true) != 0) _exit(3);
        double added = status_bytes("VmHWM") - before;
        printf("loading a bf16 base: peak +%.1f MB (weights %.1f MB, bound %.1f MB)\n", added / 1e6,
               weights / 1e6, bound / 1e6);
        fflush(stdout);
        _exit(added <= bound ? 0 : 1);
    }
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "loading a bf16 base raised the peak RSS past %.1f MB (exit %d: 1 over the bound, 2 "
          "no clear_refs, 3 load failed)",
          bound / 1e6, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static void check_refusal(void) {
    const char *out = harness_tmp_path("out_refused");
    const char *cfg = write_config("refused.yaml", "models/tiny-arith", out);
    char cfg_copy[4096];
    snprintf(cfg_copy, sizeof cfg_copy, "%s", cfg);
    MemoryPlan p = plan_of(cfg_copy);
    CHECK(p.total > 20e6, "the tiny run's plan is %.1f MB", p.total / 1e6);
    /* a tenth of what it needs */
    char mb[64];
    snprintf(mb, sizeof mb, "%.3f", p.total / 10 / (1024.0 * 1024.0));
    setenv("RLHF_TEST_MEMORY_AVAILABLE_MB", mb, 1);
    p = plan_of(cfg_copy);
    TrainConfig c;
    CHECK(train_config_load(&c, cfg_copy, NULL, 0) == 0, "%s", err_msg());
    CHECK(memory_plan_check(&p, &c) != 0, "a tenth of the memory needed was accepted");
    const char *msg = err_msg();
    CHECK(strstr(msg, "needs about") && strstr(msg, "gradient_checkpointing: true") &&
              strstr(msg, "adapter: lora") && strstr(msg, "micro_batch_size"),
          "message: %s", msg);
    train_config_free(&c);
    /* the real program: refused, exit 1, nothing written */
    char rlhf[4096];
    snprintf(rlhf, sizeof rlhf, "%s/rlhf", RLHF_BINARY_DIR);
    char *argv[] = {rlhf, "train", cfg_copy, NULL};
    pid_t pid;
    int status = 0;
    CHECK(posix_spawn(&pid, rlhf, NULL, NULL, argv, environ) == 0 &&
              waitpid(pid, &status, 0) == pid,
          "spawn");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "exit status %d", status);
    CHECK(!dir_exists(out), "%s was created by a refused run", out);
    unsetenv("RLHF_TEST_MEMORY_AVAILABLE_MB");
    p = plan_of(cfg_copy);
    CHECK(p.available > 0, "free memory unknown on this machine");
}

/* A run that fits only with gradient checkpointing gets it when the config leaves it unset, and
 * is refused when the config says gradient_checkpointing: false. */
static void check_auto_checkpointing(void) {
    const char *cfg = write_config("auto_gc.yaml", "models/tiny-arith", harness_tmp_path("gc"));
    char path[4096];
    snprintf(path, sizeof path, "%s", cfg);
    TrainConfig c;
    ModelConfig mc;
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(model_config_load(&mc, c.base_model) == 0, "%s", err_msg());
    MemoryPlan off = memory_plan_make(&c, &mc);
    c.gradient_checkpointing = true;
    MemoryPlan on = memory_plan_make(&c, &mc);
    model_config_free(&mc);
    train_config_free(&c);
    CHECK(on.total < off.total, "checkpointing shrinks the plan (%.0f vs %.0f)", on.total,
          off.total);
    char mb[64];
    snprintf(mb, sizeof mb, "%.3f", (on.total + off.total) / 2 / (1024.0 * 1024.0));
    setenv("RLHF_TEST_MEMORY_AVAILABLE_MB", mb, 1);
    FILE *log = fopen("/dev/null", "w");
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(train_memory_plan(&c, log) == 0 && c.gradient_checkpointing,
          "unset, and needed: gradient checkpointing turned on (%s)", err_msg());
    train_config_free(&c);
    const char *args[] = {"gradient_checkpointing", "false"};
    CHECK(train_config_load(&c, path, args, 1) == 0, "%s", err_msg());
    err_clear();
    CHECK(train_memory_plan(&c, log) != 0 && !c.gradient_checkpointing &&
              strstr(err_msg(), "gradient_checkpointing: true"),
          "gradient_checkpointing: false is kept, and the run refused: %s", err_msg());
    train_config_free(&c);
    fclose(log);
    unsetenv("RLHF_TEST_MEMORY_AVAILABLE_MB");
}

int main(void) {
    CHECK(chdir(harness_source_path(".")) == 0, "cd to the source tree");
    check_param_counts();
    check_load_peak();
    check_refusal();
    check_auto_checkpointing();
    check_against_peak_rss();
    return harness_finish("test_memory_plan");
}
