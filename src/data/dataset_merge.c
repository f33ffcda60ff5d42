#include "data/dataset_merge.h"

#include "common/error.h"
#include "common/numpy_pcg64.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Dataset.shuffle(seed=seed) of rows [first, first + n) of `order`, in place. */
static void numpy_shuffle_range(size_t *order, size_t first, size_t n, uint64_t seed) {
    size_t *perm = xmalloc((n ? n : 1) * sizeof *perm), *old = xmalloc((n ? n : 1) * sizeof *old);
    numpy_permutation_seeded(seed, perm, n);
    memcpy(old, order + first, n * sizeof *old);
    for (size_t i = 0; i < n; i++)
        order[first + i] = old[perm[i]];
    free(old);
    free(perm);
}

int dataset_merge_order(const TrainConfig *cfg, const size_t *part_rows, int n_parts,
                        size_t **order) {
    *order = NULL;
    bool before = n_parts > 1 && cfg->shuffle_before_merging_datasets;
    if (!cfg->shuffle_merged_datasets && !before) return 0;
    if (cfg->seed < 0)
        return err_set("%s: key 'seed': %lld is negative, and Axolotl's dataset shuffle "
                       "(shuffle_merged_datasets, on by default) takes NumPy's default_rng(seed), "
                       "which refuses negative seeds: use a seed >= 0 or "
                       "shuffle_merged_datasets: false",
                       cfg->source, (long long)cfg->seed);
    size_t n = 0;
    for (int p = 0; p < n_parts; p++)
        n += part_rows[p];
    *order = xmalloc((n ? n : 1) * sizeof **order);
    for (size_t i = 0; i < n; i++)
        (*order)[i] = i;
    for (size_t p = 0, first = 0; before && p < (size_t)n_parts; first += part_rows[p++])
        numpy_shuffle_range(*order, first, part_rows[p], (uint64_t)cfg->seed);
    if (cfg->shuffle_merged_datasets) numpy_shuffle_range(*order, 0, n, (uint64_t)cfg->seed);
    return 0;
}

void dataset_permute(void *items, size_t n, size_t size, const size_t *order) {
    char *old = xmalloc((n ? n : 1) * size), *dst = items;
    memcpy(old, items, n * size);
    for (size_t i = 0; i < n; i++)
        memcpy(dst + i * size, old + order[i] * size, size);
    free(old);
}
