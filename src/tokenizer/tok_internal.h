/* Internal interfaces shared by the files of src/tokenizer. Nothing here is public API.
 *
 * Strings are UTF-8 byte ranges with explicit lengths (text may hold NUL bytes). Every string
 * that reaches the normalizers, pre-tokenizers and the model is valid UTF-8: tokenizer_encode
 * repairs its input first, and every stage only produces valid UTF-8. */
#ifndef RLHF_TOKENIZER_TOK_INTERNAL_H
#define RLHF_TOKENIZER_TOK_INTERNAL_H

#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ======================================================================================
 * Growable buffers (buffers.c). They abort on memory exhaustion, like xmalloc.
 * ====================================================================================== */
typedef struct {
    char *p;
    size_t len, cap;
} TokBuf;

void tokbuf_reserve(TokBuf *b, size_t extra);
void tokbuf_append(TokBuf *b, const void *data, size_t n);
void tokbuf_append_cp(TokBuf *b, uint32_t cp);
void tokbuf_free(TokBuf *b);
static inline void tokbuf_push(TokBuf *b, char c) {
    if (b->len == b->cap) tokbuf_reserve(b, 1);
    b->p[b->len++] = c;
}

typedef struct {
    int32_t *v;
    size_t n, cap;
} IdBuf;

void idbuf_push(IdBuf *b, int32_t id);
void idbuf_append(IdBuf *b, const int32_t *ids, size_t n);
void idbuf_free(IdBuf *b);

/* A byte range [start, end) of some string. */
typedef struct {
    size_t start, end;
} Span;

typedef struct {
    Span *v;
    size_t n, cap;
} SpanList;

void spanlist_push(SpanList *l, size_t start, size_t end);
void spanlist_free(SpanList *l);

/* A list of strings in one buffer (token strings while decoding). */
typedef struct {
    TokBuf data;
    Span *items;
    size_t n, cap;
} StrList;

void strlist_push(StrList *l, const char *s, size_t len);
void strlist_clear(StrList *l);
void strlist_free(StrList *l);

/* ======================================================================================
 * Hash maps (hashmap.c).
 * ====================================================================================== */
uint64_t tok_hash_bytes(const void *data, size_t len);

/* String -> int32. Keys are copied into the map. */
typedef struct {
    struct StrMapSlot *slots;
    size_t cap, n;
    TokBuf keys;
} StrMap;

void strmap_init(StrMap *m, size_t expected);
void strmap_free(StrMap *m);
void strmap_clear(StrMap *m);
/* Returns true and stores the value when the key is present. */
bool strmap_get(const StrMap *m, const char *key, size_t len, int32_t *value);
/* Inserts or overwrites. */
void strmap_put(StrMap *m, const char *key, size_t len, int32_t value);

/* (uint32, uint32) pair -> (rank, merged id), for BPE merges. */
typedef struct {
    struct PairMapSlot *slots;
    size_t cap, n;
} PairMap;

void pairmap_init(PairMap *m, size_t expected);
void pairmap_free(PairMap *m);
bool pairmap_get(const PairMap *m, uint32_t a, uint32_t b, uint32_t *rank, int32_t *merged);
void pairmap_put(PairMap *m, uint32_t a, uint32_t b, uint32_t rank, int32_t merged);

/* ======================================================================================
 * UTF-8 and Unicode properties (unicode.c).
 * ====================================================================================== */
/* Decodes the character at s (valid UTF-8, len >= 1); returns its byte length. */
size_t utf8_decode(const char *s, size_t len, uint32_t *cp);
/* Byte length of the character whose lead byte is c (valid UTF-8). */
static inline size_t utf8_char_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}
/* Encodes cp (a Unicode scalar value) into out; returns 1..4. */
size_t utf8_encode(uint32_t cp, char out[4]);
/* Length of the longest valid UTF-8 prefix of s. */
size_t utf8_valid_prefix(const char *s, size_t len);
/* Appends s to out, replacing each maximal ill-formed subsequence by U+FFFD (the rule of
 * Python's bytes.decode(errors="replace") and Rust's String::from_utf8_lossy). */
void utf8_append_lossy(TokBuf *out, const char *s, size_t len);
/* Whether s is exactly one UTF-8 character; stores it. */
bool utf8_single_char(const char *s, size_t len, uint32_t *cp);

