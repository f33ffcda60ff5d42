#!/usr/bin/env python3
"""Generates src/tokenizer/unicode_tables.c: where the Unicode data of the libraries the C
tokenizer uses (PCRE2 10.42: Unicode 14; utf8proc 2.8: Unicode 15) differs from what the
`tokenizers` library does, code point by code point.

Run from the repository root (needs a C compiler, pkg-config, libpcre2-dev and libutf8proc-dev;
a few seconds):

    tools/reference/.venv/bin/python tools/reference/make_unicode_tables.py

`tokenizers` is asked directly, over every code point:
  * regex classes (Oniguruma, Unicode 16 in tokenizers 0.23): \\p{L}, \\p{N}, \\p{M}, \\p{Nd},
    \\p{Han} -- the characters PCRE2 does not put in the same class are added to it;
  * Rust's char::is_numeric (Digits pre-tokenizer; Unicode 17) -- additions to utf8proc's N*;
  * Rust's char::to_lowercase (Lowercase normalizer) -- mappings utf8proc does not have;
  * NFC/NFD/NFKC/NFKD (the unicode-normalization-alignments crate, about Unicode 11): the
    characters it does not know (no decomposition, combining class 0, composes with nothing)
    but utf8proc does. The C normalizer leaves them as they are and normalizes the text between
    them separately, which is exactly what an unknown starter does to normalization;
  * StripAccents (the same crate's is_combining_mark): marks utf8proc knows and it does not.
The C side is read from the very libraries the build links (a small program compiled here).
"""

import json
import os
import subprocess
import sys
import tempfile

from tokenizers import normalizers, pre_tokenizers, Regex

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "src", "tokenizer", "unicode_tables.c")
CHECK_OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "unicode_classes.json")
# Regex classes whose membership the C tests check against Oniguruma's, range by range.
CHECKED_PATTERNS = [r"\w", r"\W", r"\s", r"\d", r"\p{L}", r"\p{N}", r"\p{M}", r"\p{Nd}",
                    r"\p{Han}", r"[^\s\p{L}\p{N}]", r"\P{L}", r"[\w]", r"[^\w\s]"]
SEP = 1  # U+0001 separates characters in batched calls; it is its own everything
CPS = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF) and c != SEP]

C_HELPER = r"""
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>
static int ok(int c) { return !(c >= 0xD800 && c <= 0xDFFF) && c != 1; }
static void set(const char *name, const char *pat, int first) {
    int e; PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &e, &eo, NULL);
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    printf("%s\"%s\":[", first ? "" : ",", name);
    int f = 1;
    for (int c = 0; c < 0x110000; c++) {
        if (!ok(c)) continue;
        utf8proc_uint8_t b[4];
        int n = (int)utf8proc_encode_char(c, b);
        if (pcre2_match(re, b, n, 0, PCRE2_ANCHORED, md, NULL) >= 0) { printf(f ? "%d" : ",%d", c); f = 0; }
    }
    printf("]");
}
static void decomp(const char *name, int opt) {
    printf(",\"%s\":{", name);
    int f = 1;
    for (int c = 0; c < 0x110000; c++) {
        if (!ok(c)) continue;
        utf8proc_int32_t out[32];
        utf8proc_ssize_t n = utf8proc_decompose_char(c, out, 32, opt | UTF8PROC_STABLE, NULL);
        if (n == 1 && out[0] == c) continue;
        printf(f ? "\"%d\":[" : ",\"%d\":[", c); f = 0;
        for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", out[i]);
        printf("]");
    }
    printf("}");
}
int main(void) {
    printf("{");
    set("L", "\\p{L}", 1); set("N", "\\p{N}", 0); set("M", "\\p{M}", 0); set("Nd", "\\p{Nd}", 0);
    set("Han", "\\p{sc:Han}", 0);
    const char *lists[] = {"numeric", "mark", "ccc"};
    for (int k = 0; k < 3; k++) {
        printf(",\"%s\":[", lists[k]);
        int f = 1;
        for (int c = 0; c < 0x110000; c++) {
            if (!ok(c)) continue;
            int cat = utf8proc_category(c), hit;
            if (k == 0) hit = cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
            else if (k == 1) hit = cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME;
            else hit = utf8proc_get_property(c)->combining_class != 0;
            if (hit) { printf(f ? "%d" : ",%d", c); f = 0; }
        }
        printf("]");
    }
    printf(",\"lower\":{");
    int f = 1;
    for (int c = 0; c < 0x110000; c++) {
        if (!ok(c)) continue;
        int l = utf8proc_tolower(c);
        if (l != c) { printf(f ? "\"%d\":%d" : ",\"%d\":%d", c, l); f = 0; }
    }
    printf("}");
    decomp("NFD", UTF8PROC_DECOMPOSE);
    decomp("NFKD", UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    printf("}\n");
    return 0;
}
"""


