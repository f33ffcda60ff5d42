#include "train/metrics_log.h"

#include "common/error.h"
#include "common/fileio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int metrics_file_open(MetricsFile *f, const char *output_dir, bool resumed) {
    if (path_join(f->path, sizeof f->path, output_dir, "metrics.jsonl") != 0) return -1;
    f->created = !file_exists(f->path);
    f->fp = fopen(f->path, "a");
    f->replace_pending = !resumed;
    if (!f->fp) return err_set("%s: cannot create: %s", f->path, strerror(errno));
    return 0;
}

void metrics_reporters_open(MetricsFile *f, const TrainConfig *cfg, FILE *log) {
    if (f->fp) reporters_open(&f->reporters, cfg, log);
}

void metrics_file_close(MetricsFile *f) {
    reporters_close(&f->reporters);
    if (f->fp) fclose(f->fp);
    if (f->fp && f->created && f->replace_pending) remove(f->path);
    f->fp = NULL;
}

void metrics_log_entry(MetricsFile *f, json_t *log_history, json_t *entry) {
    if (!f->fp) { /* not rank 0: the log history alone, which nothing writes */
        json_array_append(log_history, entry);
        return;
    }
    if (f->replace_pending) {
        /* "a" mode writes at the end whatever the offset, so emptying the file is enough */
        if (ftruncate(fileno(f->fp), 0) != 0)
            fprintf(stderr, "warning: metrics.jsonl: cannot empty the previous run's entries: %s\n",
                    strerror(errno));
        f->replace_pending = false;
    }
    char *line = json_dumps(entry, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7));
    if (line) fprintf(f->fp, "%s\n", line);
    free(line);
    fflush(f->fp);
    reporters_log(&f->reporters, entry);
    json_array_append(log_history, entry);
}

double metrics_last_logged(const json_t *log_history, const char *key) {
    for (size_t i = json_array_size(log_history); i-- > 0;) {
        const json_t *v = json_object_get(json_array_get(log_history, i), key);
        if (json_is_number(v)) return json_number_value(v);
    }
    return 0;
}
