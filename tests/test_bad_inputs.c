/* Broken model directories and data files: each gives one clear error (naming the file and
 * what is wrong), a non-zero exit status, no crash, and leaves an existing --out untouched. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "harness.h"
#include "io/safetensors.h"
#include "model/model.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define GOOD_MODEL "tests/fixtures/models/llama_tied"

static char *slurp(const char *path, size_t *len) {
    char *data = NULL;
    if (read_file(path, &data, len) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        exit(1);
    }
    return data;
}

/* Copies the good fixture model to DIR, with its config.json and model.safetensors replaced
 * by the given bytes when non-NULL. */
static const char *make_model(const char *name, const char *config, size_t config_len,
                              const char *weights, size_t weights_len) {
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", harness_tmpdir(), name);
    mkdir(dir, 0755);
    char path[4200];
    size_t len;
    char *good_config = slurp(harness_source_path(GOOD_MODEL "/config.json"), &len);
    snprintf(path, sizeof path, "%s/config.json", dir);
    harness_write_file(path, config ? config : good_config, config ? config_len : len);
    free(good_config);
    char *good_weights = slurp(harness_source_path(GOOD_MODEL "/model.safetensors"), &len);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    harness_write_file(path, weights ? weights : good_weights, weights ? weights_len : len);
    free(good_weights);
    return dir;
}

static void expect_score_error(const char *model, const char *data, const char *want1,
                               const char *want2) {
    const char *out = harness_tmp_path("out.jsonl");
    harness_write_file(out, "previous results\n", 17);
    char *args[] = {"--model", (char *)model, "--data", (char *)data, "--out", (char *)out};
    err_clear();
    int rc = cli_score(6, args);
    CHECK(rc == CLI_EXIT_FAILURE, "exit status %d for %s", rc, want1);
    CHECK(strstr(err_msg(), want1) != NULL, "message \"%s\" lacks \"%s\"", err_msg(), want1);
    CHECK(!want2 || strstr(err_msg(), want2) != NULL, "message \"%s\" lacks \"%s\"", err_msg(),
          want2);
    size_t len;
    char *kept = slurp(out, &len);
    CHECK(len == 17 && memcmp(kept, "previous results\n", 17) == 0, "--out was modified");
    free(kept);
}

static char *replace_once(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    if (!at) {
        fprintf(stderr, "fixture lacks \"%s\"\n", from);
        exit(1);
    }
    size_t head = (size_t)(at - text), nf = strlen(from), nt = strlen(to), tail = strlen(at + nf);
    char *r = malloc(head + nt + tail + 1);
    memcpy(r, text, head);
    memcpy(r + head, to, nt);
    memcpy(r + head + nt, at + nf, tail + 1);
    return r;
}