bool unicode_is_whitespace(uint32_t cp);      /* White_Space (Rust char::is_whitespace, \s) */
bool unicode_is_word(uint32_t cp);            /* Rust regex \w */
bool unicode_is_numeric(uint32_t cp);         /* Rust char::is_numeric: Nd, Nl, No */
bool unicode_is_strippable_mark(uint32_t cp); /* what StripAccents removes */
/* Rust char::to_lowercase when it is one character (all but U+0130). */
uint32_t unicode_simple_lower(uint32_t cp);

/* Where PCRE2's / utf8proc's Unicode data differs from tokenizers' (unicode_tables.c, made by
 * tools/reference/make_unicode_tables.py). Ranges are sorted and disjoint. */
typedef struct {
    uint32_t lo, hi;
} UnicodeRange;

typedef struct {
    uint32_t from, to;
} UnicodePair;

extern const UnicodeRange unicode_extra_letter[], unicode_extra_number[], unicode_extra_mark[],
    unicode_extra_decimal[], unicode_extra_han[], unicode_extra_numeric[], unicode_nfd_unknown[],
    unicode_nfkd_unknown[], unicode_marks_kept[];
extern const size_t unicode_extra_letter_count, unicode_extra_number_count,
    unicode_extra_mark_count, unicode_extra_decimal_count, unicode_extra_han_count,
    unicode_extra_numeric_count, unicode_nfd_unknown_count, unicode_nfkd_unknown_count,
    unicode_marks_kept_count;
extern const UnicodePair unicode_extra_lower[];
extern const size_t unicode_extra_lower_count;

bool unicode_in_ranges(const UnicodeRange *r, size_t n, uint32_t cp);

/* GPT-2's bytes_to_unicode table: every byte has a printable character. */
uint32_t bytelevel_char(unsigned char b);
/* The byte of a byte-level character, or -1 when cp is not one. */
int bytelevel_byte(uint32_t cp);

/* ======================================================================================
 * Regular expressions (regex.c): Oniguruma (Ruby syntax) patterns as `tokenizers` uses them,
 * run by PCRE2 after translating the escapes whose meaning differs.
 * ====================================================================================== */
typedef struct TokRegex TokRegex;

/* Compiles `pattern` (a literal string when `literal`). Returns 0, or -1 with an error. */
int tokregex_compile(TokRegex **re, const char *pattern, size_t len, bool literal);
void tokregex_free(TokRegex *re);
/* All non-overlapping matches, left to right, with the onig crate's find_iter rule for empty
 * matches. `s` must be valid UTF-8. Clears `out` first. Returns 0, or -1 with an error. */
int tokregex_find_all(const TokRegex *re, const char *s, size_t len, SpanList *out);

/* ======================================================================================
 * Components parsed from tokenizer.json. Each *_parse takes the JSON value and `where`, the
 * key path used in error messages ("pre_tokenizer.pretokenizers[1]").
 * ====================================================================================== */
typedef enum {
    NORM_SEQUENCE,
    NORM_NFC,
    NORM_NFD,
    NORM_NFKC,
    NORM_NFKD,
    NORM_LOWERCASE,
    NORM_STRIP,
    NORM_STRIP_ACCENTS,
    NORM_PREPEND,
    NORM_REPLACE,
    NORM_BYTELEVEL,
} NormKind;

typedef struct Normalizer {
    NormKind kind;
    bool strip_left, strip_right; /* Strip */
    char *str;                    /* Prepend: prepend; Replace: content */
    size_t str_len;
    TokRegex *regex;             /* Replace */
    struct Normalizer *children; /* Sequence */
    size_t n_children;
} Normalizer;

int normalizer_parse(Normalizer *n, const json_t *j, const char *where);
void normalizer_free(Normalizer *n);
/* Normalizes s in place (tmp is scratch). *at_origin tells whether the first character of s
 * lines up with offset 0 of the original input; it becomes false when a normalizer removes
 * the leading character (what `tokenizers`' alignment tracking gives). */
int normalizer_apply(const Normalizer *n, TokBuf *s, TokBuf *tmp, bool *at_origin);

