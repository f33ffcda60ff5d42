/* Python's printf-style formatting, `fmt % args`: the % operator on a string and the format
 * filter. */
#include "jinja/jinja_internal.h"

#include "common/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Pads `body` (with sign/prefix kept in front of zero padding) to `width` code points. */
static void put_padded(JBuf *b, const char *sign, const char *prefix, const char *body,
                       size_t body_len, int64_t width, bool left, bool zero) {
    int64_t len = (int64_t)(strlen(sign) + strlen(prefix) + ju_length(body, body_len));
    int64_t pad = width > len ? width - len : 0;
    if (!left && !zero)
        for (int64_t i = 0; i < pad; i++)
            jb_putc(b, ' ');
    jb_puts(b, sign);
    jb_puts(b, prefix);
    if (!left && zero)
        for (int64_t i = 0; i < pad; i++)
            jb_putc(b, '0');
    jb_put(b, body, body_len);
    if (left)
        for (int64_t i = 0; i < pad; i++)
            jb_putc(b, ' ');
}

/* Python's `fmt % args` (printf-style formatting): args is a tuple of positional values,
 * a dict for %(name)s, or any single value. */
JValue *pystr_printf(JCtx *c, JStr fmt, JValue *args, int line) {
    JValue **list = &args;
    size_t nlist = 1, next = 0;
    if (args->kind == JV_LIST && args->is_tuple) {
        list = args->u.list.items;
        nlist = args->u.list.n;
    }
    /* Python accepts unused arguments when the argument "looks like a mapping". */
    bool mapping_like = (args->kind == JV_DICT) || (args->kind == JV_LIST && !args->is_tuple);
    JBuf b;
    jb_init(&b, c->arena);
    for (size_t i = 0; i < fmt.n;) {
        if (fmt.s[i] != '%') {
            jb_putc(&b, fmt.s[i++]);
            continue;
        }
        if (++i >= fmt.n) return jinja_fail(line, "incomplete format");
        JValue *v = NULL;
        if (fmt.s[i] == '(') {
            size_t start = ++i;
            int depth = 1;
            while (i < fmt.n && depth) {
                if (fmt.s[i] == '(') depth++;
                if (fmt.s[i] == ')') depth--;
                i++;
            }
            if (depth) return jinja_fail(line, "incomplete format key");
            if (args->kind != JV_DICT) return jinja_fail(line, "format requires a mapping");
            v = jv_dict_get(args->u.dict, fmt.s + start, i - 1 - start);
            if (!v)
                return jinja_fail(line, "KeyError: '%.*s'", (int)(i - 1 - start), fmt.s + start);
        }
        bool left = false, plus = false, space = false, alt = false, zero = false;
        for (; i < fmt.n && strchr("-+ #0", fmt.s[i]); i++) {
            char f = fmt.s[i];
            left |= f == '-', plus |= f == '+', space |= f == ' ', alt |= f == '#',
                zero |= f == '0';
        }
        int64_t width = -1, prec = -1;
        for (int part = 0; part < 2; part++) {
            int64_t *dst = part ? &prec : &width;
            if (part) {
                if (i >= fmt.n || fmt.s[i] != '.') break;
                i++;
                *dst = 0;
            }
            if (i < fmt.n && fmt.s[i] == '*') {
                if (next >= nlist)
                    return jinja_fail(line, "not enough arguments for format string");
                JValue *w = list[next++];
                if (w->kind != JV_INT) return jinja_fail(line, "* wants int");
                *dst = w->u.i;
                i++;
            } else {
                while (i < fmt.n && fmt.s[i] >= '0' && fmt.s[i] <= '9') {
                    *dst = (*dst < 0 ? 0 : *dst) * 10 + (fmt.s[i++] - '0');
                    if (*dst > 100000) return jinja_fail(line, "width or precision too big");
                }
            }
        }
        if (width < 0 && width != -1) {
            left = true;
            width = -width;
        }
        while (i < fmt.n && strchr("hlL", fmt.s[i]))
            i++;
        if (i >= fmt.n) return jinja_fail(line, "incomplete format");
        char conv = fmt.s[i++];
        if (conv == '%') {
            jb_putc(&b, '%');
            continue;
        }
        if (!v) {
            if (next >= nlist) return jinja_fail(line, "not enough arguments for format string");
            v = list[next++];
        }
        if (v->kind == JV_UNDEFINED && conv != 's' && conv != 'r' && conv != 'a')
            return jinja_fail_undefined(line, v);
        const char *sign = "";
        switch (conv) {
        case 's':
        case 'r':
        case 'a': {
            JBuf t;
            jb_init(&t, c->arena);
            if (conv == 's')
                jv_to_str(&t, v);
            else if (jv_repr(&t, v) != 0)
                return jinja_fail(line, "%s", err_msg());
            JStr str = jb_str(&t);
            size_t cut = str.n;
            if (prec >= 0) {
                cut = 0;
                for (int64_t k = 0; k < prec && cut < str.n; k++)
                    ju_decode(str.s, str.n, &cut);
            }
            put_padded(&b, "", "", str.s, cut, width, left, false);
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'o':
        case 'x':
        case 'X':
        case 'c': {
            int64_t iv;
            if (v->kind == JV_INT || v->kind == JV_BOOL) {
                iv = v->kind == JV_INT ? v->u.i : v->u.b;
            } else if (v->kind == JV_FLOAT && (conv == 'd' || conv == 'i' || conv == 'u')) {
                if (!isfinite(v->u.f) || fabs(v->u.f) >= 9.2e18)
                    return jinja_fail(line, "cannot convert float %s to integer",
                                      isnan(v->u.f) ? "NaN" : "infinity");
                iv = (int64_t)v->u.f;
            } else if (conv == 'c' && v->kind == JV_STRING && ju_length(v->u.s.s, v->u.s.n) == 1) {
                put_padded(&b, "", "", v->u.s.s, v->u.s.n, width, left, false);
                break;
            } else {
                return jinja_fail(line, "%%%c format: %s is required, not %s", conv,
                                  conv == 'c' ? "an int or a unicode character"
                                  : conv == 'd' || conv == 'i' || conv == 'u' ? "a real number"
                                                                              : "an integer",
                                  jv_type_name(v));
            }
            if (conv == 'c') {
                if (iv < 0 || iv > 0x10ffff)
                    return jinja_fail(line, "%%c arg not in range(0x110000)");
                JBuf t;
                jb_init(&t, c->arena);
                ju_encode(&t, (int32_t)iv);
                put_padded(&b, "", "", t.data, t.len, width, left, false);
                break;
            }
            bool neg = iv < 0;
            uint64_t mag = neg ? (uint64_t)0 - (uint64_t)iv : (uint64_t)iv;
            char digits[80];
            int base = conv == 'o' ? 8 : (conv == 'x' || conv == 'X') ? 16 : 10;
            const char *alphabet = conv == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
            int nd = 0;
            char rev[70];
            do {
                rev[nd++] = alphabet[mag % (uint64_t)base];
                mag /= (uint64_t)base;
            } while (mag);
            int len = 0;
            for (int64_t k = nd; k < prec && len < 64; k++)
                digits[len++] = '0';
            while (nd)
                digits[len++] = rev[--nd];
            sign = neg ? "-" : plus ? "+" : space ? " " : "";
            const char *prefix = !alt          ? ""
                                 : conv == 'o' ? "0o"
                                 : conv == 'x' ? "0x"
                                 : conv == 'X' ? "0X"
                                               : "";
            put_padded(&b, sign, prefix, digits, (size_t)len, width, left, zero && !left);
            break;
        }
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G': {
            if (!jv_is_number(v))
                return jinja_fail(line, "must be real number, not %s", jv_type_name(v));
            double d = jv_as_double(v);
            char spec[32], out[512];
            snprintf(spec, sizeof spec, "%%%s%s%s%s.%d%c", plus ? "+" : "", space ? " " : "",
                     alt ? "#" : "", "",
                     (int)(prec < 0     ? 6
                           : prec > 300 ? 300
                                        : prec),
                     conv);
            snprintf(out, sizeof out, spec, d);
            /* Sign first, then zero padding, as Python does. */
            const char *body = out;
            char sg[2] = {0, 0};
            if (*body == '-' || *body == '+' || *body == ' ') {
                sg[0] = *body;
                body++;
            }
            put_padded(&b, sg, "", body, strlen(body), width, left, zero && !left && isfinite(d));
            break;
        }
        default:
            return jinja_fail(line, "unsupported format character '%c' (0x%x)", conv,
                              (unsigned)(unsigned char)conv);
        }
    }
    if (next < nlist && !mapping_like && !(args->kind == JV_LIST && args->is_tuple && nlist == 0))
        return jinja_fail(line, "not all arguments converted during string formatting");
    return jv_str_ref(c->arena, jb_str(&b));
}
