/* A GRPO generation batch after scoring (trl-methods.md §5.3): n_rows = n_groups x group_size
 * completions, the group_size completions of one prompt contiguous. Prompts are left-padded to
 * prompt_w columns, completions right-padded to completion_w. This is what the optimisation
 * passes read and what the replay buffer stores and puts back, group by group. */
#ifndef RLHF_TRAIN_GRPO_BATCH_H
#define RLHF_TRAIN_GRPO_BATCH_H

#include <stdint.h>

typedef struct {
    int n_rows, group_size;
    int prompt_w, completion_w;
    int32_t *prompt_ids;       /* (n_rows, prompt_w), left-padded with pad_id */
    uint8_t *prompt_mask;      /* 1 on real prompt tokens */
    int32_t *completion_ids;   /* (n_rows, completion_w), right-padded with pad_id */
    uint8_t *completion_mask;  /* 1 on completion tokens that count in the loss (0 on padding, and
                                  on every token of a truncated row under
                                  mask_truncated_completions) */
    float *advantages;         /* (n_rows) */
    float *old_logps;          /* (n_rows, completion_w) or NULL: not computed for this batch */
    float *ref_logps;          /* (n_rows, completion_w) or NULL: beta == 0 */
    int32_t pad_id;
} GrpoBatch;

#endif
