/* What the built-in reward functions share: each builtin_<x>.c opens one of them, with the
 * options already checked against the keys it declares. */
#ifndef RLHF_REWARDS_BUILTIN_INTERNAL_H
#define RLHF_REWARDS_BUILTIN_INTERNAL_H

#include "rewards/reward_func.h"

#include <jansson.h>
#include <stddef.h>

/* Each opener fills f->impl, f->score and f->close (not f->name), or returns -1 with an error
 * (without the "builtin.<x>: " prefix, which the caller adds) and leaves f untouched. `options`
 * is an object holding only the declared keys (and maybe "name"); `name` is the function's
 * metrics name, which the impl keeps: its score() errors begin
 * "reward function '<name>': ". */
int builtin_accuracy_open(RewardFunc *f, const char *name, const json_t *options);
int builtin_format_open(RewardFunc *f, const char *name, const json_t *options);
int builtin_length_open(RewardFunc *f, const char *name, const json_t *options);

/* The text a built-in judges for completion i: the completion string, or the content of the
 * last assistant message of a conversational completion. Returns 0, or -1 with an error naming
 * the completion. */
int builtin_completion_text(const RewardBatch *b, int i, const char **text, size_t *len);

#endif
