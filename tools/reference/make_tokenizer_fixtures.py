#!/usr/bin/env python3
"""Reference fixtures for the rlhf.c tokenizer tests.

Run from the repository root (nothing is downloaded; a few seconds):

    tools/reference/.venv/bin/python tools/reference/make_tokenizer_fixtures.py

It BUILDS small tokenizers of each family the C tokenizer supports from the real `tokenizers`
pipeline components (trained with `tokenizers`' own BPE trainer on text from this repository plus
the multilingual paragraphs below), saves each as a Hugging Face tokenizer directory, and records
what `tokenizers` produces for a corpus of hard strings:

  tests/fixtures/tokenizers/corpus.jsonl       one case per line:
        {"text": "..."}                        a string, or
        {"hex": "...", "text": "..."}          raw bytes that are NOT valid UTF-8 (hex), with
                                               "text" = bytes.decode("utf-8", "replace"): the
                                               string Hugging Face tokenizes when such bytes reach
                                               it (Python cannot hold invalid UTF-8; the C encoder
                                               replaces ill-formed sequences the same way, one
                                               U+FFFD per maximal ill-formed subpart).
  tests/fixtures/tokenizers/<name>/
        tokenizer.json, tokenizer_config.json  the tokenizer
        expected.jsonl                         line i answers corpus line i:
            "ids":      encode(text, add_special_tokens=False).ids
            "decoded":  decode(ids, skip_special_tokens=False), absent when == text
            "decoded_skip": decode(ids_special, skip_special_tokens=True), absent when == decoded
          where ids_special = encode(text, add_special_tokens=True).ids, which the script checks
          is always special_prefix + ids + special_suffix (meta.json), so it is not stored.
        decode.jsonl                           extra decode cases on arbitrary id lists (split UTF-8
                                               sequences, byte tokens, special tokens, unknown ids):
                                               {"ids": [...], "skip": bool, "text": "..."}
        meta.json                              versions, prefix/suffix, counts, cross-checks

Every reference comes from `tokenizers.Tokenizer.from_file(<dir>/tokenizer.json)` (what the C code
must equal: it follows tokenizer.json). The script also loads each directory with transformers'
AutoTokenizer and records in meta.json on how many strings transformers agrees (it must agree on
all: each tokenizer_config.json names PreTrainedTokenizerFast, so transformers uses
tokenizer.json as it is).

Deterministic (two runs write byte-identical files): the corpus comes from a seeded
random.Random, the training text from a fixed commit, and nothing depends on BpeTrainer's
hash-ordered tie breaking (see restrict_alphabet and make_components_misc).
"""

import glob
import json
import os
import random
import shutil
import subprocess
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizers")

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# ---------------------------------------------------------------------------------------------
# Training text: the repository's own text files plus multilingual paragraphs, so that the
# vocabularies hold merges for several scripts (and still miss many characters, which is what
# exercises byte fallback / unk).
# ---------------------------------------------------------------------------------------------
MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog. It's what we'll do, isn't it? They're here.",
    "Hello world! Hello, world. HELLO WORLD. hello-world hello_world helloWorld",
    "El rápido zorro marrón salta sobre el perro perezoso. ¿Dónde está la biblioteca?",
    "Le vif renard brun saute par-dessus le chien paresseux. Où est la gare ? Très bien, merci.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Straße, Größe, Fußgänger, Mädchen.",
    "Быстрая коричневая лиса перепрыгивает через ленивую собаку. Привет, мир! Как дела?",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. Καλημέρα κόσμε, ΟΔΟΣ ΣΟΦΙΑΣ.",
    "敏捷的棕色狐狸跳过了懒狗。你好，世界！今天天气很好，我们去公园散步吧。机器学习和深度学习。",
    "素早い茶色の狐が怠惰な犬を飛び越える。こんにちは世界。東京は日本の首都です。カタカナとひらがな。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다. 안녕하세요 세계. 한국어 텍스트입니다.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول. مرحبا بالعالم. كيف حالك اليوم؟",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है। नमस्ते दुनिया। आप कैसे हैं?",
    "Hızlı kahverengi tilki tembel köpeğin üzerinden atlar. İstanbul, Iğdır, ılık.",
    "שועל חום מהיר קופץ מעל הכלב העצלן. שלום עולם.",
    "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ สวัสดีชาวโลก",
    "Con cáo nâu nhanh nhẹn nhảy qua con chó lười. Xin chào thế giới. Tiếng Việt có dấu.",
    "Emoji: 😀 😃 😄 👍 👍🏽 ❤️ 🎉 🚀 👨‍👩‍👧‍👦 🇫🇷 🇯🇵 ✅ ⚠️ 🔥",
    "Numbers: 0 1 2 3 12 123 1234 12345 3.14159 2,718 1e-5 0x1F 100% $42.00 €13 ¥500 ½ ² ³",
    "Code: def f(x): return x ** 2  # square\nfor (int i = 0; i < n; i++) { sum += a[i]; }\n",
    "Math: ∑ ∫ √ ∞ ≈ ≠ ≤ ≥ ∂ ∇ α β γ δ ε θ λ μ π σ φ ω → ⇒ ∀ ∃ ∈ ∉ ⊂ ∪ ∩",
]


