/* The report room without Python packages: TFRecord framing's CRC-32C, HF's tag names, the
 * sparklines, the tracking keys, a reporter that fails (one warning, training goes on), the TB
 * writer after a write error, and the panels `rlhf plot` draws. The files themselves are read
 * back by TensorBoard's and wandb's own readers in run_report_tests.sh. */
#include "common/error.h"
#include "config/train_config.h"
#include "harness.h"
#include "report/plot.h"
#include "report/report_tags.h"
#include "report/reporter.h"
#include "report/sparkline.h"
#include "report/tb_writer.h"

#include <stdlib.h>
#include <string.h>

/* CRC-32C's published check value: CRC-32C("123456789") = 0xE3069283 (RFC 3720 B.4's
 * polynomial; the "check" of the CRC catalogue). The mask is TFRecord's, undone here. */
static void test_crc(void) {
    uint32_t masked = tb_masked_crc32c("123456789", 9);
    uint32_t rot = masked - 0xa282ead8u;
    uint32_t crc = (rot << 15) | (rot >> 17);
    CHECK(crc == 0xE3069283u, "crc32c(123456789) = %08x, want e3069283", crc);
}

static void test_tags(void) {
    static const char *const cases[][2] = {
        {"loss", "train/loss"},     {"rewards/margins", "train/rewards/margins"},
        {"eval_loss", "eval/loss"}, {"eval_rewards/accuracies", "eval/rewards/accuracies"},
        {"test_loss", "test/loss"}, {"learning_rate", "train/learning_rate"},
        {"epoch", "train/epoch"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char tag[128];
        report_tag(cases[i][0], tag, sizeof tag);
        CHECK(strcmp(tag, cases[i][1]) == 0, "%s -> %s, want %s", cases[i][0], tag, cases[i][1]);
    }
    json_t *one = json_integer(3), *null = json_null(), *str = json_string("x");
    CHECK(report_is_scalar("loss", one) && !report_is_scalar("step", one), "step is not sent");
    CHECK(!report_is_scalar("loss", null) && !report_is_scalar("loss", str), "only numbers");
    json_decref(one), json_decref(null), json_decref(str);
}

static void test_sparkline(void) {
    double up[16], flat[5] = {2, 2, 2, 2, 2};
    for (int i = 0; i < 16; i++)
        up[i] = i;
    char buf[256];
    sparkline(up, 16, 8, buf, sizeof buf);
    CHECK(strcmp(buf, "▁▂▃▄▅▆▇█") == 0, "rising line: %s", buf);
    sparkline(flat, 5, 40, buf, sizeof buf);
    CHECK(strcmp(buf, "▄▄▄▄▄") == 0, "flat line: %s", buf);
    sparkline(up, 16, 40, buf, 10); /* three cells fit, the fourth does not */
    CHECK(strlen(buf) == 9, "truncated to whole cells: %zu bytes", strlen(buf));
}

static int load(TrainConfig *cfg, const char *extra) {
    char text[2048];
    snprintf(text, sizeof text,
             "base_model: m\ndatasets:\n  - path: d.jsonl\nlearning_rate: 1e-5\n%s", extra);
    return train_config_load_text(cfg, text, "t.yaml");
}

static void test_tracking_keys(void) {
    TrainConfig cfg;
    CHECK(load(&cfg, "use_tensorboard: true\nwandb_project: p\nwandb_mode: offline\n") == 0, "%s",
          err_msg());
    CHECK(cfg.tracking.tensorboard && cfg.tracking.wandb && !cfg.tracking.wandb_optional,
          "use_tensorboard and wandb_project");
    CHECK(cfg.n_warnings == 0, "no 'not used yet' warning: %s",
          cfg.n_warnings ? cfg.warnings[0] : "");
    train_config_free(&cfg);
    CHECK(load(&cfg, "report_to: all\n") == 0, "%s", err_msg());
    CHECK(cfg.tracking.tensorboard && cfg.tracking.wandb && cfg.tracking.wandb_optional, "all");
    train_config_free(&cfg);
    CHECK(load(&cfg, "report_to: [tensorboard]\n") == 0, "%s", err_msg());
    CHECK(cfg.tracking.tensorboard && !cfg.tracking.wandb, "a list of one");
    train_config_free(&cfg);
    CHECK(load(&cfg, "report_to: none\n") == 0 && !cfg.tracking.tensorboard && !cfg.tracking.wandb,
          "none");
    train_config_free(&cfg);
    CHECK(load(&cfg, "") == 0 && !cfg.tracking.tensorboard && !cfg.tracking.wandb, "default");
    train_config_free(&cfg);
    static const char *const refused[][2] = {
        {"report_to: mlflow\n", "does not report to mlflow"},
        {"report_to: tensorbord\n", "unknown integration \"tensorbord\""},
        {"report_to: [none, wandb]\n", "\"none\" cannot be listed"},
        {"wandb_mode: onlin\n", "'wandb_mode'"},
        {"wandb_project: p\nwandb_log_model: checkpoint\n", "'wandb_log_model'"},
        {"wandb_watch: gradients\n", "'wandb_watch'"}};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        int rc = load(&cfg, refused[i][0]);
        CHECK(rc != 0 && strstr(err_msg(), refused[i][1]) && strstr(err_msg(), "t.yaml"), "%s-> %s",
              refused[i][0], rc ? err_msg() : "accepted");
        if (rc == 0) train_config_free(&cfg);
    }
    CHECK(load(&cfg, "wandb_log_model: false\nwandb_watch: \"false\"\n") == 0, "false is fine");
    train_config_free(&cfg);
}

