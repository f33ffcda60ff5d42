/* Axolotl's chat template choice (axolotl-config.md §10): a built-in name (chatml, llama3, ...),
 * "tokenizer_default" (the tokenizer's own template), "tokenizer_default_fallback_<name>" (the
 * tokenizer's own, else the built-in <name>) or "jinja" (the template text, or a file holding
 * it). Shared by the SFT and preference dataset types. */
#ifndef RLHF_DATA_TEMPLATE_CHOICE_H
#define RLHF_DATA_TEMPLATE_CHOICE_H

#include "chat/chat_template.h"

/* Stores the template text for `choice` in *text (malloc'd). `jinja` is chat_template_jinja
 * (may be NULL); `src` what the tokenizer directory holds. Returns 0, or -1 with Axolotl's
 * message ("Template 'x' not found.", ...). */
int template_choice_text(const char *choice, const char *jinja, const ChatTemplateSource *src,
                         char **text);

#endif
