#include "config/yaml_doc.h"

#include "common/error.h"
#include "common/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* libyaml reports bad bytes (invalid UTF-8, control characters) by their offset in the input,
 * not by a line and column: count them from the text. */
static void offset_position(const char *text, size_t offset, size_t *line, size_t *column) {
    *line = 0, *column = 0;
    for (size_t i = 0; i < offset && text[i]; i++) {
        if (text[i] == '\n')
            (*line)++, *column = 0;
        else
            (*column)++;
    }
}

int yaml_doc_load_text(YamlDoc *d, const char *text, size_t len, const char *name) {
    memset(d, 0, sizeof *d);
    yaml_parser_t parser;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int ok = yaml_parser_load(&parser, &d->doc);
    if (!ok) {
        size_t line = parser.problem_mark.line, column = parser.problem_mark.column;
        if (parser.error == YAML_READER_ERROR)
            offset_position(text, parser.problem_offset, &line, &column);
        err_set("%s:%zu:%zu: invalid YAML: %s%s%s", name, line + 1, column + 1,
                parser.problem ? parser.problem : "syntax error", parser.context ? " " : "",
                parser.context ? parser.context : "");
    }
    yaml_parser_delete(&parser);
    if (!ok) return -1;
    d->loaded = true;
    d->path = xstrdup(name);
    yaml_node_t *root = yaml_document_get_root_node(&d->doc);
    if (root && root->type != YAML_MAPPING_NODE) {
        int line = yaml_node_line(root);
        yaml_doc_free(d);
        return err_set("%s:%d: expected a mapping of keys (key: value) at the top level", name,
                       line);
    }
    return 0;
}

int yaml_doc_load(YamlDoc *d, const char *path) {
    memset(d, 0, sizeof *d);
    char *text;
    size_t len;
    if (read_file(path, &text, &len) != 0) return -1;
    int rc = yaml_doc_load_text(d, text, len, path);
    free(text);
    return rc;
}

void yaml_doc_free(YamlDoc *d) {
    if (d->loaded) yaml_document_delete(&d->doc);
    free(d->path);
    memset(d, 0, sizeof *d);
}

yaml_node_t *yaml_doc_root(YamlDoc *d) {
    return d->loaded ? yaml_document_get_root_node(&d->doc) : NULL;
}

int yaml_node_line(const yaml_node_t *n) {
    return (int)n->start_mark.line + 1;
}

yaml_node_t *yaml_map_get(YamlDoc *d, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(&d->doc, p->key);
        if (k && k->type == YAML_SCALAR_NODE && strcmp((char *)k->data.scalar.value, key) == 0)
            return yaml_document_get_node(&d->doc, p->value);
    }
    return NULL;
}

bool yaml_scalar_is_null(const yaml_node_t *n) {
    if (!n || n->type != YAML_SCALAR_NODE) return false;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *s = (const char *)n->data.scalar.value;
    return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
           strcmp(s, "NULL") == 0;
}

int yaml_text_to_bool(const char *s, bool *out) {
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(s, yes[i]) == 0) return *out = true, 0;
        if (strcasecmp(s, no[i]) == 0) return *out = false, 0;
    }
    return -1;
}

int yaml_text_to_int(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

int yaml_text_to_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

json_t *yaml_text_to_json(const char *text) {
    if (!*text || strcmp(text, "~") == 0 || strcmp(text, "null") == 0 ||
        strcmp(text, "Null") == 0 || strcmp(text, "NULL") == 0)
        return json_null();
    bool b;
    int64_t i;
    double f;
    if (yaml_text_to_bool(text, &b) == 0) return json_boolean(b);
    if (yaml_text_to_int(text, &i) == 0) return json_integer(i);
    if (yaml_text_to_double(text, &f) == 0) return json_real(f);
    return json_string(text);
}

json_t *yaml_node_to_json(YamlDoc *d, yaml_node_t *n) {
    if (n->type == YAML_SCALAR_NODE) {
        const char *text = (const char *)n->data.scalar.value;
        if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return json_string(text);
        return yaml_text_to_json(text);
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        json_t *arr = json_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++) {
            json_t *v = yaml_node_to_json(d, yaml_document_get_node(&d->doc, *it));
            if (!v) {
                json_decref(arr);
                return NULL;
            }
            json_array_append_new(arr, v);
        }
        return arr;
    }
    json_t *obj = json_object();
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&d->doc, p->key);
        if (!k || k->type != YAML_SCALAR_NODE) {
            json_decref(obj);
            err_set("%s:%d: expected a key name", d->path, yaml_node_line(k ? k : n));
            return NULL;
        }
        json_t *v = yaml_node_to_json(d, yaml_document_get_node(&d->doc, p->value));
        if (!v) {
            json_decref(obj);
            return NULL;
        }
        json_object_set_new(obj, (const char *)k->data.scalar.value, v);
    }
    return obj;
}