# The repository text is read from a fixed commit, so that the vocabularies (and every fixture)
# do not change when the sources do.
TRAIN_REV = "83f61b855664da75aa38f6ccd4f314c93b8ca1ff"


def training_text():
    texts = []
    names = subprocess.run(["git", "-C", ROOT, "ls-tree", "-r", "--name-only", TRAIN_REV],
                           check=True, capture_output=True, text=True).stdout.split("\n")
    keep = [n for n in names if n == "README.md" or n.startswith("tools/reference/") and
            n.endswith(".md") or n.startswith(("src/", "tests/")) and n.endswith((".c", ".h"))]
    for name in sorted(keep):
        text = repo_file(name)
        texts += [para for para in text.split("\n\n") if para.strip()]
    texts += MULTILINGUAL * 20
    return texts


# ---------------------------------------------------------------------------------------------
# The corpus of hard strings.
# ---------------------------------------------------------------------------------------------
SPECIALS_IN_TEXT = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>",
                    "[INST]", "[/INST]", "<|begin_of_text|>", "<|eot_id|>", "<tool_call>",
                    "</tool_call>", "<think>", "</think>", "<|start_header_id|>",
                    "<|end_header_id|>", "<mask>", "<sep>", "<cls>", "[LSTRIP]", "[RSTRIP]",
                    "[WORD]", "Hello World", "<|im_start", "im_end|>", "<s", "/s>"]

WORDS = {
    "latin": ["the", "The", "THE", "hello", "world", "don't", "I'm", "you're", "we've", "she'll",
              "it'd", "IT'S", "They'RE", "rock'n'roll", "naïve", "café", "résumé", "Straße",
              "ﬁnance", "Ǆemal", "ǅ", "ΣΊΣΥΦΟΣ", "İstanbul", "KELVIN", "ſtraße", "x", "aaaa",
              "can't", "o'clock", "'s", "'ll", "'S", "'ſ", "'\u212a", "well-known", "e-mail",
              "snake_case", "camelCase", "ALLCAPS", "Mixed123Case", "tokenizer", "tokenization"],
    "cjk": ["你好", "世界", "机器学习", "東京", "こんにちは", "カタカナ", "ｶﾀｶﾅ", "한국어",
            "안녕하세요", "漢字", "𠀀𠀁", "丂丄", "〆", "ー", "々"],
    "arabic": ["مرحبا", "بالعالم", "العربية", "كتاب", "\u0627\u064e\u0644\u0652", "١٢٣٤٥", "۱۲۳"],
    "indic": ["नमस्ते", "दुनिया", "क्षत्रिय", "हिन्दी", "৳৪৫", "தமிழ்", "ગુજરાતી", "१२३४"],
    "other": ["Привет", "мир", "Ελληνικά", "ς", "σ", "שלום", "สวัสดี", "ქართული", "Հայերեն",
              "ᚠᛇᚻ", "ⲁⲃⲅ", "𐌰𐌱𐌲", "ꯃꯤꯇꯩ", "ᐃᓄᒃᑎᑐᑦ"],
    "emoji": ["😀", "👍", "👍🏽", "👍🏿", "❤️", "❤", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🇫🇷",
              "🇺🇸🇯🇵", "🧑‍🤝‍🧑", "✌🏻", "🤷‍♀️", "1️⃣", "#️⃣", "🫠", "🪿"],
    "combining": ["e\u0301", "a\u0308", "A\u030a", "\u212b", "n\u0303", "o\u0302\u0323",
                  "\u1e9b\u0323", "q\u0307\u0323", "\u1100\u1161\u11a8", "\u0915\u093c",
                  "a\u0301\u0301\u0301", "\u0301", "\u0301abc", "Z\u0351\u0352\u0353",
                  "\u00c5", "\uac00\u11a8", "\u0e01\u0e34\u0e48"],
    "digits": ["0", "7", "42", "123", "1234", "12345", "123456789", "3.14159", "1,000,000",
               "2024-01-31", "12:30:45", "+1 (555) 010-9999", "0.5e-10", "٣", "๓", "Ⅻ",
               "①②③", "½", "²³", "𝟙𝟚𝟛", "１２３", "10⁻³"],
    "punct": [".", ",", "!", "?", "...", "…", "—", "–", "-", "--", "'", "\"", "''", "``", "“", "”",
              "«", "»", "(", ")", "[", "]", "{", "}", "<", ">", "<>", "</", "/>", "|", "||", "::",
              "->", "=>", "#", "@", "$", "%", "^", "&", "*", "**", "_", "__", "~", "`", "\\",
              "\\n", "¿", "¡", "。", "、", "！", "？", "『", "』", "·", "•", "§", "©", "®", "™"],
    "space": [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", " \t ",
              "\u00a0", "\u3000", "\u2009", "\u200b", "\u0085", "\u2028", "\u2029", "\u000b",
              "\u000c", "\u180e", "\ufeff", "\u200d", "\u200c", "      ", " \n\n  ", "\n\t\n"],
    "control": ["\x00", "\x01", "\x07", "\x1b[31m", "\x7f", "\x9f", "\ue000", "\U000f0000",
                "\ufffd", "\ufffe", "\U0010ffff", "\U0001d11e", "\U000e0041"],
}

