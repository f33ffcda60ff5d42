/* The weights of a Hugging Face model directory: model.safetensors, or the shards named by
 * model.safetensors.index.json (hf-formats.md §1.6). */
#ifndef RLHF_IO_HF_WEIGHTS_H
#define RLHF_IO_HF_WEIGHTS_H

#include "io/safetensors.h"

typedef struct {
    SafetensorsFile *files;
    int n_files;
} HfWeights;

/* Opens and validates every weight file of `dir`. With an index, each weight_map entry must
 * be present in the shard it names, and no tensor may appear in two shards.
 * Returns 0, or -1 with an error naming the file (then *w holds nothing to close). */
int hf_weights_open(HfWeights *w, const char *dir);

/* The tensor called `name` in any of the files, or NULL. Borrowed: valid until hf_weights_close. */
const SafetensorsTensor *hf_weights_find(const HfWeights *w, const char *name);

/* Calls fn for every tensor of every file; stops and returns fn's value when non-zero. */
int hf_weights_for_each(const HfWeights *w,
                        int (*fn)(const SafetensorsTensor *t, const char *file, void *ctx),
                        void *ctx);

/* Closes every file and zeroes *w; the tensors found through it are invalid after. */
void hf_weights_close(HfWeights *w);

#endif
