/* The TensorBoard reporter: HF's TensorBoardCallback.on_log, natively. */
#include "common/error.h"
#include "common/fileio.h"
#include "report/report_tags.h"
#include "report/reporter.h"
#include "report/tb_writer.h"

#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static int tb_log(void *ctx, const json_t *entry, int64_t step) {
    TbWriter *w = ctx;
    double now = wall_time();
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)entry, key, v) {
        if (!report_is_scalar(key, v)) continue;
        char tag[512];
        report_tag(key, tag, sizeof tag);
        if (tb_writer_scalar(w, tag, json_number_value(v), step, now) != 0) return -1;
    }
    return tb_writer_flush(w); /* HF flushes at every on_log */
}

static void tb_close(void *ctx) {
    tb_writer_close(ctx);
    free(ctx);
}

int tensorboard_reporter_open(Reporter *r, const TrainConfig *cfg, FILE *log) {
    char dir[4096];
    const char *env = getenv("TENSORBOARD_LOGGING_DIR");
    if (env && *env) {
        snprintf(dir, sizeof dir, "%s", env);
    } else {
        /* HF's default logging_dir: runs/<%b%d_%H-%M-%S>_<hostname> under output_dir */
        char host[256] = "localhost", stamp[64], name[400];
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%b%d_%H-%M-%S", &tm);
        snprintf(name, sizeof name, "runs/%s_%s", stamp, host);
        if (path_join(dir, sizeof dir, cfg->output_dir, name) != 0) return -1;
    }
    TbWriter *w = xcalloc(1, sizeof *w);
    if (tb_writer_open(w, dir) != 0) {
        free(w);
        return -1;
    }
    fprintf(log, "tensorboard: writing %s (tensorboard --logdir %s)\n", w->path, dir);
    *r = (Reporter){.name = "tensorboard", .ctx = w, .log = tb_log, .close = tb_close};
    return 0;
}
