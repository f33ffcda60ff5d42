/* Python str semantics, part one: case mapping (lower, upper, title, capitalize, swapcase)
 * and character classes (isdigit, isalpha, islower, ...), by Unicode category through
 * utf8proc, as CPython's str methods do. */
#include "jinja/jinja_internal.h"

#include <string.h>
#include <utf8proc.h>

void pystr_put_case(JBuf *b, int32_t cp, PyStrCase op) {
    if (op != PYSTR_LOWER && cp == 0xdf) { /* ß has no single upper-case letter */
        jb_puts(b, op == PYSTR_UPPER ? "SS" : "Ss");
        return;
    }
    int32_t r = op == PYSTR_LOWER   ? utf8proc_tolower(cp)
                : op == PYSTR_UPPER ? utf8proc_toupper(cp)
                                    : utf8proc_totitle(cp);
    ju_encode(b, r);
}

JValue *pystr_case(JCtx *c, JStr s, PyStrCase op) {
    JBuf b;
    jb_init(&b, c->arena);
    for (size_t i = 0; i < s.n;) {
        size_t start = i;
        int32_t cp = ju_decode(s.s, s.n, &i);
        if (cp < 0x80) {
            char ch = s.s[start];
            if (op == PYSTR_LOWER && ch >= 'A' && ch <= 'Z') ch = (char)(ch + 32);
            if (op != PYSTR_LOWER && ch >= 'a' && ch <= 'z') ch = (char)(ch - 32);
            jb_putc(&b, ch);
        } else {
            pystr_put_case(&b, cp, op);
        }
    }
    return jv_str_ref(c->arena, jb_str(&b));
}

static bool is_cased(int32_t cp) {
    utf8proc_category_t cat = utf8proc_category(cp);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
           cat == UTF8PROC_CATEGORY_LT;
}

bool pystr_is_alnum(int32_t cp) {
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
    utf8proc_category_t cat = utf8proc_category(cp);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
           (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

/* Python str.title(): a cased character after an uncased one is title-cased, other
 * cased characters are lower-cased. */
static JValue *py_title(JCtx *c, JStr s) {
    JBuf b;
    jb_init(&b, c->arena);
    bool prev_cased = false;
    for (size_t i = 0; i < s.n;) {
        int32_t cp = ju_decode(s.s, s.n, &i);
        bool cased = is_cased(cp);
        if (cased)
            pystr_put_case(&b, cp, prev_cased ? PYSTR_LOWER : PYSTR_TITLE);
        else
            ju_encode(&b, cp);
        prev_cased = cased;
    }
    return jv_str_ref(c->arena, jb_str(&b));
}

/* Python str.capitalize(): first character title-cased, the rest lower-cased. */
JValue *pystr_capitalize(JCtx *c, JStr s) {
    JBuf b;
    jb_init(&b, c->arena);
    for (size_t i = 0, k = 0; i < s.n; k++) {
        int32_t cp = ju_decode(s.s, s.n, &i);
        pystr_put_case(&b, cp, k == 0 ? PYSTR_TITLE : PYSTR_LOWER);
    }
    return jv_str_ref(c->arena, jb_str(&b));
}

static bool str_all(JStr s, bool (*pred)(int32_t)) {
    if (s.n == 0) return false;
    for (size_t i = 0; i < s.n;)
        if (!pred(ju_decode(s.s, s.n, &i))) return false;
    return true;
}

static bool cp_digit(int32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t cat = utf8proc_category(cp);
    return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NO;
}
static bool cp_decimal(int32_t cp) {
    return cp < 0x80 ? (cp >= '0' && cp <= '9') : utf8proc_category(cp) == UTF8PROC_CATEGORY_ND;
}
static bool cp_numeric(int32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t cat = utf8proc_category(cp);
    return cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
}
static bool cp_alpha(int32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    utf8proc_category_t cat = utf8proc_category(cp);
    return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}
static bool cp_space(int32_t cp) {
    return ju_isspace(cp);
}

/* islower/isupper: at least one cased character and none of the other case. */
bool pystr_is_case(JStr s, bool upper) {
    bool any = false;
    for (size_t i = 0; i < s.n;) {
        int32_t cp = ju_decode(s.s, s.n, &i);
        utf8proc_category_t cat = utf8proc_category(cp);
        if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) {
            if (!upper) return false;
            any = true;
        } else if (cat == UTF8PROC_CATEGORY_LL) {
            if (upper) return false;
            any = true;
        }
    }
    return any;
}

JValue *pystr_case_method(JCtx *c, JStr s, const char *name) {
    if (!strcmp(name, "upper")) return pystr_case(c, s, PYSTR_UPPER);
    if (!strcmp(name, "lower") || !strcmp(name, "casefold")) return pystr_case(c, s, PYSTR_LOWER);
    if (!strcmp(name, "title")) return py_title(c, s);
    if (!strcmp(name, "capitalize")) return pystr_capitalize(c, s);
    if (!strcmp(name, "swapcase")) {
        JBuf b;
        jb_init(&b, c->arena);
        for (size_t i = 0; i < s.n;) {
            int32_t cp = ju_decode(s.s, s.n, &i);
            utf8proc_category_t cat = utf8proc_category(cp);
            pystr_put_case(&b, cp,
                           cat == UTF8PROC_CATEGORY_LU   ? PYSTR_LOWER
                           : cat == UTF8PROC_CATEGORY_LL ? PYSTR_UPPER
                                                         : PYSTR_LOWER);
        }
        return jv_str_ref(c->arena, jb_str(&b));
    }
    if (!strcmp(name, "isdigit")) return jv_bool(str_all(s, cp_digit));
    if (!strcmp(name, "isdecimal")) return jv_bool(str_all(s, cp_decimal));
    if (!strcmp(name, "isnumeric")) return jv_bool(str_all(s, cp_numeric));
    if (!strcmp(name, "isalpha")) return jv_bool(str_all(s, cp_alpha));
    if (!strcmp(name, "isalnum")) return jv_bool(str_all(s, pystr_is_alnum));
    if (!strcmp(name, "isspace")) return jv_bool(str_all(s, cp_space));
    if (!strcmp(name, "islower")) return jv_bool(pystr_is_case(s, false));
    if (!strcmp(name, "isupper")) return jv_bool(pystr_is_case(s, true));
    if (!strcmp(name, "istitle")) {
        /* Upper/title-case only after uncased characters, lower-case only after cased
         * ones, and at least one cased character. */
        bool prev_cased = false, any = false;
        for (size_t i = 0; i < s.n;) {
            utf8proc_category_t cat = utf8proc_category(ju_decode(s.s, s.n, &i));
            if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) {
                if (prev_cased) return &jv_false_value;
                prev_cased = any = true;
            } else if (cat == UTF8PROC_CATEGORY_LL) {
                if (!prev_cased) return &jv_false_value;
                prev_cased = any = true;
            } else {
                prev_cased = false;
            }
        }
        return jv_bool(any);
    }
    return NULL;
}
