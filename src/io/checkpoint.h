/* The weights of a Hugging Face model directory: model.safetensors, or the shards named by
 * model.safetensors.index.json (hf-formats.md §1.6). */
#ifndef RLHF_IO_CHECKPOINT_H
#define RLHF_IO_CHECKPOINT_H

#include "io/safetensors.h"

typedef struct {
    SafetensorsFile *files;
    int n_files;
} CheckpointReader;

/* Opens and validates every weight file of `dir`. With an index, each weight_map entry must
 * be present in the shard it names, and no tensor may appear in two shards.
 * Returns 0, or -1 with an error naming the file. */
int checkpoint_open(CheckpointReader *ck, const char *dir);

/* The tensor called `name` in any of the files, or NULL. */
const SafetensorsTensor *checkpoint_find(const CheckpointReader *ck, const char *name);

/* Calls fn for every tensor of every file; stops and returns fn's value when non-zero. */
int checkpoint_for_each(const CheckpointReader *ck,
                        int (*fn)(const SafetensorsTensor *t, const char *file, void *ctx),
                        void *ctx);

void checkpoint_close(CheckpointReader *ck);

#endif
