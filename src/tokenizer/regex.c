/* Regular expressions for Split / Replace with `tokenizers`' semantics, run by PCRE2.
 *
 * `tokenizers` compiles its patterns with Oniguruma in Ruby syntax. PCRE2 (UTF + UCP) reads
 * the same syntax for everything the real tokenizer files use (alternation is leftmost-first
 * in both, \p{..} classes, (?i:..), (?!..)), except for a few escapes whose sets differ. The
 * pattern is rewritten before compiling:
 *   \s  Onig: exactly the White_Space property. PCRE2 also matches U+180E (Mongolian vowel
 *       separator). -> an explicit White_Space class.  \S -> its negation.
 *   \w  Onig: Letter, Mark, Decimal_Number, Connector_Punctuation. PCRE2 10.42: L, N and "_".
 *       -> [\p{L}\p{M}\p{Nd}\p{Pc}].  \W -> its negation.
 *   \h  Onig: a hex digit; PCRE2: horizontal space. -> [0-9a-fA-F]. \H -> its negation.
 *   \p{Script}  Onig: the Script property; PCRE2 >= 10.40: Script_Extensions (so \p{Han}
 *       would also match U+3001 "、"). -> \p{sc:Script}. General categories and binary
 *       properties are left as they are.
 * Negated escapes (\S, \W, \H) inside a bracket class, and Onig's nested classes / "&&"
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct TokRegex {
    pcre2_code *code;
};

#define WS_CLASS_BODY                                                                              \
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"       \
    "\\x{202F}\\x{205F}\\x{3000}"
#define WORD_CLASS_BODY "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"
#define HEX_CLASS_BODY  "0-9a-fA-F"

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

/* Copies \p{..} / \P{..} (pat[i] is the 'p'/'P'), rewriting a script name to sc:name.
 * Returns the index of its closing brace. */
static size_t translate_property(const char *pat, size_t len, size_t i, TokBuf *out) {
    tokbuf_push(out, '\\');
    tokbuf_push(out, pat[i]);
    if (i + 1 >= len || pat[i + 1] != '{') return i; /* \pL: one-letter category */
    const char *close = memchr(pat + i + 2, '}', len - (i + 2));
    if (!close) return i; /* malformed: PCRE2 reports it */
    size_t name_start = i + 2, end = (size_t)(close - pat);
    tokbuf_push(out, '{');
    if (name_start < end && pat[name_start] == '^') tokbuf_push(out, pat[name_start++]);
    const char *name = pat + name_start;
    size_t nlen = end - name_start;
    if (!is_general_category(name, nlen) && !memchr(name, ':', nlen) && !memchr(name, '=', nlen) &&
        is_script(name, nlen))
        tokbuf_append(out, "sc:", 3);
    tokbuf_append(out, name, nlen);
    tokbuf_push(out, '}');
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
                i = translate_property(pat, len, i, out);
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
            if (in_class) {
                if (negated) return err_set("\\%c inside a bracket class is not supported", e);
                tokbuf_append(out, body, strlen(body));
            } else {
                tokbuf_append(out, negated ? "[^" : "[", negated ? 2 : 1);
                tokbuf_append(out, body, strlen(body));
                tokbuf_push(out, ']');
            }
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

/* One match data block per thread, grown on demand: match data is not tied to a pattern. */
static _Thread_local pcre2_match_data *tls_match_data;

static pcre2_match_data *match_data(void) {
    if (!tls_match_data) {
        tls_match_data = pcre2_match_data_create(1, NULL);
        if (!tls_match_data) {
            err_set("out of memory (regex match data)");
            return NULL;
        }
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
