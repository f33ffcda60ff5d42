/* Preference strings to token ids, as TRL 1.9's trainer for each method does it
 * (axolotl-config.md §6; trl-methods.md §1.1, §2.1, §3.1, §4).
 *
 * dpo, ipo, kto (DPOTrainer / KTOTrainer._prepare_dataset):
 *   1. the EOS text is appended to each response unless it already ends with it;
 *   2. prompt_ids = tok(prompt) with the tokenizer's special tokens; a response's ids =
 *      tok(prompt + response)[len(prompt_ids):] (a prompt that is not a prefix of the joint
 *      tokenisation is counted in `mismatches`; TRL logs it and goes on);
 *   3. a doubled leading BOS is dropped from each tokenisation (Axolotl's remove_double_bos_token,
 *      which Axolotl means to apply but TRL 1.9 never calls);
 *   4. an example whose prompt alone fills max_length is dropped (nothing of it would train).
 *   Responses are not cut: the trainer cuts each sequence to max_length (keep_start).
 *
 * orpo, simpo (ORPOTrainer / CPOTrainer.tokenize_row):
 *   1. p = tok(prompt), full = tok(prompt + response), both without special tokens; the
 *      response's ids are full[len(p):], moved one token left when full does not start with p
 *      (a merge across the boundary) -- so chosen and rejected may end up with prompts that
 *      differ in their last token (PrefPair.rejected_prompt);
 *   2. BOS is put before each prompt unless it is already first (no BOS token: nothing); EOS
 *      (the id) after each response unless already last;
 *   3. a response longer than max_length - len(its prompt) is cut to that; an example whose
 *      prompt alone fills max_length is dropped. (TRL cuts to max_length - len(longest
 *      response), which only bites when a response alone nearly fills max_length; rlhf.c follows
 *      the spec's decision, axolotl-config.md §6.3 / §15.10.)
 *
 * max_prompt_len (> 0): before step 4 (dpo/kto) or 3 (orpo/simpo) each prompt keeps its last
 * max_prompt_len tokens, a leading BOS staying in front. Axolotl 0.19 accepts the key and
 * ignores it (TRL 1.x removed max_prompt_length). */
#ifndef RLHF_DATA_PREF_TOKENIZE_H
#define RLHF_DATA_PREF_TOKENIZE_H

#include "config/train_config.h"
#include "data/pref_dataset.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const Tokenizer *tok;
    RlMethod rl;
    const char *eos_text;   /* the tokenizer's eos_token (required) */
    int32_t eos_id;         /* its id */
    int32_t bos_id;         /* -1: the tokenizer has no BOS */
    int64_t max_length;     /* sequence_len */
    int64_t max_prompt_len; /* 0: keep the whole prompt */
    /* counters for the notes the loader prints */
    size_t mismatches;        /* dpo/kto: prompt ids not a prefix of the joint ids */
    size_t responses_cut;     /* orpo/simpo: responses cut to fit max_length */
    size_t prompts_shortened; /* prompts cut to max_prompt_len */
} PrefTokenizer;

/* Tokenises a pair for t->rl (dpo, ipo, orpo, simpo). *keep is false (and *out untouched) when
 * the example is dropped for length. Returns 0, or -1 with an error. */
int pref_tokenize_pair(PrefTokenizer *t, const char *prompt, const char *chosen,
                       const char *rejected, PrefPair *out, bool *keep);

/* Tokenises one KTO row. Same contract. */
int pref_tokenize_kto(PrefTokenizer *t, const char *prompt, const char *completion, bool label,
                      KtoRow *out, bool *keep);

#endif
