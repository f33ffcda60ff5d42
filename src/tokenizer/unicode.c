/* UTF-8 coding, the lossy repair of ill-formed input, the Unicode properties the pipeline
 * tests (general categories from utf8proc), and GPT-2's byte <-> character table. */
#include "tokenizer/tok_internal.h"

#include <utf8proc.h>

size_t utf8_decode(const char *s, size_t len, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = utf8_char_len(u[0]);
    if (n > len) n = len; /* cannot happen on valid UTF-8; keeps a bad caller in bounds */
    switch (n) {
    case 1:
        *cp = u[0];
        break;
    case 2:
        *cp = (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
        break;
    case 3:
        *cp = (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
        break;
    default:
        *cp = (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 |
              (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
    }
    return n;
}

size_t utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the well-formed character at s, or 0 when ill-formed; *valid_prefix gets how many
 * bytes form the longest prefix of a well-formed sequence (the "maximal subpart", >= 1). The
 * ranges are those of Unicode Table 3-7. */
static size_t utf8_check(const unsigned char *s, size_t len, size_t *valid_prefix) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *valid_prefix = 1;
        return 0;
    }
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= len) break;
        unsigned char b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    if (i == need) return need;
    *valid_prefix = i;
    return 0;
}

size_t utf8_valid_prefix(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, dummy;
    while (i < len) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = utf8_check(u + i, len - i, &dummy);
        if (n == 0) return i;
        i += n;
    }
    return len;
}

void utf8_append_lossy(TokBuf *out, const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    tokbuf_reserve(out, len);
    while (i < len) {
        size_t ok = utf8_valid_prefix(s + i, len - i);
        tokbuf_append(out, s + i, ok);
        i += ok;
        if (i >= len) break;
        size_t bad = 1;
        utf8_check(u + i, len - i, &bad);
        tokbuf_append(out, "\xEF\xBF\xBD", 3);
        i += bad;
    }
}

bool utf8_single_char(const char *s, size_t len, uint32_t *cp) {
    if (len == 0 || utf8_valid_prefix(s, len) != len) return false;
    return utf8_decode(s, len, cp) == len;
}

bool unicode_is_whitespace(uint32_t c) {
    if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
    if (c < 0x85) return false;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool unicode_in_ranges(const UnicodeRange *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

bool unicode_is_numeric(uint32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
    return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL ||
           cat == UTF8PROC_CATEGORY_NO ||
           unicode_in_ranges(unicode_extra_numeric, unicode_extra_numeric_count, c);
}

bool unicode_is_strippable_mark(uint32_t c) {
    if (c < 0x300) return false;
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
    return (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC ||
            cat == UTF8PROC_CATEGORY_ME) &&
           !unicode_in_ranges(unicode_marks_kept, unicode_marks_kept_count, c);
}

uint32_t unicode_simple_lower(uint32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    size_t lo = 0, hi = unicode_extra_lower_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < unicode_extra_lower[mid].from)
            hi = mid;
        else if (c > unicode_extra_lower[mid].from)
            lo = mid + 1;
        else
            return unicode_extra_lower[mid].to;
    }
    return (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
}

/* Rust regex's \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control.
 * Alphabetic is the letters, Nl, and Other_Alphabetic, which is marks except for a few
 * symbol blocks of enclosed letters (listed here). */
bool unicode_is_word(uint32_t c) {
    if (c < 0x80)
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_';
    if (c == 0x200C || c == 0x200D) return true;
    if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
        (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189))
        return true;
    if (unicode_in_ranges(unicode_extra_letter, unicode_extra_letter_count, c) ||
        unicode_in_ranges(unicode_extra_mark, unicode_extra_mark_count, c) ||
        unicode_in_ranges(unicode_extra_decimal, unicode_extra_decimal_count, c))
        return true;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

/* bytes_to_unicode: the printable bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF stand for
 * themselves; the other 68, in increasing order, get U+0100.. U+0143. */
uint32_t bytelevel_char(unsigned char b) {
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0) return 0x121u + (b - 0x7Fu);
    if (b == 0xAD) return 0x143;
    return b;
}

int bytelevel_byte(uint32_t cp) {
    if (cp < 0x100) {
        if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || cp >= 0xAE) return (int)cp;
        return -1;
    }
    if (cp <= 0x120) return (int)(cp - 0x100);
    if (cp <= 0x142) return (int)(0x7F + (cp - 0x121));
    if (cp == 0x143) return 0xAD;
    return -1;
}
