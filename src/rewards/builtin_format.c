/* builtin.format: whether the completion follows a format, as a PCRE2 regular expression. */
#include "common/error.h"
#include "common/json_util.h"
#include "rewards/builtin_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_PATTERN "^<think>.*?</think>\\s*<answer>.*?</answer>$"

typedef struct {
    char *name;
    pcre2_code *code;
} Format;

static void format_close(void *impl) {
    Format *fm = impl;
    pcre2_code_free(fm->code);
    free(fm->name);
    free(fm);
}

static int format_score(void *impl, const RewardBatch *b, double *out) {
    const Format *fm = impl;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(fm->code, NULL);
    if (!md) {
        err_set("out of memory (regex match data)");
        return err_prefix("reward function '%s'", fm->name);
    }
    int status = 0;
    for (int i = 0; i < b->n && status == 0; i++) {
        const char *text;
        size_t len;
        if (builtin_completion_text(b, i, &text, &len) != 0) {
            status = -1;
            break;
        }
        int rc = pcre2_match(fm->code, (PCRE2_SPTR)text, len, 0, 0, md, NULL);
        if (rc >= 0) {
            out[i] = 1.0;
        } else if (rc == PCRE2_ERROR_NOMATCH) {
            out[i] = 0.0;
        } else {
            /* Not "no match": the match or backtracking limit, which a pattern with nested
             * quantifiers can reach on a long completion. Scoring 0 would hide that. */
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            status = err_set("completion %d: regex match failed: %s", i, (char *)msg);
        }
    }
    pcre2_match_data_free(md);
    return status == 0 ? 0 : err_prefix("reward function '%s'", fm->name);
}

int builtin_format_open(RewardFunc *f, const char *name, const json_t *options) {
    const char *pattern = DEFAULT_PATTERN, *match = "full";
    bool dotall = true;
    if (json_get_string(options, "pattern", &pattern) < 0 ||
        json_get_string(options, "match", &match) < 0 ||
        json_get_bool(options, "dotall", &dotall) < 0)
        return -1;
    bool full = strcmp(match, "full") == 0;
    if (!full && strcmp(match, "search") != 0)
        return err_set("option 'match': '%s' is not one of full, search", match);
    /* MATCH_INVALID_UTF: a completion cut mid-character is still judged, not an error.
     * Anchoring both ends at compile time (not per match) keeps the JIT usable. */
    uint32_t flags = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    if (dotall) flags |= PCRE2_DOTALL;
    if (full) flags |= PCRE2_ANCHORED | PCRE2_ENDANCHORED;
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *code =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, flags, &errcode, &erroff, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        return err_set("option 'pattern' \"%s\": %s at offset %zu", pattern, (char *)msg,
                       (size_t)erroff);
    }
    /* The JIT is only faster; where it is unavailable the interpreter gives the same result. */
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    Format *fm = xcalloc(1, sizeof *fm);
    fm->name = xstrdup(name);
    fm->code = code;
    f->impl = fm;
    f->score = format_score;
    f->close = format_close;
    return 0;
}
