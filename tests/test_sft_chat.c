/* The chat_template SFT type against Axolotl's own ChatTemplateStrategy
 * (tests/fixtures/sft_chat, made by tools/reference/make_sft_chat_fixtures.py with Axolotl
 * 0.19.0): for every dataset configuration and row, the same input ids and the same trained
 * positions. */
#include "common/error.h"
#include "common/json_util.h"
#include "data/sft_chat.h"
#include "data/sft_dataset.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

int main(void) {
    char tok_dir[4096];
    snprintf(tok_dir, sizeof tok_dir, "%s",
             harness_source_path("tests/fixtures/sft_chat/tokenizer"));
    Tokenizer tok;
    if (tokenizer_load(&tok, tok_dir) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    int32_t eos, pad;
    CHECK(tokenizer_special_ids(tok_dir, &tok, &eos, &pad) == 0 && eos >= 0, "eos: %s", err_msg());
    json_t *fixture;
    if (json_load_path(harness_source_path("tests/fixtures/sft_chat/cases.json"), &fixture) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    TrainConfig cfg = {0};
    cfg.source = "cases.json";
    cfg.tokenizer_config = tok_dir;
    size_t ci;
    json_t *c;
    int examples = 0;
    json_array_foreach(json_object_get(fixture, "cases"), ci, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        DatasetConfig dc = {0};
        dc.options = json_deep_copy(json_object_get(c, "dataset"));
        json_object_set_new(dc.options, "type", json_string("chat_template"));
        ChatSftStrategy s;
        CHECK(chat_sft_init(&s, &cfg, &dc, 0, &tok, eos) == 0, "%s: %s", name, err_msg());
        size_t ei;
        json_t *e;
        json_array_foreach(json_object_get(c, "examples"), ei, e) {
            int32_t *ids = NULL;
            uint8_t *labels = NULL;
            size_t n = 0;
            CHECK(chat_sft_example(&s, json_object_get(e, "row"), &ids, &labels, &n) == 0,
                  "%s[%zu]: %s", name, ei, err_msg());
            json_t *want_ids = json_object_get(e, "input_ids"),
                   *want_labels = json_object_get(e, "labels");
            CHECK(n == json_array_size(want_ids), "%s[%zu]: %zu ids, Axolotl %zu", name, ei, n,
                  json_array_size(want_ids));
            int id_bad = 0, label_bad = 0;
            for (size_t t = 0; t < n && t < json_array_size(want_ids); t++) {
                id_bad += ids[t] != (int32_t)json_integer_value(json_array_get(want_ids, t));
                bool trained = json_integer_value(json_array_get(want_labels, t)) != -100;
                label_bad += (labels[t] != 0) != trained;
            }
            CHECK(id_bad == 0, "%s[%zu]: %d ids differ from Axolotl's", name, ei, id_bad);
            CHECK(label_bad == 0, "%s[%zu]: %d trained positions differ from Axolotl's", name, ei,
                  label_bad);
            examples++;
            free(ids);
            free(labels);
        }
        chat_sft_free(&s);
        json_decref(dc.options);
    }
    CHECK(examples >= 19, "%d examples compared", examples);
    printf("%d chat examples match Axolotl %s\n", examples,
           json_string_value(json_object_get(fixture, "axolotl_version")));

    /* bad inputs: a missing conversation field, an unknown template, a bad option */
    DatasetConfig dc = {0};
    dc.options = json_pack("{s:s}", "type", "chat_template");
    ChatSftStrategy s;
    CHECK(chat_sft_init(&s, &cfg, &dc, 0, &tok, eos) == 0, "%s", err_msg());
    json_t *row = json_pack("{s:[]}", "conversations");
    int32_t *ids;
    uint8_t *labels;
    size_t n;
    CHECK(chat_sft_example(&s, row, &ids, &labels, &n) != 0 && strstr(err_msg(), "\"messages\""),
          "missing messages: %s", err_msg());
    json_decref(row);
    chat_sft_free(&s);
    json_object_set_new(dc.options, "chat_template", json_string("no_such_template"));
    CHECK(chat_sft_init(&s, &cfg, &dc, 0, &tok, eos) != 0 && strstr(err_msg(), "no_such_template"),
          "unknown template: %s", err_msg());
    json_object_set_new(dc.options, "chat_template", json_string("chatml"));
    json_object_set_new(dc.options, "train_on_eos", json_string("sometimes"));
    CHECK(chat_sft_init(&s, &cfg, &dc, 0, &tok, eos) != 0 && strstr(err_msg(), "train_on_eos"),
          "bad train_on_eos: %s", err_msg());
    json_decref(dc.options);
    json_decref(fixture);
    tokenizer_free(&tok);
    return harness_finish("test_sft_chat");
}
