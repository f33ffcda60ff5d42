/* The pieces of model_load (model.c) that the frozen loader (model_load_frozen.c) shares:
 * private to src/model. */
#ifndef RLHF_MODEL_MODEL_LOADING_H
#define RLHF_MODEL_MODEL_LOADING_H

#include "io/hf_weights.h"
#include "model/model.h"

/* model_init_empty without the fp32 block: layers, param_info and n_params laid out; every
 * tensor pointer NULL. Takes ownership of cfg's allocations. */
void model_init_layout(Model *m, ModelConfig *cfg);

/* The checkpoint's tensor for param_info[i], its shape checked; NULL with an error naming the
 * directory and the tensor. */
const SafetensorsTensor *model_checkpoint_tensor(const Model *m, const HfWeights *ck,
                                                 const char *dir, int i);

/* 0, or -1 with an error naming the tensor and the first NaN or infinity in w (numel values). */
int model_check_finite(const float *w, size_t numel, const char *dir, const char *name);

/* 0, or -1 with an error when the checkpoint holds a tensor the model does not have (beyond
 * those transformers itself ignores). */
int model_check_no_extra(const Model *m, const HfWeights *ck);

/* The embedding tensor t of ck (a tensor of one of its files) mapped read-only on its own from
 * its file (embed_map.c), recorded in m->embed_map so that it outlives ck; NULL, with nothing
 * recorded and no error, where it is not left in the file (a tied embedding, not bf16 in the
 * file, misaligned, or the file cannot be mapped again): the caller then copies it. */
const uint16_t *model_map_embedding(Model *m, const HfWeights *ck, const SafetensorsTensor *t);

/* Unmaps m->embed_map (nothing when NULL). */
void model_unmap_embedding(Model *m);

#endif