/* A reporter that fails at its second entry: one warning, never called again, closed once. */
static int calls, closes;
static int failing_log(void *ctx, const json_t *entry, int64_t step) {
    return ++calls == 2 ? err_set("disk full (test)") : 0;
}
static void counting_close(void *ctx) {
    closes++;
}

static void test_failing_reporter(void) {
    Reporters rs = {.n = 1};
    rs.log = tmpfile();
    rs.r[0] = (Reporter){.name = "fake", .log = failing_log, .close = counting_close};
    json_t *entry = json_pack("{s:f,s:i}", "loss", 1.0, "step", 1);
    for (int i = 0; i < 5; i++)
        reporters_log(&rs, entry);
    reporters_close(&rs);
    json_decref(entry);
    CHECK(calls == 2 && closes == 1 && rs.n == 0, "calls %d closes %d", calls, closes);
    char text[1024] = "";
    rewind(rs.log);
    size_t n = fread(text, 1, sizeof text - 1, rs.log);
    text[n] = '\0';
    fclose(rs.log);
    char *first = strstr(text, "warning: fake: disk full (test)");
    CHECK(first && !strstr(first + 1, "warning:"), "one warning: %s", text);
}

/* A write error closes the event file for good (tb_writer.h invariant 1). */
static void test_tb_write_error(void) {
    TbWriter w;
    CHECK(tb_writer_open(&w, harness_tmp_path("tb")) == 0, "%s", err_msg());
    FILE *full = fopen("/dev/full", "wb");
    if (!full) return; /* no /dev/full here */
    fclose(w.fp);
    w.fp = full;
    int rc = tb_writer_scalar(&w, "train/loss", 1, 1, 0);
    if (rc == 0) rc = tb_writer_flush(&w);
    CHECK(rc != 0 && w.fp == NULL, "the write error is reported");
    CHECK(tb_writer_scalar(&w, "train/loss", 1, 2, 0) != 0 && strstr(err_msg(), "closed"),
          "later writes fail: %s", err_msg());
    tb_writer_close(&w);
}

static void test_panels(void) {
    json_t *entries =
        json_pack("[{s:f,s:f,s:f,s:f,s:f,s:i},{s:f,s:f,s:i},{s:f,s:f,s:f,s:i}]", "loss", 0.7,
                  "epoch", 0.5, "step_time", 1.0, "learning_rate", 1e-3, "rewards/margins", 0.1,
                  "step", 1, "eval_loss", 0.8, "eval_rewards/margins", 0.05, "step", 1, "loss", 0.6,
                  "learning_rate", 5e-4, "rewards/margins", 0.3, "step", 2);
    MetricSet set;
    metrics_series_from_entries(&set, entries);
    const char *keys[8];
    int n = plot_panels(&set, keys, 8);
    CHECK(n == 3 && !strcmp(keys[0], "loss") && !strcmp(keys[1], "learning_rate") &&
              !strcmp(keys[2], "rewards/margins"),
          "panels: %d (%s...)", n, n ? keys[0] : "");
    const MetricSeries *loss = metrics_series_find(&set, "loss");
    CHECK(loss && loss->n == 2 && loss->step[1] == 2 && loss->value[1] == 0.6, "loss series");
    metrics_series_free(&set);
    json_decref(entries);
}

/* A metrics.jsonl with a broken line: an error naming the file and line, nothing read. */
static void test_bad_metrics_file(void) {
    const char *path = harness_tmp_path("bad.jsonl");
    const char *text = "{\"loss\": 1.0, \"step\": 1}\n\n[1, 2]\n";
    harness_write_file(path, text, strlen(text));
    MetricSet set;
    char want[4200];
    snprintf(want, sizeof want, "%s:3: expected one JSON object a line", path);
    CHECK(metrics_series_read(&set, path) != 0 && strstr(err_msg(), want) && set.n == 0, "%s",
          err_msg());
    CHECK(metrics_series_read(&set, harness_tmp_path("missing.jsonl")) != 0 &&
              strstr(err_msg(), "missing.jsonl: cannot open"),
          "%s", err_msg());
}

int main(void) {
    test_crc();
    test_tags();
    test_sparkline();
    test_tracking_keys();
    test_failing_reporter();
    test_tb_write_error();
    test_panels();
    test_bad_metrics_file();
    return harness_finish("test_report");
}
