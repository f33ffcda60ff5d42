/* Preference datasets (rl: dpo, ipo, simpo, orpo, kto) from local JSON/JSONL files.
 *
 * Each row is formatted by its dataset type (Axolotl's strategies, axolotl-config.md §4) into
 * prompt / chosen / rejected strings (KTO: prompt / completion / label), filtered or cut by
 * excess_length_strategy (§5.1), then tokenised as TRL's trainer for the method does it (§6):
 *  - dpo, ipo, kto (§6.1, §6.2): EOS text appended to each response unless already there;
 *    prompt_ids = tok(prompt) with the tokenizer's special tokens; response ids =
 *    tok(prompt + response)[len(prompt_ids):]; a doubled leading BOS is dropped; examples whose
 *    prompt alone fills sequence_len are dropped (the trainer cuts the rest, keep_start);
 *  - orpo, simpo (§6.3): TRL's CPO/ORPO routine (no special tokens, one-token boundary back-off,
 *    BOS prepended and EOS appended as ids, responses cut to fit sequence_len).
 * With no `type`, rows are used as they are: prompt / chosen / rejected strings (KTO: prompt /
 * completion / label, or a pair that is unpaired as TRL does it), as TRL takes them. A row
 * lacking a field is an error naming the file, the line and the field.
 * The pieces: pref_format.h (types), pref_length.h (excess_length_strategy), pref_tokenize.h
 * (ids, with the places where rlhf.c departs from the pinned versions). */
#ifndef RLHF_DATA_PREF_DATASET_H
#define RLHF_DATA_PREF_DATASET_H

#include "config/train_config.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One preference pair: the sequences are prompt + chosen and prompt + rejected.
 * rejected_prompt is NULL except for orpo/simpo when the tokenizer merged a token across the
 * prompt/response boundary differently for the two responses: TRL then gives each response its
 * own prompt ids (they differ in the last token at most), and the rejected sequence is
 * rejected_prompt + rejected. */
typedef struct {
    int32_t *prompt, *chosen, *rejected;
    int n_prompt, n_chosen, n_rejected;
    int32_t *rejected_prompt;
    int n_rejected_prompt;
} PrefPair;

/* One KTO row: the sequence is prompt + completion. */
typedef struct {
    int32_t *prompt, *completion;
    int n_prompt, n_completion;
    bool desirable;
} KtoRow;

typedef struct {
    PrefPair *pairs; /* dpo, ipo, simpo, orpo */
    size_t n_pairs;
    KtoRow *rows; /* kto (a paired dataset is unpaired as TRL does it) */
    size_t n_rows;
    size_t dropped; /* rows dropped for length (excess_length_strategy, or a prompt that fills
                       sequence_len) */
} PrefDataset;

/* Reads every dataset of cfg for cfg->rl. Notes (drops, warnings) go to `log`. Returns 0, or -1
 * with an error. */
int pref_dataset_load(PrefDataset *ds, const TrainConfig *cfg, const Tokenizer *tok, FILE *log);
void pref_dataset_free(PrefDataset *ds);

#endif
