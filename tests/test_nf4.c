/* NF4 (QLoRA) quantisation against bitsandbytes itself (tests/fixtures/nf4, made by
 * tools/reference/make_nf4_fixture.py with bitsandbytes' quantize_4bit / dequantize_4bit on the
 * CPU): the packed codes, the plain absmax, the double quantisation's codes, scales and offset,
 * and the dequantised values, each equal bit for bit; torch's float32 mean (the offset) on rows of
 * 6000 and 37 values; the 8-bit dynamic map and its blockwise
 * quantisation (the absmax's second level) on 8192 values of every magnitude. */
#include "common/error.h"
#include "harness.h"
#include "io/safetensors.h"
#include "kernels/cpu/adamw8bit.h"
#include "kernels/cpu/nf4.h"

#include <stdlib.h>
#include <string.h>

static SafetensorsFile fx;

/* The fixture tensor `name` (bytes, numel). */
static const void *tensor(const char *name, size_t *numel) {
    const SafetensorsTensor *t = safetensors_find(&fx, name);
    CHECK(t != NULL, "fixture tensor %s", name);
    if (!t) exit(harness_finish("test_nf4"));
    if (numel) *numel = (size_t)t->numel;
    return t->data;
}

/* How many of n values differ bitwise (floats compared as their 32 bits). */
static size_t bits_differ(const void *a, const void *b, size_t n, size_t width) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp((const char *)a + i * width, (const char *)b + i * width, width) != 0;
    return bad;
}

static void check_case(const char *c) {
    char name[64];
    size_t n, m;
#define T(suffix, count) (snprintf(name, sizeof name, "%s." suffix, c), tensor(name, count))
    const float *w = T("weight", &n);
    const uint8_t *packed = T("packed", &m);
    CHECK(m == (n + 1) / 2, "%s: %zu packed bytes for %zu values", c, m, n);
    size_t blocks = nf4_blocks(n);
    uint8_t *p = malloc(m);
    float *absmax = malloc(blocks * sizeof *absmax);
    nf4_quantize_plain(w, n, p, absmax);
    size_t bad = bits_differ(p, packed, m, 1);
    CHECK(bad == 0, "%s: %zu of %zu packed bytes differ from bitsandbytes'", c, bad, m);
    const float *plain = T("absmax_plain", &m);
    CHECK(m == blocks, "%s: %zu absmax for %zu blocks", c, m, blocks);
    bad = bits_differ(absmax, plain, blocks, 4);
    CHECK(bad == 0, "%s: %zu absmax differ", c, bad);

    Nf4Weight q;
    CHECK(nf4_quantize(&q, w, n) == 0, "%s", err_msg());
    bad = bits_differ(q.packed, packed, (n + 1) / 2, 1);
    CHECK(bad == 0, "%s: double-quantised: %zu packed bytes differ", c, bad);
    const float *offset = T("offset", NULL);
    CHECK(memcmp(&q.offset, offset, 4) == 0, "%s: offset %.9g, bitsandbytes %.9g", c, q.offset,
          *offset);
    const uint8_t *qabsmax = T("qabsmax", &m);
    bad = bits_differ(q.qabsmax, qabsmax, blocks, 1);
    CHECK(m == blocks && bad == 0, "%s: %zu of %zu absmax codes differ", c, bad, blocks);
    const float *absmax2 = T("absmax2", &m);
    CHECK(m == (blocks + NF4_ABSMAX_BLOCK - 1) / NF4_ABSMAX_BLOCK &&
              bits_differ(q.absmax2, absmax2, m, 4) == 0,
          "%s: the %zu second-level absmax differ", c, m);
    const float *dequant = T("dequant", &m);
    float *d = malloc(n * sizeof *d);
    nf4_dequantize(d, &q, 0, n);
    bad = bits_differ(d, dequant, n, 4);
    CHECK(m == n && bad == 0, "%s: %zu of %zu dequantised values differ", c, bad, n);
    /* a range starting mid-block and mid-byte reads the same values */
    size_t first = n / 3 | 1, count = n - first - 1;
    nf4_dequantize(d, &q, first, count);
    CHECK(bits_differ(d, dequant + first, count, 4) == 0, "%s: a partial range differs", c);
#undef T
    nf4_free(&q);
    free(d), free(p), free(absmax);
}

static void check_dynamic_map(void) {
    Q8Map map;
    q8_map_dynamic(&map, true);
    size_t n;
    const float *code = tensor("code.dynamic", &n);
    CHECK(n == 256 && bits_differ(map.value, code, 256, 4) == 0,
          "the signed dynamic map differs from bitsandbytes'");
    const float *x = tensor("dq.input", &n);
    const uint8_t *want = tensor("dq.codes", NULL);
    const float *want_absmax = tensor("dq.absmax", NULL);
    uint8_t *codes = malloc(n);
    float *absmax = malloc((n / 256 + 1) * sizeof *absmax);
    q8_dynamic_quantize(map.value, x, n, 256, codes, absmax);
    size_t bad = bits_differ(codes, want, n, 1);
    CHECK(bad == 0, "blockwise 8-bit: %zu of %zu codes differ from bitsandbytes' CPU library", bad,
          n);
    CHECK(bits_differ(absmax, want_absmax, n / 256, 4) == 0, "blockwise 8-bit: absmax differ");
    free(codes), free(absmax);
}

static void check_mean(const char *input, const char *value) {
    size_t n;
    const float *x = tensor(input, &n), *want = tensor(value, NULL);
    float got = torch_mean_f32(x, n);
    CHECK(memcmp(&got, want, 4) == 0, "%s: mean %.9g, torch %.9g", input, got, *want);
}

int main(void) {
    CHECK(safetensors_open(&fx, harness_source_path("tests/fixtures/nf4/nf4.safetensors")) == 0,
          "%s", err_msg());
    check_dynamic_map();
    check_mean("mean6000.input", "mean6000.value");
    check_mean("mean37.input", "mean37.value");
    check_case("wide");
    check_case("ragged");
    check_case("ties");
    check_case("bf16");
    safetensors_close(&fx);
    return harness_finish("test_nf4");
}