HAND = [
    "", " ", "  ", "\t", "\n", "\r\n", "\n\n\n", " \n ", "   leading", "trailing   ",
    "  both  ", "\tTab\tseparated\tvalues\t", "Hello world", "Hello  world", "a  b", "a   b",
    "x\n\n  y", " 12345", "12345", "1234567", "don't", "Don'T", "DON'T", "he's", "HE'S",
    "she'll", "SHE'LL", "we're", "they've", "I'm", "I'd", "'s", "'S", "'ſ", "'\u212a", "x'ſ",
    "'", "''", "'''", "' s", "'ss", "'llama", "'mm", "'dd", "hello world\n", "\n\nhello",
    "hello\n\n\nworld", "hello \n world", "hello\t\n\tworld", "a\r\nb\r\nc", "line1\rline2",
    "end with newline\n", "   \n   ", " \u00a0 \u3000 ", "\u0085\u0085", "a\u2028b\u2029c",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\nHi there.<|im_end|>\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>", "<|endoftext|>", "<|endoftext|><|endoftext|>",
    "text<|endoftext|>text", "text <|endoftext|> text", "<|im_start|", "<|im_start|<|im_end|>",
    "<<|im_end|>>", "<|im_start|>", "|im_start|", "< |im_start| >", "<s>", "</s>", "<s>Hello",
    "<s> Hello", "<s>  Hello", "Hello</s>", "Hello </s>", "<s>Hi</s><s>Bye</s>", "<s><s></s>",
    "<unk>", "a<unk>b", "[INST] What is 2+2? [/INST] 4</s>", "[INST]x[/INST]", "[INST][/INST]",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<tool_call>{\"name\": \"f\"}</tool_call>", "<think>\nreasoning\n</think>\n\nanswer",
    "<think></think>", "a [LSTRIP] b", "a  [LSTRIP]  b", "[LSTRIP]", "  [LSTRIP]", "a[RSTRIP]  b",
    "[RSTRIP]   ", "x [WORD] y", "x[WORD]y", "[WORD]", "x_[WORD]", "é[WORD]", "[WORD]1",
    " [LSTRIP][RSTRIP] ", "[RSTRIP] [LSTRIP]", "Hello World", "hello world", "Hello Worlds",
    "say Hello World!", "Hello  World", " <mask> ", "a<mask>b", "<sep><cls>", " <sep> ",
    "naïve café", "e\u0301", "\u00e9", "A\u030a", "\u212b", "\u1100\u1161\u11a8", "각",
    "ﬁ ﬂ ﬃ", "ＡＢＣ１２３", "ｶﾀｶﾅ", "x² y³ H₂O", "Ⅻ ⅻ", "① ② ③", "㍿", "™", "µ", "Å",
    "İstanbul", "ΣΊΣΥΦΟΣ ΟΔΟΣ", "Straße STRASSE ẞ", "ǅemal Ǆ ǆ", "KELVIN \u212a",
    "👨‍👩‍👧‍👦", "👍🏽", "🏳️‍🌈", "🇺🇸", "🇺🇸🇫🇷🇯🇵", "😀😀😀", "👩🏽‍💻 is coding",
    "❤️❤️", "1️⃣2️⃣", "🧑‍🤝‍🧑", "\u200d", "\u200d\u200d", "a\u200db", "\ufeffBOM",
    "नमस्ते दुनिया", "क्षत्रिय", "مرحبا بالعالم", "العربية ١٢٣", "שלום עולם", "你好，世界！",
    "こんにちは、世界。", "안녕하세요 세계", "สวัสดีชาวโลก", "Tiếng Việt", "ქართული ენა",
    "\x00", "a\x00b", "\x00\x00\x00", "\x1b[31mred\x1b[0m", "\x7f", "\ue000\uf8ff",
    "\U0010ffff", "\ufffd", "\ufffd\ufffd", "tab\there", "0", "00", "000", "0000", "00000",
    "3.14159265358979", "1,234,567.89", "$100", "100%", "-42", "+42", "1e10", "0xDEADBEEF",
    "٠١٢٣٤٥٦٧٨٩", "१२३४५", "𝟘𝟙𝟚", "１２３４５", "12:00", "2024-12-31T23:59:59Z",
    "https://example.com/path?query=1&b=2#frag", "user@example.com", "C:\\Windows\\System32",
    "def main():\n    print('hi')\n", "int main(void) {\n\treturn 0;\n}\n",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "<html><body>Hi</body></html>",
    "| a | b |\n|---|---|\n| 1 | 2 |", "- item\n- item\n  - sub", "```python\nx = 1\n```",
    "$$\\frac{a}{b}$$", "∑_{i=1}^{n} i² = n(n+1)(2n+1)/6", "....", "!!!", "???", "?!", "—–-",
    "...hello...", "(parenthesized)", "[bracketed]", "{braced}", "\"quoted\"", "'single'",
    "«guillemets»", "“curly”", "a.b.c", "a,b,c", "a;b;c", "a:b:c", "a/b/c", "a\\b\\c", "a|b|c",
    "ſ", "ſs", "'ſt", "ǰ", "ΐ", "ﬀ",
]


def random_string(rng):
    kinds = list(WORDS)
    weights = [8, 3, 2, 2, 2, 2, 2, 3, 3, 4, 1]
    n = rng.choice([1, 2, 3, 4, 5, 6, 8, 12])
    parts = []
    for _ in range(n):
        r = rng.random()
        if r < 0.08:
            parts.append(rng.choice(SPECIALS_IN_TEXT))
        else:
            kind = rng.choices(kinds, weights)[0]
            parts.append(rng.choice(WORDS[kind]))
        sep = rng.random()
        if sep < 0.55:
            parts.append(" ")
        elif sep < 0.65:
            parts.append(rng.choice(WORDS["space"]))
        elif sep < 0.72:
            parts.append(rng.choice(WORDS["punct"]))
    s = "".join(parts)
    r = rng.random()
    if r < 0.1:
        s = rng.choice(WORDS["space"]) + s
    elif r < 0.2:
        s = s + rng.choice(WORDS["space"])
    return s


def long_strings(rng):
    out = [
        "a" * 1000, "ab" * 300, "the" * 200, " " * 300, "\n" * 100, "\t " * 50, "9" * 600,
        "1234567890" * 30, "😀" * 100, "👨‍👩‍👧‍👦" * 10, "你好世界" * 60, "é" * 200,
        "e\u0301" * 100, "-" * 300, "=" * 80 + "\n" + "=" * 80, "x" * 3000,
        "Supercalifragilisticexpialidocious" * 5, "".join(chr(0x4E00 + i * 7) for i in range(300)),
        "".join(chr(0x0400 + (i % 256)) for i in range(300)),
        " ".join(["word"] * 300), "<|im_end|>" * 30, "<s>" * 30, "<0x41><0xE2>" * 5,
        "▁" * 50, "▁hello▁world", "Ġhello", "ĊĠ",
    ]
    words = sum(WORDS.values(), [])
    for _ in range(4):
        out.append("".join(rng.choice(words) for _ in range(200)))
    return out


def invalid_byte_strings(rng):
    base = [
        b"\xff", b"\xfe\xff", b"\x80", b"abc\x80def", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80",
        b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80",
        b"abc\xe2\x82", b"\xe2\x82abc", b"\xe2\x82\xe2\x82\xac", b"\xf0\x9f\x98", b"\xf0\x9f\x98 ok",
        b"\xc3", b"\xc3\x28", b"\xa0\xa1", b"hello \xff world", b"<s>\xff</s>", b"\xff<|im_end|>",
        b"\xe4\xbd\xa0\xe5\xa5", b"\xc2\xc2\xc2", b"\xe1\x80\xe1\x80\xe1\x80", b"\xf1\x80\x80",
        b"\x00\xff\x00", b"caf\xe9", b"\x93smart quotes\x94", b"\xef\xbb\xbf\xff", b"\xc1\xbf",
        b"\xe0\xa0", b"\xf0\x90\x80", b"\xf4\x8f\xbf", b"\xf4\x8f\xbf\xbf",
    ]
    out = list(base)
    pieces = [b"\x80", b"\xbf", b"\xc3", b"\xe2\x82", b"\xf0\x9f", b"\xff", b"\xfe", b"\xed\xa0"]
    for _ in range(60):
        s = random_string(rng).encode("utf-8")
        for _ in range(rng.randint(1, 3)):
            pos = rng.randint(0, len(s))
            s = s[:pos] + rng.choice(pieces) + s[pos:]
        out.append(s)
    return [b for b in out if not is_valid_utf8(b)]


# Characters where the Unicode data of PCRE2 (Unicode 14) / utf8proc (15) and of tokenizers
# (Oniguruma: 16; Rust: 17; its normalization tables: ~11) disagree -- see
# tools/reference/make_unicode_tables.py.
UNICODE_EDGES = [
    "\U0001E4D0", "\U00031350", "\U0002EBF0", "\U0001E030", "\U00010D50", "\U00011380",
    "\U00016D40", "\u1C89", "\u1C8A", "\uA7CB", "\uA7DC", "\U0001D2C0", "\U00010D40",
    "\U0001E4F0", "\U0001CCF0", "\U00011DE0", "\u0897", "\U0001E08F", "\U00010D69", "\u32FF",
    "\uA7F2", "\U00010781", "\U0001FBF0", "\U00011935\U00011930", "\U00011938", "\u1AC1",
    "\u1DF6", "\U00016FF0", "\u0D3B", "\U00011F00", "\U000116D0",
]


def unicode_edge_strings():
    out = []
    for c in UNICODE_EDGES:
        out += [c, "x" + c + "y", " " + c + c, "1" + c + "2", "A" + c + " B", "e\u0301" + c + "\u0301",
                "a\u0316" + c + "\u0301b", c + "123", "'s" + c, "\u4e2d" + c + "\u6587"]
    return out


def is_valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def repo_file(name):
    return subprocess.run(["git", "-C", ROOT, "show", f"{TRAIN_REV}:{name}"], check=True,
                          capture_output=True, text=True).stdout


def repo_lines(rng):
    names = subprocess.run(["git", "-C", ROOT, "ls-tree", "-r", "--name-only", TRAIN_REV],
                           check=True, capture_output=True, text=True).stdout.split("\n")
    lines = []
    for name in sorted(n for n in names if n.startswith("src/") and n.endswith(".c"))[:20]:
        content = repo_file(name).split("\n")
        for _ in range(6):
            i = rng.randrange(len(content))
            lines.append("\n".join(content[i:i + rng.randint(1, 8)]))
    return lines


def build_corpus():
    rng = random.Random(20240611)
    cases = [{"text": s} for s in HAND]
    cases += [{"text": s} for s in MULTILINGUAL]
    cases += [{"text": s} for s in repo_lines(rng)]
    cases += [{"text": s} for s in long_strings(rng)]
    cases += [{"text": s} for s in unicode_edge_strings()]
    for b in invalid_byte_strings(rng):
        cases.append({"hex": b.hex(), "text": b.decode("utf-8", "replace")})
    while len(cases) < 2200:
        cases.append({"text": random_string(rng)})
    for c in cases:
        c["text"].encode("utf-8")  # no lone surrogates
    return cases


# ---------------------------------------------------------------------------------------------
# Tokenizer construction.
# ---------------------------------------------------------------------------------------------
def added(id_, content, special=True, normalized=False, lstrip=False, rstrip=False,
          single_word=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def restrict_alphabet(texts, keep):
    """The training text with every character outside the `keep` most frequent ones (ties by
    code point) replaced by a space. (BpeTrainer's own limit_alphabet breaks ties in hash
    order, which would make the fixtures change from run to run.)"""
    counts = {}
    for t in texts:
        for ch in t:
            counts[ch] = counts.get(ch, 0) + 1
    kept = set(sorted(counts, key=lambda ch: (-counts[ch], ch))[:keep])
    return ["".join(ch if ch in kept else " " for ch in t) for t in texts]


def train(pre_tokenizer, vocab_size, special_tokens=(), normalizer=None, limit_alphabet=None,
          initial_alphabet=(), byte_fallback=False, unk_token=None):
    tok = Tokenizer(models.BPE(unk_token=unk_token, byte_fallback=byte_fallback))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    kwargs = dict(vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False,
                  initial_alphabet=list(initial_alphabet))
    texts = training_text()
    if limit_alphabet is not None:
        texts = restrict_alphabet(texts, limit_alphabet)
    tok.train_from_iterator(texts, trainers.BpeTrainer(**kwargs))
    return json.loads(tok.to_str())


def bpe_model(j, **overrides):
    m = j["model"]
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": False, "vocab": m["vocab"], "merges": m["merges"]}
    model.update(overrides)
    return model


def legacy_merges(model):
    for a, b in model["merges"]:
        assert " " not in a and " " not in b
    model["merges"] = [f"{a} {b}" for a, b in model["merges"]]


def tokenizer_json(model, added_tokens, normalizer=None, pre_tokenizer=None, post_processor=None,
                   decoder=None):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
            "post_processor": post_processor, "decoder": decoder, "model": model}


def template(single, specials):
    """TemplateProcessing with `single` a list of special-token names and "$A"."""
    items = []
    for s in single:
        if s == "$A":
            items.append({"Sequence": {"id": "A", "type_id": 0}})
        else:
            items.append({"SpecialToken": {"id": s, "type_id": 0}})
    pair = items + [{"Sequence": {"id": "B", "type_id": 1}}]
    return {"type": "TemplateProcessing", "single": items, "pair": pair,
            "special_tokens": {name: {"id": name, "ids": [i], "tokens": [name]}
                               for name, i in specials.items()}}


def append_added(model, specs):
    """Added tokens with ids after the model vocab, in order: specs = [(content, kwargs)]."""
    next_id = len(model["vocab"])
    out = []
    for content, kw in specs:
        if content in model["vocab"]:
            out.append(added(model["vocab"][content], content, **kw))
        else:
            out.append(added(next_id, content, **kw))
            next_id += 1
    return out


BYTELEVEL_DECODER = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                     "use_regex": True}
SP_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
BYTES = [f"<0x{i:02X}>" for i in range(256)]


