/* Pre-tokenizers: Split (regex or string, five behaviours, invert), ByteLevel, Metaspace,
 * Digits, WhitespaceSplit, and Sequence of those.
 *
 * Each stage takes the list of pieces from the previous stage and replaces every piece by the
 * pieces it splits into, dropping empty ones (PreTokenizedString::split). Splitting first marks
 * the piece's spans as match / not match (tokenizers' Pattern::find_matches: the gaps between
 * regex matches, or one span per matching character), then groups them by the behaviour. */
#include "tokenizer/tok_internal.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pattern ByteLevel splits with when use_regex is on (GPT-2's). */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char *const supported =
    "Sequence, Split, ByteLevel, Metaspace, Digits, WhitespaceSplit";

static int parse_behavior(const json_t *j, SplitBehavior *out, const char *where) {
    const char *s;
    size_t len;
    if (tokjson_string(j, "behavior", &s, &len, where) != 0) return -1;
    static const struct {
        const char *name;
        SplitBehavior b;
    } names[] = {{"Removed", SPLIT_REMOVED},
                 {"Isolated", SPLIT_ISOLATED},
                 {"MergedWithPrevious", SPLIT_MERGED_WITH_PREVIOUS},
                 {"MergedWithNext", SPLIT_MERGED_WITH_NEXT},
                 {"Contiguous", SPLIT_CONTIGUOUS}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].b;
            return 0;
        }
    }
    return err_set("%s: key 'behavior': unknown split behavior \"%s\" (expected Removed, "
                   "Isolated, MergedWithPrevious, MergedWithNext or Contiguous)",
                   where, s);
}

int pretok_parse(PreTokenizer *p, const json_t *j, const char *where) {
    memset(p, 0, sizeof *p);
    const char *type = tokjson_type(j, where);
    if (!type) return -1;
    if (strcmp(type, "Sequence") == 0) {
        p->kind = PRETOK_SEQUENCE;
        const json_t *arr = json_object_get(j, "pretokenizers");
        if (!json_is_array(arr))
            return err_set("%s: key 'pretokenizers': expected an array", where);
        p->n_children = json_array_size(arr);
        p->children = xcalloc(p->n_children ? p->n_children : 1, sizeof *p->children);
        for (size_t i = 0; i < p->n_children; i++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", where, i);
            if (pretok_parse(&p->children[i], json_array_get(arr, i), sub) != 0) {
                p->n_children = i + 1;
                return -1;
            }
        }
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        p->kind = PRETOK_SPLIT;
        if (parse_behavior(j, &p->behavior, where) != 0 ||
            tokjson_bool(j, "invert", false, &p->invert, where) != 0 ||
            tokjson_pattern(j, "pattern", &p->regex, where) != 0)
            return -1;
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        p->kind = PRETOK_BYTELEVEL;
        if (tokjson_bool(j, "add_prefix_space", true, &p->add_prefix_space, where) != 0 ||
            tokjson_bool(j, "use_regex", true, &p->use_regex, where) != 0)
            return -1;
        if (p->use_regex && tokregex_compile(&p->regex, gpt2_pattern, strlen(gpt2_pattern), false))
            return err_prefix("%s", where);
        return 0;
    }
    if (strcmp(type, "Metaspace") == 0) {
        p->kind = PRETOK_METASPACE;
        uint32_t cp;
        if (tokjson_char(j, "replacement", &cp, where) != 0 ||
            tokjson_prepend_scheme(j, &p->prepend_scheme, where) != 0 ||
            tokjson_bool(j, "split", true, &p->split, where) != 0)
            return -1;
        p->replacement_len = utf8_encode(cp, p->replacement);
        return 0;
    }
    if (strcmp(type, "Digits") == 0) {
        p->kind = PRETOK_DIGITS;
        return tokjson_bool(j, "individual_digits", false, &p->individual_digits, where);
    }
    if (strcmp(type, "WhitespaceSplit") == 0) {
        p->kind = PRETOK_WHITESPACE_SPLIT;
        return 0;
    }
    return err_set("%s: unsupported pre-tokenizer type \"%s\" (supported: %s)", where, type,
                   supported);
}

void pretok_free(PreTokenizer *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_children; i++)
        pretok_free(&p->children[i]);
    free(p->children);
    tokregex_free(p->regex);
    memset(p, 0, sizeof *p);
}

void pretok_scratch_free(PretokScratch *s) {
    piecelist_free(&s->tmp);
    spanlist_free(&s->spans);
    spanlist_free(&s->kept);
    free(s->flagged.v);
    tokbuf_free(&s->text);
    memset(s, 0, sizeof *s);
}

