/* The chat_template SFT dataset type, as Axolotl's ChatTemplateStrategy tokenises it:
 *  - the conversation (field_messages, default "messages") is mapped message by message
 *    (message_property_mappings, roles) and rendered whole with the chat template, then
 *    tokenised without extra special tokens (as apply_chat_template does);
 *  - each turn whose role is in roles_to_train (default: assistant) is trained on. Its tokens
 *    are found by rendering the conversation up to that turn twice, once with the turn's content
 *    replaced by "[[dummy_message]]", and taking where the two token lists differ;
 *  - the EOS / EOT token found within 3 tokens after a turn is trained on per train_on_eos /
 *    train_on_eot: "turn" (after trained turns, the default), "all", "last" or "none".
 * The chat template is the dataset's chat_template, else the config's, else the tokenizer's
 * own (tokenizer_default); "jinja" takes chat_template_jinja; other names are the built-ins. */
#ifndef RLHF_DATA_SFT_CHAT_H
#define RLHF_DATA_SFT_CHAT_H

#include "chat/chat_template.h"
#include "config/train_config.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    TRAIN_SPECIAL_NONE,
    TRAIN_SPECIAL_TURN,
    TRAIN_SPECIAL_ALL,
    TRAIN_SPECIAL_LAST
} SpecialTokenTraining;

typedef struct {
    ChatTemplate *tpl;
    json_t *special_tokens; /* what the template sees as bos_token, eos_token, ... */
    const Tokenizer *tok;
    int32_t eos_id, eot_id;
    const char *field_messages, *field_system, *field_tools;
    json_t *property_map;   /* message key in the template -> key in the data */
    json_t *roles;          /* role in the data -> role in the template */
    json_t *roles_to_train; /* template role names */
    SpecialTokenTraining on_eos, on_eot;
    bool drop_system_message;
} ChatSftStrategy;

/* Reads the dataset's options and resolves the template. Returns 0, or -1 with an error naming
 * the config file, the dataset and the key. */
int chat_sft_init(ChatSftStrategy *s, const TrainConfig *cfg, const DatasetConfig *dc, int index,
                  const Tokenizer *tok, int32_t eos_id);
void chat_sft_free(ChatSftStrategy *s);

/* Tokenises one row: ids and labels (1 = trained) of length *n, malloc'd. Returns 0, or -1 with
 * an error naming the field. */
int chat_sft_example(const ChatSftStrategy *s, const json_t *row, int32_t **ids, uint8_t **labels,
                     size_t *n);

#endif
