#include "data/pref_tokenize.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

/* A token list being built. */
typedef struct {
    int32_t *ids;
    size_t n;
} Ids;

static int encode(const PrefTokenizer *t, const char *text, bool special, Ids *out) {
    out->ids = NULL;
    out->n = 0;
    if (tokenizer_encode(t->tok, text, strlen(text), special, &out->ids, &out->n) != 0) return -1;
    if (special && t->bos_id >= 0 && out->n >= 2 && out->ids[0] == t->bos_id &&
        out->ids[1] == t->bos_id) { /* Axolotl's remove_double_bos_token */
        memmove(out->ids, out->ids + 1, (out->n - 1) * sizeof *out->ids);
        out->n--;
    }
    return 0;
}

/* ids[from:] as a new array (at least one slot, so that it is never NULL). */
static int32_t *slice(const Ids *ids, size_t from, size_t extra, int *n) {
    size_t k = from < ids->n ? ids->n - from : 0;
    int32_t *out = xmalloc((k + extra + 1) * sizeof *out);
    if (k) memcpy(out, ids->ids + from, k * sizeof *out);
    *n = (int)k;
    return out;
}

/* max_prompt_len: keep the prompt's last tokens, a leading BOS staying first. */
static void keep_prompt_end(PrefTokenizer *t, int32_t *ids, int *n) {
    if (t->max_prompt_len <= 0 || *n <= t->max_prompt_len) return;
    int bos = t->bos_id >= 0 && ids[0] == t->bos_id && t->max_prompt_len > 1 ? 1 : 0;
    int keep = (int)t->max_prompt_len - bos;
    memmove(ids + bos, ids + *n - keep, (size_t)keep * sizeof *ids);
    *n = keep + bos;
    t->prompts_shortened++;
}

/* ------------------------------------------------------------------------- dpo, ipo, kto */

static bool ends_with(const char *s, const char *suffix) {
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && memcmp(s + ls - lx, suffix, lx) == 0;
}

/* tok(prompt + response [+ EOS text])[n_prompt:]. */
static int joint_response(PrefTokenizer *t, const char *prompt, const Ids *prompt_ids,
                          const char *response, int32_t **out, int *n_out) {
    const char *eos = ends_with(response, t->eos_text) ? "" : t->eos_text;
    char *joint = xmalloc(strlen(prompt) + strlen(response) + strlen(eos) + 1);
    strcat(strcat(strcpy(joint, prompt), response), eos);
    Ids ids;
    int rc = encode(t, joint, true, &ids);
    free(joint);
    if (rc != 0) return -1;
    if (ids.n < prompt_ids->n ||
        memcmp(ids.ids, prompt_ids->ids, prompt_ids->n * sizeof *ids.ids) != 0)
        t->mismatches++;
    *out = slice(&ids, prompt_ids->n, 0, n_out);
    free(ids.ids);
    return 0;
}

static int dpo_pair(PrefTokenizer *t, const char *prompt, const char *chosen, const char *rejected,
                    PrefPair *out, bool *keep) {
    Ids p;
    if (encode(t, prompt, true, &p) != 0) return -1;
    PrefPair pair = {0};
    if (joint_response(t, prompt, &p, chosen, &pair.chosen, &pair.n_chosen) != 0 ||
        joint_response(t, prompt, &p, rejected, &pair.rejected, &pair.n_rejected) != 0) {
        free(p.ids);
        free(pair.chosen);
        return -1;
    }
    pair.prompt = slice(&p, 0, 0, &pair.n_prompt);
    free(p.ids);
    keep_prompt_end(t, pair.prompt, &pair.n_prompt);
    *keep = pair.n_prompt < t->max_length;
    if (*keep) {
        *out = pair;
    } else {
        free(pair.prompt);
        free(pair.chosen);
        free(pair.rejected);
    }
    return 0;
}

int pref_tokenize_kto(PrefTokenizer *t, const char *prompt, const char *completion, bool label,
                      KtoRow *out, bool *keep) {
    Ids p;
    if (encode(t, prompt, true, &p) != 0) return -1;
    KtoRow row = {0};
    row.desirable = label;
    if (joint_response(t, prompt, &p, completion, &row.completion, &row.n_completion) != 0) {
        free(p.ids);
        return -1;
    }
    row.prompt = slice(&p, 0, 0, &row.n_prompt);
    free(p.ids);
    keep_prompt_end(t, row.prompt, &row.n_prompt);
    *keep = row.n_prompt < t->max_length;
    if (*keep) {
        *out = row;
    } else {
        free(row.prompt);
        free(row.completion);
    }
    return 0;
}

