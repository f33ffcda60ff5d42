#include "grpo/grpo_batch.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

static int32_t *ids_filled(size_t n, int32_t pad_id) {
    int32_t *p = xmalloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = pad_id;
    return p;
}

void grpo_batch_alloc(GrpoBatch *b, int n_rows, int group_size, int prompt_w, int completion_w,
                      int32_t pad_id, bool with_old_logps, bool with_ref_logps) {
    size_t rows = (size_t)n_rows, pc = rows * (size_t)prompt_w, cc = rows * (size_t)completion_w;
    *b = (GrpoBatch){.n_rows = n_rows,
                     .group_size = group_size,
                     .prompt_w = prompt_w,
                     .completion_w = completion_w,
                     .pad_id = pad_id};
    b->prompt_ids = ids_filled(pc, pad_id);
    b->prompt_mask = xcalloc(pc ? pc : 1, 1);
    b->completion_ids = ids_filled(cc, pad_id);
    b->completion_mask = xcalloc(cc ? cc : 1, 1);
    b->prompt_len = xcalloc(rows ? rows : 1, sizeof(int));
    b->completion_len = xcalloc(rows ? rows : 1, sizeof(int));
    b->advantages = xcalloc(rows ? rows : 1, sizeof(float));
    if (with_old_logps) b->old_logps = xcalloc(cc ? cc : 1, sizeof(float));
    if (with_ref_logps) b->ref_logps = xcalloc(cc ? cc : 1, sizeof(float));
}

void grpo_batch_free(GrpoBatch *b) {
    free(b->prompt_ids), free(b->prompt_mask), free(b->completion_ids), free(b->completion_mask);
    free(b->prompt_len), free(b->completion_len), free(b->advantages);
    free(b->old_logps), free(b->ref_logps), free(b->env_mask);
    memset(b, 0, sizeof *b);
}
