/* Python ints beyond int64 (JV_BIGINT): made from JSON numbers that jansson cannot hold, from
 * int() of a float >= 2^63 and of a long digit string. They print, compare and serialise as
 * Python would; arithmetic on them is refused at the operator (see jinja_binop).
 *
 * Invariants:
 *  1. u.s is the canonical decimal text: an optional '-', then digits without leading zeros.
 *  2. The value is outside int64: a JV_BIGINT is never equal to a JV_INT. */
#include "jinja/jinja_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The canonical text of a decimal integer (sign, digits; leading zeros allowed), or NULL. */
static JValue *from_digits(JArena *a, bool neg, const char *d, size_t n) {
    while (n > 1 && *d == '0') {
        d++;
        n--;
    }
    /* Fits int64 (19 digits at most, and not past 9223372036854775807 / ...808)? */
    static const char max[] = "9223372036854775807", min[] = "9223372036854775808";
    const char *lim = neg ? min : max;
    if (n < 19 || (n == 19 && memcmp(d, lim, 19) <= 0)) {
        int64_t v = 0;
        for (size_t i = 0; i < n; i++)
            v = v * 10 - (d[i] - '0'); /* negative accumulation reaches INT64_MIN */
        return jv_int(a, neg ? v : -v);
    }
    JValue *v = ja_alloc(a, sizeof *v);
    v->kind = JV_BIGINT;
    char *s = ja_alloc(a, n + 2);
    size_t k = 0;
    if (neg) s[k++] = '-';
    memcpy(s + k, d, n);
    v->u.s = (JStr){s, k + n};
    return v;
}

JValue *jv_int_from_text(JArena *a, const char *s, size_t n) {
    while (n && ju_isspace((unsigned char)*s)) {
        s++;
        n--;
    }
    while (n && ju_isspace((unsigned char)s[n - 1]))
        n--;
    bool neg = false;
    if (n && (*s == '-' || *s == '+')) {
        neg = *s == '-';
        s++;
        n--;
    }
    if (n == 0) return NULL;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return NULL;
    return from_digits(a, neg, s, n);
}

JValue *jv_int_from_double(JArena *a, double f) {
    if (!isfinite(f)) return NULL;
    f = trunc(f);
    if (fabs(f) < 9.2e18) return jv_int(a, (int64_t)f);
    /* |f| = m * 2^e exactly, m < 2^53: the digits of m, doubled e times (little-endian). */
    int e;
    double frac = frexp(fabs(f), &e);
    uint64_t m = (uint64_t)ldexp(frac, 53);
    e -= 53;
    size_t cap = 20 + (size_t)(e > 0 ? e : 0) / 3 + 1, n = 0;
    unsigned char *dig = ja_alloc(a, cap);
    for (; m; m /= 10)
        dig[n++] = (unsigned char)(m % 10);
    for (int i = 0; i < e; i++) {
        unsigned carry = 0;
        for (size_t k = 0; k < n; k++) {
            unsigned x = dig[k] * 2u + carry;
            dig[k] = (unsigned char)(x % 10);
            carry = x / 10;
        }
        if (carry) dig[n++] = (unsigned char)carry;
    }
    char *s = ja_alloc(a, n + 1);
    for (size_t k = 0; k < n; k++)
        s[k] = (char)('0' + dig[n - 1 - k]);
    return from_digits(a, f < 0, s, n);
}

int jv_bigint_sign(const JValue *v) {
    return v->u.s.s[0] == '-' ? -1 : 1;
}

double jv_bigint_double(const JValue *v) {
    return strtod(v->u.s.s, NULL);
}

int jv_int_compare(const JValue *x, const JValue *y) {
    int sx = x->kind == JV_BIGINT ? jv_bigint_sign(x) * 2 : 0,
        sy = y->kind == JV_BIGINT ? jv_bigint_sign(y) * 2 : 0;
    if (sx != sy || (sx == 0 && sy == 0)) {
        /* At most one is big (or neither): its sign decides (invariant 2). */
        if (sx == 0 && sy == 0) {
            int64_t p = jv_as_int(x), q = jv_as_int(y);
            return p < q ? -1 : p > q;
        }
        return sx < sy ? -1 : 1;
    }
    /* Both big, same sign: longer magnitude is bigger, else the digits decide. */
    int c = x->u.s.n < y->u.s.n   ? -1
            : x->u.s.n > y->u.s.n ? 1
                                  : memcmp(x->u.s.s, y->u.s.s, x->u.s.n);
    c = c < 0 ? -1 : c > 0;
    return sx < 0 ? -c : c;
}