/* A piece of text during pre-tokenization: a range of the arena. */
typedef struct {
    size_t off, len;
    bool at_origin;
} Piece;

typedef struct {
    Piece *v;
    size_t n, cap;
} PieceList;

void piecelist_push(PieceList *l, size_t off, size_t len, bool at_origin);
void piecelist_free(PieceList *l);

typedef enum {
    SPLIT_REMOVED,
    SPLIT_ISOLATED,
    SPLIT_MERGED_WITH_PREVIOUS,
    SPLIT_MERGED_WITH_NEXT,
    SPLIT_CONTIGUOUS,
} SplitBehavior;

typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } PrependScheme;

typedef enum {
    PRETOK_SEQUENCE,
    PRETOK_SPLIT,
    PRETOK_BYTELEVEL,
    PRETOK_METASPACE,
    PRETOK_DIGITS,
    PRETOK_WHITESPACE_SPLIT,
} PretokKind;

typedef struct PreTokenizer {
    PretokKind kind;
    TokRegex *regex; /* Split; ByteLevel with use_regex (the GPT-2 pattern) */
    SplitBehavior behavior;
    bool invert;
    bool add_prefix_space; /* ByteLevel */
    bool use_regex;
    char replacement[4]; /* Metaspace: the replacement character, UTF-8 */
    size_t replacement_len;
    PrependScheme prepend_scheme;
    bool split;
    bool individual_digits; /* Digits */
    struct PreTokenizer *children;
    size_t n_children;
} PreTokenizer;

int pretok_parse(PreTokenizer *p, const json_t *j, const char *where);
void pretok_free(PreTokenizer *p);

/* A span of a piece with whether the pattern matched it (tokenizers' find_matches). */
typedef struct {
    size_t start, end;
    bool match;
} FlagSpan;

typedef struct {
    FlagSpan *v;
    size_t n, cap;
} FlagSpanList;

/* Scratch space for pre-tokenization, reused across calls. */
typedef struct {
    PieceList tmp;
    SpanList spans, kept;
    FlagSpanList flagged;
    TokBuf text;
} PretokScratch;

void pretok_scratch_free(PretokScratch *s);
/* Applies the pre-tokenizer to the pieces (ranges of `arena`, which may grow: pieces hold
 * offsets, not pointers). Empty pieces are dropped. Returns 0, or -1 with an error. */
int pretok_apply(const PreTokenizer *p, TokBuf *arena, PieceList *pieces, PretokScratch *s);

/* The BPE model (bpe.c). */
typedef struct Bpe Bpe;

int bpe_parse(Bpe **out, const json_t *j, const char *where);
void bpe_free(Bpe *b);
int32_t bpe_vocab_count(const Bpe *b);
int32_t bpe_token_to_id(const Bpe *b, const char *s, size_t len);
const char *bpe_id_to_token(const Bpe *b, int32_t id, size_t *len);

typedef struct {
    struct BpeSymbol *syms;
    size_t syms_cap;
    struct BpeMerge *heap;
    size_t heap_cap;
    IdBuf ids;
} BpeScratch;

void bpe_scratch_free(BpeScratch *s);
/* Appends the ids of one piece to out. Returns 0, or -1 with an error (unk_token missing). */
int bpe_encode_piece(const Bpe *b, const char *s, size_t len, IdBuf *out, BpeScratch *scratch);

/* Added tokens (added_tokens.c). */
typedef struct {
    char *content; /* as written in tokenizer.json */
    size_t len;
    char *pattern; /* what is matched: content, or its normalized form when `normalized` */
    size_t pattern_len;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} AddedToken;

/* Leftmost-longest matcher over a set of patterns. */
typedef struct {
    int32_t *order;      /* token indices, grouped by first byte, longest first */
    uint32_t first[257]; /* order[first[b] .. first[b+1]) start with byte b */
} AddedMatcher;

typedef struct {
    AddedToken *tokens; /* one per id, in the order `tokenizers` adds them */
    size_t n;
    StrMap by_content;    /* content -> index in tokens */
    int32_t *index_of_id; /* id - min_id -> token index, or -1 */
    int32_t min_id, max_id;
    StrMap special; /* contents of special tokens -> 1 */
    AddedMatcher raw, normalized;
    bool any_raw, any_normalized;
} AddedVocab;

