#!/usr/bin/env python3
"""Tokenizer fixtures whose reference is transformers' AutoTokenizer, not the `tokenizers` file.

Run from the repository root (nothing is downloaded; about a minute, most of it training):

    /work/venv-ref/bin/python tools/reference/make_auto_tokenizer_fixtures.py

transformers 5 does not always use tokenizer.json as it is: a folder whose tokenizer_config.json
declares LlamaTokenizer (Llama 2, Mistral, Phi-3) is rebuilt with Metaspace(prepend_scheme
"first"/"always"/"never") instead of the file's Prepend/Replace normalizer, add_bos_token /
add_eos_token are ignored (the file's post-processor stays), split_special_tokens is read, and config.json's
model_type can veto the declared class (src/tokenizer/auto_tokenizer.h). TRL and Axolotl train on
AutoTokenizer's ids, so these fixtures record what AutoTokenizer.from_pretrained(<dir>) gives.

It writes, in the format of make_tokenizer_fixtures.py (tests/test_tokenizer_parity.c reads both):

  tests/fixtures/tokenizers/corpus_auto.jsonl   the strings (meta.json "corpus" names it):
        hand-written Llama/Phi-3 cases (leading, repeated and trailing spaces, newlines, "▁",
        special tokens inside text with the spaces around them, digits), Phi-3 and Llama 2 chat
        renderings (Phi-3's template through apply_chat_template), the hand-written,
        multilingual, unicode-edge and invalid-UTF-8 strings of the other corpus, and random
        strings
  tests/fixtures/tokenizers/<name>/
        tokenizer.json, tokenizer_config.json[, config.json]
        expected.jsonl   ids = encode(text, add_special_tokens=False); "decoded" =
                         decode(ids); "decoded_skip" = decode(ids with specials,
                         skip_special_tokens=True) (absent when equal to the previous one)
        decode.jsonl     decode of arbitrary id lists, both skip settings
        overrides.json   (phi3_auto, mistral_auto_modeltype) ids of the first 120 strings
                         loaded as Axolotl's tokenizer_legacy / tokenizer_type load them
                         (from_pretrained(dir, legacy=True), PreTrainedTokenizerFast /
                         LlamaTokenizerFast.from_pretrained(dir))
        meta.json        versions, the special prefix/suffix, sizes, and how many strings the
                         raw tokenizer.json (tokenizers.Tokenizer.from_file) encodes otherwise:
                         what the fixture tests beyond make_tokenizer_fixtures.py's

The tokenizers are trained with make_tokenizer_fixtures.sp_train (deterministic).
"""

import json
import os
import random
import sys

import tokenizers
import transformers
from tokenizers import Tokenizer
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tokenizer_fixtures as base  # noqa: E402

OUT = base.OUT
CORPUS = "corpus_auto.jsonl"

PREPEND_REPLACE = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "\u2581"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
METASPACE_FIRST = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                   "split": False}
PHI3_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + "
    "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + "
    "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}")
PHI3_ADDED = [("<unk>", {}), ("<s>", {}), ("</s>", {"special": False, "rstrip": True}),
              ("<|endoftext|>", {}), ("<|assistant|>", {"rstrip": True}),
              ("<|system|>", {"rstrip": True}), ("<|end|>", {"rstrip": True}),
              ("<|user|>", {"rstrip": True})]

LLAMA_CASES = [
    "Hello", " Hello", "  Hello", "   Hello world", "Hello ", "Hello  ", "a  b   c    d",
    " ", "  ", "\n", " \n ", "\n\nHello\n\n", "line one\nline two\n\n  indented\n\tTab",
    "4", " 4", "44", "2024-01-31", "3.14159 and 2,718", "x=1+2", "\u2581", "\u2581x", " \u2581x",
    "\u2581\u2581", "x\u2581y", "You are a helpful assistant.", "[INST] Hi [/INST]",
    "<s>Hello</s>", "<s> Hello</s> ", " <s>x", "x<s>", "x </s> y", "x</s>\n\ny", "</s></s>",
    "<|system|>\nYou are<|end|>\n<|user|>\n4+4<|end|>\n<|assistant|>\n",
    "<|user|> spaced <|end|>  <|assistant|>   ", "<|endoftext|>", " <|endoftext|> x",
    "<|end|>\n\n\nx", "<unk>", "a<unk>b", "<|placeholder1|>", "<|user|>",
    "naïve café 日本語 🤗 ∑ x² ‖ ẞ", "\u00a0non-breaking\u00a0space", "\u3000ideographic",
    "emoji 👩‍👩‍👧‍👦 flags 🇫🇷🇯🇵", "\x00nul\x00", "trailing newline\n", "\r\nwindows\r\n",
    "a<pad>b", "<pad><pad> x", "x <mask>y", "x<mask> y", "<img>\n<img>", "see <extra1>.",
    "<extra1><pad></s>", " </s> ",
]

