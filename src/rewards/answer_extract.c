#include "rewards/answer_extract.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

int answer_extract_parse(const char *name, AnswerExtract *out) {
    static const struct {
        const char *name;
        AnswerExtract mode;
    } modes[] = {{"auto", ANSWER_AUTO},
                 {"boxed", ANSWER_BOXED},
                 {"hash", ANSWER_HASH},
                 {"last_number", ANSWER_LAST_NUMBER},
                 {"none", ANSWER_WHOLE}};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (strcmp(name, modes[i].name) == 0) {
            *out = modes[i].mode;
            return 0;
        }
    return -1;
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

static bool is_alnum(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* The content of the last \boxed{...} whose braces close. An unclosed one (a completion cut off
 * at max_completion_length) is no answer, so an earlier complete box still counts. LaTeX's
 * escaped braces \{ \} are characters, not grouping, and do not count towards the balance. */
static bool find_boxed(const char *t, size_t len, AnswerSpan *out) {
    static const char key[] = "\\boxed{";
    const size_t klen = sizeof key - 1;
    bool found = false;
    size_t from = 0;
    while (from + klen <= len) {
        const char *hit = memmem(t + from, len - from, key, klen);
        if (!hit) break;
        size_t start = (size_t)(hit - t) + klen;
        int depth = 1;
        size_t j = start;
        for (; j < len && depth > 0; j++) {
            if (t[j] == '\\' && j + 1 < len && (t[j + 1] == '{' || t[j + 1] == '}'))
                j++;
            else if (t[j] == '{')
                depth++;
            else if (t[j] == '}')
                depth--;
        }
        if (depth == 0) {
            *out = (AnswerSpan){t + start, j - 1 - start};
            found = true;
        }
        from = (size_t)(hit - t) + 1;
    }
    return found;
}

/* The rest of the line after the last "####": GSM8K ends its solutions with "#### 42", and a
 * model trained on them may go on talking on the next lines. */
static bool find_hash(const char *t, size_t len, AnswerSpan *out) {
    size_t at = 0;
    bool found = false;
    for (size_t i = 0; i + 4 <= len; i++)
        if (memcmp(t + i, "####", 4) == 0) {
            at = i + 4;
            found = true;
        }
    if (!found) return false;
    size_t end = at;
    while (end < len && t[end] != '\n')
        end++;
    *out = (AnswerSpan){t + at, end - at};
    return true;
}

/* Length of the number starting at t[i] (0 if none starts there): an optional sign, digits with
 * optional thousands groups (",ddd", only after 1-3 leading digits, so "1,2,3" stays a list),
 * an optional fraction; or a bare fraction ".5". */
static size_t number_at(const char *t, size_t len, size_t i) {
    size_t j = i;
    if (j < len && (t[j] == '-' || t[j] == '+')) j++;
    size_t int_start = j;
    while (j < len && is_digit(t[j]))
        j++;
    size_t int_digits = j - int_start;
    if (int_digits >= 1 && int_digits <= 3) {
        while (j + 3 < len && t[j] == ',' && is_digit(t[j + 1]) && is_digit(t[j + 2]) &&
               is_digit(t[j + 3]) && !(j + 4 < len && is_digit(t[j + 4])))
            j += 4;
    }
    size_t frac_digits = 0;
    if (j + 1 < len && t[j] == '.' && is_digit(t[j + 1])) {
        j++;
        while (j < len && is_digit(t[j])) {
            j++;
            frac_digits++;
        }
    }
    return int_digits + frac_digits > 0 ? j - i : 0;
}

/* A sign belongs to the number only where it cannot be an operator: "3-5" ends in 5, "x = -5"
 * in -5. A '.' starts a number (".5") only when not after a digit ("1.2.3" ends in 3). */
static bool number_may_start(const char *t, size_t len, size_t i) {
    char prev = i > 0 ? t[i - 1] : ' ';
    if (is_digit(t[i])) return true;
    if (t[i] == '.') return !is_digit(prev) && i + 1 < len && is_digit(t[i + 1]);
    if (t[i] == '-' || t[i] == '+') return !is_alnum(prev) && number_at(t, len, i) > 0;
    return false;
}

static bool find_last_number(const char *t, size_t len, AnswerSpan *out) {
    bool found = false;
    size_t i = 0;
    while (i < len) {
        size_t n = number_may_start(t, len, i) ? number_at(t, len, i) : 0;
        if (n == 0) {
            i++;
            continue;
        }
        *out = (AnswerSpan){t + i, n};
        found = true;
        i += n;
    }
    return found;
}

bool answer_extract(const char *text, size_t len, AnswerExtract mode, AnswerSpan *out) {
    switch (mode) {
    case ANSWER_BOXED:
        return find_boxed(text, len, out);
    case ANSWER_HASH:
        return find_hash(text, len, out);
    case ANSWER_LAST_NUMBER:
        return find_last_number(text, len, out);
    case ANSWER_WHOLE:
        *out = (AnswerSpan){text, len};
        return true;
    case ANSWER_AUTO:
        break;
    }
    return find_boxed(text, len, out) || find_hash(text, len, out) ||
           find_last_number(text, len, out);
}

AnswerSpan answer_reference(const char *text, size_t len) {
    AnswerSpan s;
    if (find_boxed(text, len, &s) || find_hash(text, len, &s)) return s;
    return (AnswerSpan){text, len};
}

/* The answer without ',' and '$' anywhere, surrounding space, or trailing '.' ("$1,000." and
 * "1000" are the same answer). Returns a malloc'd string. */
static char *normalise(AnswerSpan s) {
    char *buf = xmalloc(s.len + 1);
    size_t n = 0;
    for (size_t i = 0; i < s.len; i++)
        if (s.p[i] != ',' && s.p[i] != '$') buf[n++] = s.p[i];
    while (n > 0 && (is_space(buf[n - 1]) || buf[n - 1] == '.'))
        n--;
    size_t start = 0;
    while (start < n && is_space(buf[start]))
        start++;
    memmove(buf, buf + start, n - start);
    buf[n - start] = '\0';
    return buf;
}

/* Whether s is a plain decimal number and its value: only what number_at reads (no "inf", hex
 * or exponents, which strtod alone would take). */
static bool plain_number(const char *s, double *value) {
    size_t len = strlen(s);
    if (len == 0 || number_at(s, len, 0) != len) return false;
    *value = strtod(s, NULL);
    return true;
}

bool answer_equal(AnswerSpan a, AnswerSpan b) {
    char *na = normalise(a), *nb = normalise(b);
    double va, vb;
    bool same = plain_number(na, &va) && plain_number(nb, &vb) ? va == vb : strcmp(na, nb) == 0;
    free(na);
    free(nb);
    return same;
}
