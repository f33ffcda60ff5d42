/* rlhf tokenize --tokenizer DIR (--text STR | --file FILE.jsonl) [--decode] [--no-special]
 *               [--skip-special] [--split-special]
 * Encodes text to token ids (or, with --decode, ids to text) with a tokenizer directory (as
 * AutoTokenizer loads it) or a tokenizer.json file, printing JSON. */
#include "cli/commands.h"

#include "common/error.h"
#include "common/fileio.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char tokenize_usage[] =
    "usage: rlhf tokenize --tokenizer DIR (--text STR | --file FILE.jsonl) [--decode]\n"
    "                     [--no-special] [--skip-special] [--split-special]\n"
    "\n"
    "Encodes text with the tokenizer of DIR, as transformers' AutoTokenizer loads it (its\n"
    "tokenizer.json, tokenizer_config.json and config.json), or with a tokenizer.json file as\n"
    "it is, and prints the ids as a JSON array. With --file, each line {\"text\": \"...\"}\n"
    "gives one line {\"ids\": [...]}.\n"
    "Special tokens are added as the tokenizer's post-processor says (like transformers'\n"
    "tokenizer(text)); --no-special leaves them out. --split-special encodes special tokens\n"
    "written in the text (\"<|im_start|>\") as ordinary text (transformers'\n"
    "split_special_tokens).\n"
    "\n"
    "With --decode the input is ids instead: --text '[1, 2, 3]', or lines {\"ids\": [...]}\n"
    "(or bare arrays); the text is printed as a JSON string (a line {\"text\": \"...\"} per\n"
    "input line). --skip-special leaves special tokens out of the text.\n";

/* Prints s (len bytes of UTF-8) as a JSON string. */
static int print_json_string(FILE *fp, const char *s, size_t len) {
    json_t *j = json_stringn_nocheck(s, len);
    if (!j) return -1;
    int rc = json_dumpf(j, fp, JSON_ENCODE_ANY);
    json_decref(j);
    return rc;
}

static void print_ids(FILE *fp, const int32_t *ids, size_t n) {
    fputc('[', fp);
    for (size_t i = 0; i < n; i++)
        fprintf(fp, i ? ", %d" : "%d", ids[i]);
    fputc(']', fp);
}

/* Reads a JSON array of ids (or an object with "ids"). */
static int ids_from_json(const json_t *j, int32_t **ids, size_t *n, const char *where) {
    if (json_is_object(j)) j = json_object_get(j, "ids");
    if (!json_is_array(j)) return err_set("%s: expected a JSON array of token ids", where);
    *n = json_array_size(j);
    *ids = xmalloc((*n ? *n : 1) * sizeof **ids);
    for (size_t i = 0; i < *n; i++) {
        const json_t *v = json_array_get(j, i);
        if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN ||
            json_integer_value(v) > INT32_MAX) {
            free(*ids);
            return err_set("%s: ids[%zu]: expected an integer", where, i);
        }
        (*ids)[i] = (int32_t)json_integer_value(v);
    }
    return 0;
}

static int decode_one(const Tokenizer *tok, const json_t *j, bool skip, bool wrap,
                      const char *where) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (ids_from_json(j, &ids, &n, where) != 0) return -1;
    char *text;
    size_t len;
    int rc = tokenizer_decode(tok, ids, n, skip, &text, &len);
    free(ids);
    if (rc != 0) return err_prefix("%s", where);
    if (wrap) fputs("{\"text\": ", stdout);
    print_json_string(stdout, text, len);
    puts(wrap ? "}" : "");
    free(text);
    return 0;
}

static int encode_one(const Tokenizer *tok, const char *text, size_t len, bool special, bool wrap,
                      const char *where) {
    int32_t *ids;
    size_t n;
    if (tokenizer_encode(tok, text, len, special, &ids, &n) != 0) return err_prefix("%s", where);
    if (wrap) fputs("{\"ids\": ", stdout);
    print_ids(stdout, ids, n);
    puts(wrap ? "}" : "");
    free(ids);
    return 0;
}

