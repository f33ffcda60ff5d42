/* Loading a preference dataset: per dataset entry, each row is formatted by its type
 * (pref_format.h), checked against excess_length_strategy (pref_length.h) and tokenised for the
 * method (pref_tokenize.h), in file order; then the datasets are merged in Axolotl's order
 * (data/dataset_merge.h: shuffled from seed by default), as its rl: path merges them after each
 * dataset's length filter.
 *
 * KTO with paired rows (prompt / chosen / rejected, no type): TRL unpairs them in batches of
 * 1000 pairs, all chosen rows (desirable) then all rejected rows (undesirable) of each batch; the
 * same order is kept here, per dataset. The unpairing comes before the length rule (Axolotl
 * would stop at its length filter instead: "Prompt and completion keys are required for KTO
 * datasets"). Whether a dataset is paired is decided by its first row, as TRL decides. */
#include "data/pref_dataset.h"

#include "chat/chat_template.h"
#include "common/error.h"
#include "data/dataset_merge.h"
#include "data/dataset_rows.h"
#include "data/pref_format.h"
#include "data/pref_length.h"
#include "data/pref_tokenize.h"

#include <stdlib.h>
#include <string.h>

#define KTO_UNPAIR_BATCH 1000 /* datasets.map's default batch size, which TRL's unpairing uses */

typedef struct {
    KtoRow *rows;
    size_t n;
} KtoRows;

typedef struct {
    PrefDataset *ds;
    const PrefFormat *format;
    PrefLengthRule length;
    PrefTokenizer *tokenize;
    size_t dropped_long, dropped_uncuttable, dropped_prompt_fills;
    /* KTO */
    bool first_row_seen, paired;
    KtoRows block_chosen, block_rejected; /* the current batch of unpaired pairs */
    size_t block_pairs;
} LoadContext;

static void kto_rows_push(KtoRows *r, const KtoRow *row) {
    r->rows = xrealloc(r->rows, (r->n + 1) * sizeof *r->rows);
    r->rows[r->n++] = *row;
}

static void flush_unpaired(LoadContext *c) {
    PrefDataset *ds = c->ds;
    KtoRows *parts[2] = {&c->block_chosen, &c->block_rejected};
    for (int p = 0; p < 2; p++) {
        for (size_t i = 0; i < parts[p]->n; i++) {
            ds->rows = xrealloc(ds->rows, (ds->n_rows + 1) * sizeof *ds->rows);
            ds->rows[ds->n_rows++] = parts[p]->rows[i];
        }
        free(parts[p]->rows);
        parts[p]->rows = NULL;
        parts[p]->n = 0;
    }
    c->block_pairs = 0;
}

/* Length rule then tokenisation; *kept says whether a row came out. */
static int length_rule(LoadContext *c, const char *prompt, char **responses, size_t n, bool *kept) {
    PrefLengthOutcome outcome;
    if (pref_length_apply(&c->length, prompt, responses, n, &outcome) != 0) return -1;
    *kept = outcome == PREF_LENGTH_KEEP;
    if (outcome == PREF_LENGTH_DROP_LONG) c->dropped_long++;
    if (outcome == PREF_LENGTH_DROP_UNCUTTABLE) c->dropped_uncuttable++;
    return 0;
}

static int kto_row(LoadContext *c, const char *prompt, const char *completion, bool label,
                   KtoRows *dst) {
    char *text = xstrdup(completion);
    bool kept;
    KtoRow row;
    int rc = length_rule(c, prompt, &text, 1, &kept);
    if (rc == 0 && kept) {
        rc = pref_tokenize_kto(c->tokenize, prompt, text, label, &row, &kept);
        if (rc == 0 && !kept) c->dropped_prompt_fills++;
    }
    if (rc == 0 && kept) {
        if (dst) {
            kto_rows_push(dst, &row);
        } else {
            PrefDataset *ds = c->ds;
            ds->rows = xrealloc(ds->rows, (ds->n_rows + 1) * sizeof *ds->rows);
            ds->rows[ds->n_rows++] = row;
        }
    }
    free(text);
    return rc;
}

