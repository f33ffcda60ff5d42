/* Jinja2 lexer with the environment transformers uses: default delimiters,
 * trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False.
 *
 * Rules reproduced from jinja2 3.1 (lexer.py):
 *  1. Newlines (\r\n, \r, \n) are normalised to \n, and one trailing newline of the
 *     template is dropped.
 *  2. `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` strip
 *     all whitespace after it (Python's \s: Unicode whitespace, newlines included).
 *  3. trim_blocks: `%}` and `#}` swallow one newline right after them; `}}` does not;
 *     `+%}` keeps it.
 *  4. lstrip_blocks: before `{%` and `{#` (not `{{`), spaces/tabs between the start of the
 *     line and the tag are removed; `{%+` keeps them. "Start of the line" also covers
 *     text that begins right after a match ending in a newline (a trimmed block end).
 *  5. Inside a tag, `}}`/`%}` only close it when no bracket is open.
 *  6. {% raw %}...{% endraw %} is data. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *const jop_text[OP_COUNT_] = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
    "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";",
};

typedef struct {
    JArena *arena;
    const char *s;
    size_t n, pos;
    int line;
    bool line_starting; /* did the previous match end with a newline? */
    JToken *toks;
    size_t ntoks, cap;
    char brackets[256];
    int nbrackets;
} Lexer;

static int lex_fail(int line, const char *msg) {
    return err_set("line %d: %s", line, msg);
}

static void push(Lexer *lx, JToken t) {
    if (lx->ntoks == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        JToken *toks = ja_alloc(lx->arena, cap * sizeof *toks);
        if (lx->ntoks) memcpy(toks, lx->toks, lx->ntoks * sizeof *toks);
        lx->toks = toks;
        lx->cap = cap;
    }
    lx->toks[lx->ntoks++] = t;
}

static int count_newlines(const char *s, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += s[i] == '\n';
    return c;
}

/* Length of the Python-\s run at s[i..n). */
static size_t space_run(const char *s, size_t n, size_t i) {
    size_t j = i;
    while (j < n) {
        size_t k = j;
        int32_t c = ju_decode(s, n, &k);
        if (!ju_isspace(c)) break;
        j = k;
    }
    return j - i;
}

/* Emits the data before a tag, applying `-` stripping or lstrip_blocks. sign is the
 * character after the tag opener ('-', '+' or 0); is_var: the tag is `{{`. */
static void emit_data(Lexer *lx, const char *text, size_t len, char sign, bool is_var) {
    size_t keep = len;
    if (sign == '-') {
        keep = ju_rstrip_len(text, len);
    } else if (sign != '+' && !is_var) {
        size_t l_pos = len;
        while (l_pos > 0 && text[l_pos - 1] != '\n')
            l_pos--;
        if ((l_pos > 0 || lx->line_starting) && l_pos < len &&
            space_run(text, len, l_pos) == len - l_pos)
            keep = l_pos;
    }
    if (keep > 0) {
        JToken t = {.kind = JT_DATA, .line = lx->line};
        t.text = (JStr){ja_memdup(lx->arena, text, keep), keep};
        push(lx, t);
    }
    lx->line += count_newlines(text, len);
}

/* Matches a block end at pos: `+%}`, `-%}\s*` or `%}\n?`. Returns the match length. */
static size_t match_end(const Lexer *lx, size_t pos, char c1) {
    const char *s = lx->s;
    size_t n = lx->n;
    if (pos + 3 <= n && s[pos] == '+' && s[pos + 1] == c1 && s[pos + 2] == '}' && c1 != '}')
        return 3;
    if (pos + 3 <= n && s[pos] == '-' && s[pos + 1] == c1 && s[pos + 2] == '}')
        return 3 + space_run(s, n, pos + 3);
    if (pos + 2 <= n && s[pos] == c1 && s[pos + 1] == '}') {
        if (c1 != '}' && pos + 2 < n && s[pos + 2] == '\n') return 3;
        return 2;
    }
    return 0;
}

