#include "data/pref_turns.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

static const PrefTurnMarkup *markup_of(const PrefFormat *f) {
    return f->type->param;
}

/* One turn: start, role, header end, content, turn end. */
static char *turn(const PrefTurnMarkup *m, const char *role, const char *content) {
    return pref_concat(m->turn_start, role, m->header_end, content, m->turn_end, NULL);
}

/* [system turn if the row's system is truthy] + user turn + the assistant's header. */
static char *prompt_with_system(const PrefTurnMarkup *m, const json_t *row, const char *user) {
    char *system = pref_field_truthy(row, "system") ? pref_field_text(row, "system") : NULL;
    char *sys_turn = system ? turn(m, "system", system) : NULL;
    char *user_turn = turn(m, "user", user);
    char *p = pref_concat(sys_turn ? sys_turn : "", user_turn, m->turn_start, "assistant",
                          m->header_end, NULL);
    free(system);
    free(sys_turn);
    free(user_turn);
    return p;
}

/* str(row[key]) + the response end. */
static char *response(const PrefTurnMarkup *m, const json_t *row, const char *key) {
    char *text = pref_field_text(row, key);
    if (!text) return NULL;
    char *r = pref_concat(text, m->response_end, NULL);
    free(text);
    return r;
}

/* str(row[key][index].content) + the response end. */
static char *message_response(const PrefTurnMarkup *m, const json_t *row, const char *key,
                              long index) {
    char *text = pref_message_text(row, key, index, "content");
    if (!text) return NULL;
    char *r = pref_concat(text, m->response_end, NULL);
    free(text);
    return r;
}

static int prompt_from(const PrefTurnMarkup *m, const json_t *row, const char *key,
                       PrefStrings *out) {
    char *user = pref_field_text(row, key);
    if (!user) return -1;
    out->prompt = prompt_with_system(m, row, user);
    free(user);
    return 0;
}

/* --------------------------------------------------------------------------------------- DPO */

static int dpo_plain(const PrefFormat *f, const json_t *row, const char *user_key,
                     const char *chosen_key, const char *rejected_key, PrefStrings *out) {
    const PrefTurnMarkup *m = markup_of(f);
    if (prompt_from(m, row, user_key, out) != 0) return -1;
    return (out->chosen = response(m, row, chosen_key)) &&
                   (out->rejected = response(m, row, rejected_key))
               ? 0
               : -1;
}

/* The user text comes from the first of prompt, input, question present (else instruction);
 * the responses from chosen / rejected, else chosen_response / rejected_response. Upstream
 * decides by column, so a file mixing these shapes gets "None" there; here each row decides. */
int pref_turns_dpo_default(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    static const char *const user_keys[] = {"prompt", "input", "question"};
    const char *user_key = "instruction";
    for (size_t i = 0; i < 3; i++)
        if (pref_field_value(row, user_keys[i])) {
            user_key = user_keys[i];
            break;
        }
    return dpo_plain(f, row, user_key,
                     pref_field_value(row, "chosen") ? "chosen" : "chosen_response",
                     pref_field_value(row, "rejected") ? "rejected" : "rejected_response", out);
}

/* chosen / rejected are conversations: the user turn is chosen[0], the responses [1] of each
 * (roles are not checked; later messages are ignored). No system turn. */
int pref_turns_dpo_argilla_chat(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    const PrefTurnMarkup *m = markup_of(f);
    char *user = pref_message_text(row, "chosen", 0, "content");
    if (!user) return -1;
    char *user_turn = turn(m, "user", user);
    out->prompt = pref_concat(user_turn, m->turn_start, "assistant", m->header_end, NULL);
    free(user);
    free(user_turn);
    return (out->chosen = message_response(m, row, "chosen", 1)) &&
                   (out->rejected = message_response(m, row, "rejected", 1))
               ? 0
               : -1;
}

int pref_turns_dpo_icr(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    return dpo_plain(f, row, "input", "chosen", "rejected", out);
}

int pref_turns_dpo_intel(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    return dpo_plain(f, row, "question", "chosen", "rejected", out);
}

int pref_turns_dpo_prompt_pairs(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    return dpo_plain(f, row, "prompt", "chosen", "rejected", out);
}

/* prompt is a string; chosen / rejected are conversations whose [1] is the response. */
int pref_turns_dpo_ultra(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    const PrefTurnMarkup *m = markup_of(f);
    if (prompt_from(m, row, "prompt", out) != 0) return -1;
    return (out->chosen = message_response(m, row, "chosen", 1)) &&
                   (out->rejected = message_response(m, row, "rejected", 1))
               ? 0
               : -1;
}

/* --------------------------------------------------------------------------------------- KTO */

static int kto_plain(const PrefFormat *f, const json_t *row, const char *user_key,
                     PrefStrings *out) {
    const PrefTurnMarkup *m = markup_of(f);
    if (prompt_from(m, row, user_key, out) != 0) return -1;
    if (!(out->completion = response(m, row, "completion"))) return -1;
    return pref_field_label(row, "label", &out->label);
}

int pref_turns_kto_argilla(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    return kto_plain(f, row, "instruction", out);
}

int pref_turns_kto_intel(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    return kto_plain(f, row, "question", out);
}

int pref_turns_kto_prompt_pairs(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    return kto_plain(f, row, "prompt", out);
}

int pref_turns_kto_ultra(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    return kto_plain(f, row, "prompt", out);
}

/* `completion` is a conversation: every turn but the last is written with its own role (no
 * system turn from the row), then the assistant's header; the last turn is the completion.
 * (Axolotl's docs show the user turn under `chosen`; its code reads it from `completion`.) */
int pref_turns_kto_argilla_chat(const PrefFormat *f, const json_t *row, PrefStrings *out) {
    const PrefTurnMarkup *m = markup_of(f);
    if (!pref_field_message(row, "completion", -1)) return -1;
    size_t n = json_array_size(json_object_get(row, "completion"));
    char *prompt = xstrdup("");
    for (size_t i = 0; i + 1 < n; i++) {
        char *role = pref_message_text(row, "completion", (long)i, "role");
        char *content = role ? pref_message_text(row, "completion", (long)i, "content") : NULL;
        char *t = content ? turn(m, role, content) : NULL;
        char *next = t ? pref_concat(prompt, t, NULL) : NULL;
        free(role);
        free(content);
        free(t);
        free(prompt);
        if (!next) return -1;
        prompt = next;
    }
    out->prompt = pref_concat(prompt, m->turn_start, "assistant", m->header_end, NULL);
    free(prompt);
    if (!(out->completion = message_response(m, row, "completion", -1))) return -1;
    return pref_field_label(row, "label", &out->label);
}
