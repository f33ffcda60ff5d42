/* What the replay buffer's files share and nothing else needs: the entry orders, the heap offer
 * that keeps an entry's own counter (load), and entry sizes. */
#ifndef RLHF_GRPO_REPLAY_BUFFER_INTERNAL_H
#define RLHF_GRPO_REPLAY_BUFFER_INTERNAL_H

#include "grpo/replay_buffer.h"

#include <stdbool.h>
#include <stddef.h>

/* Whether a ranks below b (is evicted before it): lower score, or equal score and inserted
 * later (invariant 1). */
bool replay_entry_below(const ReplayEntry *a, const ReplayEntry *b);

/* qsort comparator on `const ReplayEntry *` elements: insertion order (invariant 5; files). */
int replay_entry_ptr_by_counter(const void *a, const void *b);

/* Offers e with the counter it has (taking ownership; *e is cleared either way). Returns whether
 * it was kept. */
bool replay_buffer_offer(ReplayBuffer *rb, ReplayEntry *e);

/* An allocation count that is never 0: empty arrays still get a pointer, so NULL keeps meaning
 * "not stored". */
static inline size_t replay_nz(size_t n) {
    return n ? n : 1;
}

/* Total real prompt / completion tokens over the entry's rows. */
size_t replay_entry_prompt_tokens(const ReplayEntry *e);
size_t replay_entry_completion_tokens(const ReplayEntry *e);

#endif