static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_name_char(char c) {
    return is_name_start(c) || (c >= '0' && c <= '9');
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* (\d+_)*\d+ at s[i]; returns the end or i when absent. */
static size_t digits_with_underscores(const char *s, size_t n, size_t i) {
    if (i >= n || !is_digit(s[i])) return i;
    size_t j = i;
    for (;;) {
        while (j < n && is_digit(s[j]))
            j++;
        if (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) {
            j++;
            continue;
        }
        return j;
    }
}

static size_t match_float(const Lexer *lx, size_t pos) {
    const char *s = lx->s;
    size_t n = lx->n;
    if (pos > 0 && s[pos - 1] == '.') return 0;
    size_t j = digits_with_underscores(s, n, pos);
    if (j == pos) return 0;
    size_t frac = j;
    if (j < n && s[j] == '.') {
        size_t k = digits_with_underscores(s, n, j + 1);
        if (k > j + 1) frac = k;
    }
    size_t e = frac;
    if (e < n && (s[e] == 'e' || s[e] == 'E')) {
        size_t k = e + 1;
        if (k < n && (s[k] == '+' || s[k] == '-')) k++;
        size_t m = digits_with_underscores(s, n, k);
        if (m > k) return m - pos;
    }
    return frac > j ? frac - pos : 0;
}

static int digit_value(char d) {
    if (d >= '0' && d <= '9') return d - '0';
    if (d >= 'a' && d <= 'z') return d - 'a' + 10;
    if (d >= 'A' && d <= 'Z') return d - 'A' + 10;
    return 99;
}

/* jinja2's integer_re: 0b(_?[01])+ | 0o(_?[0-7])+ | 0x(_?[0-9a-f])+ | [1-9](_?\d)* | 0(_?0)*
 * Returns the match length (0 when the value does not fit in 64 bits). */
static size_t match_int(const Lexer *lx, size_t pos, int64_t *value) {
    const char *s = lx->s;
    size_t n = lx->n, j = pos;
    int base = 10;
    if (s[pos] == '0' && pos + 1 < n) {
        char p = (char)(s[pos + 1] | 0x20);
        int b = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 0;
        size_t k = pos + 2;
        if (b && k < n && s[k] == '_') k++;
        if (b && k < n && digit_value(s[k]) < b) {
            base = b;
            j = pos + 2;
        }
    }
    uint64_t v = 0;
    bool overflow = false;
    if (base == 10 && s[pos] == '0') {
        j = pos + 1;
        for (;;) {
            if (j < n && s[j] == '0')
                j++;
            else if (j + 1 < n && s[j] == '_' && s[j + 1] == '0')
                j += 2;
            else
                break;
        }
    } else {
        if (base == 10) {
            v = (uint64_t)(s[j] - '0');
            j++;
        }
        for (;;) {
            size_t k = j;
            if (k < n && s[k] == '_') k++;
            if (k >= n || digit_value(s[k]) >= base) break;
            if (v > (UINT64_MAX - (uint64_t)digit_value(s[k])) / (uint64_t)base) overflow = true;
            v = v * (uint64_t)base + (uint64_t)digit_value(s[k]);
            j = k + 1;
        }
    }
    if (overflow || v > (uint64_t)INT64_MAX) return 0;
    *value = (int64_t)v;
    return j - pos;
}

static int unescape_string(Lexer *lx, const char *s, size_t n, JStr *out) {
    JBuf b;
    jb_init(&b, lx->arena);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c != '\\' || i + 1 >= n) {
            jb_putc(&b, c);
            continue;
        }
        char e = s[++i];
        switch (e) {
        case '\n':
            break;
        case '\\':
        case '\'':
        case '"':
            jb_putc(&b, e);
            break;
        case 'a':
            jb_putc(&b, '\a');
            break;
        case 'b':
            jb_putc(&b, '\b');
            break;
        case 'f':
            jb_putc(&b, '\f');
            break;
        case 'n':
            jb_putc(&b, '\n');
            break;
        case 'r':
            jb_putc(&b, '\r');
            break;
        case 't':
            jb_putc(&b, '\t');
            break;
        case 'v':
            jb_putc(&b, '\v');
            break;
        case 'x':
        case 'u':
        case 'U': {
            int want = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            int32_t cp = 0;
            for (int k = 0; k < want; k++) {
                char h = i + 1 + (size_t)k < n ? s[i + 1 + k] : 0;
                int d = (h >= '0' && h <= '9')   ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
                if (d < 0)
                    return lex_fail(lx->line, "truncated \\x, \\u or \\U escape in a string");
                cp = cp * 16 + d;
            }
            if (cp > 0x10ffff) return lex_fail(lx->line, "illegal Unicode character in a string");
            i += (size_t)want;
            ju_encode(&b, cp);
            break;
        }
        case 'N':
            return lex_fail(lx->line, "\\N{...} escapes in strings are not supported");
        default:
            if (e >= '0' && e <= '7') {
                int32_t cp = e - '0';
                for (int k = 0; k < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; k++)
                    cp = cp * 8 + (s[++i] - '0');
                ju_encode(&b, cp);
            } else {
                jb_putc(&b, '\\');
                jb_putc(&b, e);
            }
        }
    }
    *out = jb_str(&b);
    return 0;
}