static void flag_push(FlagSpanList *l, size_t start, size_t end, bool match) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 32;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (FlagSpan){start, end, match};
}

/* Regex matches and the gaps between them. */
static int flag_regex(const TokRegex *re, const char *s, size_t len, PretokScratch *sc) {
    sc->flagged.n = 0;
    if (tokregex_find_all(re, s, len, &sc->spans) != 0) return -1;
    size_t prev = 0;
    for (size_t i = 0; i < sc->spans.n; i++) {
        Span m = sc->spans.v[i];
        if (prev != m.start) flag_push(&sc->flagged, prev, m.start, false);
        flag_push(&sc->flagged, m.start, m.end, true);
        prev = m.end;
    }
    if (prev != len) flag_push(&sc->flagged, prev, len, false);
    return 0;
}

typedef enum { CHARS_NUMERIC, CHARS_WHITESPACE, CHARS_EQUAL } CharTest;

/* One match span per character passing the test, and the gaps between them. */
static void flag_chars(const char *s, size_t len, CharTest test, uint32_t want, PretokScratch *sc) {
    sc->flagged.n = 0;
    size_t last = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = utf8_decode(s + i, len - i, &cp);
        bool hit = test == CHARS_NUMERIC      ? unicode_is_numeric(cp)
                   : test == CHARS_WHITESPACE ? unicode_is_whitespace(cp)
                                              : cp == want;
        if (hit) {
            if (last < i) flag_push(&sc->flagged, last, i, false);
            flag_push(&sc->flagged, i, i + n, true);
            last = i + n;
        }
        i += n;
    }
    if (last < len) flag_push(&sc->flagged, last, len, false);
}

/* Groups the flagged spans into the kept spans (NormalizedString::split). */
static void apply_behavior(PretokScratch *sc, SplitBehavior behavior, bool invert) {
    FlagSpanList *f = &sc->flagged;
    SpanList *out = &sc->kept;
    out->n = 0;
    if (invert)
        for (size_t i = 0; i < f->n; i++)
            f->v[i].match = !f->v[i].match;
    bool prev_match = false;
    switch (behavior) {
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < f->n; i++)
            spanlist_push(out, f->v[i].start, f->v[i].end);
        break;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < f->n; i++)
            if (!f->v[i].match) spanlist_push(out, f->v[i].start, f->v[i].end);
        break;
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < f->n; i++) {
            if (f->v[i].match == prev_match && out->n)
                out->v[out->n - 1].end = f->v[i].end;
            else
                spanlist_push(out, f->v[i].start, f->v[i].end);
            prev_match = f->v[i].match;
        }
        break;
    case SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < f->n; i++) {
            if (f->v[i].match && !prev_match && out->n)
                out->v[out->n - 1].end = f->v[i].end;
            else
                spanlist_push(out, f->v[i].start, f->v[i].end);
            prev_match = f->v[i].match;
        }
        break;
    case SPLIT_MERGED_WITH_NEXT:
        /* built right to left, then reversed */
        for (size_t k = f->n; k-- > 0;) {
            if (f->v[k].match && !prev_match && out->n)
                out->v[out->n - 1].start = f->v[k].start;
            else
                spanlist_push(out, f->v[k].start, f->v[k].end);
            prev_match = f->v[k].match;
        }
        for (size_t a = 0, b = out->n; a + 1 < b; a++, b--) {
            Span t = out->v[a];
            out->v[a] = out->v[b - 1];
            out->v[b - 1] = t;
        }
        break;
    }
}

/* Pushes the kept spans of piece pc as new pieces (empty ones dropped). */
static void push_kept(const PretokScratch *sc, const Piece *pc, PieceList *dst) {
    for (size_t i = 0; i < sc->kept.n; i++) {
        Span sp = sc->kept.v[i];
        if (sp.end > sp.start)
            piecelist_push(dst, pc->off + sp.start, sp.end - sp.start,
                           pc->at_origin && sp.start == 0);
    }
}

static void swap_lists(PieceList *a, PieceList *b) {
    PieceList t = *a;
    *a = *b;
    *b = t;
}

static int split_regex(const TokRegex *re, SplitBehavior behavior, bool invert, TokBuf *arena,
                       PieceList *pieces, PretokScratch *sc) {
    sc->tmp.n = 0;
    for (size_t i = 0; i < pieces->n; i++) {
        const Piece *pc = &pieces->v[i];
        if (flag_regex(re, arena->p + pc->off, pc->len, sc) != 0) return -1;
        apply_behavior(sc, behavior, invert);
        push_kept(sc, pc, &sc->tmp);
    }
    swap_lists(pieces, &sc->tmp);
    return 0;
}

