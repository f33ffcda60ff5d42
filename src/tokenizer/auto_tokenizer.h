/* What transformers 5's AutoTokenizer builds from a tokenizer directory, beyond tokenizer.json
 * (a room-internal interface of src/tokenizer; tokenizer_load calls it for a directory).
 *
 * AutoTokenizer does not always use tokenizer.json as it is. The class it picks (from
 * tokenizer_config.json's "tokenizer_class", config.json's "tokenizer_class" and "model_type")
 * may rebuild the backend from the file's vocabulary and merges, and every class reads some
 * keys of tokenizer_config.json. What is reproduced here, as a rewrite of the parsed
 * tokenizer.json before its components are built:
 *
 *  1. LlamaTokenizer (Llama 2, Mistral v0.1-v0.3, Phi-3 tokenizer folders, TinyLlama...):
 *     models/llama/tokenization_llama.py keeps only the vocabulary and merges and builds
 *       model         BPE(fuse_unk=True, byte_fallback=True), no unk_token, no dropout
 *       normalizer    none (the file's Prepend("▁") + Replace(" ", "▁") are dropped)
 *       pre_tokenizer Metaspace("▁", prepend_scheme, split=False), prepend_scheme =
 *                     add_prefix_space (default true) ? (legacy (default false) ? "always" :
 *                     "first") : "never"
 *       decoder       Replace("▁", " "), ByteFallback, Fuse, and Strip(" ", 1, 0) when
 *                     add_prefix_space
 *       added tokens  tokenizer_config.json's "added_tokens_decoder" when it has one, else
 *                     the file's
 *     The declared class is not used (the file is read as it is) when tokenizer.json contains
 *     the text "ByteLevel" (Llama 3 style files that still declare LlamaTokenizer), or when
 *     config.json's model_type is registered to a backend class or listed as having a wrong
 *     Hub class (mistral, mixtral, phi3, ...: auto_tokenizer_llama_overridden).
 *  2. Every class: tokenizer_config.json's add_bos_token / add_eos_token are dropped when a
 *     tokenizer.json is present (PreTrainedTokenizerBase._from_pretrained pops them), so the
 *     file's post-processor stays: a Phi-3 folder gets no BOS, a Llama 2 folder its <s>.
 *     An explicit class (Axolotl's tokenizer_type: getattr(transformers, name).from_pretrained)
 *     skips the choice: LlamaTokenizer(Fast) always rebuilds, even a byte-level file;
 *     PreTrainedTokenizerFast / TokenizersBackend read the file as it is.
 *  3. "split_special_tokens": true makes the special added tokens ordinary text
 *     (tokenizer_set_encode_special_tokens).
 *
 *  4. Special tokens tokenizer_config.json names (bos_token ... mask_token, extra_special_tokens,
 *     additional_special_tokens) that are not added tokens are added, special, with the ids
 *     tokenizers gives new tokens (TokenizersBackend.__init__).
 *
 * Not reproduced (the file is used as it is): other classes that rebuild the backend
 * (GPT2Tokenizer, Qwen2Tokenizer and GemmaTokenizer build what their published files hold;
 * CodeLlamaTokenizer, T5Tokenizer, ...), and remote code (auto_map). */
#ifndef RLHF_TOKENIZER_AUTO_TOKENIZER_H
#define RLHF_TOKENIZER_AUTO_TOKENIZER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* What a tokenizer directory says beyond tokenizer.json (each may be NULL: file absent). */
typedef struct {
    const json_t *tokenizer_config;  /* tokenizer_config.json */
    const json_t *model_config;      /* config.json */
    int legacy;                      /* -1: as tokenizer_config.json says; else an override */
    const char *forced_class;        /* NULL: AutoTokenizer's choice; else the class whose
                                        from_pretrained is called (tokenizer_load_classes) */
    const char *config_source;       /* tokenizer_config.json's path, for messages */
    const char *model_config_source; /* config.json's path, for messages */
} AutoTokenizerInputs;

/* Rewrites `root` (the parsed tokenizer.json, whose text is json_text) in place into what
 * AutoTokenizer builds from it with `in`. *split_special_tokens gets tokenizer_config.json's
 * "split_special_tokens" (false when absent). Returns 0, or -1 with an error naming the key of
 * tokenizer_config.json / config.json that has the wrong type or names an unknown token. */
int auto_tokenizer_rewrite(json_t *root, const char *json_text, size_t len,
                           const AutoTokenizerInputs *in, bool *split_special_tokens);

/* The model types of auto_tokenizer_classes.c (sorted by strcmp). */
extern const char *const auto_tokenizer_llama_overridden[];
extern const size_t auto_tokenizer_llama_overridden_count;

#endif
