/* A torch generator's state in a file, for checkpoints (common/torch_generator.h). */
#include "common/error.h"
#include "common/json_util.h"
#include "common/torch_generator.h"

#include <jansson.h>

int torch_generator_save(const TorchGenerator *g, const char *path) {
    json_t *words = json_array();
    for (int i = 0; i < TORCH_MT_STATE_WORDS; i++)
        json_array_append_new(words, json_integer((json_int_t)g->state[i]));
    json_t *doc = json_pack("{s:o,s:i,s:i}", "mt19937", words, "left", g->left, "next", g->next);
    int rc = json_dump_file(doc, path, JSON_COMPACT) == 0
                 ? 0
                 : err_set("%s: cannot write torch's generator state", path);
    json_decref(doc);
    return rc;
}

int torch_generator_load(TorchGenerator *g, const char *path) {
    json_t *doc = NULL;
    if (json_load_path(path, &doc) != 0) return -1;
    TorchGenerator t;
    const json_t *words = json_object_get(doc, "mt19937");
    int64_t left = 0, next = -1;
    int rc = json_is_array(words) && json_array_size(words) == TORCH_MT_STATE_WORDS
                 ? 0
                 : err_set("%s: key 'mt19937': expected an array of %d words", path,
                           TORCH_MT_STATE_WORDS);
    for (int i = 0; i < TORCH_MT_STATE_WORDS && rc == 0; i++) {
        const json_t *w = json_array_get(words, (size_t)i);
        json_int_t v = json_integer_value(w);
        if (!json_is_integer(w) || v < 0 || v > (json_int_t)UINT32_MAX)
            rc = err_set("%s: key 'mt19937': word %d is not a 32-bit unsigned integer", path, i);
        t.state[i] = (uint32_t)v;
    }
    if (rc == 0 &&
        (json_get_int64(doc, "left", &left) != 1 || left < 1 || left > TORCH_MT_STATE_WORDS))
        rc = err_set("%s: key 'left': expected an integer in 1 .. %d", path, TORCH_MT_STATE_WORDS);
    if (rc == 0 &&
        (json_get_int64(doc, "next", &next) != 1 || next < 0 || next > TORCH_MT_STATE_WORDS))
        rc = err_set("%s: key 'next': expected an integer in 0 .. %d", path, TORCH_MT_STATE_WORDS);
    json_decref(doc);
    if (rc != 0) return -1;
    t.left = (int)left, t.next = (int)next;
    *g = t;
    return 0;
}
