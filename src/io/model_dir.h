/* Writing a Hugging Face model directory: weights, config.json, generation and tokenizer files. */
#ifndef RLHF_IO_MODEL_DIR_H
#define RLHF_IO_MODEL_DIR_H

#include "io/safetensors.h"
#include "model/model.h"

/* Writes m's weights as `dtype` to out_dir (model.safetensors, or 5 GB shards and an index as
 * save_pretrained does), and copies config.json and
 * generation_config.json from model_dir and the tokenizer files (tokenizer.json,
 * tokenizer_config.json, special_tokens_map.json, chat_template.jinja) from tokenizer_dir,
 * those that exist. Each file is written atomically. When dtype differs from the source's,
 * config.json's dtype keys are updated. */
int model_dir_write(const Model *m, const char *model_dir, const char *tokenizer_dir,
                    const char *out_dir, SafetensorsDtype dtype);

/* An adapter's output directory as PEFT and Axolotl leave it: adapter_config.json and
 * adapter_model.safetensors, with the base's config.json, generation_config.json and the
 * tokenizer files beside them. base_model_name_or_path is base_id, the Hub id the base came from,
 * or (NULL) model_dir's absolute path: AutoPeftModelForCausalLM loads the base by it, from
 * whatever directory it runs in. */
int model_dir_write_adapter(const LoraAdapter *a, const char *model_dir, const char *base_id,
                            const char *tokenizer_dir, const char *out_dir);

/* The dtype the checkpoint's config.json names (float32 when it names none). */
SafetensorsDtype model_dir_source_dtype(const Model *m);

#endif
