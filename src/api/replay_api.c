/* include/rlhf.h's replay buffer over the GRPO buffer (grpo/replay_buffer.h): its entries carry
 * no arrays (group_size 0), only a score and the insertion counter, which is the item's id. */
#include "rlhf.h"

#include "common/error.h"
#include "grpo/replay_buffer.h"

#include <math.h>
#include <stdlib.h>

struct rlhf_replay_buffer {
    ReplayBuffer rb;
};

int rlhf_replay_buffer_create(int max_size, rlhf_replay_buffer **out) {
    if (!out) return err_set("rlhf_replay_buffer_create: out is NULL"), RLHF_ERROR;
    *out = xcalloc(1, sizeof **out);
    replay_buffer_init(&(*out)->rb, max_size);
    return RLHF_OK;
}

void rlhf_replay_buffer_free(rlhf_replay_buffer *rb) {
    if (!rb) return;
    replay_buffer_free(&rb->rb);
    free(rb);
}

int rlhf_replay_buffer_add(rlhf_replay_buffer *rb, double score, uint64_t *id, int *kept) {
    if (!rb || !id || !kept) return err_set("rlhf_replay_buffer_add: NULL argument"), RLHF_ERROR;
    /* a draw's weight: torch.multinomial, which TRL's buffer samples with, refuses a negative or
     * non-finite one only when sampling, after the buffer has been filled with it */
    if (!isfinite(score) || score < 0)
        return err_set("replay buffer: score %g is not a finite number >= 0 (scores are the "
                       "weights items are drawn with)",
                       score),
               RLHF_ERROR;
    *id = rb->rb.next_counter; /* replay_buffer_add numbers the entry with it */
    ReplayEntry e = {.score = score};
    *kept = replay_buffer_add(&rb->rb, &e);
    return RLHF_OK;
}

size_t rlhf_replay_buffer_size(const rlhf_replay_buffer *rb) {
    return rb ? (size_t)rb->rb.size : 0;
}

int rlhf_replay_buffer_entry(const rlhf_replay_buffer *rb, size_t i, double *score, uint64_t *id) {
    if (!rb || !score || !id) return err_set("rlhf_replay_buffer_entry: NULL argument"), RLHF_ERROR;
    if (i >= (size_t)rb->rb.size)
        return err_set("rlhf_replay_buffer_entry: index %zu out of range (the buffer holds %d)", i,
                       rb->rb.size),
               RLHF_ERROR;
    *score = rb->rb.heap[i].score, *id = rb->rb.heap[i].counter;
    return RLHF_OK;
}

int rlhf_replay_buffer_sample(const rlhf_replay_buffer *rb, size_t n, uint64_t seed,
                              uint64_t *ids) {
    if (!rb || (n && !ids)) return err_set("rlhf_replay_buffer_sample: NULL argument"), RLHF_ERROR;
    if (n == 0) return RLHF_OK;
    if (n > (size_t)1 << 30)
        return err_set("rlhf_replay_buffer_sample: %zu draws is too many", n), RLHF_ERROR;
    if (rb->rb.size == 0)
        return err_set("replay buffer: sampling from an empty buffer"), RLHF_ERROR;
    const ReplayEntry **drawn = xmalloc(n * sizeof *drawn);
    replay_buffer_sample(&rb->rb, (int)n, seed, 0, drawn);
    for (size_t k = 0; k < n; k++)
        ids[k] = drawn[k]->counter;
    free(drawn);
    return RLHF_OK;
}
