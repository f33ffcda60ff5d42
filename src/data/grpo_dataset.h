/* GRPO's prompts (axolotl-config.md §4.5, §6.4): rows of local JSON/JSONL files, optionally
 * reshaped by a Python transform (`type: module.fn`, Axolotl's (cfg) -> map_fn contract), each
 * with a `prompt` column: a string, tokenised as it is (with the tokenizer's special tokens, as
 * TRL's processing_class(text=...) does), or a list of {role, content} messages, rendered with
 * the chat template and add_generation_prompt (trl.chat_template_kwargs passed to it) and
 * tokenised without added special tokens. Every other column stays with its row: reward
 * functions receive them as keyword arguments. No length filtering (Axolotl applies none to
 * GRPO rows); a prompt longer than the model's context fails at generation with the row named. */
#ifndef RLHF_DATA_GRPO_DATASET_H
#define RLHF_DATA_GRPO_DATASET_H

#include "config/train_config.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    json_t *rows; /* array of row objects, prompt included, as the reward functions see them */
    int32_t **prompt_ids;
    int *prompt_lens;
    size_t n;
    bool conversational; /* prompts are message lists (completions are then messages too) */
} GrpoDataset;

/* Reads the datasets of a list (cfg->datasets or cfg->test_datasets). Returns 0, or -1 with an
 * error naming the file and row. */
int grpo_dataset_load(GrpoDataset *ds, const TrainConfig *cfg, const DatasetConfig *list, int n,
                      const Tokenizer *tok, FILE *log);
void grpo_dataset_free(GrpoDataset *ds);

/* Moves the rows order[0 .. n_move) out of ds into *out (a held-out split). */
void grpo_dataset_split(GrpoDataset *ds, const size_t *order, size_t n_move, GrpoDataset *out);

#endif
