/* The model card (README.md) of an output directory, as TRL's trainers write it
 * (trl/templates/lm_model_card.md through huggingface_hub's ModelCardData): YAML front matter
 * with base_model (only when the base is a Hub id), datasets (Hub dataset ids), library_name,
 * model_name, tags (generated_from_trainer, trl, the method) and licence; then the body: what
 * the model is fine-tuned from, a quick start, the method and its paper, the final metrics, the
 * framework versions and the citations. */
#ifndef RLHF_IO_MODEL_CARD_H
#define RLHF_IO_MODEL_CARD_H

#include <jansson.h>
#include <stdbool.h>

typedef struct {
    const char *method;          /* TRL's tag of the trainer: sft, dpo, kto, orpo, cpo, grpo */
    const char *base_model;      /* the Hub id of the base, or NULL when it is local */
    const char *base_path;       /* the local base's directory (shown when base_model is NULL) */
    const char *model_name;      /* hub_model_id's last part, else the output directory's name */
    const char *hub_model_id;    /* where it is pushed; NULL: not pushed */
    const char *const *datasets; /* Hub dataset ids trained on (local files are not listed) */
    int n_datasets;
    bool adapter;          /* a PEFT adapter: library_name peft */
    const json_t *metrics; /* the final metrics, an object of numbers; may be NULL */
} ModelCard;

/* Writes dir/README.md atomically. Returns 0, or -1 with an error naming the file. An unknown
 * method is a programmer error caught by the caller's table; it writes a card without paper. */
int model_card_write(const ModelCard *card, const char *dir);

#endif
