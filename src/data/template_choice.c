#include "data/template_choice.h"

#include "common/error.h"
#include "common/fileio.h"

#include <string.h>

int template_choice_text(const char *choice, const char *jinja, const ChatTemplateSource *src,
                         char **text) {
    if (strcmp(choice, "jinja") == 0) {
        if (!jinja)
            return err_set("chat_template_jinja is required when chat_template is set to 'jinja'");
        if (file_exists(jinja)) return read_file(jinja, text, NULL);
        *text = xstrdup(jinja);
        return 0;
    }
    const char *fallback_prefix = "tokenizer_default_fallback_";
    bool fallback = strncmp(choice, fallback_prefix, strlen(fallback_prefix)) == 0;
    if (strcmp(choice, "tokenizer_default") == 0 || fallback) {
        const char *own = src->ntemplates ? chat_template_source_pick(src, false) : NULL;
        if (own) {
            *text = xstrdup(own);
            return 0;
        }
        if (!fallback)
            return err_set(
                "chat_template choice is tokenizer_default but tokenizer's chat_template "
                "is null. Please add a chat_template in tokenizer config");
        choice += strlen(fallback_prefix);
    }
    const char *builtin = chat_template_builtin(choice);
    if (!builtin) return err_set("Template '%s' not found.", choice);
    *text = xstrdup(builtin);
    return 0;
}
