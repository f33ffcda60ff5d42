/* Regular expressions for Split / Replace with `tokenizers`' semantics, run by PCRE2.
 *
 * `tokenizers` compiles its patterns with Oniguruma in Ruby syntax. PCRE2 (UTF + UCP) reads
 * the same syntax for everything the real tokenizer files use (alternation is leftmost-first
 * in both, \p{..} classes, (?i:..), (?!..)), except for a few escapes whose sets differ. The
 * pattern is rewritten before compiling:
 *   \s  Onig: exactly the White_Space property. PCRE2 also matches U+180E (Mongolian vowel
 *       separator). -> an explicit White_Space class.  \S -> its negation.
 *   \w  Onig: Alphabetic, Mark, Decimal_Number, Connector_Punctuation (and a few Latin-1
 *       digits). PCRE2 10.42: L, N and "_". -> an explicit class.  \W -> its negation.
 *   \d  -> \p{Nd} with the digits added since Unicode 14 (see below).  \D -> its negation.
 *   \h  Onig: a hex digit; PCRE2: horizontal space. -> [0-9a-fA-F]. \H -> its negation.
 *   \p{Script}  Onig: the Script property; PCRE2 >= 10.40: Script_Extensions (so \p{Han}
 *       would also match U+3001 "、"). -> \p{sc:Script}. General categories and binary
 *       properties are left as they are.
 *   Unicode versions: Oniguruma in tokenizers 0.23 has Unicode 16 tables, PCRE2 10.42 has
 *       Unicode 14. \p{L}, \p{N}, \p{M}, \p{Nd}, \p{Han} (and \w) get the characters added
 *       since as explicit ranges (unicode_tables.c), except in a negated escape inside a
 *       bracket class. Other classes (\p{Lu}, \p{P}, ...) keep PCRE2's Unicode 14 data.
 * Negated escapes (\S, \W, \D, \H) inside a bracket class, and Onig's nested classes / "&&"
 * intersections, have no direct PCRE2 spelling: such patterns are refused with a message.
 * Ruby's ^ and $ are line anchors: the pattern is compiled with PCRE2_MULTILINE.
 *
 * Matches are iterated as the onig crate's find_iter does: after a match, the search resumes at
 * its end; an empty match advances the start by one character, and an empty match right after
 * a non-empty one is dropped. */
#include "tokenizer/tok_internal.h"

#include "common/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct TokRegex {
    pcre2_code *code;
};

#define WS_CLASS_BODY                                                                              \
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"       \
    "\\x{202F}\\x{205F}\\x{3000}"
/* Oniguruma's \w: Alphabetic (letters, Nl, the enclosed letters of Other_Alphabetic), marks,
 * Nd and Pc; outside a bracket class also ²³¹¼½¾ (from its Latin-1 table). */
#define WORD_CLASS_BODY                                                                            \
    "\\p{L}\\p{M}\\p{Nd}\\p{Pc}\\p{Nl}\\x{24B6}-\\x{24E9}\\x{1F130}-\\x{1F149}\\x{1F150}-\\x{"     \
    "1F169}"                                                                                       \
    "\\x{1F170}-\\x{1F189}"
#define WORD_LATIN1_EXTRA "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}"
#define DIGIT_CLASS_BODY  "\\p{Nd}"
#define HEX_CLASS_BODY    "0-9a-fA-F"

static bool is_general_category(const char *name, size_t len) {
    static const char *const gc[] = {"L",  "Lu", "Ll", "Lt", "Lm", "Lo", "L&", "LC", "M",  "Mn",
                                     "Mc", "Me", "N",  "Nd", "Nl", "No", "P",  "Pc", "Pd", "Ps",
                                     "Pe", "Pi", "Pf", "Po", "S",  "Sm", "Sc", "Sk", "So", "Z",
                                     "Zs", "Zl", "Zp", "C",  "Cc", "Cf", "Cs", "Co", "Cn", "Any"};
    for (size_t i = 0; i < sizeof gc / sizeof *gc; i++)
        if (strlen(gc[i]) == len && memcmp(gc[i], name, len) == 0) return true;
    return false;
}

/* Whether PCRE2 knows `name` as a script (\p{sc:name}). */
static bool is_script(const char *name, size_t len) {
    char buf[128];
    int n = snprintf(buf, sizeof buf, "\\p{sc:%.*s}", (int)len, name);
    if (n < 0 || (size_t)n >= sizeof buf) return false;
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *code =
        pcre2_compile((PCRE2_SPTR)buf, (size_t)n, PCRE2_UTF | PCRE2_UCP, &errcode, &erroff, NULL);
    if (!code) return false;
    pcre2_code_free(code);
    return true;
}