def make_qwen2():
    split = {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated",
             "invert": False}
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
          "use_regex": False}
    j = train(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_REGEX), "isolated"),
                                       pre_tokenizers.ByteLevel(False, use_regex=False)]),
              3000, normalizer=normalizers.NFC(),
              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    model = bpe_model(j, continuing_subword_prefix="", end_of_word_suffix="")
    specs = [("<|endoftext|>", {}), ("<|im_start|>", {}), ("<|im_end|>", {}),
             ("<tool_call>", {"special": False}), ("</tool_call>", {"special": False}),
             ("<think>", {"special": False}), ("</think>", {"special": False})]
    tj = tokenizer_json(model, append_added(model, specs), {"type": "NFC"},
                        {"type": "Sequence", "pretokenizers": [split, bl]}, dict(bl),
                        dict(bl))
    cfg = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
           "unk_token": None}
    return tj, cfg


def make_llama3():
    split = {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated",
             "invert": False}
    j = train(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_REGEX), "isolated"),
                                       pre_tokenizers.ByteLevel(False, use_regex=False)]),
              3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    model = bpe_model(j, ignore_merges=True)
    # tiktoken-converted vocabularies hold whole words that the merge table would split
    # differently; add such words (no merge produces them) so that ignore_merges matters.
    extra = ["Ġwonderful", "Ġtokenizer", "Ġtokenization", "Ġhello", "Ġworld", "hello", "world",
             "Ġquick", "Ġbrown", "Ġthe", "ĠThe", "Ġnaïve", "Ġsupercalifragilistic", "Ġlazy",
             "ĠHello", "ĠWorld", "Hello", "World", "Ġdon", "Ġfox", "Ġdog", "ing", "Ġing"]
    for w in extra:
        w = w.replace("ï", "Ã¯")
        if w not in model["vocab"]:
            model["vocab"][w] = len(model["vocab"])
    legacy_merges(model)
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
             "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
             "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    added_tokens = append_added(model, [(n, {}) for n in names])
    bos = added_tokens[0]["id"]
    post = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        template(["<|begin_of_text|>", "$A"], {"<|begin_of_text|>": bos})]}
    tj = tokenizer_json(model, added_tokens, None,
                        {"type": "Sequence", "pretokenizers": [
                            split, {"type": "ByteLevel", "add_prefix_space": False,
                                    "trim_offsets": True, "use_regex": False}]},
                        post, dict(BYTELEVEL_DECODER))
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    return tj, cfg


