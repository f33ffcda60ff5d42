#include "io/hf_weights.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"

#include <stdlib.h>
#include <string.h>

static int open_single(HfWeights *w, const char *path) {
    w->files = xcalloc(1, sizeof *w->files);
    if (safetensors_open(&w->files[0], path) != 0) return -1;
    w->n_files = 1;
    return 0;
}

static int find_file_index(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

static int open_sharded(HfWeights *w, const char *dir, const char *index_path) {
    json_t *root;
    if (json_load_path(index_path, &root) != 0) return -1;
    int rc = -1;
    const char **names = NULL;
    int n_names = 0;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0) {
        err_set("%s: key 'weight_map': expected a non-empty object of tensor name -> file",
                index_path);
        goto done;
    }
    names = xcalloc(json_object_size(map), sizeof *names);
    const char *tensor;
    json_t *file;
    json_object_foreach(map, tensor, file) {
        const char *f = json_string_value(file);
        if (!f || strchr(f, '/') || strcmp(f, "..") == 0) {
            err_set("%s: weight_map[\"%s\"]: expected a file name in the same directory",
                    index_path, tensor);
            goto done;
        }
        if (find_file_index(names, n_names, f) < 0) names[n_names++] = f;
    }
    w->files = xcalloc((size_t)n_names, sizeof *w->files);
    for (int i = 0; i < n_names; i++) {
        char path[4096];
        if (path_join(path, sizeof path, dir, names[i]) != 0) goto done;
        if (safetensors_open(&w->files[i], path) != 0) {
            if (!file_exists(path))
                err_set("%s: shard %s named by the index is missing", index_path, path);
            goto done;
        }
        w->n_files = i + 1;
    }
    json_object_foreach(map, tensor, file) {
        int i = find_file_index(names, n_names, json_string_value(file));
        if (!safetensors_find(&w->files[i], tensor)) {
            err_set("%s: tensor \"%s\" is listed in %s but that file does not contain it",
                    index_path, tensor, names[i]);
            goto done;
        }
    }
    for (int i = 0; i < n_names; i++) {
        for (size_t t = 0; t < w->files[i].n_tensors; t++) {
            const char *name = w->files[i].tensors[t].name;
            for (int j = i + 1; j < n_names; j++) {
                if (safetensors_find(&w->files[j], name)) {
                    err_set("%s: tensor \"%s\" appears in both %s and %s", dir, name, names[i],
                            names[j]);
                    goto done;
                }
            }
        }
    }
    rc = 0;
done:
    free(names);
    json_decref(root);
    return rc;
}

int hf_weights_open(HfWeights *w, const char *dir) {
    memset(w, 0, sizeof *w);
    char single[4096], index[4096], legacy[4096];
    if (path_join(single, sizeof single, dir, "model.safetensors") != 0 ||
        path_join(index, sizeof index, dir, "model.safetensors.index.json") != 0 ||
        path_join(legacy, sizeof legacy, dir, "pytorch_model.bin") != 0)
        return -1;
    int rc;
    if (file_exists(single)) {
        rc = open_single(w, single);
    } else if (file_exists(index)) {
        rc = open_sharded(w, dir, index);
    } else if (file_exists(legacy)) {
        return err_set(
            "%s: only pickle weights (pytorch_model.bin) found; rlhf.c reads safetensors "
            "only (re-save with save_pretrained(safe_serialization=True))",
            dir);
    } else {
        return err_set("%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    if (rc != 0) hf_weights_close(w);
    return rc;
}

const SafetensorsTensor *hf_weights_find(const HfWeights *w, const char *name) {
    for (int i = 0; i < w->n_files; i++) {
        const SafetensorsTensor *t = safetensors_find(&w->files[i], name);
        if (t) return t;
    }
    return NULL;
}

int hf_weights_for_each(const HfWeights *w,
                        int (*fn)(const SafetensorsTensor *t, const char *file, void *ctx),
                        void *ctx) {
    for (int i = 0; i < w->n_files; i++) {
        for (size_t t = 0; t < w->files[i].n_tensors; t++) {
            int rc = fn(&w->files[i].tensors[t], w->files[i].path, ctx);
            if (rc) return rc;
        }
    }
    return 0;
}

void hf_weights_close(HfWeights *w) {
    for (int i = 0; i < w->n_files; i++)
        safetensors_close(&w->files[i]);
    free(w->files);
    memset(w, 0, sizeof *w);
}
