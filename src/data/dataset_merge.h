/* How Axolotl merges the datasets of a config into one: concatenated in config order and
 * shuffled with `datasets`' own (NumPy) shuffle from `seed` (utils/data/shared.py
 * merge_datasets, Axolotl 0.19; common/numpy_pcg64.h). The loaders (sft_dataset, pref_dataset,
 * grpo_dataset) apply it where Axolotl does, so training, evaluation and `rlhf preprocess` all
 * see the merged order. */
#ifndef RLHF_DATA_DATASET_MERGE_H
#define RLHF_DATA_DATASET_MERGE_H

#include "config/train_config.h"

#include <stddef.h>

/* The row order Axolotl's merge_datasets (utils/data/shared.py, 0.19) gives datasets of
 * part_rows[0 .. n_parts) rows, concatenated in config order, as *order (new array of the total
 * n, caller frees: row i of the merged dataset is row (*order)[i] of the concatenation), or NULL
 * when the rows keep their order. With one dataset: shuffled when shuffle_merged_datasets
 * (shuffle_before_merging_datasets plays no part). With several: each one shuffled first when
 * shuffle_before_merging_datasets, then the whole when shuffle_merged_datasets. Every shuffle
 * is `datasets`' Dataset.shuffle(seed=seed): np.random.default_rng(seed).permutation(rows)
 * (common/numpy_pcg64.h), a fresh generator each time. Axolotl does this for SFT on the
 * tokenised rows before long ones are dropped, and for rl: (GRPO too) after each dataset's long
 * rows are dropped; test_datasets are merged the same way. Returns 0, or -1 with an error naming
 * the config when a shuffle is due and seed is negative (NumPy refuses it). */
int dataset_merge_order(const TrainConfig *cfg, const size_t *part_rows, int n_parts,
                        size_t **order);

/* Reorders an array of n items of `size` bytes so that item i becomes the old item order[i]. */
void dataset_permute(void *items, size_t n, size_t size, const size_t *order);

#endif
