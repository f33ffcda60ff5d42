/* A GRPO generation batch after scoring (trl-methods.md §5.3): n_rows = n_groups x group_size
 * completions, the group_size completions of one prompt contiguous. Prompts are left-padded to
 * prompt_w columns, completions right-padded to completion_w. This is what the optimisation
 * passes read and what the replay buffer stores and puts back, group by group. */
#ifndef RLHF_GRPO_GRPO_BATCH_H
#define RLHF_GRPO_GRPO_BATCH_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int n_rows, group_size;
    int prompt_w, completion_w;
    int32_t *prompt_ids;      /* (n_rows, prompt_w), left-padded with pad_id */
    uint8_t *prompt_mask;     /* 1 on real prompt tokens */
    int32_t *completion_ids;  /* (n_rows, completion_w), right-padded with pad_id */
    uint8_t *completion_mask; /* 1 on completion tokens that count in the loss (0 on padding, and
                                 on every token of a truncated row under
                                 mask_truncated_completions) */
    int *prompt_len;          /* (n_rows) real prompt tokens */
    int *completion_len;      /* (n_rows) real completion tokens, whether masked or not */
    float *advantages;        /* (n_rows) */
    float *old_logps;         /* (n_rows, completion_w) or NULL: not computed for this batch */
    float *ref_logps;         /* (n_rows, completion_w) or NULL: beta == 0 */
    uint8_t *env_mask;        /* (n_rows, completion_w) or NULL (all 1): 0 on completion tokens an
                                 environment wrote (a rollout function's env_mask, TRL's
                                 tool_mask), attended to but left out of the loss */
    int32_t pad_id;
} GrpoBatch;

/* Allocates every array (old_logps and ref_logps only when asked), filled with padding: ids
 * pad_id, masks 0, lengths 0, values 0. Every array is malloc'd, so code that widens a batch may
 * realloc them. */
void grpo_batch_alloc(GrpoBatch *b, int n_rows, int group_size, int prompt_w, int completion_w,
                      int32_t pad_id, bool with_old_logps, bool with_ref_logps);
void grpo_batch_free(GrpoBatch *b);

#endif
