/* Collation of preference pairs as TRL's DataCollatorForPreference does it (and, for ORPO and
 * CPO, as their concatenated_inputs do: the same layout): a micro-batch of B pairs becomes 2B
 * rows, the B prompt + chosen sequences then the B prompt + rejected ones (the rejected one with
 * its own prompt ids when the pair has them), each cut to its first max_len tokens (keep_start),
 * right-padded with pad_id. The completion mask marks the response tokens that survived the
 * cut. */
#ifndef RLHF_TRAIN_PREF_BATCH_H
#define RLHF_TRAIN_PREF_BATCH_H

#include "data/pref_dataset.h"
#include "train/trainer.h"

typedef struct {
    MicroBatch mb;       /* 2B rows; label_mask marks every position whose log-prob is needed */
    uint8_t *completion; /* (2B x T): 1 on the response tokens */
    int n_pairs;
    const size_t *pair_index; /* the dataset index of each pair (order[first ..]) */
    int32_t *tokens;          /* owned buffers behind mb */
    uint8_t *attn;
} PrefMicroBatch;

/* Pairs order[first .. first+count) of ds. With all_positions, label_mask covers every real
 * token but the first of each row (ORPO's NLL needs the prompt's log-probs too); otherwise
 * it is the completion mask. */
void pref_batch_build(PrefMicroBatch *out, const PrefDataset *ds, const size_t *order, size_t first,
                      int count, int64_t max_len, int32_t pad_id, bool all_positions);
void pref_batch_free(PrefMicroBatch *b);

#endif
