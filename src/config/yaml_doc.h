/* A YAML file loaded with libyaml as one document, and typed reads of its scalars with the
 * position of every node, so that messages can say "cfg.yaml:12: key 'lr': ...".
 * Scalars follow YAML 1.1 as PyYAML's safe_load reads them (what Axolotl users' files are
 * written for): true/false/yes/no/on/off are booleans; ~, null and an empty value are null. */
#ifndef RLHF_CONFIG_YAML_DOC_H
#define RLHF_CONFIG_YAML_DOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

typedef struct {
    char *path;
    yaml_document_t doc;
    bool loaded;
} YamlDoc;

/* Loads the first document of `path`. Returns 0, or -1 with "path:line:column: what". An empty
 * file is an empty mapping. */
int yaml_doc_load(YamlDoc *d, const char *path);

/* The same for a document held in memory (len bytes of text; JSON is YAML's flow syntax and
 * reads the same way); `name` stands for the file in messages ("name:line:column: what"). */
int yaml_doc_load_text(YamlDoc *d, const char *text, size_t len, const char *name);
void yaml_doc_free(YamlDoc *d);

/* The root node (a mapping), or NULL when the document is empty. */
yaml_node_t *yaml_doc_root(YamlDoc *d);

/* 1-based line of a node. */
int yaml_node_line(const yaml_node_t *n);

/* The value of `key` in a mapping node, or NULL. */
yaml_node_t *yaml_map_get(YamlDoc *d, yaml_node_t *map, const char *key);

bool yaml_scalar_is_null(const yaml_node_t *n);

/* A node as JSON: mappings become objects, sequences arrays; a plain scalar becomes null,
 * a boolean, an integer or a real when it reads as one (YAML 1.1, as PyYAML does), else a
 * string; quoted scalars stay strings. Returns a new reference, or NULL (error set) for a key
 * that is not a string. */
#include <jansson.h>
json_t *yaml_node_to_json(YamlDoc *d, yaml_node_t *n);

/* A plain (unquoted) scalar's text as JSON by the same rules: null, a boolean, an integer, a
 * real, else a string (a command-line override's value). Returns a new reference. */
json_t *yaml_text_to_json(const char *text);

/* Scalar conversions of a scalar's text (also used for command-line override values).
 * Return 0, or -1 when the text is not of that type. */
int yaml_text_to_bool(const char *s, bool *out);
int yaml_text_to_int(const char *s, int64_t *out);
int yaml_text_to_double(const char *s, double *out);

#endif
