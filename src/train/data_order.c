#include "train/data_order.h"

#include "common/error.h"
#include "common/torch_generator.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* order = the next torch.randperm(n) of g. */
static void next_randperm(TorchGenerator *g, size_t *order, size_t n) {
    int64_t *perm = xmalloc((n ? n : 1) * sizeof *perm);
    torch_randperm(g, perm, (int64_t)n);
    for (size_t i = 0; i < n; i++)
        order[i] = (size_t)perm[i];
    free(perm);
}

void data_order_shuffle(size_t *order, size_t n, int64_t seed, int64_t epoch) {
    TorchGenerator g;
    /* SeedableRandomSampler: manual_seed(initial_seed + epoch), Python integers (no overflow
     * there; a seed near INT64_MAX wraps here, and torch keeps only the low 32 bits anyway). */
    torch_generator_seed(&g, (int64_t)((uint64_t)seed + (uint64_t)epoch));
    next_randperm(&g, order, n);
}

void data_order_shuffle_repeat_sampler(size_t *order, size_t n, int64_t seed, int64_t epoch) {
    TorchGenerator g;
    torch_generator_seed(&g, seed);
    for (int64_t e = 0; e <= epoch; e++)
        next_randperm(&g, order, n);
}

int data_order_validation_draw(size_t n, const TrainConfig *cfg, size_t **order, size_t *n_val) {
    *order = NULL;
    *n_val = 0;
    if (cfg->val_set_size <= 0) return 0;
    *n_val = cfg->val_set_size < 1 ? (size_t)ceil(cfg->val_set_size * (double)n)
                                   : (size_t)cfg->val_set_size;
    if (*n_val >= n)
        return err_set("%s: val_set_size %g leaves no training example (%zu in the datasets)",
                       cfg->source, cfg->val_set_size, n);
    *order = xmalloc(n * sizeof **order);
    for (size_t i = 0; i < n; i++)
        (*order)[i] = i < *n_val ? n - *n_val + i : i - *n_val;
    return 0;
}

void data_order_move_held_out(void **items, size_t *n, size_t size, const size_t *order,
                              size_t n_val, void **held_out) {
    char *src = *items, *kept = xmalloc((*n - n_val) * size), *out = xmalloc(n_val * size);
    for (size_t i = 0; i < *n; i++)
        memcpy(i < n_val ? out + i * size : kept + (i - n_val) * size, src + order[i] * size, size);
    free(*items);
    *items = kept;
    *held_out = out;
    *n -= n_val;
}