static void append_ranges(TokBuf *out, const UnicodeRange *r, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char buf[40];
        int len = r[i].lo == r[i].hi
                      ? snprintf(buf, sizeof buf, "\\x{%X}", r[i].lo)
                      : snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", r[i].lo, r[i].hi);
        tokbuf_append(out, buf, (size_t)len);
    }
}

/* The characters Oniguruma (Unicode 16 in tokenizers 0.23) has in a class and PCRE2 10.42
 * (Unicode 14) does not (unicode_tables.c); NULL when none are listed for this class. */
static const UnicodeRange *class_extras(const char *name, size_t len, bool script, size_t *n) {
    struct {
        const char *name;
        bool script;
        const UnicodeRange *r;
        size_t n;
    } table[] = {
        {"L", false, unicode_extra_letter, unicode_extra_letter_count},
        {"N", false, unicode_extra_number, unicode_extra_number_count},
        {"M", false, unicode_extra_mark, unicode_extra_mark_count},
        {"Nd", false, unicode_extra_decimal, unicode_extra_decimal_count},
        {"Han", true, unicode_extra_han, unicode_extra_han_count},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        if (table[i].script == script && strlen(table[i].name) == len &&
            memcmp(table[i].name, name, len) == 0) {
            *n = table[i].n;
            return table[i].r;
        }
    }
    return NULL;
}

/* Rewrites \p{..} / \P{..} (pat[i] is the 'p'/'P'): a script name becomes sc:name, and the
 * classes Unicode has grown since PCRE2's tables get the missing characters. Inside a negated
 * escape within a bracket class the missing characters cannot be added (left as PCRE2 has it).
 * Returns the index of the last character consumed. */
static size_t translate_property(const char *pat, size_t len, size_t i, bool in_class,
                                 TokBuf *out) {
    bool negated = pat[i] == 'P';
    if (i + 1 >= len || pat[i + 1] != '{') { /* \pL: one-letter category */
        tokbuf_push(out, '\\');
        tokbuf_push(out, pat[i]);
        return i;
    }
    const char *close = memchr(pat + i + 2, '}', len - (i + 2));
    if (!close) { /* malformed: PCRE2 reports it */
        tokbuf_push(out, '\\');
        tokbuf_push(out, pat[i]);
        return i;
    }
    size_t name_start = i + 2, end = (size_t)(close - pat);
    if (name_start < end && pat[name_start] == '^') {
        negated = !negated;
        name_start++;
    }
    const char *name = pat + name_start;
    size_t nlen = end - name_start;
    bool script = !is_general_category(name, nlen) && !memchr(name, ':', nlen) &&
                  !memchr(name, '=', nlen) && is_script(name, nlen);
    size_t n_extra = 0;
    const UnicodeRange *extra = class_extras(name, nlen, script, &n_extra);
    bool wrap = extra && n_extra > 0 && !in_class;
    if (extra && n_extra > 0 && in_class && negated) extra = NULL;
    if (wrap) tokbuf_append(out, negated ? "[^" : "[", negated ? 2 : 1);
    tokbuf_append(out, (negated && !wrap) ? "\\P{" : "\\p{", 3);
    if (script) tokbuf_append(out, "sc:", 3);
    tokbuf_append(out, name, nlen);
    tokbuf_push(out, '}');
    if (extra) append_ranges(out, extra, n_extra);
    if (wrap) tokbuf_push(out, ']');
    return end;
}