static int add_kto(LoadContext *c, PrefStrings *s) {
    if (!c->first_row_seen) {
        c->first_row_seen = true;
        c->paired = s->paired;
    } else if (s->paired != c->paired) {
        return err_set(c->paired ? "expected chosen and rejected like the dataset's first row "
                                   "(a paired dataset is unpaired for KTO)"
                                 : "expected completion and label like the dataset's first row");
    }
    if (!s->paired) return kto_row(c, s->prompt, s->completion, s->label, NULL);
    if (kto_row(c, s->prompt, s->chosen, true, &c->block_chosen) != 0 ||
        kto_row(c, s->prompt, s->rejected, false, &c->block_rejected) != 0)
        return -1;
    if (++c->block_pairs == KTO_UNPAIR_BATCH) flush_unpaired(c);
    return 0;
}

static int add_pair(LoadContext *c, PrefStrings *s) {
    char *responses[2] = {s->chosen, s->rejected};
    bool kept;
    int rc = length_rule(c, s->prompt, responses, 2, &kept);
    s->chosen = responses[0]; /* truncate may have replaced them */
    s->rejected = responses[1];
    if (rc != 0 || !kept) return rc;
    PrefPair pair;
    if (pref_tokenize_pair(c->tokenize, s->prompt, s->chosen, s->rejected, &pair, &kept) != 0)
        return -1;
    if (!kept) {
        c->dropped_prompt_fills++;
        return 0;
    }
    PrefDataset *ds = c->ds;
    ds->pairs = xrealloc(ds->pairs, (ds->n_pairs + 1) * sizeof *ds->pairs);
    ds->pairs[ds->n_pairs++] = pair;
    return 0;
}

static int add_row(void *ctx, const json_t *row) {
    LoadContext *c = ctx;
    PrefStrings s;
    if (pref_format_row(c->format, row, &s) != 0) return -1;
    int rc = c->length.rl == RL_KTO ? add_kto(c, &s) : add_pair(c, &s);
    pref_strings_free(&s);
    return rc;
}

static void report_drops(const LoadContext *c, const TrainConfig *cfg, int index, FILE *log) {
    if (c->dropped_long)
        fprintf(log, "warning: Dropped %zu long samples from dataset index %d\n", c->dropped_long,
                index);
    if (c->dropped_uncuttable)
        fprintf(log,
                "warning: Dropped %zu samples from dataset index %d that could not be truncated "
                "to fit sequence_len (prompt alone exceeds limit)\n",
                c->dropped_uncuttable, index);
    if (c->dropped_prompt_fills)
        fprintf(log,
                "warning: dropped %zu examples from dataset index %d whose prompt alone fills "
                "sequence_len %lld (with BOS/EOS added, nothing of the response would be "
                "trained)\n",
                c->dropped_prompt_fills, index, (long long)cfg->sequence_len);
}

static int load_dataset(PrefDataset *ds, const TrainConfig *cfg, int index, PrefTokenizer *tokenize,
                        FILE *log) {
    PrefFormat *format;
    if (pref_format_open(&format, cfg, index, log) != 0) return -1;
    LoadContext c = {.ds = ds, .format = format, .tokenize = tokenize};
    c.length = (PrefLengthRule){tokenize->tok, cfg->rl, EXCESS_DROP, cfg->sequence_len,
                                cfg->max_prompt_len};
    int rc = pref_length_strategy(cfg->excess_length_strategy, &c.length.strategy);
    if (rc == 0) rc = dataset_rows_foreach(&cfg->datasets[index], add_row, &c);
    if (rc == 0) flush_unpaired(&c);
    for (size_t i = 0; i < c.block_chosen.n; i++) {
        free(c.block_chosen.rows[i].prompt);
        free(c.block_chosen.rows[i].completion);
    }
    for (size_t i = 0; i < c.block_rejected.n; i++) {
        free(c.block_rejected.rows[i].prompt);
        free(c.block_rejected.rows[i].completion);
    }
    free(c.block_chosen.rows);
    free(c.block_rejected.rows);
    pref_format_close(format);
    if (rc == 0) report_drops(&c, cfg, index, log);
    ds->dropped += c.dropped_long + c.dropped_uncuttable + c.dropped_prompt_fills;
    return rc;
}

static void report_tokenize_notes(const PrefTokenizer *t, const TrainConfig *cfg, FILE *log) {
    if (t->mismatches)
        fprintf(log,
                "warning: %zu responses: the tokenized prompt is not the start of the tokenized "
                "prompt + response (TRL: \"Mismatch between tokenized prompt and the start of "
                "tokenized prompt+chosen\"); the response ids are taken after the prompt's "
                "length all the same\n",
                t->mismatches);
    if (t->prompts_shortened)
        fprintf(log,
                "note: max_prompt_len %lld: %zu prompts keep only their last tokens (Axolotl 0.19 "
                "ignores max_prompt_len)\n",
                (long long)cfg->max_prompt_len, t->prompts_shortened);
    if (t->responses_cut)
        fprintf(log,
                "note: %zu responses cut to sequence_len - len(prompt) tokens (TRL %s cuts to "
                "sequence_len - len(longest response); rlhf.c follows the documented rule)\n",
                t->responses_cut, cfg->rl == RL_ORPO ? "ORPO" : "CPO");
}

