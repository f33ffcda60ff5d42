/* The paired preference methods (rl: dpo, ipo, orpo, simpo/cpo) and KTO (rl: kto) as training
 * tasks: their datasets, held-out sets, reference policies (and precompute_ref_log_probs), and
 * the TrainMethods of pref_method.h and kto_method.h, trained in the one training loop. */
#ifndef RLHF_TRAIN_PREF_TASK_H
#define RLHF_TRAIN_PREF_TASK_H

#include "config/train_config.h"
#include "data/pref_dataset.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/train_loop.h"

#include <stdio.h>

/* rl: dpo, ipo, orpo, simpo, cpo. Loads the pairs (and the held-out ones), makes the reference
 * when the method has one, and trains m (or the adapter lora). out may be NULL. Returns 0, or -1
 * with an error. */
int pref_task_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
                  TrainOutcome *out, FILE *log);

/* rl: kto: the same for unpaired rows, taken in dataset order every epoch (TRL's sequential
 * sampler, which the kto loss requires). */
int kto_task_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
                 TrainOutcome *out, FILE *log);

/* The held-out pairs (or KTO rows, kto): test_datasets, or val_set_size of ds's (moved out of
 * ds into *val). Returns 0, or -1 with an error. */
int pref_task_held_out(PrefDataset *ds, const TrainConfig *cfg, const Tokenizer *tok, bool kto,
                       PrefDataset *val, FILE *log);

#endif
