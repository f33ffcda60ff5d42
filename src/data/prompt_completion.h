/* Prompt/completion pairs given as token ids, one JSON object per line:
 *   {"prompt_ids": [1, 2, 3], "completion_ids": [4, 5]}
 * Blank lines are skipped; other keys are ignored. */
#ifndef RLHF_DATA_PROMPT_COMPLETION_H
#define RLHF_DATA_PROMPT_COMPLETION_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t *ids;       /* prompt then completion */
    int prompt_len;     /* >= 1: the first completion token needs a token before it */
    int completion_len; /* >= 1 */
    int line;           /* 1-based line in the file, for messages */
} PromptCompletion;

typedef struct {
    PromptCompletion *items;
    size_t n;
} PromptCompletionSet;

/* Reads and validates the whole file before returning. Ids must lie in [0, vocab_size).
 * Returns 0, or -1 with an error "FILE:LINE: what is wrong". */
int prompt_completion_read_jsonl(PromptCompletionSet *set, const char *path, int vocab_size);

void prompt_completion_free(PromptCompletionSet *set);

#endif
