/* `rlhf score` end to end on a fixture model: the sums it prints match the ones computed
 * from transformers' log-probs (reference.json "score"), and --out writes the same lines.
 * Usage: test_score_cli FIXTURE_DIR */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* Each output line of `path` against the reference entries `want` (1e-4 relative). */
static void compare_scores(const char *path, json_t *want) {
    char *text = NULL;
    size_t len = 0;
    CHECK(read_file(path, &text, &len) == 0, "read %s", path);
    size_t line = 0;
    for (char *save = NULL, *tok = text ? strtok_r(text, "\n", &save) : NULL; tok;
         tok = strtok_r(NULL, "\n", &save), line++) {
        json_t *got;
        CHECK(json_load_text(tok, strlen(tok), "output", &got) == 0, "output line %zu: %s", line,
              tok);
        json_t *w = json_array_get(want, line);
        double got_logp = json_number_value(json_object_get(got, "logp"));
        double want_logp = json_number_value(json_object_get(w, "logp"));
        int tokens = (int)json_integer_value(json_object_get(got, "tokens"));
        CHECK(harness_close(got_logp, want_logp, 1e-4, 0), "line %zu logp %.7f vs %.7f", line,
              got_logp, want_logp);
        CHECK(tokens == (int)json_integer_value(json_object_get(w, "tokens")), "line %zu tokens",
              line);
        CHECK(harness_close(json_number_value(json_object_get(got, "mean_logp")),
                            json_number_value(json_object_get(w, "mean_logp")), 1e-4, 0),
              "line %zu mean_logp", line);
        json_decref(got);
    }
    CHECK(line == json_array_size(want) && line > 0, "%zu output lines for %zu inputs", line,
          json_array_size(want));
    free(text);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
        return 2;
    }
    char data[4096], ref_path[4096], out[4096];
    snprintf(data, sizeof data, "%s/score.jsonl", argv[1]);
    snprintf(ref_path, sizeof ref_path, "%s/reference.json", argv[1]);
    snprintf(out, sizeof out, "%s/scores.jsonl", harness_tmpdir());

    char *args[] = {"--model", argv[1], "--data", data, "--out", out, "--batch-size", "2"};
    CHECK(cli_score(8, args) == CLI_EXIT_OK, "rlhf score failed: %s", err_msg());

    json_t *ref;
    if (json_load_path(ref_path, &ref) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    compare_scores(out, json_object_get(ref, "score"));

    /* Text lines, where the fixture has them: tokenised by the model directory's tokenizer and
     * compared with transformers' AutoTokenizer + model (make_text_score_fixture.py). */
    char text_data[4096], text_out[4096];
    snprintf(text_data, sizeof text_data, "%s/score_text.jsonl", argv[1]);
    snprintf(text_out, sizeof text_out, "%s/scores-text.jsonl", harness_tmpdir());
    if (file_exists(text_data)) {
        char *targs[] = {"--model", argv[1], "--data", text_data, "--out", text_out};
        CHECK(cli_score(6, targs) == CLI_EXIT_OK, "rlhf score (text) failed: %s", err_msg());
        compare_scores(text_out, json_object_get(ref, "score_text"));
    }

    /* Invariant: a score does not depend on the batch it was padded into. */
    {
        char single[4096];
        snprintf(single, sizeof single, "%s/scores-batch1.jsonl", harness_tmpdir());
        char *args1[] = {"--model", argv[1], "--data", data, "--out", single, "--batch-size", "1"};
        CHECK(cli_score(8, args1) == CLI_EXIT_OK, "batch size 1: %s", err_msg());
        char *a = NULL, *b = NULL;
        CHECK(read_file(out, &a, NULL) == 0 && read_file(single, &b, NULL) == 0, "read outputs");
        for (char *sa = NULL, *sb = NULL, *la = a ? strtok_r(a, "\n", &sa) : NULL,
                  *lb = b ? strtok_r(b, "\n", &sb) : NULL;
             la && lb; la = strtok_r(NULL, "\n", &sa), lb = strtok_r(NULL, "\n", &sb)) {
            double x = strtod(strstr(la, "\"logp\": ") + 8, NULL);
            double y = strtod(strstr(lb, "\"logp\": ") + 8, NULL);
            CHECK(harness_close(y, x, 1e-5, 0), "batch 1 vs one batch: %.7f vs %.7f", y, x);
        }
        free(a);
        free(b);
    }

    json_decref(ref);
    return harness_finish("test_score_cli");
}
