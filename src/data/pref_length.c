#include "data/pref_length.h"

#include "common/error.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int pref_length_strategy(const char *name, ExcessLengthStrategy *out) {
    if (!name || strcmp(name, "drop") == 0) return *out = EXCESS_DROP, 0;
    if (strcmp(name, "truncate") == 0) return *out = EXCESS_TRUNCATE, 0;
    if (strcmp(name, "raise") == 0) return *out = EXCESS_RAISE, 0;
    return err_set("excess_length_strategy: \"%s\" is not one of drop, truncate, raise", name);
}

static int count(const PrefLengthRule *r, const char *text, int64_t *n) {
    int32_t *ids;
    size_t k;
    if (tokenizer_encode(r->tok, text, strlen(text), false, &ids, &k) != 0) return -1;
    free(ids);
    *n = (int64_t)k;
    return 0;
}

static int prompt_count(const PrefLengthRule *r, const char *prompt, int64_t *n) {
    if (count(r, prompt, n) != 0) return -1;
    if (r->max_prompt_len > 0 && *n > r->max_prompt_len) *n = r->max_prompt_len;
    return 0;
}

static int fits(const PrefLengthRule *r, const char *prompt, char **responses, size_t n, bool *ok) {
    int64_t lp, lr;
    if (prompt_count(r, prompt, &lp) != 0) return -1;
    *ok = true;
    for (size_t i = 0; i < n && *ok; i++) {
        if (count(r, responses[i], &lr) != 0) return -1;
        *ok = lp + lr <= r->sequence_len;
    }
    return 0;
}

/* The first `keep` tokens of text, decoded with special tokens as they are. */
static int cut(const PrefLengthRule *r, char **text, int64_t keep) {
    int32_t *ids;
    size_t n;
    if (tokenizer_encode(r->tok, *text, strlen(*text), false, &ids, &n) != 0) return -1;
    if ((int64_t)n <= keep) {
        free(ids);
        return 0;
    }
    char *s;
    int rc = tokenizer_decode(r->tok, ids, (size_t)keep, false, &s, NULL);
    free(ids);
    if (rc != 0) return -1;
    free(*text);
    *text = s;
    return 0;
}

int pref_length_apply(const PrefLengthRule *r, const char *prompt, char **responses,
                      size_t n_responses, PrefLengthOutcome *outcome) {
    bool present = *prompt != '\0';
    for (size_t i = 0; i < n_responses; i++)
        present &= *responses[i] != '\0';
    if (!present)
        return err_set(r->rl == RL_KTO
                           ? "Prompt and completion keys are required for KTO datasets"
                           : "Prompt, chosen and rejected keys are required for DPO/ORPO datasets");
    bool ok;
    *outcome = PREF_LENGTH_KEEP;
    if (fits(r, prompt, responses, n_responses, &ok) != 0) return -1;
    if (ok) return 0;
    if (r->strategy == EXCESS_RAISE)
        return err_set("Sample exceeds configured sequence_len (%lld). Set "
                       "`excess_length_strategy: drop` or `excess_length_strategy: truncate` to "
                       "handle long sequences automatically.",
                       (long long)r->sequence_len);
    if (r->strategy == EXCESS_DROP) {
        *outcome = PREF_LENGTH_DROP_LONG;
        return 0;
    }
    int64_t lp;
    if (prompt_count(r, prompt, &lp) != 0) return -1;
    int64_t room = r->sequence_len - lp;
    for (size_t i = 0; room > 0 && i < n_responses; i++)
        if (cut(r, &responses[i], room) != 0) return -1;
    /* Axolotl follows the cut with its drop filter, on the new strings */
    if (room > 0 && fits(r, prompt, responses, n_responses, &ok) != 0) return -1;
    if (room <= 0 || !ok) *outcome = PREF_LENGTH_DROP_UNCUTTABLE;
    return 0;
}