/* Lexes the inside of a {{ }} or {% %} tag up to and including its end. */
static int lex_tag(Lexer *lx, bool is_block) {
    const char *s = lx->s;
    size_t n = lx->n;
    char c1 = is_block ? '%' : '}';
    lx->nbrackets = 0;
    for (;;) {
        size_t pos = lx->pos;
        if (pos >= n)
            return lex_fail(lx->line, is_block ? "unexpected end of template, expected '%}'"
                                               : "unexpected end of template, expected '}}'");
        if (lx->nbrackets == 0) {
            size_t m = match_end(lx, pos, c1);
            if (m) {
                push(lx, (JToken){.kind = is_block ? JT_BLOCK_END : JT_VAR_END, .line = lx->line});
                lx->line += count_newlines(s + pos, m);
                lx->line_starting = s[pos + m - 1] == '\n';
                lx->pos = pos + m;
                return 0;
            }
        }
        size_t ws = space_run(s, n, pos);
        if (ws) {
            lx->line += count_newlines(s + pos, ws);
            lx->pos = pos + ws;
            continue;
        }
        JToken t = {.line = lx->line};
        char c = s[pos];
        size_t m = match_float(lx, pos);
        if (m) {
            char buf[128];
            size_t k = 0;
            for (size_t i = pos; i < pos + m && k + 1 < sizeof buf; i++)
                if (s[i] != '_') buf[k++] = s[i];
            buf[k] = '\0';
            t.kind = JT_FLOAT;
            t.f = strtod(buf, NULL);
            push(lx, t);
            lx->pos = pos + m;
            continue;
        }
        if (is_digit(c)) {
            int64_t value;
            m = match_int(lx, pos, &value);
            if (m == 0) return lex_fail(lx->line, "integer literal too large");
            t.kind = JT_INT;
            t.i = value;
            push(lx, t);
            lx->pos = pos + m;
            continue;
        }
        if (is_name_start(c)) {
            size_t j = pos;
            while (j < n && is_name_char(s[j]))
                j++;
            t.kind = JT_NAME;
            t.text = (JStr){ja_memdup(lx->arena, s + pos, j - pos), j - pos};
            push(lx, t);
            lx->pos = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = pos + 1;
            while (j < n && s[j] != c) {
                if (s[j] == '\\' && j + 1 < n) j++;
                j++;
            }
            if (j >= n) return lex_fail(lx->line, "unterminated string literal");
            t.kind = JT_STRING;
            if (unescape_string(lx, s + pos + 1, j - pos - 1, &t.text) != 0) return -1;
            push(lx, t);
            lx->line += count_newlines(s + pos, j + 1 - pos);
            lx->pos = j + 1;
            continue;
        }
        int op = -1;
        for (int k = 0; k < OP_COUNT_; k++) {
            size_t len = strlen(jop_text[k]);
            if (pos + len <= n && memcmp(s + pos, jop_text[k], len) == 0) {
                op = k;
                break;
            }
        }
        if (op < 0) {
            char msg[64];
            if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
                snprintf(msg, sizeof msg, "unexpected character \\x%02x", (unsigned char)c);
            else
                snprintf(msg, sizeof msg, "unexpected character '%c'", c);
            return lex_fail(lx->line, msg);
        }
        if (op == OP_LBRACE || op == OP_LPAREN || op == OP_LBRACKET) {
            if (lx->nbrackets == (int)sizeof lx->brackets)
                return lex_fail(lx->line, "brackets nested too deeply");
            lx->brackets[lx->nbrackets++] = op == OP_LBRACE ? '}' : op == OP_LPAREN ? ')' : ']';
        } else if (op == OP_RBRACE || op == OP_RPAREN || op == OP_RBRACKET) {
            char want = jop_text[op][0];
            char msg[64];
            if (lx->nbrackets == 0) {
                snprintf(msg, sizeof msg, "unexpected '%c'", want);
                return lex_fail(lx->line, msg);
            }
            char expected = lx->brackets[--lx->nbrackets];
            if (expected != want) {
                snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", want, expected);
                return lex_fail(lx->line, msg);
            }
        }
        t.kind = JT_OP;
        t.op = (JOp)op;
        push(lx, t);
        lx->pos = pos + strlen(jop_text[op]);
    }
}

