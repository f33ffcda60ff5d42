/* Encoding and decoding: the pipeline of tokenizers' TokenizerImpl (encode_single_sequence,
 * post_process, decode) over the components of the other files. */
#include "tokenizer/tok_internal.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

/* Everything one encode call needs; buffers are reused between the segments of the call. */
typedef struct {
    TokBuf input;     /* the input, repaired to valid UTF-8 */
    TokBuf norm, tmp; /* a normalized segment, and scratch */
    TokBuf arena;     /* text of the pre-tokenized pieces */
    SegmentList raw_segs, norm_segs;
    PieceList pieces;
    PretokScratch pretok;
    BpeScratch bpe;
    IdBuf ids, ids_tmp;
} EncodeState;

static void state_free(EncodeState *st) {
    tokbuf_free(&st->input);
    tokbuf_free(&st->norm);
    tokbuf_free(&st->tmp);
    tokbuf_free(&st->arena);
    segmentlist_free(&st->raw_segs);
    segmentlist_free(&st->norm_segs);
    piecelist_free(&st->pieces);
    pretok_scratch_free(&st->pretok);
    bpe_scratch_free(&st->bpe);
    idbuf_free(&st->ids_tmp);
}

/* Pre-tokenizes one segment of normalized text and runs BPE on each piece. */
static int encode_text(const TokenizerImpl *t, const char *s, size_t len, bool at_origin,
                       EncodeState *st) {
    st->arena.len = 0;
    tokbuf_append(&st->arena, s, len);
    st->pieces.n = 0;
    piecelist_push(&st->pieces, 0, len, at_origin);
    if (t->pretok && pretok_apply(t->pretok, &st->arena, &st->pieces, &st->pretok) != 0) return -1;
    for (size_t i = 0; i < st->pieces.n; i++) {
        const Piece *pc = &st->pieces.v[i];
        if (bpe_encode_piece(t->bpe, st->arena.p + pc->off, pc->len, &st->ids, &st->bpe) != 0)
            return -1;
    }
    return 0;
}

/* Normalizes one raw text segment, splits out the normalized added tokens, encodes the rest. */
static int encode_segment(const TokenizerImpl *t, const char *s, size_t len, bool at_origin,
                          EncodeState *st) {
    st->norm.len = 0;
    tokbuf_append(&st->norm, s, len);
    if (t->normalizer && normalizer_apply(t->normalizer, &st->norm, &st->tmp, &at_origin) != 0)
        return -1;
    if (st->norm.len == 0) return 0;
    added_vocab_split(&t->added, true, t->encode_special_tokens, st->norm.p, st->norm.len,
                      &st->norm_segs);
    for (size_t i = 0; i < st->norm_segs.n; i++) {
        const Segment *sg = &st->norm_segs.v[i];
        if (sg->id >= 0) {
            idbuf_push(&st->ids, sg->id);
            continue;
        }
        /* st->norm is not touched again while its segments are being encoded */
        if (encode_text(t, st->norm.p + sg->start, sg->end - sg->start, at_origin && sg->start == 0,
                        st) != 0)
            return -1;
    }
    return 0;
}

int tokenizer_encode(const Tokenizer *tok, const char *text, size_t len, bool add_special_tokens,
                     int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    const TokenizerImpl *t = tok->impl;
    if (!t) return err_set("tokenizer_encode: tokenizer not loaded");
    EncodeState st = {0};
    utf8_append_lossy(&st.input, text ? text : "", text ? len : 0);
    added_vocab_split(&t->added, false, t->encode_special_tokens, st.input.p, st.input.len,
                      &st.raw_segs);
    int rc = 0;
    for (size_t i = 0; i < st.raw_segs.n && rc == 0; i++) {
        const Segment *sg = &st.raw_segs.v[i];
        if (sg->id >= 0)
            idbuf_push(&st.ids, sg->id);
        else
            rc =
                encode_segment(t, st.input.p + sg->start, sg->end - sg->start, sg->start == 0, &st);
    }
    if (rc == 0 && t->post) postproc_apply(t->post, add_special_tokens, &st.ids, &st.ids_tmp);
    state_free(&st);
    if (rc != 0) {
        idbuf_free(&st.ids);
        return -1;
    }
    *n = st.ids.n;
    *ids = st.ids.v ? st.ids.v : xmalloc(sizeof **ids);
    return 0;
}

static bool is_special_string(const TokenizerImpl *t, const char *s, size_t len) {
    int32_t one;
    return strmap_get(&t->added.special, s, len, &one);
}

/* The string decoding starts from: an added token's (normalized, when it is matched
 * normalized) content, else the model's vocabulary entry; NULL for an unknown id. */
static const char *id_string(const TokenizerImpl *t, int32_t id, size_t *len) {
    const AddedToken *a = added_vocab_by_id(&t->added, id);
    if (a) {
        *len = a->pattern_len;
        return a->pattern;
    }
    return bpe_id_to_token(t->bpe, id, len);
}

int tokenizer_decode(const Tokenizer *tok, const int32_t *ids, size_t n, bool skip_special_tokens,
                     char **text, size_t *len) {
    *text = NULL;
    if (len) *len = 0;
    const TokenizerImpl *t = tok->impl;
    if (!t) return err_set("tokenizer_decode: tokenizer not loaded");
    StrList toks = {0}, tmp = {0};
    for (size_t i = 0; i < n; i++) {
        size_t sl;
        const char *s = id_string(t, ids[i], &sl);
        if (!s) continue;
        if (skip_special_tokens && is_special_string(t, s, sl)) continue;
        strlist_push(&toks, s, sl);
    }
    int rc = 0;
    TokBuf out = {0};
    if (t->decoder) {
        rc = decoder_apply(t->decoder, &toks, &tmp);
        for (size_t i = 0; rc == 0 && i < toks.n; i++)
            tokbuf_append(&out, toks.data.p + toks.items[i].start,
                          toks.items[i].end - toks.items[i].start);
    } else {
        for (size_t i = 0; i < toks.n; i++) {
            if (i) tokbuf_push(&out, ' ');
            tokbuf_append(&out, toks.data.p + toks.items[i].start,
                          toks.items[i].end - toks.items[i].start);
        }
    }
    strlist_free(&toks);
    strlist_free(&tmp);
    if (rc != 0) {
        tokbuf_free(&out);
        return -1;
    }
    tokbuf_push(&out, '\0');
    *text = out.p;
    if (len) *len = out.len - 1;
    return 0;
}

int32_t tokenizer_token_to_id(const Tokenizer *tok, const char *token, size_t len) {
    const TokenizerImpl *t = tok->impl;
    if (!t) return -1;
    int32_t k;
    if (strmap_get(&t->added.by_content, token, len, &k)) return t->added.tokens[k].id;
    return bpe_token_to_id(t->bpe, token, len);
}

const char *tokenizer_id_to_token(const Tokenizer *tok, int32_t id, size_t *len) {
    const TokenizerImpl *t = tok->impl;
    if (!t) return NULL;
    const AddedToken *a = added_vocab_by_id(&t->added, id);
    if (a) {
        if (len) *len = a->pattern_len;
        return a->pattern;
    }
    return bpe_id_to_token(t->bpe, id, len);
}

void tokenizer_set_encode_special_tokens(Tokenizer *tok, bool on) {
    if (tok->impl) tok->impl->encode_special_tokens = on;
}

bool tokenizer_is_special(const Tokenizer *tok, int32_t id) {
    const TokenizerImpl *t = tok->impl;
    if (!t) return false;
    const AddedToken *a = added_vocab_by_id(&t->added, id);
    return a && is_special_string(t, a->content, a->len);
}
