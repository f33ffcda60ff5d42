#include "python/py_error.h"

#include "python/py_embed.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The text of a str object, or `fallback` when it is not one (or cannot be encoded). The pointer
 * lives as long as the object. */
static const char *utf8_or(PyObject *s, const char *fallback) {
    if (!s || !PyUnicode_Check(s)) return fallback;
    const char *t = PyUnicode_AsUTF8(s);
    if (!t) {
        PyErr_Clear();
        return fallback;
    }
    return t;
}

/* "KeyError" for built-ins, "rewards.RewardError" for the rest, as Python's traceback prints. */
static void format_type_name(PyObject *type, char *out, size_t cap) {
    PyObject *module = PyObject_GetAttrString(type, "__module__");
    PyObject *qualname = PyObject_GetAttrString(type, "__qualname__");
    PyErr_Clear();
    const char *mod = utf8_or(module, NULL), *name = utf8_or(qualname, "exception");
    if (mod && strcmp(mod, "builtins") != 0 && strcmp(mod, "__main__") != 0)
        snprintf(out, cap, "%s.%s", mod, name);
    else
        snprintf(out, cap, "%s", name);
    Py_XDECREF(module);
    Py_XDECREF(qualname);
}

/* " (at file:line in func)" from the innermost traceback frame of code read from a file, which
 * is where the user's code raised: frames of "<frozen importlib._bootstrap>" and of our own
 * "<rlhf.c _rlhf_support>" are passed over. "" when there is none. */
static void format_raise_site(PyObject *tb, char *out, size_t cap) {
    out[0] = '\0';
    Py_XINCREF(tb);
    while (tb && tb != Py_None) {
        PyObject *frame = PyObject_GetAttrString(tb, "tb_frame");
        PyObject *code = frame ? PyObject_GetAttrString(frame, "f_code") : NULL;
        PyObject *file = code ? PyObject_GetAttrString(code, "co_filename") : NULL;
        PyObject *func = code ? PyObject_GetAttrString(code, "co_name") : NULL;
        PyObject *line = PyObject_GetAttrString(tb, "tb_lineno");
        PyErr_Clear();
        const char *f = utf8_or(file, "?");
        if (f[0] != '<')
            snprintf(out, cap, " (at %s:%ld in %s)", f, line ? PyLong_AsLong(line) : -1L,
                     utf8_or(func, "?"));
        PyErr_Clear();
        Py_XDECREF(frame);
        Py_XDECREF(code);
        Py_XDECREF(file);
        Py_XDECREF(func);
        Py_XDECREF(line);
        PyObject *next = PyObject_GetAttrString(tb, "tb_next");
        PyErr_Clear();
        Py_DECREF(tb);
        tb = next;
    }
    Py_XDECREF(tb);
}

/* A SyntaxError's place is the file being compiled, not a frame. */
static void format_syntax_error_site(PyObject *value, char *out, size_t cap) {
    PyObject *file = PyObject_GetAttrString(value, "filename");
    PyObject *line = PyObject_GetAttrString(value, "lineno");
    PyErr_Clear();
    long lineno = line && PyLong_Check(line) ? PyLong_AsLong(line) : -1L;
    PyErr_Clear();
    snprintf(out, cap, " (at %s:%ld)", utf8_or(file, "?"), lineno);
    Py_XDECREF(file);
    Py_XDECREF(line);
}

void py_error_take(char *out, size_t cap) {
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    PyErr_Fetch(&type, &value, &tb);
    if (!type) {
        snprintf(out, cap, "failed without a Python exception");
        return;
    }
    PyErr_NormalizeException(&type, &value, &tb);

    char type_name[256], site[1024];
    format_type_name(type, type_name, sizeof type_name);
    if (value && PyErr_GivenExceptionMatches(type, PyExc_SyntaxError))
        format_syntax_error_site(value, site, sizeof site);
    else
        format_raise_site(tb, site, sizeof site);

    PyObject *text = value ? PyObject_Str(value) : NULL;
    PyErr_Clear();
    const char *message = utf8_or(text, "");
    /* A huge message (a repr of a whole batch) is cut so that the raise site still fits. */
    int max_message = 1000;
    const char *ellipsis = (int)strlen(message) > max_message ? "..." : "";
    snprintf(out, cap, "%s%s%.*s%s%s", type_name, *message ? ": " : "", max_message, message,
             ellipsis, site);

    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

int py_error_set(const char *fmt, ...) {
    char context[1024], exception[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    py_error_take(exception, sizeof exception);
    return err_set("%s: %s", context, exception);
}
