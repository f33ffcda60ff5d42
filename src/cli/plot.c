/* rlhf plot OUTPUT_DIR [--out FILE.png|svg]
 * Draws a run's curves from OUTPUT_DIR/metrics.jsonl (report/plot.h). */
#include "cli/commands.h"

#include "common/error.h"
#include "common/fileio.h"
#include "report/plot.h"
#include "report/sparkline.h"

#include <stdio.h>
#include <string.h>

static const char plot_usage[] =
    "usage: rlhf plot OUTPUT_DIR [--out FILE.png|FILE.svg]\n"
    "\n"
    "Draws the curves of the run in OUTPUT_DIR from its metrics.jsonl: one panel per logged\n"
    "metric (loss, learning_rate, grad_norm, then the method's own: reward margins and\n"
    "accuracies, KL, reward mean and spread, completion lengths, ...), with the evaluation\n"
    "curve (eval_*) in the same panel as the training one. PNG or SVG by --out's extension;\n"
    "default OUTPUT_DIR/metrics.png. Also prints the main curves as sparklines.\n"
    "OUTPUT_DIR may also be a metrics.jsonl file (any FILE.jsonl; then --out is needed).\n";

int cli_plot(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(plot_usage, stdout);
            return CLI_EXIT_OK;
        }
        int r = cli_option(argc, argv, &i, "--out", &out);
        if (r < 0) return CLI_EXIT_USAGE;
        if (r > 0) continue;
        if (argv[i][0] == '-' || dir) {
            fprintf(stderr, "rlhf plot: unexpected argument \"%s\"\n%s", argv[i], plot_usage);
            return CLI_EXIT_USAGE;
        }
        dir = argv[i];
    }
    if (!dir) {
        fputs(plot_usage, stderr);
        return CLI_EXIT_USAGE;
    }
    char metrics[4096], out_path[4096];
    size_t len = strlen(dir);
    bool is_dir = !(len > 6 && strcmp(dir + len - 6, ".jsonl") == 0);
    if (is_dir ? path_join(metrics, sizeof metrics, dir, "metrics.jsonl") != 0
               : snprintf(metrics, sizeof metrics, "%s", dir) >= (int)sizeof metrics)
        return cli_fail(err_msg());
    if (!out) {
        if (!is_dir) return cli_fail("plot: give --out FILE.png when plotting a metrics file");
        if (path_join(out_path, sizeof out_path, dir, "metrics.png") != 0)
            return cli_fail(err_msg());
        out = out_path;
    }
    if (plot_check_available(out) != 0) return cli_fail(err_msg());
    MetricSet set;
    if (metrics_series_read(&set, metrics) != 0) return cli_fail(err_msg());
    int rc = plot_write(&set, dir, out);
    if (rc == 0) {
        sparkline_summary(stdout, &set);
        printf("wrote %s\n", out);
    }
    metrics_series_free(&set);
    return rc == 0 ? CLI_EXIT_OK : cli_fail(err_msg());
}
