/* The GRPO replay buffer (trl-methods.md §6.4: TRL's intended algorithm, with §6.3's defects
 * fixed). Per generation batch, groups whose rewards vary enter a bounded buffer of whole groups,
 * and groups whose rewards do not vary (no learning signal) are overwritten by groups drawn from
 * it.
 *
 * Invariants:
 *  1. The buffer holds the `capacity` greatest entries offered so far under the order "higher
 *     score first, then earlier insertion": an entry replaces the minimum only when its score is
 *     strictly greater (TRL's `score > heap_min`), so among equal scores the earliest is kept and
 *     the newest is evicted first. Ties never fail.
 *  2. heap[0] is the minimum under that order (what is evicted next).
 *  3. Entries own their arrays; nothing written into a batch aliases them, and padding or
 *     widening a batch never touches them (§6.3: the PR that padded live entries in place).
 *  4. Every entry has the same group_size.
 *  5. Draws depend only on (the set of entries, seed, draw_index): entries are visited in
 *     insertion order, never in heap layout order, so a buffer reloaded from disk draws alike.
 *
 * Stored per entry: each row's real prompt tokens (prompt_len of them; the prompt mask is 1 on
 * exactly those, so it is not stored), real completion tokens with their completion_mask values
 * (a truncated row may be masked to 0 throughout), G advantages as computed when stored, and the
 * old/ref per-token log-probs of the real completion tokens when the batch had them. */
#ifndef RLHF_GRPO_REPLAY_BUFFER_H
#define RLHF_GRPO_REPLAY_BUFFER_H

#include "grpo/grpo_batch.h"

#include <stdbool.h>
#include <stdint.h>

/* A group std at most this counts as zero: torch.isclose(std, 0)'s atol, as TRL's
 * frac_reward_zero_std uses it (§5.5). */
#define REPLAY_ZERO_STD_ATOL 1e-8

typedef struct {
    int group_size;           /* G rows */
    int *prompt_len;          /* [G] */
    int *completion_len;      /* [G] */
    int32_t *prompt_ids;      /* the rows' real prompt tokens, concatenated (sum prompt_len) */
    int32_t *completion_ids;  /* the rows' real completion tokens, concatenated */
    uint8_t *completion_mask; /* same layout as completion_ids */
    float *advantages;        /* [G] */
    float *old_logps;         /* same layout as completion_ids, or NULL: the batch had none */
    float *ref_logps;         /* likewise */
    double score;             /* sum_i |A_i| * sigma_g, >= 0 */
    uint64_t counter;         /* insertion number, unique in a buffer */
} ReplayEntry;

typedef struct {
    int capacity;          /* <= 0: disabled */
    int size;              /* entries in heap[0..size) */
    uint64_t next_counter; /* the counter the next stored entry gets */
    ReplayEntry *heap;     /* min-heap (invariants 1, 2) */
} ReplayBuffer;

typedef struct {
    int num_added;     /* variance groups that entered the buffer (others were discarded) */
    int num_replaced;  /* zero-std groups overwritten by buffer entries */
    int buffer_size;   /* after the update */
    double mean_score; /* of the entries after the update; 0 when empty */
} ReplayStats;

/* capacity <= 0: disabled, every update is a no-op. */
void replay_buffer_init(ReplayBuffer *rb, int capacity);
void replay_buffer_free(ReplayBuffer *rb);

/* One generation batch (§6.4 steps 3-4), with group_std[g] the reward std of group g:
 *  1. every group with variance (group_std finite and > REPLAY_ZERO_STD_ATOL) is offered to the
 *     buffer with score sum_{i in g} |A_i| * sigma_g. A NaN std (fewer than two scorable rows,
 *     whose advantages are all 0) counts as no variance.
 *  2. then (TRL's order: add, then sample, so a group just stored may be drawn) each group
 *     without variance is overwritten by a copy of an entry drawn with probability proportional to
 *     score (replay_buffer_sample), padded to the batch widths: prompts on the left, completions
 *     on the right, ids pad_id, masks 0, log-probs 0. A stored group wider than the batch widens
 *     it first (its arrays are reallocated; existing rows keep their tokens under the new
 *     padding). All G rows' tokens, masks, lengths, advantages and old/ref log-probs are
 *     replaced. With an empty buffer the groups stay as they are (their advantages are 0).
 * Log-probs: an entry's arrays that the batch lacks are not copied; a buffer entry lacking an
 * array the batch has (a buffer stored under another configuration) is refused with an error
 * rather than filled with made-up values, which would corrupt the ratio or the KL term.
 * The caller recomputes num_items_in_batch from the final masks, and does not call this during
 * evaluation (§6.4 step 1).
 * Returns 0, or -1 with an error (bad batch shape or lengths, non-finite advantages in a group
 * with variance, group size or log-probs not matching the buffer), leaving the batch and the
 * buffer untouched. stats may be NULL. */
int replay_buffer_update(ReplayBuffer *rb, GrpoBatch *batch, const float *group_std, uint64_t seed,
                         uint64_t draw_index, ReplayStats *stats);

/* Offers an entry the caller built (taking ownership of its arrays; *e is cleared): it gets the
 * next counter (the counter advances whether or not the entry is kept, so it counts offers) and
 * is kept or discarded by invariant 1. Returns whether it was kept. A disabled
 * buffer discards everything. */
bool replay_buffer_add(ReplayBuffer *rb, ReplayEntry *e);

/* Draws n entries with probability proportional to score (all alike if every score is 0):
 * without replacement when at least n entries have a positive weight, else with replacement
 * (still never an entry of weight 0 while others have some).
 * Uses SamplerRng seeded (seed, draw_index). Returns the number drawn: n, or 0 when the buffer is
 * empty. The pointers are valid until the buffer next changes. */
int replay_buffer_sample(const ReplayBuffer *rb, int n, uint64_t seed, uint64_t draw_index,
                         const ReplayEntry **out);

/* Deep copy (dst owns new arrays) and release of one entry. */
void replay_entry_copy(ReplayEntry *dst, const ReplayEntry *src);
void replay_entry_free(ReplayEntry *e);

/* Over several ranks (dist.h): rank 0's buffer, entries, heap layout and counter, copied into
 * every other rank's (whose entries it replaces), so that the ranks' buffers are the same bytes
 * from there on (each rank then updates its own copy with the same batches, by the same rule).
 * Collective; the capacities must be equal. A no-op in one process. */
void replay_buffer_bcast(ReplayBuffer *rb);

/* Writes the buffer atomically (safetensors; layout in replay_buffer_io.c). Returns 0, or -1
 * with an error naming the path. */
int replay_buffer_save(const ReplayBuffer *rb, const char *path);

/* Replaces rb's entries with the file's, keeping rb's capacity: when the file holds more
 * entries, the `capacity` greatest under invariant 1's order are kept (exactly what the buffer
 * would hold had it had this capacity all along); a disabled buffer keeps none. The insertion
 * counter continues from the file's. Every structural property is validated; on any problem
 * returns -1 with an error naming the file and what is wrong, and rb is unchanged. */
int replay_buffer_load(ReplayBuffer *rb, const char *path);

#endif