CONVERSATIONS = [
    ([{"role": "user", "content": "What is 4+4?"}], True),
    ([{"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "Hi there!"}, {"role": "assistant", "content": " Hello! How can I help?"}],
     False),
    ([{"role": "user", "content": "  leading spaces\nand\n\nnewlines  "},
      {"role": "assistant", "content": "Sure:\n- one\n- two"},
      {"role": "user", "content": "日本語で答えて 🤗"}], True),
    ([{"role": "user", "content": "Say <|end|> literally"},
      {"role": "assistant", "content": "</s> and <s> are tokens"}], False),
]


def llama2_chat(conv):
    """Llama 2's [INST] format written out (its template wraps the system prompt in <<SYS>>)."""
    out, system = "", ""
    for m in conv:
        if m["role"] == "system":
            system = f"<<SYS>>\n{m['content']}\n<</SYS>>\n\n"
        elif m["role"] == "user":
            out += f"<s>[INST] {system}{m['content'].strip()} [/INST]"
            system = ""
        else:
            out += f" {m['content'].strip()} </s>"
    return out


def build_corpus(phi3_dir):
    rng = random.Random(20261127)
    hf = AutoTokenizer.from_pretrained(phi3_dir)
    texts = list(LLAMA_CASES)
    for conv, gen in CONVERSATIONS:
        texts.append(hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen))
        texts.append(llama2_chat(conv))
    texts += base.HAND + base.MULTILINGUAL + base.unicode_edge_strings()
    cases = [{"text": s} for s in texts]
    for b in base.invalid_byte_strings(rng)[:20]:
        cases.append({"hex": b.hex(), "text": b.decode("utf-8", "replace")})
    while len(cases) < 600:
        s = base.random_string(rng)
        if rng.random() < 0.3:  # special tokens and runs of spaces inside random text
            pieces = [s[:len(s) // 2], rng.choice(["<|end|>", "</s>", "<s>", "<|user|>\n", "  ",
                                                   " \n ", "\u2581"]), s[len(s) // 2:]]
            s = "".join(pieces)
        cases.append({"text": s})
    for c in cases:
        c["text"].encode("utf-8")
    return cases


def phi3_like():
    """Phi-3-mini's tokenizer.json layout (Prepend/Replace normalizer, no pre-tokenizer, a
    template without special tokens, rstrip chat tokens, </s> not special) and its config."""
    j = base.sp_train(2500, 250, base.BYTES)
    model = base.bpe_model(j, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    base.legacy_merges(model)
    added = base.append_added(model, PHI3_ADDED)
    tj = base.tokenizer_json(model, added, PREPEND_REPLACE, None, base.template(["$A"], {}),
                             base.SP_DECODER)
    cfg = {"tokenizer_class": "LlamaTokenizer", "legacy": False, "add_bos_token": False,
           "add_eos_token": False, "bos_token": "<s>", "eos_token": "<|endoftext|>",
           "pad_token": "<|endoftext|>", "unk_token": "<unk>", "chat_template": PHI3_TEMPLATE,
           "clean_up_tokenization_spaces": False,
           "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                    for t in added}}
    return tj, cfg, None


def llama2_legacy_bos_eos():
    """Llama 2's layout with legacy: true (prepend_scheme "always"); add_bos_token: false and
    add_eos_token: true, which transformers ignores beside a tokenizer.json (the file's <s>
    template stays); no added_tokens_decoder (the file's added tokens); byte tokens missing
    for the lead bytes of most non-Latin characters, which the file's unk_token "<unk>" covers
    and LlamaTokenizer's BPE (no unk_token) drops."""
    # byte tokens only below 0xC8: most characters beyond U+0200 cannot fall back to bytes,
    # and LlamaTokenizer's BPE has no unk_token to put instead
    j = base.sp_train(2500, 250, base.BYTES[:0xC8])
    model = base.bpe_model(j, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    base.legacy_merges(model)
    added = [base.added(0, "<unk>"), base.added(1, "<s>"), base.added(2, "</s>")]
    tj = base.tokenizer_json(model, added, PREPEND_REPLACE, None,
                             base.template(["<s>", "$A"], {"<s>": 1}), base.SP_DECODER)
    cfg = {"tokenizer_class": "LlamaTokenizerFast", "legacy": True, "add_bos_token": False,
           "add_eos_token": True, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
           "clean_up_tokenization_spaces": False}
    return tj, cfg, None


def llama_no_prefix_split():
    """A Metaspace("first") file declared LlamaTokenizer with add_prefix_space: false
    (prepend_scheme "never", no Strip decoder), split_special_tokens, no legacy key, the file's
    <s> template kept (no add_bos_token key), added tokens that differ from the file's."""
    tj, _ = base.make_mistral_first()
    tj["pre_tokenizer"] = METASPACE_FIRST
    # the config's added_tokens_decoder wins over the file's: [INST] strips the spaces on its
    # right there, [/INST] is not special
    dec = {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in tj["added_tokens"]}
    for t in dec.values():
        if t["content"] == "[INST]":
            t["rstrip"] = True
        if t["content"] == "[/INST]":
            t["special"] = False
    cfg = {"tokenizer_class": "LlamaTokenizer", "add_prefix_space": False,
           "split_special_tokens": True, "bos_token": "<s>", "eos_token": "</s>",
           "unk_token": "<unk>", "clean_up_tokenization_spaces": False,
           "added_tokens_decoder": dec}
    return tj, cfg, None


def mistral_model_type():
    """Declared LlamaTokenizer, but config.json's model_type "mistral" makes AutoTokenizer read
    tokenizer.json as it is (a Prepend/Replace normalizer here, so the two differ)."""
    tj, cfg, _ = phi3_like()
    cfg = dict(cfg)
    del cfg["add_bos_token"], cfg["add_eos_token"]
    tj["post_processor"] = base.template(["<s>", "$A"], {"<s>": 1})
    return tj, cfg, {"model_type": "mistral", "architectures": ["MistralForCausalLM"]}


def sp_named_specials():
    """Special tokens the config names but the file's added tokens lack: eos_token left out
    (LlamaTokenizer's default "</s>", a vocabulary entry), pad_token "<pad>" (new), mask_token
    as a serialized AddedToken (lstrip, normalized), a model-specific image_token (dict
    extra_special_tokens) and additional_special_tokens."""
    j = base.sp_train(2500, 250, base.BYTES)
    model = base.bpe_model(j, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    base.legacy_merges(model)
    added = [base.added(0, "<unk>"), base.added(1, "<s>")]
    tj = base.tokenizer_json(model, added, PREPEND_REPLACE, None,
                             base.template(["<s>", "$A"], {"<s>": 1}), base.SP_DECODER)
    cfg = {"tokenizer_class": "LlamaTokenizer", "legacy": False, "bos_token": "<s>",
           "unk_token": "<unk>", "pad_token": "<pad>",
           "mask_token": {"__type": "AddedToken", "content": "<mask>", "lstrip": True,
                          "rstrip": False, "normalized": True, "single_word": False,
                          "special": False},
           "extra_special_tokens": {"image_token": "<img>"},
           "additional_special_tokens": ["<extra1>"], "clean_up_tokenization_spaces": False}
    return tj, cfg, None


def llama3_declared_llama():
    """A byte-level (Llama 3 style) file whose config still declares LlamaTokenizerFast, as
    DeepSeek-R1-Distill-Llama's does: AutoTokenizer reads the file as it is."""
    tj, cfg = base.make_llama3()
    cfg = dict(cfg, tokenizer_class="LlamaTokenizerFast", legacy=False)
    return tj, cfg, None


FIXTURES = {
    "phi3_auto": phi3_like,
    "llama2_auto_legacy": llama2_legacy_bos_eos,
    "llama_auto_noprefix": llama_no_prefix_split,
    "mistral_auto_modeltype": mistral_model_type,
    "llama3_auto_declared_llama": llama3_declared_llama,
    "sp_auto_named_specials": sp_named_specials,
}


def write_json(path, obj, compact=False):
    with open(path, "w", encoding="utf-8") as fp:
        if compact:
            json.dump(obj, fp, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, fp, ensure_ascii=False, indent=2)
        fp.write("\n")


def decode_cases(hf, rng, n_total, corpus_ids):
    cases = []
    for i in range(100):
        ids = [rng.randrange(n_total) for _ in range(rng.randint(0, 12))]
        if i % 10 == 0:
            ids.append(n_total + 5)  # unknown id: skipped
        cases.append(ids)
    for ids in corpus_ids[:40]:  # cut real encodings anywhere, also inside characters
        if len(ids) > 1:
            cut = rng.randrange(1, len(ids))
            cases += [ids[:cut], ids[cut:]]
    return [{"ids": ids, "skip": skip, "text": hf.decode(ids, skip_special_tokens=skip)}
            for ids in cases for skip in (False, True)]


def make_dir(name, make, corpus):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    tj, cfg, model_cfg = make()
    write_json(os.path.join(d, "tokenizer.json"), tj, compact=True)
    write_json(os.path.join(d, "tokenizer_config.json"), cfg)
    if model_cfg:
        write_json(os.path.join(d, "config.json"), model_cfg)
    hf = AutoTokenizer.from_pretrained(d)
    raw = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    probe = hf.encode("hello", add_special_tokens=False)
    probe_sp = hf.encode("hello", add_special_tokens=True)
    k = next(i for i in range(len(probe_sp)) if probe_sp[i:i + len(probe)] == probe)
    prefix, suffix = probe_sp[:k], probe_sp[k + len(probe):]
    n_tokens = differ = 0
    all_ids = []
    with open(os.path.join(d, "expected.jsonl"), "w", encoding="utf-8") as fp:
        for c in corpus:
            text = c["text"]
            ids = hf.encode(text, add_special_tokens=False)
            ids_sp = hf.encode(text, add_special_tokens=True)
            assert ids_sp == prefix + ids + suffix, (name, text)
            differ += raw.encode(text, add_special_tokens=False).ids != ids
            n_tokens += len(ids)
            all_ids.append(ids)
            rec = {"ids": ids}
            dec = hf.decode(ids, skip_special_tokens=False)
            dec_skip = hf.decode(ids_sp, skip_special_tokens=True)
            if dec != text:
                rec["decoded"] = dec
            if dec_skip != dec:
                rec["decoded_skip"] = dec_skip
            fp.write(base.dump_line(rec) + "\n")
    bt = hf.backend_tokenizer
    n_total = bt.get_vocab_size(with_added_tokens=True)
    dcases = decode_cases(hf, random.Random(11), n_total, all_ids)
    with open(os.path.join(d, "decode.jsonl"), "w", encoding="utf-8") as fp:
        for c in dcases:
            fp.write(base.dump_line(c) + "\n")
    meta = {"name": name, "reference": "transformers.AutoTokenizer",
            "class": type(hf).__name__, "corpus": CORPUS,
            "tokenizers_version": tokenizers.__version__,
            "transformers_version": transformers.__version__,
            "special_prefix": prefix, "special_suffix": suffix, "strings": len(corpus),
            "tokens": n_tokens, "decode_cases": len(dcases),
            "vocab_size": bt.get_vocab_size(with_added_tokens=False), "size_with_added": n_total,
            "backend": {"normalizer": str(bt.normalizer), "pre_tokenizer": str(bt.pre_tokenizer),
                        "decoder": str(bt.decoder)},
            "strings_tokenizer_json_encodes_otherwise": differ}
    write_json(os.path.join(d, "meta.json"), meta)
    overrides = OVERRIDES.get(name, []) if len(corpus) >= OVERRIDE_ROWS else []
    if overrides:
        out = []
        for opts, load in overrides:
            hf_o = load(d)
            ids = [hf_o.encode(c["text"], add_special_tokens=False) for c in corpus[:OVERRIDE_ROWS]]
            changed = sum(a != json.loads(b)["ids"] for a, b in
                          zip(ids, open(os.path.join(d, "expected.jsonl"), encoding="utf-8")))
            assert changed > 0, (name, opts)  # the override must matter on these strings
            out.append({"options": opts, "class": type(hf_o).__name__, "changed": changed,
                        "ids": ids})
        with open(os.path.join(d, "overrides.json"), "w", encoding="utf-8") as fp:
            json.dump(out, fp, ensure_ascii=False, separators=(",", ":"))
            fp.write("\n")


# Loads with Axolotl's tokenizer_legacy / tokenizer_type (tokenizer_load_options): the ids of
# the first OVERRIDE_ROWS corpus strings, in <dir>/overrides.json.
OVERRIDE_ROWS = 120
OVERRIDES = {
    "phi3_auto": [
        ({"legacy": True}, lambda d: AutoTokenizer.from_pretrained(d, legacy=True)),
        ({"tokenizer_class": "PreTrainedTokenizerFast"},
         lambda d: transformers.PreTrainedTokenizerFast.from_pretrained(d)),
    ],
    "mistral_auto_modeltype": [
        ({"tokenizer_class": "LlamaTokenizerFast"},
         lambda d: transformers.LlamaTokenizerFast.from_pretrained(d)),
    ],
}


def main():
    phi3_dir = os.path.join(OUT, "phi3_auto")
    make_dir("phi3_auto", phi3_like, [{"text": "x"}])  # the template for the corpus
    corpus = build_corpus(phi3_dir)
    with open(os.path.join(OUT, CORPUS), "w", encoding="utf-8") as fp:
        for c in corpus:
            fp.write(base.dump_line(c) + "\n")
    for name, make in FIXTURES.items():
        make_dir(name, make, corpus)


if __name__ == "__main__":
    sys.exit(main())