static void split_chars(CharTest test, uint32_t want, SplitBehavior behavior, TokBuf *arena,
                        PieceList *pieces, PretokScratch *sc) {
    sc->tmp.n = 0;
    for (size_t i = 0; i < pieces->n; i++) {
        const Piece *pc = &pieces->v[i];
        flag_chars(arena->p + pc->off, pc->len, test, want, sc);
        apply_behavior(sc, behavior, false);
        push_kept(sc, pc, &sc->tmp);
    }
    swap_lists(pieces, &sc->tmp);
}

static int bytelevel(const PreTokenizer *p, TokBuf *arena, PieceList *pieces, PretokScratch *sc) {
    if (p->add_prefix_space) {
        for (size_t i = 0; i < pieces->n; i++) {
            Piece *pc = &pieces->v[i];
            if (pc->len > 0 && arena->p[pc->off] == ' ') continue;
            size_t off = arena->len;
            tokbuf_reserve(arena, pc->len + 1);
            arena->p[arena->len++] = ' ';
            tokbuf_append(arena, arena->p + pc->off, pc->len);
            pc->off = off;
            pc->len += 1;
        }
    }
    if (p->use_regex && split_regex(p->regex, SPLIT_ISOLATED, false, arena, pieces, sc) != 0)
        return -1;
    /* Map every byte to its byte-level character. */
    for (size_t i = 0; i < pieces->n; i++) {
        Piece *pc = &pieces->v[i];
        sc->text.len = 0;
        for (size_t k = 0; k < pc->len; k++)
            tokbuf_append_cp(&sc->text, bytelevel_char((unsigned char)arena->p[pc->off + k]));
        pc->off = arena->len;
        pc->len = sc->text.len;
        tokbuf_append(arena, sc->text.p, sc->text.len);
    }
    return 0;
}

static void metaspace(const PreTokenizer *p, TokBuf *arena, PieceList *pieces, PretokScratch *sc) {
    for (size_t i = 0; i < pieces->n; i++) {
        Piece *pc = &pieces->v[i];
        sc->text.len = 0;
        const char *s = arena->p + pc->off;
        for (size_t k = 0; k < pc->len; k++) {
            if (s[k] == ' ')
                tokbuf_append(&sc->text, p->replacement, p->replacement_len);
            else
                tokbuf_push(&sc->text, s[k]);
        }
        bool starts = sc->text.len >= p->replacement_len &&
                      memcmp(sc->text.p, p->replacement, p->replacement_len) == 0;
        bool prepend = !starts && (p->prepend_scheme == PREPEND_ALWAYS ||
                                   (p->prepend_scheme == PREPEND_FIRST && pc->at_origin));
        pc->off = arena->len;
        if (prepend) tokbuf_append(arena, p->replacement, p->replacement_len);
        tokbuf_append(arena, sc->text.p, sc->text.len);
        pc->len = arena->len - pc->off;
    }
    if (p->split) {
        uint32_t cp;
        utf8_decode(p->replacement, p->replacement_len, &cp);
        split_chars(CHARS_EQUAL, cp, SPLIT_MERGED_WITH_NEXT, arena, pieces, sc);
    }
}

int pretok_apply(const PreTokenizer *p, TokBuf *arena, PieceList *pieces, PretokScratch *sc) {
    switch (p->kind) {
    case PRETOK_SEQUENCE:
        for (size_t i = 0; i < p->n_children; i++)
            if (pretok_apply(&p->children[i], arena, pieces, sc) != 0) return -1;
        return 0;
    case PRETOK_SPLIT:
        return split_regex(p->regex, p->behavior, p->invert, arena, pieces, sc);
    case PRETOK_BYTELEVEL:
        return bytelevel(p, arena, pieces, sc);
    case PRETOK_METASPACE:
        metaspace(p, arena, pieces, sc);
        return 0;
    case PRETOK_DIGITS:
        split_chars(CHARS_NUMERIC, 0, p->individual_digits ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS,
                    arena, pieces, sc);
        return 0;
    case PRETOK_WHITESPACE_SPLIT:
        split_chars(CHARS_WHITESPACE, 0, SPLIT_REMOVED, arena, pieces, sc);
        return 0;
    }
    return 0;
}
