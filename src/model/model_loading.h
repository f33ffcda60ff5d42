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

/* Values converted at a time when a tensor is read in pieces (the embedding: 1 GB of fp32 on a
 * 7B vocabulary otherwise). */
#define MODEL_LOAD_CHUNK_VALUES ((size_t)1 << 22)

/* Values first .. first + n - 1 of the checkpoint tensor t (F32, BF16 or F16, as
 * safetensors_to_f32) in fp32 at out; then the pages of the read-only checkpoint mapping that
 * held them are given back (madvise DONTNEED). Why: a converted value is not read again, and
 * the mapped file would otherwise stay in the process's resident memory (counted in VmRSS and
 * VmHWM) until the file is closed: the whole checkpoint, or at least the largest tensor (a 7B
 * lm_head: 1.09 GB in bf16) on top of the weights already loaded. The mapping is private and
 * never written, so a page shared with the next range is read from the file again. t must come
 * from an HfWeights (a file mapping, never a caller's buffer). 0, or -1 with an error. */
int model_read_checkpoint_range(const SafetensorsTensor *t, size_t first, size_t n, float *out);

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