/* ---------------------------------------------------------------------------- orpo, simpo */

typedef struct {
    int32_t *prompt, *answer;
    int n_prompt, n_answer;
} Answer;

/* build_tokenized_answer: full = tok(prompt + answer); the answer starts at len(p), or one
 * token earlier when full does not start with p. */
static int split_answer(const PrefTokenizer *t, const char *prompt, const Ids *p,
                        const char *answer, Answer *out) {
    char *joint = xmalloc(strlen(prompt) + strlen(answer) + 1);
    strcat(strcpy(joint, prompt), answer);
    Ids full;
    int rc = encode(t, joint, false, &full);
    free(joint);
    if (rc != 0) return -1;
    if (full.n < p->n) {
        free(full.ids);
        return err_set("Prompt input ids and answer input ids should have the same length.");
    }
    size_t start = p->n;
    if (start && memcmp(full.ids, p->ids, start * sizeof *p->ids) != 0) start--;
    /* room for the BOS / EOS added below */
    out->prompt = xmalloc((start + 2) * sizeof *out->prompt);
    memcpy(out->prompt, full.ids, start * sizeof *full.ids);
    out->n_prompt = (int)start;
    out->answer = slice(&full, start, 1, &out->n_answer);
    free(full.ids);
    return 0;
}

static void add_bos_eos(const PrefTokenizer *t, Answer *a) {
    if (t->bos_id >= 0 && (a->n_prompt == 0 || a->prompt[0] != t->bos_id)) {
        memmove(a->prompt + 1, a->prompt, (size_t)a->n_prompt * sizeof *a->prompt);
        a->prompt[0] = t->bos_id;
        a->n_prompt++;
    }
    if (a->n_answer == 0 || a->answer[a->n_answer - 1] != t->eos_id)
        a->answer[a->n_answer++] = t->eos_id;
}

static int cpo_pair(PrefTokenizer *t, const char *prompt, const char *chosen, const char *rejected,
                    PrefPair *out, bool *keep) {
    Ids p;
    if (encode(t, prompt, false, &p) != 0) return -1;
    Answer c = {0}, r = {0};
    int rc = split_answer(t, prompt, &p, chosen, &c);
    if (rc == 0) rc = split_answer(t, prompt, &p, rejected, &r);
    free(p.ids);
    if (rc == 0) {
        int shorter = c.n_prompt < r.n_prompt ? c.n_prompt : r.n_prompt, differ = 0;
        for (int i = 0; i < shorter; i++)
            differ += c.prompt[i] != r.prompt[i];
        if (differ > 1 || abs(c.n_prompt - r.n_prompt) > 1)
            rc = err_set("Chosen and rejected prompt_input_ids might only differ on the last "
                         "token due to tokenizer merge ops.");
    }
    *keep = false;
    if (rc == 0) {
        Answer *both[2] = {&c, &r};
        *keep = true;
        for (int i = 0; i < 2; i++) {
            add_bos_eos(t, both[i]);
            keep_prompt_end(t, both[i]->prompt, &both[i]->n_prompt);
            int64_t room = t->max_length - both[i]->n_prompt;
            if (room <= 0) {
                *keep = false;
            } else if (both[i]->n_answer > room) {
                both[i]->n_answer = (int)room;
                t->responses_cut++;
            }
        }
    }
    if (rc == 0 && *keep) {
        bool same = c.n_prompt == r.n_prompt &&
                    memcmp(c.prompt, r.prompt, (size_t)c.n_prompt * sizeof *c.prompt) == 0;
        *out = (PrefPair){.prompt = c.prompt,
                          .chosen = c.answer,
                          .rejected = r.answer,
                          .n_prompt = c.n_prompt,
                          .n_chosen = c.n_answer,
                          .n_rejected = r.n_answer};
        if (same) {
            free(r.prompt);
        } else {
            out->rejected_prompt = r.prompt;
            out->n_rejected_prompt = r.n_prompt;
        }
        return 0;
    }
    free(c.prompt);
    free(c.answer);
    free(r.prompt);
    free(r.answer);
    return rc;
}

int pref_tokenize_pair(PrefTokenizer *t, const char *prompt, const char *chosen,
                       const char *rejected, PrefPair *out, bool *keep) {
    if (t->rl == RL_ORPO || t->rl == RL_SIMPO || t->rl == RL_CPO)
        return cpo_pair(t, prompt, chosen, rejected, out, keep);
    return dpo_pair(t, prompt, chosen, rejected, out, keep);
}