/* Rewrites an Onig pattern into PCRE2 syntax (see the top of the file). */
static int translate(const char *pat, size_t len, TokBuf *out) {
    bool in_class = false;
    size_t class_start = 0;
    for (size_t i = 0; i < len; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < len) {
            char e = pat[++i];
            const char *body = NULL;
            bool negated = false;
            if (e == 'p' || e == 'P') {
                i = translate_property(pat, len, i, in_class, out);
                continue;
            }
            switch (e) {
            case 's':
                body = WS_CLASS_BODY;
                break;
            case 'S':
                body = WS_CLASS_BODY;
                negated = true;
                break;
            case 'w':
                body = WORD_CLASS_BODY;
                break;
            case 'W':
                body = WORD_CLASS_BODY;
                negated = true;
                break;
            case 'd':
                body = DIGIT_CLASS_BODY;
                break;
            case 'D':
                body = DIGIT_CLASS_BODY;
                negated = true;
                break;
            case 'h':
                body = HEX_CLASS_BODY;
                break;
            case 'H':
                body = HEX_CLASS_BODY;
                negated = true;
                break;
            default:
                break;
            }
            if (!body) {
                tokbuf_push(out, '\\');
                tokbuf_push(out, e);
                continue;
            }
            if (in_class && negated)
                return err_set("\\%c inside a bracket class is not supported", e);
            if (!in_class) tokbuf_append(out, negated ? "[^" : "[", negated ? 2 : 1);
            tokbuf_append(out, body, strlen(body));
            if (e == 'w' || e == 'W') {
                if (!in_class) tokbuf_append(out, WORD_LATIN1_EXTRA, strlen(WORD_LATIN1_EXTRA));
                append_ranges(out, unicode_extra_letter, unicode_extra_letter_count);
                append_ranges(out, unicode_extra_mark, unicode_extra_mark_count);
            }
            if (e == 'w' || e == 'W' || e == 'd' || e == 'D')
                append_ranges(out, unicode_extra_decimal, unicode_extra_decimal_count);
            if (!in_class) tokbuf_push(out, ']');
            continue;
        }
        if (in_class) {
            if (c == '[' && !(i + 1 < len && pat[i + 1] == ':'))
                return err_set("nested bracket classes are not supported");
            if (c == '&' && i + 1 < len && pat[i + 1] == '&')
                return err_set("class intersection (&&) is not supported");
            if (c == ']' && i > class_start) in_class = false;
            if (c == '[' && i + 1 < len && pat[i + 1] == ':') {
                /* POSIX class [:name:]: copy through to its closing ":]" */
                const char *end = strstr(pat + i, ":]");
                if (!end || (size_t)(end - pat) >= len) return err_set("unterminated [: class");
                size_t n = (size_t)(end - pat) + 2 - i;
                tokbuf_append(out, pat + i, n);
                i += n - 1;
                continue;
            }
            tokbuf_push(out, c);
            continue;
        }
        if (c == '[') {
            in_class = true;
            tokbuf_push(out, c);
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < len && pat[i + 1] == '^') tokbuf_push(out, pat[++i]);
            class_start = i + 1;
            continue;
        }
        tokbuf_push(out, c);
    }
    return 0;
}

int tokregex_compile(TokRegex **re, const char *pattern, size_t len, bool literal) {
    *re = NULL;
    TokBuf pat = {0};
    uint32_t options = PCRE2_UTF;
    if (literal) {
        tokbuf_append(&pat, pattern, len);
        options |= PCRE2_LITERAL;
    } else {
        options |= PCRE2_UCP;
        if (translate(pattern, len, &pat) != 0) {
            tokbuf_free(&pat);
            return err_prefix("regex \"%.*s\"", (int)(len > 200 ? 200 : len), pattern);
        }
        options |= PCRE2_MULTILINE;
    }
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *code =
        pcre2_compile((PCRE2_SPTR)(pat.p ? pat.p : ""), pat.len, options, &errcode, &erroff, NULL);
    tokbuf_free(&pat);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        return err_set("regex \"%.*s\": %s", (int)(len > 200 ? 200 : len), pattern, (char *)msg);
    }
    /* JIT is an optimisation: without it (unsupported CPU) the interpreter gives the same. */
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    *re = xcalloc(1, sizeof **re);
    (*re)->code = code;
    return 0;
}

void tokregex_free(TokRegex *re) {
    if (!re) return;
    pcre2_code_free(re->code);
    free(re);
}

/* One match data block per thread, grown on demand: match data is not tied to a pattern. A
 * thread that exits frees its block (the key's destructor): a server's connection or engine
 * threads come and go. */
static _Thread_local pcre2_match_data *tls_match_data;
static pthread_key_t match_data_key;
static pthread_once_t match_data_once = PTHREAD_ONCE_INIT;

static void match_data_free(void *md) {
    pcre2_match_data_free(md);
}

static void match_data_key_create(void) {
    pthread_key_create(&match_data_key, match_data_free);
}

static pcre2_match_data *match_data(void) {
    if (!tls_match_data) {
        tls_match_data = pcre2_match_data_create(1, NULL);
        if (!tls_match_data) {
            err_set("out of memory (regex match data)");
            return NULL;
        }
        pthread_once(&match_data_once, match_data_key_create);
        pthread_setspecific(match_data_key, tls_match_data);
    }
    return tls_match_data;
}

int tokregex_find_all(const TokRegex *re, const char *s, size_t len, SpanList *out) {
    out->n = 0;
    pcre2_match_data *md = match_data();
    if (!md) return -1;
    size_t last_end = 0;
    bool skip_next_empty = false;
    const char *subject = s ? s : "";
    while (last_end <= len) {
        int rc =
            pcre2_match(re->code, (PCRE2_SPTR)subject, len, last_end, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return err_set("regex match failed: %s", (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        last_end = me;
        if (me == ms) {
            last_end += me < len ? utf8_char_len((unsigned char)subject[me]) : 1;
            if (skip_next_empty) {
                skip_next_empty = false;
                continue;
            }
        } else {
            skip_next_empty = true;
        }
        spanlist_push(out, ms, me);
    }
    return 0;
}
