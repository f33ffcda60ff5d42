/* Supervised fine-tuning examples from local JSON/JSONL files, formatted and tokenised as
 * Axolotl's prompt strategies do it:
 *  - type: completion   {"text": ...}: the text with the tokenizer's special tokens (BOS), EOS
 *                       appended unless already last, cut into pieces of sequence_len tokens;
 *                       every token is trained on.
 *  - type: alpaca       {"instruction", "input" (optional), "output"}: Axolotl's Alpaca prompt
 *                       (with BOS, not trained on) followed by the output (no BOS, EOS appended,
 *                       trained on). Examples longer than sequence_len are dropped.
 * A row without the field its type needs is an error naming the file, the line and the field. */
#ifndef RLHF_DATA_SFT_DATASET_H
#define RLHF_DATA_SFT_DATASET_H

#include "config/train_config.h"
#include "tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t *ids;
    uint8_t *labels; /* labels[t]: token t is trained on (predicted from the tokens before it) */
    int len;
    size_t row; /* its place among every tokenised row of the datasets, kept or not */
} SftExample;

/* Invariant: rows = part_rows[0] + ... + part_rows[n_parts - 1] >= n, and the items' `row`
 * values are distinct and below it (every tokenised row, including those dropped for length or
 * for having fewer than 2 tokens, has one: Axolotl shuffles the rows before it drops them). */
typedef struct {
    SftExample *items;
    size_t n;
    size_t dropped_too_long;
    size_t shortest_dropped; /* tokens in the shortest example dropped as too long */
    size_t rows;             /* tokenised rows, dropped ones included */
    size_t *part_rows;       /* of them, per dataset of the config */
    int n_parts;
} SftDataset;

/* Reads every dataset of cfg. eos_id is the tokenizer's EOS token id (< 0: none).
 * Returns 0, or -1 with an error. */
int sft_dataset_load(SftDataset *ds, const TrainConfig *cfg, const Tokenizer *tok, int32_t eos_id);
void sft_dataset_free(SftDataset *ds);

/* Axolotl's merge_datasets on the loaded examples (data/dataset_merge.h): the tokenised rows
 * shuffled from seed, the dropped ones then left out, so the kept examples come in the order an
 * Axolotl run trains on them. Returns 0, or -1 with an error. */
int sft_dataset_merge(SftDataset *ds, const TrainConfig *cfg);

/* EOS and padding ids from a tokenizer directory's tokenizer_config.json (eos_token,
 * pad_token; pad falls back to EOS as HF does for tokenizers without one, then to 0; a missing
 * EOS is -1). Returns 0, or -1 with an error. */
int tokenizer_special_ids(const char *tok_dir, const Tokenizer *tok, int32_t *eos, int32_t *pad);

/* Axolotl's Alpaca prompt for an instruction and optional input (malloc'd). */
char *alpaca_prompt(const char *instruction, const char *input);

#endif