def make_smollm():
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<file_sep>"]
    j = train(pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                       pre_tokenizers.ByteLevel(False, use_regex=True)]),
              2500, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    model = bpe_model(j, continuing_subword_prefix="", end_of_word_suffix="")
    legacy_merges(model)
    added_tokens = [added(model["vocab"][s], s) for s in specials]
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
          "use_regex": True}
    tj = tokenizer_json(model, added_tokens, None,
                        {"type": "Sequence", "pretokenizers": [
                            {"type": "Digits", "individual_digits": True}, bl]},
                        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                         "use_regex": True},
                        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                         "use_regex": True})
    cfg = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>"}
    return tj, cfg


def make_bytelevel_misc():
    """Byte-level with the less common components: NFKC + Lowercase + a Regex Replace
    normalizer, ByteLevel(add_prefix_space) with the built-in GPT-2 regex after a Split with
    another behaviour, a two-sided template, and added tokens with every matching flag."""
    norm = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                 normalizers.Replace(Regex(r"[0-9]{4,}"), "#")])
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split("-", "merged_with_previous"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    j = train(pre, 2500, normalizer=norm, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    model = bpe_model(j)
    specs = [("<|bos|>", {}), ("<|eos|>", {}),
             ("[LSTRIP]", {"lstrip": True}), ("[RSTRIP]", {"rstrip": True}),
             ("[WORD]", {"single_word": True}),
             ("Hello World", {"special": False, "normalized": True}),
             ("<mask>", {"lstrip": True, "rstrip": True, "special": True}),
             ("<sep>", {"special": False, "normalized": False, "single_word": True,
                        "rstrip": True})]
    added_tokens = append_added(model, specs)
    ids = {t["content"]: t["id"] for t in added_tokens}
    tj = tokenizer_json(
        model, added_tokens,
        {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Lowercase"},
            {"type": "Replace", "pattern": {"Regex": "[0-9]{4,}"}, "content": "#"}]},
        {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithPrevious",
             "invert": False},
            {"type": "Split", "pattern": {"Regex": r"\p{Han}"}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
             "use_regex": True}]},
        template(["<|bos|>", "$A", "<|eos|>"], {"<|bos|>": ids["<|bos|>"],
                                                "<|eos|>": ids["<|eos|>"]}),
        dict(BYTELEVEL_DECODER))
    cfg = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "mask_token": "<mask>"}
    return tj, cfg