/* At s[pos] == "{%": if this is `{%[-+]? raw [-]%}`, returns the length of the opener. */
static size_t match_raw_begin(const Lexer *lx, size_t pos) {
    const char *s = lx->s;
    size_t n = lx->n, j = pos + 2;
    if (j < n && (s[j] == '-' || s[j] == '+')) j++;
    j += space_run(s, n, j);
    if (j + 3 > n || memcmp(s + j, "raw", 3) != 0) return 0;
    j += 3;
    j += space_run(s, n, j);
    if (j + 3 <= n && s[j] == '-' && s[j + 1] == '%' && s[j + 2] == '}')
        return j + 3 + space_run(s, n, j + 3) - pos;
    if (j + 2 <= n && s[j] == '%' && s[j + 1] == '}') return j + 2 - pos;
    return 0;
}

/* Finds `{%[-+]? endraw [+-]?%}` from pos; sets the data end, sign, and match end. */
static bool find_endraw(const Lexer *lx, size_t pos, size_t *data_end, char *sign, size_t *end) {
    const char *s = lx->s;
    size_t n = lx->n;
    for (size_t i = pos; i + 1 < n; i++) {
        if (s[i] != '{' || s[i + 1] != '%') continue;
        size_t j = i + 2;
        char sg = 0;
        if (j < n && (s[j] == '-' || s[j] == '+')) sg = s[j++];
        j += space_run(s, n, j);
        if (j + 6 > n || memcmp(s + j, "endraw", 6) != 0) continue;
        j += 6;
        j += space_run(s, n, j);
        size_t m = match_end(lx, j, '%');
        if (!m) continue;
        *data_end = i;
        *sign = sg;
        *end = j + m;
        return true;
    }
    return false;
}

int jinja_lex(JArena *a, const char *src, size_t len, JToken **toks, size_t *ntoks) {
    /* Rule 1: normalise newlines and drop one trailing newline. */
    char *s = ja_alloc(a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    s[n] = '\0';

    Lexer lx = {.arena = a, .s = s, .n = n, .line = 1, .line_starting = true};
    while (lx.pos < n) {
        /* The earliest "{{", "{%" or "{#". */
        size_t i = lx.pos;
        while (i + 1 < n &&
               !(s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')))
            i++;
        if (i + 1 >= n) {
            emit_data(&lx, s + lx.pos, n - lx.pos, '+', true);
            break;
        }
        char kind = s[i + 1];
        char sign = (i + 2 < n && (s[i + 2] == '-' || s[i + 2] == '+')) ? s[i + 2] : 0;
        size_t raw = kind == '%' ? match_raw_begin(&lx, i) : 0;
        emit_data(&lx, s + lx.pos, i - lx.pos, sign, kind == '{');
        int tag_line = lx.line;
        if (raw) {
            size_t data_end, end;
            char endsign;
            lx.line += count_newlines(s + i, raw);
            if (!find_endraw(&lx, i + raw, &data_end, &endsign, &end))
                return lex_fail(tag_line, "missing end of raw directive");
            lx.line_starting = s[i + raw - 1] == '\n';
            emit_data(&lx, s + i + raw, data_end - (i + raw), endsign, false);
            lx.line += count_newlines(s + data_end, end - data_end);
            lx.line_starting = s[end - 1] == '\n';
            lx.pos = end;
            continue;
        }
        lx.pos = i + 2 + (sign ? 1 : 0);
        lx.line_starting = false;
        if (kind == '#') {
            /* Comment: up to the earliest `+#}`, `-#}\s*` or `#}\n?`. */
            size_t j = lx.pos, m = 0;
            for (; j < n; j++) {
                if (s[j] == '+' && j + 2 < n && s[j + 1] == '#' && s[j + 2] == '}') {
                    m = 3;
                    break;
                }
                if ((s[j] == '-' || s[j] == '#') && (m = match_end(&lx, j, '#'))) break;
            }
            if (j >= n) return lex_fail(tag_line, "missing end of comment tag");
            lx.line += count_newlines(s + lx.pos, j + m - lx.pos);
            lx.line_starting = s[j + m - 1] == '\n';
            lx.pos = j + m;
            continue;
        }
        push(&lx, (JToken){.kind = kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, .line = tag_line});
        if (lex_tag(&lx, kind == '%') != 0) return -1;
    }
    push(&lx, (JToken){.kind = JT_EOF, .line = lx.line});
    *toks = lx.toks;
    *ntoks = lx.ntoks;
    return 0;
}
