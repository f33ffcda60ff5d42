/* Python int(str, base) and float(str): the int and float filters parse strings as Python
 * does (underscores between digits, 0x/0o/0b prefixes, inf and nan), not as strtol and
 * strtod do. */
#include "jinja/jinja_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Python int(s, base) for a string. Returns false when Python would raise. */
bool pystr_to_int(JStr s, int64_t base, int64_t *out) {
    size_t i = 0, n = s.n;
    while (i < n && ju_isspace((unsigned char)s.s[i]))
        i++;
    while (n > i && ju_isspace((unsigned char)s.s[n - 1]))
        n--;
    bool neg = false;
    if (i < n && (s.s[i] == '+' || s.s[i] == '-')) neg = s.s[i++] == '-';
    if (base == 0 || base == 16 || base == 8 || base == 2) {
        if (i + 1 < n && s.s[i] == '0') {
            char p = (char)(s.s[i + 1] | 0x20);
            int64_t pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
            if (pb && (base == 0 || base == pb)) {
                base = pb;
                i += 2;
                if (i < n && s.s[i] == '_') i++;
            }
        }
        if (base == 0) {
            /* Base 0 without prefix: decimal, and no leading zeros unless the value is 0. */
            base = 10;
            if (i + 1 < n && s.s[i] == '0') {
                for (size_t k = i; k < n; k++)
                    if (s.s[k] != '0' && s.s[k] != '_') return false;
            }
        }
    }
    if (base < 2 || base > 36 || i >= n) return false;
    uint64_t v = 0;
    bool prev_digit = false;
    for (; i < n; i++) {
        char ch = s.s[i];
        if (ch == '_') {
            if (!prev_digit || i + 1 >= n) return false;
            prev_digit = false;
            continue;
        }
        int d = (ch >= '0' && ch <= '9')                     ? ch - '0'
                : ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') ? (ch | 0x20) - 'a' + 10
                                                             : 99;
        if (d >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_digit = true;
    }
    if (!prev_digit) return false;
    if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0)) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* Python float(s). */
bool pystr_to_float(JStr s, double *out) {
    size_t i = 0, n = s.n;
    while (i < n && ju_isspace((unsigned char)s.s[i]))
        i++;
    while (n > i && ju_isspace((unsigned char)s.s[n - 1]))
        n--;
    if (i >= n) return false;
    char buf[128];
    size_t k = 0;
    for (; i < n && k + 1 < sizeof buf; i++) {
        if (s.s[i] == '_') {
            if (k == 0 || !(buf[k - 1] >= '0' && buf[k - 1] <= '9') || i + 1 >= n ||
                !(s.s[i + 1] >= '0' && s.s[i + 1] <= '9'))
                return false;
            continue;
        }
        buf[k++] = s.s[i];
    }
    if (i < n) return false;
    buf[k] = '\0';
    /* strtod accepts hex floats and "infinity"/"nan(...)" forms Python rejects or spells
     * differently; allow only decimal forms, inf, infinity and nan. */
    const char *p = buf;
    if (*p == '+' || *p == '-') p++;
    if (strcasecmp(p, "inf") && strcasecmp(p, "infinity") && strcasecmp(p, "nan")) {
        for (const char *q = p; *q; q++)
            if (!strchr("0123456789.eE+-", *q)) return false;
    }
    char *end;
    double d = strtod(buf, &end);
    if (*end || end == buf) return false;
    *out = d;
    return true;
}
