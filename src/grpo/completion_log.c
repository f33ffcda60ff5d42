#include "grpo/completion_log.h"

#include "common/error.h"
#include "common/fileio.h"
#include "rollout/sampler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int completion_log_open(CompletionLog *cl, const char *output_dir, bool resumed, int num_to_print,
                        uint64_t seed) {
    *cl = (CompletionLog){.truncate_pending = !resumed, .num_to_print = num_to_print, .seed = seed};
    return path_join(cl->path, sizeof cl->path, output_dir, "completions.jsonl");
}

void completion_log_close(CompletionLog *cl) {
    json_decref(cl->rows);
    cl->rows = NULL;
}

void completion_log_keep(CompletionLog *cl, json_t *rows) {
    json_decref(cl->rows);
    cl->rows = rows;
}

/* A cell of the printed table: s on one line (line breaks and tabs shown escaped), cut to at
 * most `width` bytes on a UTF-8 character boundary with "..." marking the cut. buf holds
 * width + 1 bytes. */
static void cell(char *buf, size_t width, const char *s) {
    if (!s) s = "";
    size_t n = 0, cap = 2 * strlen(s) + 1;
    char *line = xmalloc(cap);
    for (const char *p = s; *p; p++) {
        if (*p == '\n' || *p == '\r' || *p == '\t')
            line[n++] = '\\', line[n++] = *p == '\n' ? 'n' : (*p == '\r' ? 'r' : 't');
        else
            line[n++] = *p;
    }
    if (n > width) {
        n = width - 3;
        while (n > 0 && ((unsigned char)line[n] & 0xC0) == 0x80) /* a continuation byte */
            n--;
        memcpy(line + n, "...", 3);
        n += 3;
    }
    memcpy(buf, line, n);
    buf[n] = '\0';
    free(line);
}

/* Characters (not bytes) of a UTF-8 string: the columns it takes, near enough. */
static int utf8_chars(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* TRL's print_prompt_completions_sample: `k` rows drawn without replacement (all, in order,
 * when k is at least the row count), rewards and advantage with two decimals. */
static void print_sample(const CompletionLog *cl, int64_t step, FILE *out) {
    size_t n = json_array_size(cl->rows);
    if (cl->num_to_print <= 0 || n == 0) return;
    size_t k = (size_t)cl->num_to_print < n ? (size_t)cl->num_to_print : n;
    size_t *pick = xmalloc(n * sizeof *pick);
    for (size_t i = 0; i < n; i++)
        pick[i] = i;
    if (k < n) { /* the first k of a seeded Fisher-Yates shuffle */
        SamplerRng rng;
        sampler_rng_seed(&rng, cl->seed, (uint64_t)step);
        for (size_t i = 0; i < k; i++) {
            size_t j = i + (size_t)(sampler_rng_uniform(&rng) * (double)(n - i));
            size_t t = pick[i];
            pick[i] = pick[j], pick[j] = t;
        }
    }
    fprintf(out, "completions at step %lld (%zu of %zu; all in %s)\n", (long long)step, k, n,
            cl->path);
    enum { W = 32 };
    char a[W + 1], b[W + 1];
    for (size_t r = 0; r < k; r++) {
        const json_t *row = json_array_get(cl->rows, pick[r]);
        if (r == 0) { /* the header: TRL's columns */
            fprintf(out, "  %-*s | %-*s", W, "Prompt", W, "Completion");
            const char *key;
            const json_t *v;
            json_object_foreach((json_t *)row, key, v) {
                if (strcmp(key, "prompt") && strcmp(key, "completion") && strcmp(key, "advantage"))
                    fprintf(out, " | %*s", (int)(strlen(key) > 8 ? strlen(key) : 8), key);
            }
            fprintf(out, " | %9s\n", "Advantage");
        }
        cell(a, W, json_string_value(json_object_get(row, "prompt")));
        cell(b, W, json_string_value(json_object_get(row, "completion")));
        fprintf(out, "  %s%*s | %s%*s", a, W - utf8_chars(a), "", b, W - utf8_chars(b), "");
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)row, key, v) {
            if (!strcmp(key, "prompt") || !strcmp(key, "completion") || !strcmp(key, "advantage"))
                continue;
            int w = (int)(strlen(key) > 8 ? strlen(key) : 8);
            if (json_is_number(v))
                fprintf(out, " | %*.2f", w, json_number_value(v));
            else
                fprintf(out, " | %*s", w, "nan"); /* None: TRL's table shows the NaN */
        }
        fprintf(out, " | %9.2f\n", json_number_value(json_object_get(row, "advantage")));
    }
    free(pick);
}

int completion_log_write(CompletionLog *cl, int64_t step, FILE *out) {
    if (!cl->rows) return 0;
    FILE *f = fopen(cl->path, cl->truncate_pending ? "w" : "a");
    if (!f) return err_set("%s: cannot write: %s", cl->path, strerror(errno));
    cl->truncate_pending = false;
    size_t i;
    json_t *row;
    json_array_foreach(cl->rows, i, row) {
        json_t *line = json_pack("{s:I}", "step", (json_int_t)step);
        json_object_update(line, row);
        char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
        json_decref(line);
        if (text) fprintf(f, "%s\n", text);
        free(text);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return err_set("%s: write failed: %s", cl->path, strerror(errno));
    print_sample(cl, step, out);
    return 0;
}
