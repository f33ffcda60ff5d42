/* zephyr.nectar (axolotl-config.md §4.2): Nectar rows, a prompt and ranked answers.
 *
 * The answers are sorted by ascending `rank` (stable, as Python's sorted) and the last two are
 * taken: chosen = the highest rank number, rejected = the next. If rank 1 is the best answer, as
 * in Nectar, this picks the two worst with the worse one as "chosen"; Axolotl does exactly this,
 * and rlhf.c keeps it so that the same data trains the same way. No end token is appended. */
#include "data/pref_types.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    double rank;
    const json_t *answer;
} RankedAnswer;

static int nectar(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    (void)f;
    char *prompt = pref_field_text(row, "prompt");
    if (!prompt) return -1;
    out->prompt =
        pref_concat("<|system|>\n</s>\n<|user|>\n", prompt, "</s>\n<|assistant|>\n", NULL);
    free(prompt);
    const json_t *answers = pref_field_value(row, "answers");
    size_t n = json_array_size(answers);
    if (!json_is_array(answers) || n < 2)
        return err_set("field \"answers\": expected a list of at least 2 {answer, rank} objects");
    RankedAnswer *ranked = xcalloc(n, sizeof *ranked);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const json_t *a = json_array_get(answers, i);
        const json_t *rank = json_object_get(a, "rank");
        ranked[i].answer = json_object_get(a, "answer");
        if (!json_is_object(a) || !json_is_number(rank) || !pref_field_value(a, "answer"))
            rc = err_set("field \"answers\"[%zu]: expected {\"answer\": ..., \"rank\": number}", i);
        else
            ranked[i].rank = json_number_value(rank);
    }
    for (size_t i = 1; rc == 0 && i < n; i++) /* insertion sort: stable, and n is small */
        for (size_t j = i; j > 0 && ranked[j].rank < ranked[j - 1].rank; j--) {
            RankedAnswer t = ranked[j];
            ranked[j] = ranked[j - 1];
            ranked[j - 1] = t;
        }
    if (rc == 0) {
        out->chosen = pref_py_str(ranked[n - 1].answer);
        out->rejected = pref_py_str(ranked[n - 2].answer);
        if (!out->chosen || !out->rejected) rc = err_prefix("field \"answers\"");
    }
    free(ranked);
    return rc;
}

const PrefType pref_zephyr_types[] = {
    {.name = "zephyr.nectar", .loaders = PREF_LOADER_DPO, .row = nectar}, {.name = NULL}};