int main(void) {
    const char *good_data = harness_source_path(GOOD_MODEL "/score.jsonl");
    char data_path[4096];
    snprintf(data_path, sizeof data_path, "%s", good_data);
    size_t wlen, clen;
    char *weights = slurp(harness_source_path(GOOD_MODEL "/model.safetensors"), &wlen);
    char *config = slurp(harness_source_path(GOOD_MODEL "/config.json"), &clen);

    /* truncated safetensors */
    expect_score_error(make_model("truncated", NULL, 0, weights, wlen / 2), data_path,
                       "model.safetensors", "truncated");

    /* a header offset past the end of the file: the last tensor's end grows by 4 bytes */
    {
        char *w = malloc(wlen);
        memcpy(w, weights, wlen);
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--)
            n = (n << 8) | (uint8_t)w[i];
        char *hdr = strndup(w + 8, n);
        char *last = strrchr(hdr, '[');
        unsigned long long b = 0, e = 0;
        sscanf(last, "[%llu,%llu]", &b, &e);
        char from[64], to[64];
        snprintf(from, sizeof from, "[%llu,%llu]", b, e);
        snprintf(to, sizeof to, "[%llu,%llu]", b, e + 4);
        CHECK(strlen(from) == strlen(to), "same-length edit");
        memcpy(w + 8 + (last - hdr), to, strlen(to));
        expect_score_error(make_model("offset-past-end", NULL, 0, w, wlen), data_path,
                           "model.safetensors", "needs");
        free(hdr);
        free(w);
    }

    /* a wrong dtype string, same length so every offset stays valid */
    {
        char *w = malloc(wlen);
        memcpy(w, weights, wlen);
        char *d = memmem(w, wlen, "\"F32\"", 5);
        memcpy(d, "\"F3X\"", 5);
        expect_score_error(make_model("bad-dtype", NULL, 0, w, wlen), data_path,
                           "unknown dtype \"F3X\"", "model.safetensors");
        free(w);
    }

    /* config.json disagrees with the tensors */
    {
        char *c = replace_once(config, "\"intermediate_size\": 64", "\"intermediate_size\": 48");
        expect_score_error(
            make_model("shape", c, strlen(c), NULL, 0), data_path,
            "mlp.gate_proj.weight\" has shape [64, 32] but config.json implies [48, 32]", NULL);
        free(c);
    }
    {
        char *c = replace_once(config, "\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"");
        expect_score_error(make_model("model-type", c, strlen(c), NULL, 0), data_path,
                           "config.json: key 'model_type': \"gpt2\" is not supported", NULL);
        free(c);
    }
    {
        char *c = replace_once(config, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3");
        expect_score_error(make_model("kv-heads", c, strlen(c), NULL, 0), data_path,
                           "num_key_value_heads", "does not divide");
        free(c);
    }
    expect_score_error(make_model("config-syntax", "{\"model_type\": ", 15, NULL, 0), data_path,
                       "config.json:1:", "invalid JSON");
    expect_score_error(harness_tmp_path("no-such-dir"), data_path, "config.json: not found", NULL);

    /* a tensor missing, and one the config knows nothing about */
    {
        Model m;
        CHECK(model_load(&m, harness_source_path(GOOD_MODEL)) == 0, "load: %s", err_msg());
        int n = m.n_param_tensors;
        SafetensorsWriteTensor *t = calloc((size_t)n + 1, sizeof *t);
        for (int i = 0; i < n; i++) {
            const ParamInfo *p = &m.param_info[i];
            t[i] = (SafetensorsWriteTensor){
                p->name, ST_F32, p->ndim, {p->shape[0], p->shape[1]}, m.params + p->offset};
        }
        const char *dir = make_model("missing-tensor", NULL, 0, NULL, 0);
        char path[4200];
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        int norm = (int)(model_find_param(&m, "model.norm.weight") - m.param_info);
        t[norm] = t[n - 1];
        CHECK(safetensors_write(path, t, (size_t)n - 1) == 0, "write: %s", err_msg());
        expect_score_error(dir, data_path, "tensor \"model.norm.weight\" is missing", NULL);

        dir = make_model("extra-tensor", NULL, 0, NULL, 0);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        t[norm] = (SafetensorsWriteTensor){"model.norm.weight", ST_F32, 1, {32}, m.final_norm};
        t[n] = (SafetensorsWriteTensor){
            "model.layers.0.self_attn.q_proj.lora_A.weight", ST_F32, 1, {4}, m.params};
        CHECK(safetensors_write(path, t, (size_t)n + 1) == 0, "write: %s", err_msg());
        expect_score_error(dir, data_path,
                           "unexpected tensor \"model.layers.0.self_attn.q_proj.lora_A", NULL);
        free(t);
        model_free(&m);
    }

    /* a sharded checkpoint whose index names a shard that is not there */
    {
        const char *dir = make_model("missing-shard", NULL, 0, NULL, 0);
        char path[4200];
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        remove(path);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        const char *index = "{\"metadata\": {}, \"weight_map\": {\"model.norm.weight\": "
                            "\"model-00002-of-00002.safetensors\"}}";
        harness_write_file(path, index, strlen(index));
        expect_score_error(dir, data_path, "model-00002-of-00002.safetensors", "missing");
    }

    /* malformed JSONL: the error names the file and the line */
    const char *model = make_model("good", NULL, 0, NULL, 0);
    static const struct {
        const char *text, *want1, *want2;
    } rows[] = {
        {"{\"prompt_ids\": [1, 2], \"completion_ids\": [3]}\n{\"prompt_ids\": [1, 2\n",
         "bad.jsonl:2: invalid JSON", "column 20"},
        {"{\"prompt_ids\": [1], \"completion_ids\": [3]}\n\n{\"completion_ids\": [3]}\n",
         "bad.jsonl:3:", "missing field \"prompt_ids\""},
        {"{\"prompt_ids\": [1], \"completion_ids\": [999]}\n",
         "bad.jsonl:1:", "outside the vocabulary"},
        {"{\"prompt_ids\": [], \"completion_ids\": [3]}\n", "bad.jsonl:1:", "at least one token"},
        {"{\"prompt_ids\": [1], \"completion_ids\": [\"a\"]}\n",
         "bad.jsonl:1:", "expected an integer"},
        {"[1, 2]\n", "bad.jsonl:1:", "expected a JSON object"},
        {"\n\n", "bad.jsonl", "empty"},
        {"{\"prompt\": \"hi\", \"completion\": \" there\"}\n",
         "bad.jsonl:1:", "text input needs a tokenizer"},
        {"{\"prompt\": 3, \"completion\": \"x\"}\n",
         "bad.jsonl:1:", "field \"prompt\": expected a string"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/bad.jsonl", harness_tmpdir());
        harness_write_file(path, rows[i].text, strlen(rows[i].text));
        expect_score_error(model, path, rows[i].want1, rows[i].want2);
    }

    /* text that tokenises to ids beyond a model's vocabulary, and an unloadable --tokenizer */
    {
        char path[4096];
        snprintf(path, sizeof path, "%s/text.jsonl", harness_tmpdir());
        const char *line = "{\"prompt\": \"The quick brown fox\", \"completion\": \" jumps\"}\n";
        harness_write_file(path, line, strlen(line));
        const char *tok_dir = harness_source_path("tests/fixtures/tokenizers/llama3_bytelevel");
        char tok_copy[4096];
        snprintf(tok_copy, sizeof tok_copy, "%s", tok_dir);
        char *args[] = {"--model", (char *)model, "--data", path, "--tokenizer", tok_copy};
        CHECK(cli_score(6, args) == CLI_EXIT_FAILURE && strstr(err_msg(), "text.jsonl:1:") &&
                  strstr(err_msg(), "outside the model's vocabulary"),
              "ids beyond the vocabulary: %s", err_msg());
        char *args2[] = {"--model", (char *)model, "--data",
                         path,      "--tokenizer", (char *)harness_tmp_path("nope")};
        CHECK(cli_score(6, args2) == CLI_EXIT_FAILURE && strstr(err_msg(), "nope"),
              "missing --tokenizer: %s", err_msg());
    }

    /* the real program: exit status 1 and the message on stderr, 2 for bad usage */
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/rlhf score --model %s --data %s > %s 2>&1", RLHF_BINARY_DIR,
             harness_tmp_path("no-such-dir"), data_path, harness_tmp_path("stderr.txt"));
    int status = system(cmd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "rlhf exit status %d", status);
    size_t len;
    char *printed = slurp(harness_tmp_path("stderr.txt"), &len);
    CHECK(strstr(printed, "rlhf: error: ") && strstr(printed, "config.json: not found"),
          "stderr: %s", printed);
    free(printed);
    snprintf(cmd, sizeof cmd, "%s/rlhf score --bogus > /dev/null 2>&1", RLHF_BINARY_DIR);
    status = system(cmd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2, "usage error exit status %d", status);

    free(weights);
    free(config);
    return harness_finish("test_bad_inputs");
}