int added_vocab_build(AddedVocab *av, const json_t *arr, const Bpe *model,
                      const Normalizer *normalizer);
void added_vocab_free(AddedVocab *av);
const AddedToken *added_vocab_by_id(const AddedVocab *av, int32_t id);

/* A segment of text after splitting out added tokens: a token (id >= 0) or text. */
typedef struct {
    size_t start, end;
    int32_t id; /* -1 for text */
} Segment;

typedef struct {
    Segment *v;
    size_t n, cap;
} SegmentList;

void segmentlist_free(SegmentList *l);
/* Splits s into text and added-token segments with the raw or the normalized matcher (the
 * `find_matches` rules of tokenizers: leftmost-longest, then single_word / lstrip / rstrip).
 * Clears `out` first; empty text segments are left out. */
void added_vocab_split(const AddedVocab *av, bool normalized, bool encode_special_tokens,
                       const char *s, size_t len, SegmentList *out);

/* Post-processors (postprocess.c). */
typedef enum { POST_SEQUENCE, POST_TEMPLATE, POST_BYTELEVEL } PostKind;

typedef struct {
    bool is_sequence; /* $A (or $B, which a single sequence does not have) */
    char seq_id;      /* 'A' or 'B' */
    int32_t *ids;     /* special token ids */
    size_t n_ids;
} TemplateItem;

typedef struct PostProcessor {
    PostKind kind;
    TemplateItem *single;
    size_t n_single;
    struct PostProcessor *children;
    size_t n_children;
} PostProcessor;

int postproc_parse(PostProcessor *p, const json_t *j, const char *where);
void postproc_free(PostProcessor *p);
/* Rewrites ids (the encoding of one sequence) through the template(s). */
void postproc_apply(const PostProcessor *p, bool add_special_tokens, IdBuf *ids, IdBuf *tmp);

/* Decoders (decode.c). */
typedef enum {
    DEC_SEQUENCE,
    DEC_BYTELEVEL,
    DEC_METASPACE,
    DEC_REPLACE,
    DEC_BYTEFALLBACK,
    DEC_FUSE,
    DEC_STRIP,
} DecKind;

typedef struct Decoder {
    DecKind kind;
    uint32_t replacement; /* Metaspace */
    PrependScheme prepend_scheme;
    TokRegex *regex; /* Replace */
    char *content;   /* Replace */
    size_t content_len;
    uint32_t strip_char; /* Strip */
    size_t strip_start, strip_stop;
    struct Decoder *children;
    size_t n_children;
} Decoder;

int decoder_parse(Decoder *d, const json_t *j, const char *where);
void decoder_free(Decoder *d);
/* Runs the decoder over the token strings in `toks` (replaced by the result; tmp is scratch). */
int decoder_apply(const Decoder *d, StrList *toks, StrList *tmp);

/* ======================================================================================
 * Shared JSON helpers for the component parsers (tokenizer_json.c).
 * ====================================================================================== */
/* The "type" string of a component object, or NULL with an error. */
const char *tokjson_type(const json_t *j, const char *where);
/* Optional bool / string members, with a default; -1 with an error on a wrong type. */
int tokjson_bool(const json_t *j, const char *key, bool dflt, bool *out, const char *where);
int tokjson_string(const json_t *j, const char *key, const char **out, size_t *len,
                   const char *where);
/* A {"String": s} or {"Regex": r} pattern, compiled. */
int tokjson_pattern(const json_t *j, const char *key, TokRegex **re, const char *where);
/* A one-character string member (Metaspace replacement, Strip content). */
int tokjson_char(const json_t *j, const char *key, uint32_t *cp, const char *where);
int tokjson_prepend_scheme(const json_t *j, PrependScheme *out, const char *where);

/* ======================================================================================
 * The tokenizer (tokenizer.c).
 * ====================================================================================== */
struct TokenizerImpl {
    Bpe *bpe;
    Normalizer *normalizer; /* NULL: none */
    PreTokenizer *pretok;   /* NULL: none */
    PostProcessor *post;    /* NULL: none */
    Decoder *decoder;       /* NULL: tokens joined with " " */
    AddedVocab added;
    bool encode_special_tokens;
};

#endif
