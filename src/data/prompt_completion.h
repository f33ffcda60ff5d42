/* Prompt/completion pairs, one JSON object per line, as token ids or as text:
 *   {"prompt_ids": [1, 2, 3], "completion_ids": [4, 5]}
 *   {"prompt": "Question: ...", "completion": " answer"}
 * Text is tokenised the way TRL's trainers did before joint tokenisation: prompt and completion
 * separately, then concatenated; the prompt with the tokenizer's special tokens (its BOS, as
 * tokenizer(prompt) gives), the completion without. No EOS is added: the completion is scored
 * as written. Blank lines are skipped; other keys are ignored. */
#ifndef RLHF_DATA_PROMPT_COMPLETION_H
#define RLHF_DATA_PROMPT_COMPLETION_H

#include "tokenizer/tokenizer.h"

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
 * `tok` tokenises text lines; when it is NULL a text line is an error that quotes
 * `no_tokenizer_reason` (why there is none). Returns 0, or -1 with an error
 * "FILE:LINE: what is wrong". */
int prompt_completion_read_jsonl(PromptCompletionSet *set, const char *path, int vocab_size,
                                 const Tokenizer *tok, const char *no_tokenizer_reason);

void prompt_completion_free(PromptCompletionSet *set);

#endif
