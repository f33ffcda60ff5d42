/* The order examples are trained in, and which of them are held out: seeded permutations, so
 * that a run (and a resumed run) sees the same order on every rank and every time. The training
 * orders are torch's (common/torch_generator.h), so that a `seed:` gives the batches TRL gives
 * for the same seed. */
#ifndef RLHF_TRAIN_DATA_ORDER_H
#define RLHF_TRAIN_DATA_ORDER_H

#include "config/train_config.h"

#include <stddef.h>
#include <stdint.h>

/* order (n entries, caller-allocated) = epoch `epoch`'s order of HF Trainer's train sampler
 * (what TRL's SFT, DPO, ORPO, CPO/SimPO and reward trainers inherit) for TrainingArguments.seed
 * = seed: accelerate's SeedableRandomSampler (transformers' default use_seedable_sampler, no
 * data_seed) reseeds a torch.Generator with seed + epoch each epoch and draws
 * torch.randperm(n). Cannot fail. */
void data_order_shuffle(size_t *order, size_t n, int64_t seed, int64_t epoch);

/* order = epoch `epoch`'s order of TRL's RepeatSampler (GRPO, RLOO): one torch.Generator seeded
 * once with seed, one torch.randperm(n) per epoch, so epoch e is the (e+1)-th draw. Cannot
 * fail; costs e + 1 permutations. */
void data_order_shuffle_repeat_sampler(size_t *order, size_t n, int64_t seed, int64_t epoch);

/* val_set_size as Axolotl's create_train_validation_split takes it: datasets'
 * train_test_split(test_size, shuffle=False) on the merged (already shuffled) rows, so the last
 * *n_val of the n rows are held out, in order: *n_val = ceil(fraction * n) for a fraction
 * (< 1), else the count. *order (new array, caller frees) lists the held-out rows first, then
 * the kept ones, each in row order (data_order_move_held_out's input). *order is NULL and *n_val
 * 0 when there is no validation split. Returns 0, or -1 with an error naming the config when
 * nothing would be left to train on. */
int data_order_validation_draw(size_t n, const TrainConfig *cfg, size_t **order, size_t *n_val);

/* Moves the items order[0 .. n_val) of an array of *n items of `size` bytes into a new array
 * (*held_out, caller frees), keeping the rest, in draw order, in *items (reallocated). */
void data_order_move_held_out(void **items, size_t *n, size_t size, const size_t *order,
                              size_t n_val, void **held_out);

#endif
