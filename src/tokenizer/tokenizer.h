/* Hugging Face tokenizers (tokenizer.json) in C: byte-level BPE (GPT-2, Llama 3, Qwen2/2.5/3,
 * SmolLM) and SentencePiece-style BPE (Llama 2, Mistral, TinyLlama), giving the ids the
 * `tokenizers` library gives for the same file and text.
 *
 * The pipeline is the library's: added tokens are split out of the raw text, each remaining
 * segment is normalized, added tokens marked "normalized" are split out of the result, the
 * pre-tokenizer cuts the segments into pieces, BPE turns each piece into ids, and the
 * post-processor adds the special tokens of its template. Decoding maps ids back to token
 * strings and runs the decoder chain.
 *
 * What is followed, and what is not:
 *  - A tokenizer.json file is followed as it is (as `tokenizers`' Tokenizer.from_file does). A
 *    directory is loaded as transformers 5's AutoTokenizer loads it: tokenizer_config.json and
 *    config.json beside tokenizer.json pick the class, and the class may rebuild parts of the
 *    file (LlamaTokenizer's Metaspace for Llama 2 / Mistral / Phi-3 folders, add_bos_token /
 *    add_eos_token, split_special_tokens): auto_tokenizer.h lists what is reproduced.
 *  - "truncation" and "padding" are ignored: the trainer truncates and pads by itself.
 *  - Any component we do not implement makes tokenizer_load fail with a message naming it; we
 *    never guess.
 *  - Input that is not valid UTF-8 is first decoded the way Python's
 *    bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do: each maximal
 *    ill-formed subsequence becomes one U+FFFD. (Hugging Face only ever sees such a string.)
 *
 * Thread safety: after tokenizer_load, any number of threads may call tokenizer_encode /
 * tokenizer_decode on the same Tokenizer at once. */
#ifndef RLHF_TOKENIZER_TOKENIZER_H
#define RLHF_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct TokenizerImpl TokenizerImpl;

typedef struct {
    TokenizerImpl *impl;
    int32_t vocab_size; /* entries in the model's vocabulary */
    int32_t n_tokens;   /* len(tokenizer): vocab + added tokens that are not in the vocab */
} Tokenizer;

/* Loads `path`: a tokenizer.json file, or a directory holding one (and maybe
 * tokenizer_config.json and config.json, read as AutoTokenizer reads them). Returns 0, or -1 with
 * an error naming the file and the key that is wrong or unsupported; *tok is then left empty (and
 * tokenizer_free on it is harmless). */
int tokenizer_load(Tokenizer *tok, const char *path);

/* How a directory is loaded beyond its files. */
typedef struct {
    int legacy; /* -1: tokenizer_config.json's "legacy"; 0 or 1: that value instead (Axolotl's
                   tokenizer_legacy, passed to from_pretrained as legacy=) */
    const char *tokenizer_class; /* NULL or "AutoTokenizer": the class AutoTokenizer picks; else
                                    the class whose from_pretrained loads the directory (Axolotl's
                                    tokenizer_type): one of tokenizer_load_classes */
} TokenizerLoadOptions;

/* The class names TokenizerLoadOptions.tokenizer_class may give, NULL-terminated. */
extern const char *const tokenizer_load_classes[];

/* tokenizer_load with options (NULL: none). */
int tokenizer_load_options(Tokenizer *tok, const char *path, const TokenizerLoadOptions *opts);

/* Same as tokenizer_load of a tokenizer.json file, from its JSON text in memory; `source`
 * names it in messages. */
int tokenizer_load_json(Tokenizer *tok, const char *json_text, size_t len, const char *source);

void tokenizer_free(Tokenizer *tok);

/* Encodes `len` bytes of `text` (need not be NUL-terminated; may hold NUL bytes). With
 * add_special_tokens the post-processor's template is applied (e.g. BOS for Llama).
 * On success returns 0 and stores a malloc'd array the caller frees in *ids (non-NULL even
 * when *n is 0). Fails (-1, error set) only when a vocabulary is inconsistent in a way that
 * `tokenizers` would also report at encode time (e.g. unk_token missing from the vocab). */
int tokenizer_encode(const Tokenizer *tok, const char *text, size_t len, bool add_special_tokens,
                     int32_t **ids, size_t *n);

/* Decodes ids to text. Ids that are not in the vocabulary are skipped (as `tokenizers` does);
 * with skip_special_tokens, added tokens marked special are left out. Stores a malloc'd,
 * NUL-terminated string in *text and its length (the text may itself hold NUL bytes) in *len
 * (len may be NULL). Returns 0, or -1 with an error. */
int tokenizer_decode(const Tokenizer *tok, const int32_t *ids, size_t n, bool skip_special_tokens,
                     char **text, size_t *len);

/* The id of a token string (added tokens first, then the model vocabulary), or -1. */
int32_t tokenizer_token_to_id(const Tokenizer *tok, const char *token, size_t len);

/* The string of an id, or NULL: an added token's content (its normalized form when it is matched
 * normalized, as tokenizers' id_to_token gives), else the model vocabulary entry. *len gets its
 * length when len is non-NULL. The pointer lives as long as the tokenizer. */
const char *tokenizer_id_to_token(const Tokenizer *tok, int32_t id, size_t *len);

/* Whether id is an added token marked special. */
bool tokenizer_is_special(const Tokenizer *tok, int32_t id);

/* With `on`, special added tokens are no longer split out of the text: "<|im_start|>" in user
 * text is encoded as ordinary text (tokenizers' encode_special_tokens; transformers'
 * split_special_tokens). Off after loading. Set it before encoding, not while other threads
 * encode with the same tokenizer. */
void tokenizer_set_encode_special_tokens(Tokenizer *tok, bool on);

#endif
