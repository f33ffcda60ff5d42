/* UTF-8 decoding and encoding, and the Python notions of whitespace and printability the
 * engine's str semantics rest on. Invalid bytes decode as themselves rather than failing:
 * a template must render whatever bytes it is given, as jinja2 renders any str. */
#include "jinja/jinja.h"

#include <utf8proc.h>

/* ---------------------------------------------------------------- UTF-8 */

int32_t ju_decode(const char *str, size_t n, size_t *i) {
    const unsigned char *s = (const unsigned char *)str;
    size_t k = *i;
    unsigned c = s[k];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || k + (size_t)len > n) {
        *i = k + 1;
        return (int32_t)c;
    }
    int32_t cp = len == 1   ? (int32_t)c
                 : len == 2 ? (int32_t)(c & 0x1f)
                 : len == 3 ? (int32_t)(c & 0x0f)
                            : (int32_t)(c & 0x07);
    for (int j = 1; j < len; j++) {
        if ((s[k + j] & 0xc0) != 0x80) {
            *i = k + 1;
            return (int32_t)c;
        }
        cp = (cp << 6) | (s[k + j] & 0x3f);
    }
    *i = k + (size_t)len;
    return cp;
}

void ju_encode(JBuf *b, int32_t cp) {
    char t[4];
    if (cp < 0x80) {
        jb_putc(b, (char)cp);
    } else if (cp < 0x800) {
        t[0] = (char)(0xc0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3f));
        jb_put(b, t, 2);
    } else if (cp < 0x10000) {
        t[0] = (char)(0xe0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        t[2] = (char)(0x80 | (cp & 0x3f));
        jb_put(b, t, 3);
    } else {
        t[0] = (char)(0xf0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        t[3] = (char)(0x80 | (cp & 0x3f));
        jb_put(b, t, 4);
    }
}

size_t ju_length(const char *s, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        ju_decode(s, n, &i);
        count++;
    }
    return count;
}

bool ju_isspace(int32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

size_t ju_rstrip_len(const char *s, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xc0) == 0x80)
            start--;
        size_t k = start;
        int32_t c = ju_decode(s, end, &k);
        if (k != end || !ju_isspace(c)) break;
        end = start;
    }
    return end;
}

bool ju_isprintable(int32_t c) {
    if (c == ' ') return true;
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x7f) return true;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}