/* Axolotl's merge_datasets (data/dataset_merge.h): after each dataset's long rows are dropped
 * (as Axolotl's rl: path drops them), the merged pairs or rows shuffled from seed. */
static int merge_datasets(PrefDataset *ds, const TrainConfig *cfg, const size_t *part_rows) {
    size_t *order;
    if (dataset_merge_order(cfg, part_rows, cfg->n_datasets, &order) != 0) return -1;
    if (order && ds->n_pairs) dataset_permute(ds->pairs, ds->n_pairs, sizeof *ds->pairs, order);
    if (order && ds->n_rows) dataset_permute(ds->rows, ds->n_rows, sizeof *ds->rows, order);
    free(order);
    return 0;
}

int pref_dataset_load(PrefDataset *ds, const TrainConfig *cfg, const Tokenizer *tok, FILE *log) {
    memset(ds, 0, sizeof *ds);
    if (cfg->rl != RL_DPO && cfg->rl != RL_IPO && cfg->rl != RL_KTO && cfg->rl != RL_ORPO &&
        cfg->rl != RL_SIMPO && cfg->rl != RL_CPO)
        return err_set("%s: rl: %s is not a preference method (dpo, ipo, kto, orpo, simpo, cpo)",
                       cfg->source, rl_method_name(cfg->rl));
    ChatTemplateSource src;
    if (chat_template_source_load(cfg->tokenizer_config, &src) != 0) return -1;
    const char *eos = json_string_value(json_object_get(src.special_tokens, "eos_token"));
    const char *bos = json_string_value(json_object_get(src.special_tokens, "bos_token"));
    PrefTokenizer t = {.tok = tok,
                       .rl = cfg->rl,
                       .eos_text = eos,
                       .eos_id = eos ? tokenizer_token_to_id(tok, eos, strlen(eos)) : -1,
                       .bos_id = bos ? tokenizer_token_to_id(tok, bos, strlen(bos)) : -1,
                       .max_length = cfg->sequence_len,
                       .max_prompt_len = cfg->max_prompt_len};
    int rc = 0;
    if (!eos || t.eos_id < 0)
        rc = err_set("%s: the tokenizer has no eos_token (tokenizer_config.json): preference "
                     "training appends it to every response",
                     cfg->tokenizer_config);
    size_t *part_rows = xcalloc((size_t)cfg->n_datasets, sizeof *part_rows);
    for (int d = 0; rc == 0 && d < cfg->n_datasets; d++) {
        size_t before = ds->n_pairs + ds->n_rows;
        rc = load_dataset(ds, cfg, d, &t, log);
        part_rows[d] = ds->n_pairs + ds->n_rows - before;
    }
    chat_template_source_free(&src);
    if (rc == 0) rc = merge_datasets(ds, cfg, part_rows);
    free(part_rows);
    if (rc == 0) report_tokenize_notes(&t, cfg, log);
    if (rc == 0 && ds->n_pairs == 0 && ds->n_rows == 0) {
        const char *what = cfg->rl == RL_KTO ? "KTO row" : "preference pair";
        rc = ds->dropped ? err_set("%s: the datasets hold no usable %s (%zu dropped as longer "
                                   "than sequence_len %lld, see the warnings above)",
                                   cfg->source, what, ds->dropped, (long long)cfg->sequence_len)
                         : err_set("%s: the datasets hold no usable %s", cfg->source, what);
    }
    if (rc != 0) pref_dataset_free(ds);
    return rc;
}

void pref_dataset_free(PrefDataset *ds) {
    for (size_t i = 0; i < ds->n_pairs; i++) {
        free(ds->pairs[i].prompt);
        free(ds->pairs[i].chosen);
        free(ds->pairs[i].rejected);
        free(ds->pairs[i].rejected_prompt);
    }
    for (size_t i = 0; i < ds->n_rows; i++) {
        free(ds->rows[i].prompt);
        free(ds->rows[i].completion);
    }
    free(ds->pairs);
    free(ds->rows);
    memset(ds, 0, sizeof *ds);
}