static int run_file(const Tokenizer *tok, const char *path, bool decode, bool special, bool skip) {
    char *data;
    size_t len;
    if (read_file(path, &data, &len) != 0) return -1;
    int rc = 0;
    size_t line_no = 0;
    for (char *line = data; rc == 0 && line < data + len;) {
        char *end = memchr(line, '\n', (size_t)(data + len - line));
        if (!end) end = data + len;
        line_no++;
        char where[4200];
        snprintf(where, sizeof where, "%s:%zu", path, line_no);
        size_t n = (size_t)(end - line);
        bool blank = true;
        for (size_t i = 0; i < n && blank; i++)
            blank = line[i] == ' ' || line[i] == '\t' || line[i] == '\r';
        if (!blank) {
            json_error_t jerr;
            json_t *j = json_loadb(line, n, JSON_ALLOW_NUL, &jerr);
            if (!j) {
                rc = err_set("%s: invalid JSON (column %d): %s", where, jerr.column, jerr.text);
                break;
            }
            if (decode) {
                rc = decode_one(tok, j, skip, true, where);
            } else {
                const json_t *t = json_object_get(j, "text");
                if (!json_is_string(t))
                    rc = err_set("%s: key 'text': expected a string", where);
                else
                    rc = encode_one(tok, json_string_value(t), json_string_length(t), special, true,
                                    where);
            }
            json_decref(j);
        }
        line = end + 1;
    }
    free(data);
    return rc;
}

static int tokenize_local(int argc, char **argv) {
    const char *dir = NULL, *text = NULL, *file = NULL;
    bool decode = false, special = true, skip = false, split_special = false;
    for (int i = 0; i < argc; i++) {
        int r;
        if ((r = cli_option(argc, argv, &i, "--tokenizer", &dir)) ||
            (r = cli_option(argc, argv, &i, "--text", &text)) ||
            (r = cli_option(argc, argv, &i, "--file", &file))) {
            if (r < 0) return CLI_EXIT_USAGE;
            continue;
        }
        if (strcmp(argv[i], "--decode") == 0) {
            decode = true;
        } else if (strcmp(argv[i], "--no-special") == 0) {
            special = false;
        } else if (strcmp(argv[i], "--skip-special") == 0) {
            skip = true;
        } else if (strcmp(argv[i], "--split-special") == 0) {
            split_special = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(tokenize_usage, stdout);
            return CLI_EXIT_OK;
        } else {
            fprintf(stderr, "rlhf tokenize: unknown argument \"%s\"\n%s", argv[i], tokenize_usage);
            return CLI_EXIT_USAGE;
        }
    }
    if (!dir || (!text == !file)) {
        fprintf(stderr, "rlhf tokenize: --tokenizer and one of --text or --file are required\n%s",
                tokenize_usage);
        return CLI_EXIT_USAGE;
    }
    Tokenizer tok;
    if (tokenizer_load(&tok, dir) != 0) return cli_fail(err_msg());
    if (split_special) tokenizer_set_encode_special_tokens(&tok, true);
    int rc = 0;
    if (file) {
        rc = run_file(&tok, file, decode, special, skip);
    } else if (decode) {
        json_error_t jerr;
        json_t *j = json_loads(text, 0, &jerr);
        if (!j)
            rc = err_set("--text: invalid JSON (column %d): %s", jerr.column, jerr.text);
        else
            rc = decode_one(&tok, j, skip, false, "--text");
        json_decref(j);
    } else {
        rc = encode_one(&tok, text, strlen(text), special, false, "--text");
    }
    tokenizer_free(&tok);
    if (rc != 0) return cli_fail(err_msg());
    if (fflush(stdout) != 0) return cli_fail("writing to standard output failed");
    return CLI_EXIT_OK;
}

/* The command with its directory options made local first (a Hub id: the HF cache, or a
 * download). */
int cli_tokenize(int argc, char **argv) {
    static const CliDirOption dirs[] = {{"--tokenizer", HUB_TOKENIZER}};
    char **args;
    if (cli_resolve_options(argc, argv, dirs, 1, &args) != 0) return cli_fail(err_msg());
    int rc = tokenize_local(argc, args);
    cli_free_resolved(argc, args, argv);
    return rc;
}
