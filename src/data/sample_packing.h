/* Axolotl's sample packing (multipack) for SFT: which examples share a row, and the row they
 * make. As axolotl.utils.samplers.multipack.MultipackBatchSampler with a varlen attention
 * (flash_attention; multipack_real_batches off: one bin per micro-batch), or with sdpa/eager
 * (multipack_real_batches: bins of sequence_len, micro_batch_size of them a micro-batch; Axolotl
 * drops an incomplete last batch, rlhf.c, packing once per run, keeps it):
 *  - a bin holds up to `capacity` tokens (micro_batch_size x sequence_len, or sequence_len) and
 *    `bin_size` examples (sample_packing_bin_size, 200);
 *  - examples are taken in the order given (the shuffled order), group_size at a time
 *    (sample_packing_group_size, 100000), each placed in the first bin of its group with room
 *    for it, else a new bin (first-fit, pack_group); bins never mix groups;
 *  - sample_packing_sequentially: next-fit instead (allocate_sequentially): an example that
 *    does not fit closes the bin, so bins hold runs of the order; bin_size does not apply;
 *  - a bin is one row: its examples one after the other, positions restarting at 0 at each,
 *    attention not crossing from one to the next (V2BatchSamplerDataCollatorForSeq2Seq's
 *    concatenation, with transformers' varlen attention over the reset position_ids). Labels are
 *    concatenated as they are: an example's first token, where it is a label, is predicted
 *    from the last token of the example before it, as HF's shifted loss does on the row. */
#ifndef RLHF_DATA_SAMPLE_PACKING_H
#define RLHF_DATA_SAMPLE_PACKING_H

#include "data/sft_dataset.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t capacity;   /* tokens per bin */
    int64_t bin_size;   /* most examples per bin (first-fit only) */
    int64_t group_size; /* examples packed independently of the rest (first-fit only) */
    bool sequential;    /* next-fit, keeping the order */
} PackingOptions;

/* Bin b holds examples members[start[b] .. start[b+1]), in the order they were placed. */
typedef struct {
    size_t n_bins;
    size_t *start;   /* (n_bins + 1) */
    size_t *members; /* (n examples packed) dataset indices */
    size_t tokens;   /* tokens of every packed example */
} PackedBins;

/* Packs examples order[0 .. n) of ds (each no longer than opt->capacity: the dataset drops or
 * cuts longer ones) into bins. capacity, bin_size and group_size must be >= 1. Cannot fail;
 * free with sample_packing_free. */
void sample_packing_pack(const SftDataset *ds, const size_t *order, size_t n,
                         const PackingOptions *opt, PackedBins *bins);
void sample_packing_free(PackedBins *bins);

/* The fraction of the bins' token slots the examples fill: tokens / (n_bins x capacity), as
 * Axolotl's MultipackBatchSampler.efficiency(). 0 without bins. */
double sample_packing_efficiency(const PackedBins *bins, int64_t capacity);

/* count bins laid out as a padded batch of `count` rows of t_len = the longest bin's tokens:
 * tokens (pad_id where padding), attn (1 real), positions (0.. within each example: where they
 * restart, a packed TokenBatch starts another sequence), labels (the examples' own,
 * except a row's first cell, which nothing predicts and HF's num_items_in_batch does not count:
 * it counts labels[..., 1:]). Arrays are malloc'd (free with sample_packing_rows_free). */
typedef struct {
    int rows, t_len;
    int32_t *tokens, *positions;
    uint8_t *attn, *labels;
    size_t tokens_real; /* real cells */
} PackedRows;

void sample_packing_rows(const SftDataset *ds, const PackedBins *bins, size_t first_bin, int count,
                         int32_t pad_id, PackedRows *out);
void sample_packing_rows_free(PackedRows *r);

#endif
