/* excess_length_strategy for preference rows (axolotl-config.md §5.1), on the formatted strings,
 * as Axolotl's _drop_long_sequences / _truncate_long_sequences_rl / _raise_on_long_sequences do
 * it. Token counts are taken without special tokens; a row fits when prompt + each response
 * (KTO: prompt + completion) is at most sequence_len tokens.
 *   drop (default): a row that does not fit is dropped;
 *   truncate: a row that does not fit has each response longer than sequence_len - len(prompt)
 *     replaced by the decoding of its first that many tokens; if the prompt alone leaves no room,
 *     or the cut text tokenises longer again, the row is dropped;
 *   raise: a row that does not fit is an error.
 * With max_prompt_len the prompt counts at most max_prompt_len tokens (the tokeniser keeps its
 * end; pref_tokenize.h). */
#ifndef RLHF_DATA_PREF_LENGTH_H
#define RLHF_DATA_PREF_LENGTH_H

#include "config/train_config.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { EXCESS_DROP, EXCESS_TRUNCATE, EXCESS_RAISE } ExcessLengthStrategy;

typedef struct {
    const Tokenizer *tok;
    RlMethod rl;
    ExcessLengthStrategy strategy;
    int64_t sequence_len;
    int64_t max_prompt_len; /* 0: none */
} PrefLengthRule;

typedef enum {
    PREF_LENGTH_KEEP,           /* fits (perhaps after truncation) */
    PREF_LENGTH_DROP_LONG,      /* drop: did not fit */
    PREF_LENGTH_DROP_UNCUTTABLE /* truncate: could not be made to fit */
} PrefLengthOutcome;

/* Applies the rule to a prompt and its n_responses responses (1 for KTO, 2 otherwise); with
 * truncate, a cut response replaces responses[i] (the old string is freed). The prompt and every
 * response must be non-empty (Axolotl's "Prompt, chosen and rejected keys are required for
 * DPO/ORPO datasets" / "Prompt and completion keys are required for KTO datasets"). Returns 0
 * with *outcome, or -1 with an error (raise, or a missing key). */
int pref_length_apply(const PrefLengthRule *r, const char *prompt, char **responses,
                      size_t n_responses, PrefLengthOutcome *outcome);

/* "drop" / "truncate" / "raise" (NULL: drop) -> the strategy; -1 with an error otherwise. */
int pref_length_strategy(const char *name, ExcessLengthStrategy *out);

#endif
