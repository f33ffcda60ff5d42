/* Collation of KTO rows as TRL 1.9's DataCollatorForUnpairedPreference does it: each row becomes
 * prompt + completion, cut to its first max_len tokens (keep_start), right-padded with pad_id to
 * the longest row of the micro-batch; the completion mask marks the completion tokens that
 * survived the cut.
 *
 * The KL rows (loss type kto) pair each row's prompt with another row's completion: within the
 * micro-batch the completions are rotated by one, row i getting row i-1's (row 0 the last
 * row's). TRL builds them on the dataset (add_kl_completion_ids: consecutive chunks of
 * per_device_train_batch_size rows, rotated by one) and then must sample sequentially; a
 * sequential micro-batch is exactly such a chunk, so building them here, per micro-batch, gives
 * TRL's rows without tying the prepared dataset to the batch size. The KL rows are cut and
 * padded the same way, to their own length.
 *
 * Upstream quirk, not followed: Axolotl passes dataset_num_proc (default: the CPU count) to
 * KTOConfig, and datasets.map(num_proc=n) splits the dataset into n contiguous shards before
 * cutting the chunks, so in an Axolotl run the chunks restart at every shard boundary and stop
 * lining up with the micro-batches: the KL pairing depends on the machine. rlhf.c pairs as TRL
 * does with one process (dataset_num_proc unset), which is what the KTO paper intends (the KL
 * rows of a batch are that batch's completions after other prompts).
 *
 * Invariants:
 *  1. mb.label_mask == completion (a completion token at position 0 has no log-prob and is not
 *     marked);
 *  2. kl.batch == mb.batch.batch when with_kl, else kl.tokens == NULL;
 *  3. row r of the KL batch is prompt(row r) + completion(row (r + n - 1) % n). */
#ifndef RLHF_TRAIN_KTO_BATCH_H
#define RLHF_TRAIN_KTO_BATCH_H

#include "data/pref_dataset.h"
#include "train/trainer.h"

#include <stdbool.h>

typedef struct {
    MicroBatch mb;       /* n rows: prompt + completion */
    uint8_t *completion; /* (n x T): 1 on the completion tokens */
    TokenBatch kl;       /* n rows: prompt + the rotated completion; tokens NULL without KL */
    uint8_t *kl_completion;
    bool *desirable;             /* [n] each row's label */
    int n_rows;                  /* n */
    const size_t *row_index;     /* the dataset index of each row (order[first ..]) */
    int32_t *tokens, *kl_tokens; /* owned buffers behind mb and kl */
    uint8_t *attn, *kl_attn;
} KtoMicroBatch;

/* Rows order[first .. first+count) of ds->rows. Never fails (allocation failure aborts). */
void kto_batch_build(KtoMicroBatch *out, const PrefDataset *ds, const size_t *order, size_t first,
                     int count, int64_t max_len, int32_t pad_id, bool with_kl);
void kto_batch_free(KtoMicroBatch *b);

/* Attention-mask tokens of the completion rows (TRL's num_tokens counts these, not the KL
 * rows). */
size_t kto_batch_tokens(const KtoMicroBatch *b);

#endif
