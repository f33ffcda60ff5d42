/* Chat templates: compile arbitrary template source and render it over a fixed conversation. */
#include "chat/chat_template.h"
#include "targets.h"

#include <string.h>

/* A conversation with every role and the variables real templates read (tools, reasoning,
 * add_generation_prompt), so that more of a mutated template's branches are reached. */
static const char vars_json[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"What is 2+2?\"},"
    " {\"role\": \"assistant\", \"content\": \"4\", \"reasoning_content\": \"add\","
    "  \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"add\","
    "  \"arguments\": {\"a\": 2, \"b\": 2}}}]},"
    " {\"role\": \"tool\", \"content\": \"4\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"add\"}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int fuzz_chat_template(const uint8_t *data, size_t size) {
    ChatTemplate *tpl = NULL;
    if (chat_template_compile((const char *)data, size, &tpl) != 0) return 0;
    json_t *vars = json_loads(vars_json, 0, NULL);
    struct tm now;
    memset(&now, 0, sizeof now);
    now.tm_year = 124;
    now.tm_mday = 26;
    ChatRenderResult res;
    memset(&res, 0, sizeof res);
    chat_template_render_vars(tpl, vars, &now, &res);
    chat_render_result_free(&res); /* on failure too: harmless on the zeroed result */
    json_decref(vars);
    chat_template_free(tpl);
    return 0;
}
