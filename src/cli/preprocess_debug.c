#include "cli/preprocess_debug.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* termcolor's codes, which Axolotl's output uses */
#define COLOR_RED    "\033[31m"
#define COLOR_GREEN  "\033[32m"
#define COLOR_YELLOW "\033[33m"
#define COLOR_WHITE  "\033[37m"
#define COLOR_RESET  "\033[0m"

static void put_colored(const DebugPrinter *p, const char *color, const char *text, size_t len) {
    if (p->color) fputs(color, p->out);
    fwrite(text, 1, len, p->out);
    if (p->color) fputs(COLOR_RESET, p->out);
}

/* One token: its decoded text, then "(label, id)" (with_label) or "(id)", unless text_only.
 * Tokens are separated by a space unless text_only (then the texts run together). */
static void put_token(const DebugPrinter *p, const char *color, int32_t id, long label,
                      bool with_label, bool first) {
    char *text = NULL;
    size_t len = 0;
    if (!first && !p->text_only) fputc(' ', p->out);
    /* an id outside the vocabulary decodes to nothing, as tokenizers does; it still shows */
    if (tokenizer_decode(p->tok, &id, 1, false, &text, &len) != 0) len = 0;
    put_colored(p, color, text ? text : "", len);
    free(text);
    if (p->text_only) return;
    char tail[64];
    int n = with_label ? snprintf(tail, sizeof tail, "(%ld, %d)", label, (int)id)
                       : snprintf(tail, sizeof tail, "(%d)", (int)id);
    put_colored(p, COLOR_WHITE, tail, (size_t)n);
}

static void put_ids(const DebugPrinter *p, const char *heading, const char *color,
                    const int32_t *ids, int n) {
    fprintf(p->out, "%s: ", heading);
    for (int t = 0; t < n; t++)
        put_token(p, color, ids[t], 0, false, t == 0);
    fputs("\n\n", p->out);
}

void debug_print_sft(const DebugPrinter *p, const SftDataset *ds) {
    for (size_t i = 0; i < ds->n && i < p->n_examples; i++) {
        const SftExample *e = &ds->items[i];
        size_t trained = 0;
        for (int t = 0; t < e->len; t++) {
            bool on = e->labels[t] != 0;
            trained += on;
            /* Axolotl's labels: the id where the token is trained on, -100 where masked */
            put_token(p, on ? COLOR_GREEN : COLOR_RED, e->ids[t], on ? (long)e->ids[t] : -100, true,
                      t == 0);
        }
        fprintf(p->out, "\n\n\nTotal input len: %d\nCount of labels: %zu\n\n", e->len, trained);
    }
}

void debug_print_pref(const DebugPrinter *p, const PrefDataset *ds) {
    for (size_t i = 0; i < ds->n_pairs && i < p->n_examples; i++) {
        const PrefPair *e = &ds->pairs[i];
        put_ids(p, "INPUT PROMPT", COLOR_YELLOW, e->prompt, e->n_prompt);
        put_ids(p, "CHOSEN RESPONSE", COLOR_GREEN, e->chosen, e->n_chosen);
        if (e->rejected_prompt)
            put_ids(p, "REJECTED PROMPT", COLOR_YELLOW, e->rejected_prompt, e->n_rejected_prompt);
        put_ids(p, "REJECTED RESPONSE", COLOR_RED, e->rejected, e->n_rejected);
        fputc('\n', p->out);
    }
    for (size_t i = 0; i < ds->n_rows && i < p->n_examples; i++) {
        const KtoRow *e = &ds->rows[i];
        put_ids(p, "INPUT PROMPT", COLOR_YELLOW, e->prompt, e->n_prompt);
        put_ids(p, "COMPLETION RESPONSE", e->desirable ? COLOR_GREEN : COLOR_RED, e->completion,
                e->n_completion);
        fprintf(p->out, "LABEL: %s\n\n\n",
                e->desirable ? "true (desirable)" : "false (undesirable)");
    }
}

void debug_print_grpo(const DebugPrinter *p, const GrpoDataset *ds) {
    for (size_t i = 0; i < ds->n && i < p->n_examples; i++) {
        put_ids(p, "INPUT PROMPT", COLOR_YELLOW, ds->prompt_ids[i], ds->prompt_lens[i]);
        /* the row as the reward functions receive it, prompt left out (shown above) */
        json_t *columns = json_deep_copy(json_array_get(ds->rows, i));
        json_object_del(columns, "prompt");
        char *text = json_dumps(columns, JSON_SORT_KEYS | JSON_ENSURE_ASCII);
        fprintf(p->out, "COLUMNS: %s\n\n\n", text ? text : "{}");
        free(text);
        json_decref(columns);
    }
}