def sp_train(vocab_size, limit_alphabet, byte_tokens):
    specials = ["<unk>", "<s>", "</s>"] + byte_tokens
    j = train(pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
              vocab_size, special_tokens=specials, limit_alphabet=limit_alphabet,
              byte_fallback=True, unk_token="<unk>")
    return j


def make_llama2_legacy():
    j = sp_train(2500, 250, BYTES)
    model = bpe_model(j, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    legacy_merges(model)
    added_tokens = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")]
    tj = tokenizer_json(model, added_tokens,
                        {"type": "Sequence", "normalizers": [
                            {"type": "Prepend", "prepend": "\u2581"},
                            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
                        None, template(["<s>", "$A"], {"<s>": 1}), SP_DECODER)
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": True}
    return tj, cfg


def make_mistral_first():
    j = sp_train(2500, 250, BYTES)
    model = bpe_model(j, unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    specs = [("<unk>", {}), ("<s>", {}), ("</s>", {}), ("[INST]", {}), ("[/INST]", {})]
    added_tokens = append_added(model, specs)
    tj = tokenizer_json(model, added_tokens, None,
                        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                         "split": False},
                        template(["<s>", "$A"], {"<s>": 1}), SP_DECODER)
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": False}
    return tj, cfg


def make_sp_misc():
    """SP-style with a split Metaspace(always), NFKD + StripAccents + Strip normalizers, byte
    tokens only for
    ASCII (other unknown characters become <unk>, not fused), the Metaspace decoder, legacy
    merges, and a two-sided template."""
    j = sp_train(2000, 150, BYTES[:128])
    model = bpe_model(j, unk_token="<unk>", fuse_unk=False, byte_fallback=True)
    # A few ASCII characters must be missing from the vocabulary so that their byte tokens are
    # used (the trainer puts every character of its alphabet in the vocabulary).
    for ch in ["~", "`", "^"]:
        if ch in model["vocab"]:
            tid = model["vocab"].pop(ch)
            model["merges"] = [m for m in model["merges"]
                               if ch not in m[0] and ch not in m[1]]
            for k in [k for k in model["vocab"] if ch in k]:
                model["vocab"].pop(k)
            del tid
    # re-number the vocabulary densely, keeping its order
    order = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    model["vocab"] = {k: i for i, (k, _) in enumerate(order)}
    legacy_merges(model)
    specs = [("<unk>", {}), ("<s>", {}), ("</s>", {}),
             ("[LSTRIP]", {"lstrip": True, "special": False, "normalized": False}),
             ("[RSTRIP]", {"rstrip": True, "special": True}),
             ("[WORD]", {"single_word": True, "special": False, "normalized": True}),
             ("<cls>", {"special": True, "normalized": True})]
    added_tokens = append_added(model, specs)
    tj = tokenizer_json(model, added_tokens,
                        {"type": "Sequence", "normalizers": [
                            {"type": "NFKD"}, {"type": "StripAccents"},
                            {"type": "Strip", "strip_left": False, "strip_right": True}]},
                        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                         "split": True},
                        template(["<s>", "$A", "</s>"], {"<s>": 1, "</s>": 2}),
                        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                         "split": True})
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    return tj, cfg


def make_components_misc():
    """The remaining components: NFD, Strip (both sides), a String Replace normalizer,
    WhitespaceSplit, Digits (runs), an inverted Split with \\w, Metaspace("first", split) after
    a normalizer that can remove the leading characters, BPE with continuing_subword_prefix and
    end_of_word_suffix, a template whose special token has two ids, and a decoder chain of
    String Replaces, Metaspace, Fuse and Strip."""
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"},
        {"type": "Digits", "individual_digits": False},
        {"type": "Split", "pattern": {"Regex": r"\w+|[^\w\s]+"}, "behavior": "Removed",
         "invert": True},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}]}
    # BpeTrainer assigns the ids of "##x" symbols in hash order (fixtures would change from run
    # to run), so the prefix/suffix model is derived from a plain one: every token t also as
    # "##t", "t</w>", "##t</w>", and every merge (a, b) for each of those forms.
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(Regex(r"\w+|[^\w\s]+"), "removed", invert=True),
        pre_tokenizers.Metaspace(prepend_scheme="first", split=True)])
    tok.train_from_iterator(restrict_alphabet(training_text(), 300), trainers.BpeTrainer(
        vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    plain = json.loads(tok.to_str())["model"]
    vocab = {}
    for t, _ in sorted(plain["vocab"].items(), key=lambda kv: kv[1]):
        forms = [t] if t in ("<unk>", "<s>", "</s>") else [t, "##" + t, t + "</w>", "##" + t + "</w>"]
        for f in forms:
            vocab.setdefault(f, len(vocab))
    merges = []
    for a, b in plain["merges"]:
        merges += [[a, "##" + b], ["##" + a, "##" + b], [a, "##" + b + "</w>"],
                   ["##" + a, "##" + b + "</w>"]]
    j = {"model": {"vocab": vocab, "merges": merges}}
    model = bpe_model(j, unk_token="<unk>", fuse_unk=True, continuing_subword_prefix="##",
                      end_of_word_suffix="</w>")
    legacy_merges(model)
    added_tokens = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")]
    post = template(["<s>", "$A", "</s>"], {"<s>": 1, "</s>": 2})
    post["special_tokens"]["</s>"]["ids"] = [2, 1]
    post["special_tokens"]["</s>"]["tokens"] = ["</s>", "<s>"]
    tj = tokenizer_json(
        model, added_tokens,
        {"type": "Sequence", "normalizers": [
            {"type": "NFD"}, {"type": "Strip", "strip_left": True, "strip_right": True},
            {"type": "Replace", "pattern": {"String": "  "}, "content": " "}]},
        pre, post,
        {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "</w>"}, "content": " "},
            {"type": "Replace", "pattern": {"String": "##"}, "content": ""},
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
             "split": True},
            {"type": "Fuse"},
            # (tokenizers panics in Strip with stop > 0 on an empty token, so only start here)
            {"type": "Strip", "content": " ", "start": 2, "stop": 0}]})
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    return tj, cfg


