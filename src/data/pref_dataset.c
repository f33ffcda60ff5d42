#include "data/pref_dataset.h"

#include "chat/chat_template.h"
#include "common/error.h"
#include "data/dataset_rows.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    PrefDataset *ds;
    const TrainConfig *cfg;
    const Tokenizer *tok;
    const char *eos_text; /* the tokenizer's eos_token (NULL: none) */
    int32_t bos_id;       /* -1: none */
} LoadContext;

static const char *string_field(const json_t *row, const char *key, int *rc) {
    const json_t *v = json_object_get(row, key);
    if (!v || json_is_null(v)) {
        *rc = err_set("missing field \"%s\"", key);
        return NULL;
    }
    if (!json_is_string(v)) {
        *rc = err_set("field \"%s\": expected a string", key);
        return NULL;
    }
    return json_string_value(v);
}

static int encode(const LoadContext *c, const char *text, int32_t **ids, size_t *n) {
    if (tokenizer_encode(c->tok, text, strlen(text), true, ids, n) != 0) return -1;
    if (c->bos_id >= 0 && *n >= 2 && (*ids)[0] == c->bos_id && (*ids)[1] == c->bos_id) {
        memmove(*ids, *ids + 1, (*n - 1) * sizeof **ids); /* a doubled BOS: keep one */
        (*n)--;
    }
    return 0;
}

/* prompt + response (EOS text appended unless already last), tokenised jointly; the response's
 * ids are what follows the prompt's own tokenisation. */
static int response_ids(const LoadContext *c, const char *prompt, const char *response,
                        size_t n_prompt, int32_t **out, int *n_out) {
    size_t lp = strlen(prompt), lr = strlen(response);
    size_t le = c->eos_text ? strlen(c->eos_text) : 0;
    bool add_eos = le && !(lr >= le && memcmp(response + lr - le, c->eos_text, le) == 0);
    char *joint = xmalloc(lp + lr + le + 1);
    memcpy(joint, prompt, lp);
    memcpy(joint + lp, response, lr);
    if (add_eos) memcpy(joint + lp + lr, c->eos_text, le);
    joint[lp + lr + (add_eos ? le : 0)] = '\0';
    int32_t *ids;
    size_t n;
    int rc = encode(c, joint, &ids, &n);
    free(joint);
    if (rc != 0) return -1;
    size_t skip = n_prompt < n ? n_prompt : n;
    *n_out = (int)(n - skip);
    *out = xmalloc((n - skip + 1) * sizeof **out);
    memcpy(*out, ids + skip, (n - skip) * sizeof **out);
    free(ids);
    return 0;
}

static int add_pair(void *ctx, const json_t *row) {
    const LoadContext *c = ctx;
    int rc = 0;
    const char *prompt = string_field(row, "prompt", &rc);
    const char *chosen = rc ? NULL : string_field(row, "chosen", &rc);
    const char *rejected = rc ? NULL : string_field(row, "rejected", &rc);
    if (rc) return -1;
    int32_t *p_ids;
    size_t np;
    if (encode(c, prompt, &p_ids, &np) != 0) return -1;
    if ((int64_t)np >= c->cfg->sequence_len) { /* TRL drops it: nothing of the responses fits */
        free(p_ids);
        c->ds->dropped++;
        return 0;
    }
    PrefPair pair = {p_ids, NULL, NULL, (int)np, 0, 0};
    if (response_ids(c, prompt, chosen, np, &pair.chosen, &pair.n_chosen) != 0 ||
        response_ids(c, prompt, rejected, np, &pair.rejected, &pair.n_rejected) != 0) {
        free(pair.prompt);
        free(pair.chosen);
        return -1;
    }
    PrefDataset *ds = c->ds;
    ds->pairs = xrealloc(ds->pairs, (ds->n_pairs + 1) * sizeof *ds->pairs);
    ds->pairs[ds->n_pairs++] = pair;
    return 0;
}

int pref_dataset_load(PrefDataset *ds, const TrainConfig *cfg, const Tokenizer *tok, FILE *log) {
    memset(ds, 0, sizeof *ds);
    if (cfg->rl != RL_DPO && cfg->rl != RL_IPO)
        return err_set("%s: rl: %s datasets are not implemented yet", cfg->source,
                       rl_method_name(cfg->rl));
    ChatTemplateSource src;
    if (chat_template_source_load(cfg->tokenizer_config, &src) != 0) return -1;
    const char *eos = json_string_value(json_object_get(src.special_tokens, "eos_token"));
    const char *bos = json_string_value(json_object_get(src.special_tokens, "bos_token"));
    LoadContext c = {ds, cfg, tok, eos, bos ? tokenizer_token_to_id(tok, bos, strlen(bos)) : -1};
    int rc = 0;
    for (int d = 0; rc == 0 && d < cfg->n_datasets; d++) {
        const DatasetConfig *dc = &cfg->datasets[d];
        if (dc->type)
            rc = err_set("%s:%d: datasets[%d].type: \"%s\" is not supported for rl: %s yet",
                         cfg->source, dc->line, d, dc->type, rl_method_name(cfg->rl));
        else
            rc = dataset_rows_foreach(dc, add_pair, &c);
    }
    chat_template_source_free(&src);
    if (rc == 0 && ds->dropped)
        fprintf(log, "warning: dropped %zu examples whose prompt alone fills sequence_len %lld\n",
                ds->dropped, (long long)cfg->sequence_len);
    if (rc == 0 && ds->n_pairs == 0)
        rc = err_set("%s: the datasets hold no usable preference pair", cfg->source);
    if (rc != 0) pref_dataset_free(ds);
    return rc;
}

void pref_dataset_free(PrefDataset *ds) {
    for (size_t i = 0; i < ds->n_pairs; i++) {
        free(ds->pairs[i].prompt);
        free(ds->pairs[i].chosen);
        free(ds->pairs[i].rejected);
    }
    for (size_t i = 0; i < ds->n_rows; i++) {
        free(ds->rows[i].prompt);
        free(ds->rows[i].completion);
    }
    free(ds->pairs);
    free(ds->rows);
    memset(ds, 0, sizeof *ds);
}