def c_side():
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "u.c"), os.path.join(tmp, "u")
        with open(src, "w") as fp:
            fp.write(C_HELPER)
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libpcre2-8", "libutf8proc"],
                               check=True, capture_output=True, text=True).stdout.split()
        subprocess.run(["cc", "-O2", src, "-o", exe] + flags, check=True)
        return json.loads(subprocess.run([exe], check=True, capture_output=True,
                                         text=True).stdout)


def onig_class(pattern):
    """Code points a one-character regex class matches in tokenizers (Oniguruma)."""
    s = "".join(chr(c) for c in CPS)
    gaps = bytearray(len(CPS))
    for _, (a, b) in pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(s):
        for i in range(a, b):
            gaps[i] = 1
    return {CPS[i] for i in range(len(CPS)) if not gaps[i]}


def per_char(fn, chunk=20000):
    """fn applied to every code point on its own (batched with U+0001 between them)."""
    out = {}
    for i in range(0, len(CPS), chunk):
        part = CPS[i:i + chunk]
        res = fn("\x01".join(chr(c) for c in part)).split("\x01")
        assert len(res) == len(part)
        for c, v in zip(part, res):
            out[c] = v
    return out


def hf_side():
    hf = {name: onig_class(p) for name, p in
          [("L", r"\p{L}"), ("N", r"\p{N}"), ("M", r"\p{M}"), ("Nd", r"\p{Nd}"),
           ("Han", r"\p{Han}")]}
    digits = pre_tokenizers.Digits(individual_digits=True)
    hf["numeric"] = {c for c in CPS if len(digits.pre_tokenize_str("a" + chr(c) + "a")) == 3}
    low = per_char(normalizers.Lowercase().normalize_str)
    hf["lower"] = {c: v for c, v in low.items() if v != chr(c)}
    for name, n in [("NFD", normalizers.NFD()), ("NFKD", normalizers.NFKD())]:
        hf[name] = {c: v for c, v in per_char(n.normalize_str).items() if v != chr(c)}
    strip = per_char(normalizers.StripAccents().normalize_str)
    hf["stripped"] = {c for c, v in strip.items() if v == ""}
    return hf


