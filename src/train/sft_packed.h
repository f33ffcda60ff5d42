/* SFT with sample_packing (data/sample_packing.h) as Axolotl's trainer runs it: the training
 * examples packed once into rows of micro_batch_size x sequence_len tokens, a micro-batch of
 * packed rows, and the packed evaluation (eval_sample_packing). */
#ifndef RLHF_TRAIN_SFT_PACKED_H
#define RLHF_TRAIN_SFT_PACKED_H

#include "config/train_config.h"
#include "data/sample_packing.h"
#include "model/model.h"
#include "train/trainer.h"

#include <stdbool.h>
#include <stdio.h>

/* Tokens a packed row holds: micro_batch_size x sequence_len, or sequence_len with
 * multipack_real_batches; and the rows of a micro-batch (1, or micro_batch_size). */
int64_t sft_packed_row_tokens(const TrainConfig *cfg);
int64_t sft_packed_rows_per_micro_batch(const TrainConfig *cfg);

/* Packs ds's examples into bins as cfg says (capacity sft_packed_row_tokens,
 * sample_packing_bin_size / group_size / sequentially) and logs what it made. shuffled: in the
 * order of the (seed, epoch 0) shuffle, as Axolotl packs the RandomSampler's order for
 * training; the training loop then shuffles the rows every epoch (rlhf.c packs once per run,
 * Axolotl again every epoch). Else in dataset order (Axolotl's SequentialSampler for
 * evaluation). Cannot fail. */
void sft_packed_plan(const TrainConfig *cfg, const SftDataset *ds, bool shuffled, PackedBins *bins,
                     FILE *log);

/* Rows bins[order[first .. first+count)] as one micro-batch (rows receives its arrays, freed
 * with sample_packing_rows_free); *tokens gets its real tokens. Cannot fail. */
MicroBatch sft_packed_micro_batch(const SftDataset *ds, const PackedBins *bins, const size_t *order,
                                  size_t first, int count, int32_t pad_id, PackedRows *rows,
                                  size_t *tokens);

/* HF's evaluation loop over batches of rows_per_batch packed rows (the last may be shorter): each
 * batch's loss is its mean NLL over its label tokens (the model's loss without
 * num_items_in_batch), weighed by its rows (HF repeats it batch-size times), batches without a
 * label left out as HF drops their NaN. Over several ranks batch k is rank k % world's and the
 * sums are taken over ranks. Returns 0, or -1 with an error. */
int sft_packed_evaluate(Model *m, const SftDataset *val, const PackedBins *bins,
                        int64_t rows_per_batch, int32_t pad_id, double *loss);

#endif
