#include "common/error.h"
#include "common/float16.h"
#include "model/model.h"

#include "common/fileio.h"

#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes the tensors param_info[idx[0..n)] to one file. */
static int save_tensors(const Model *m, const char *path, SafetensorsDtype dtype, const int *idx,
                        int n) {
    if (m->params16) return err_set("%s: a model kept in bf16 in memory is not saved", path);
    if (dtype != ST_F32 && dtype != ST_BF16 && dtype != ST_F16)
        return err_set("%s: weights can be saved as F32, BF16 or F16, not %s", path,
                       safetensors_dtype_name(dtype));
    size_t total = 0;
    for (int j = 0; j < n; j++)
        total += m->param_info[idx[j]].numel;
    SafetensorsWriteTensor *t = xcalloc((size_t)(n ? n : 1), sizeof *t);
    uint16_t *half = NULL;
    if (dtype != ST_F32) {
        half = xmalloc_checked((total ? total : 1) * sizeof *half,
                               "half-precision copy of the weights");
        if (!half) {
            free(t);
            return -1;
        }
    }
    size_t at = 0;
    for (int j = 0; j < n; j++) {
        const ParamInfo *p = &m->param_info[idx[j]];
        const float *src = m->params + p->offset;
        t[j] = (SafetensorsWriteTensor){p->name, dtype, p->ndim, {p->shape[0], p->shape[1]}, src};
        if (half) {
            for (size_t i = 0; i < p->numel; i++)
                half[at + i] = dtype == ST_BF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
            t[j].data = half + at;
            at += p->numel;
        }
    }
    int rc = safetensors_write(path, t, (size_t)n);
    free(half);
    free(t);
    return rc;
}

int model_save_safetensors(const Model *m, const char *path, SafetensorsDtype dtype) {
    int *all = xmalloc((size_t)(m->n_param_tensors ? m->n_param_tensors : 1) * sizeof *all);
    for (int i = 0; i < m->n_param_tensors; i++)
        all[i] = i;
    int rc = save_tensors(m, path, dtype, all, m->n_param_tensors);
    free(all);
    return rc;
}

/* huggingface_hub's split: tensors in state-dict order fill the current shard until the next one
 * would overflow it; a tensor larger than the limit becomes a shard of its own at once, while the
 * shard being filled stays open. shard_of[i] gets tensor i's shard; returns the shard count. */
static int plan_shards(const Model *m, size_t elem_bytes, uint64_t limit, int *shard_of) {
    int n_shards = 0, open_from = -1; /* tensors in the open shard carry shard_of == -1 */
    uint64_t current = 0;
    for (int i = 0; i < m->n_param_tensors; i++) {
        uint64_t size = (uint64_t)m->param_info[i].numel * elem_bytes;
        shard_of[i] = -1;
        if (size > limit) {
            shard_of[i] = n_shards++;
            continue;
        }
        if (current + size > limit) {
            for (int j = open_from; j >= 0 && j < i; j++)
                if (shard_of[j] == -1) shard_of[j] = n_shards;
            n_shards++;
            current = 0;
            open_from = -1;
        }
        if (open_from < 0) open_from = i;
        current += size;
    }
    if (open_from >= 0) {
        for (int j = open_from; j < m->n_param_tensors; j++)
            if (shard_of[j] == -1) shard_of[j] = n_shards;
        n_shards++;
    }
    return n_shards;
}

static bool is_weight_file(const char *name) {
    size_t n = strlen(name);
    return strcmp(name, "model.safetensors") == 0 ||
           strcmp(name, "model.safetensors.index.json") == 0 ||
           (strncmp(name, "model-", 6) == 0 && n > 12 &&
            strcmp(name + n - 12, ".safetensors") == 0 && strstr(name, "-of-"));
}

/* Removes the weight files in dir that are not in keep[0..n_keep). */
static void remove_stale(const char *dir, char keep[][64], int n_keep) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_weight_file(e->d_name)) continue;
        bool kept = false;
        for (int i = 0; i < n_keep; i++)
            kept |= strcmp(keep[i], e->d_name) == 0;
        if (kept) continue;
        char path[4096];
        if (path_join(path, sizeof path, dir, e->d_name) == 0) unlink(path);
    }
    closedir(d);
}

static int write_index(const char *dir, const Model *m, const int *shard_of, size_t elem_bytes,
                       char names[][64]) {
    json_t *index = json_object(), *meta = json_object(), *map = json_object();
    size_t total_params = 0;
    for (int i = 0; i < m->n_param_tensors; i++)
        total_params += m->param_info[i].numel;
    json_object_set_new(meta, "total_parameters", json_integer((json_int_t)total_params));
    json_object_set_new(meta, "total_size", json_integer((json_int_t)(total_params * elem_bytes)));
    for (int i = 0; i < m->n_param_tensors; i++)
        json_object_set_new(map, m->param_info[i].name, json_string(names[shard_of[i]]));
    json_object_set_new(index, "metadata", meta);
    json_object_set_new(index, "weight_map", map);
    char *text = json_dumps(index, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(index);
    char path[4096];
    int rc = path_join(path, sizeof path, dir, "model.safetensors.index.json");
    if (rc == 0) {
        size_t len = strlen(text);
        text = xrealloc(text, len + 2);
        text[len] = '\n'; /* Python's json.dumps(...) + "\n" */
        rc = write_file_atomic(path, text, len + 1);
    }
    free(text);
    return rc;
}

int model_save_weights(const Model *m, const char *dir, SafetensorsDtype dtype,
                       uint64_t max_shard_bytes) {
    size_t elem = safetensors_dtype_size(dtype);
    int n = m->n_param_tensors;
    int *shard_of = xmalloc((size_t)(n ? n : 1) * sizeof *shard_of);
    int *members = xmalloc((size_t)(n ? n : 1) * sizeof *members);
    int n_shards = plan_shards(m, elem, max_shard_bytes, shard_of);
    char(*names)[64] = xcalloc((size_t)n_shards + 1, sizeof *names);
    int rc = 0;
    for (int k = 0; rc == 0 && k < n_shards; k++) {
        if (n_shards == 1)
            snprintf(names[k], sizeof names[k], "model.safetensors");
        else
            snprintf(names[k], sizeof names[k], "model-%05d-of-%05d.safetensors", k + 1, n_shards);
        int count = 0;
        for (int i = 0; i < n; i++)
            if (shard_of[i] == k) members[count++] = i;
        char path[4096];
        rc = path_join(path, sizeof path, dir, names[k]);
        if (rc == 0) rc = save_tensors(m, path, dtype, members, count);
    }
    if (rc == 0 && n_shards > 1) {
        rc = write_index(dir, m, shard_of, elem, names);
        snprintf(names[n_shards], sizeof names[0], "model.safetensors.index.json");
    }
    if (rc == 0) remove_stale(dir, names, n_shards == 1 ? 1 : n_shards + 1);
    free(names);
    free(members);
    free(shard_of);
    return rc;
}