def ranges(points):
    out = []
    for c in sorted(points):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def main():
    c = c_side()
    hf = hf_side()
    tables = {}
    for name in ["L", "N", "M", "Nd", "Han", "numeric"]:
        extra, missing = hf[name] - set(c[name]), set(c[name]) - hf[name]
        if missing:
            print(f"warning: {name}: {len(missing)} code points the C side has and tokenizers "
                  f"does not (left as they are)", file=sys.stderr)
        tables[name] = ranges(extra)

    # Lowercase: mappings tokenizers (Rust) has that utf8proc lacks (U+0130 is special-cased
    # in the C code).
    c_lower = {int(k): v for k, v in c["lower"].items()}
    lower = []
    for cp, v in sorted(hf["lower"].items()):
        if cp == 0x130:
            continue
        assert len(v) == 1, (hex(cp), v)
        if c_lower.get(cp) != ord(v):
            lower.append((cp, ord(v)))
    extra_low = [cp for cp in c_lower if cp not in hf["lower"]]
    if extra_low:
        print(f"warning: lowercase: utf8proc maps {len(extra_low)} more", file=sys.stderr)

    # Normalization: characters the Rust crate does not know. Canonical forms: a different
    # canonical decomposition, a combining class it lacks (it does not reorder the mark: found
    # by putting U+0345, class 240, before it), or the first character of a composition it
    # lacks (the decomposition of a character it does not decompose).
    unknown = {}
    ccc_c = set(c["ccc"])
    reorder = per_char(lambda s: normalizers.NFD().normalize_str(
        "".join("\u0345" + ch if ch != "\x01" else ch for ch in s)))
    hf_ccc = {cp for cp, v in reorder.items() if v != "\u0345" + chr(cp)}
    for form in ["NFD", "NFKD"]:
        cmap = {int(k): "".join(chr(x) for x in v) for k, v in c[form].items()}
        bad = set()
        for cp in set(cmap) | set(hf[form]):
            if cmap.get(cp, chr(cp)) != hf[form].get(cp, chr(cp)):
                bad.add(cp)
                d = cmap.get(cp)
                if d:
                    bad.add(ord(d[0]))
        bad |= {cp for cp in ccc_c if cp not in hf_ccc and cp != 0x345}
        unknown[form] = ranges(bad)
    marks = ranges(set(c["mark"]) - hf["stripped"])

    def emit(fp, name, rs, comment):
        fp.write(f"/* {comment} */\nconst UnicodeRange {name}[] = {{\n")
        for a, b in rs:
            fp.write(f"    {{0x{a:04X}, 0x{b:04X}}},\n")
        if not rs:
            fp.write("    {0xFFFFFFFF, 0},\n")
        fp.write(f"}};\nconst size_t {name}_count = {len(rs)};\n\n")

    import tokenizers
    with open(OUT, "w") as fp:
        fp.write(f"""/* Generated by tools/reference/make_unicode_tables.py from tokenizers {tokenizers.__version__},
 * PCRE2 and utf8proc as installed; do not edit. Where the Unicode data of PCRE2 / utf8proc
 * differs from what `tokenizers` does (see the script). */
#include "tokenizer/tok_internal.h"

""")
        emit(fp, "unicode_extra_letter", tables["L"], "\\p{L} in Oniguruma, not in PCRE2")
        emit(fp, "unicode_extra_number", tables["N"], "\\p{N} in Oniguruma, not in PCRE2")
        emit(fp, "unicode_extra_mark", tables["M"], "\\p{M} in Oniguruma, not in PCRE2")
        emit(fp, "unicode_extra_decimal", tables["Nd"], "\\p{Nd} in Oniguruma, not in PCRE2")
        emit(fp, "unicode_extra_han", tables["Han"], "\\p{Han} in Oniguruma, not \\p{sc:Han} in PCRE2")
        emit(fp, "unicode_extra_numeric", tables["numeric"],
             "Rust char::is_numeric, not N* in utf8proc")
        emit(fp, "unicode_nfd_unknown", unknown["NFD"],
             "unknown to tokenizers' NFC/NFD (left as they are), known to utf8proc")
        emit(fp, "unicode_nfkd_unknown", unknown["NFKD"],
             "unknown to tokenizers' NFKC/NFKD (left as they are), known to utf8proc")
        emit(fp, "unicode_marks_kept", marks,
             "marks utf8proc knows that tokenizers' StripAccents keeps")
        fp.write("/* Rust char::to_lowercase mappings utf8proc lacks */\n"
                 "const UnicodePair unicode_extra_lower[] = {\n")
        for a, b in lower:
            fp.write(f"    {{0x{a:04X}, 0x{b:04X}}},\n")
        if not lower:
            fp.write("    {0xFFFFFFFF, 0},\n")
        fp.write(f"}};\nconst size_t unicode_extra_lower_count = {len(lower)};\n")
    try:  # keep the generated file in the project's format
        subprocess.run(["clang-format", "-i", OUT], check=True)
    except (OSError, subprocess.CalledProcessError):
        print("clang-format not run", file=sys.stderr)
    for k, v in list(tables.items()) + [("nfd", unknown["NFD"]), ("nfkd", unknown["NFKD"]),
                                        ("marks", marks)]:
        print(f"{k}: {len(v)} ranges")
    print(f"lower: {len(lower)} mappings; wrote {os.path.relpath(OUT, ROOT)}")

    # What the C tests check: each class as Oniguruma has it, and Rust's is_numeric, as ranges
    # of code points (U+0001 and the surrogates are not asked about).
    check = {"patterns": {p: ranges(onig_class(p)) for p in CHECKED_PATTERNS},
             "numeric": ranges(hf["numeric"]), "tokenizers_version": tokenizers.__version__}
    with open(CHECK_OUT, "w") as fp:
        json.dump(check, fp, separators=(",", ":"))
        fp.write("\n")
    print(f"wrote {os.path.relpath(CHECK_OUT, ROOT)}")


if __name__ == "__main__":
    main()