TOKENIZERS = {
    "qwen2_bytelevel": make_qwen2,
    "llama3_bytelevel": make_llama3,
    "smollm_bytelevel": make_smollm,
    "bytelevel_misc": make_bytelevel_misc,
    "llama2_sp_legacy": make_llama2_legacy,
    "mistral_sp_first": make_mistral_first,
    "sp_misc": make_sp_misc,
    "components_misc": make_components_misc,
}


# ---------------------------------------------------------------------------------------------
# Recording.
# ---------------------------------------------------------------------------------------------
def dump_line(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def decode_cases(tok, rng, vocab_size, n_total):
    """Arbitrary id lists: random ids (including special and byte tokens), and prefixes of real
    encodings cut in the middle of multi-byte characters, plus an out-of-range id."""
    cases = []
    for i in range(120):
        n = rng.randint(0, 12)
        ids = [rng.randrange(n_total) for _ in range(n)]
        if i % 10 == 0:
            ids.append(n_total + 5)  # unknown id: skipped by tokenizers
        cases.append(ids)
    for s in ["你好世界😀👍🏽", "naïve café €", "मराठी 🇫🇷", "<s>Hi</s> <|im_end|>x"]:
        ids = tok.encode(s, add_special_tokens=False).ids
        for cut in range(1, len(ids)):
            cases.append(ids[:cut])
            cases.append(ids[cut:])
    out = []
    for ids in cases:
        for skip in (False, True):
            out.append({"ids": ids, "skip": skip, "text": tok.decode(ids, skip_special_tokens=skip)})
    return out


def transformers_agreement(dirpath, tok, corpus):
    try:
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(dirpath)
    except Exception as e:  # recorded, not fatal: the reference is `tokenizers`
        return {"error": repr(e)}
    agree = 0
    for c in corpus:
        a = tok.encode(c["text"], add_special_tokens=True).ids
        b = hf(c["text"], add_special_tokens=True)["input_ids"]
        d1 = tok.decode(a, skip_special_tokens=True)
        d2 = hf.decode(b, skip_special_tokens=True)
        agree += (a == b and d1 == d2)
    return {"strings": len(corpus), "agree": agree, "class": type(hf).__name__}


def main():
    import transformers

    os.makedirs(OUT, exist_ok=True)
    for name in TOKENIZERS:
        if os.path.isdir(os.path.join(OUT, name)):
            shutil.rmtree(os.path.join(OUT, name))
    corpus = build_corpus()
    with open(os.path.join(OUT, "corpus.jsonl"), "w", encoding="utf-8") as fp:
        for c in corpus:
            fp.write(dump_line(c) + "\n")

    summary = []
    for name, make in TOKENIZERS.items():
        tj, cfg = make()
        d = os.path.join(OUT, name)
        os.makedirs(d)
        path = os.path.join(d, "tokenizer.json")
        with open(path, "w", encoding="utf-8") as fp:
            json.dump(tj, fp, ensure_ascii=False, indent=None, separators=(",", ":"))
            fp.write("\n")
        tok = Tokenizer.from_file(path)
        # the ids written in added_tokens are the ids tokenizers assigns
        for t in tj["added_tokens"]:
            assert tok.token_to_id(t["content"]) == t["id"], (name, t)
        cfg_full = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096,
                    "clean_up_tokenization_spaces": False,
                    "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                             for t in tj["added_tokens"]}}
        cfg_full.update(cfg)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as fp:
            json.dump(cfg_full, fp, ensure_ascii=False, indent=2)
            fp.write("\n")

        # ids_sp == prefix + ids + suffix, the same prefix/suffix for every string
        probe = tok.encode("hello", add_special_tokens=False).ids
        probe_sp = tok.encode("hello", add_special_tokens=True).ids
        k = next(i for i in range(len(probe_sp)) if probe_sp[i:i + len(probe)] == probe)
        prefix, suffix = probe_sp[:k], probe_sp[k + len(probe):]
        n_tokens = 0
        with open(os.path.join(d, "expected.jsonl"), "w", encoding="utf-8") as fp:
            for c in corpus:
                text = c["text"]
                ids = tok.encode(text, add_special_tokens=False).ids
                ids_sp = tok.encode(text, add_special_tokens=True).ids
                n_tokens += len(ids)
                assert ids_sp == prefix + ids + suffix, (name, text)
                rec = {"ids": ids}
                dec = tok.decode(ids, skip_special_tokens=False)
                dec_skip = tok.decode(ids_sp, skip_special_tokens=True)
                if dec != text:
                    rec["decoded"] = dec
                if dec_skip != dec:
                    rec["decoded_skip"] = dec_skip
                fp.write(dump_line(rec) + "\n")

        rng = random.Random(7)
        n_total = tok.get_vocab_size(with_added_tokens=True)
        dcases = decode_cases(tok, rng, tok.get_vocab_size(with_added_tokens=False), n_total)
        with open(os.path.join(d, "decode.jsonl"), "w", encoding="utf-8") as fp:
            for c in dcases:
                fp.write(dump_line(c) + "\n")

        agreement = transformers_agreement(d, tok, corpus)
        meta = {"name": name, "tokenizers_version": tokenizers.__version__,
                "transformers_version": transformers.__version__,
                "special_prefix": prefix, "special_suffix": suffix,
                "strings": len(corpus), "tokens": n_tokens, "decode_cases": len(dcases),
                "vocab_size": tok.get_vocab_size(with_added_tokens=False),
                "size_with_added": n_total, "transformers_agreement": agreement}
        with open(os.path.join(d, "meta.json"), "w", encoding="utf-8") as fp:
            json.dump(meta, fp, ensure_ascii=False, indent=2)
            fp.write("\n")
        summary.append(meta)
        print(f"{name:20s} vocab {meta['vocab_size']:5d}  {len(corpus)} strings, {n_tokens} tokens,"
              f" prefix {prefix} suffix {suffix}, transformers {agreement}")
    total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(OUT, "**"), recursive=True)
                if os.path.isfile(p))
    print(f"total fixture size {total / 1e6:.2f} MB")


if __name__ == "__main__":
    sys.exit(main())
