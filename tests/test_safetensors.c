/* safetensors: the writer's layout (hf-formats.md §1.4), reading back what it wrote, and
 * one clear error for each way a file can be malformed (§1.1). */
#include "common/error.h"
#include "common/fileio.h"
#include "harness.h"
#include "io/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_layout_and_round_trip(void) {
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {0x3f80, 0x4000, 0xc040};
    int64_t c[2] = {-7, 1LL << 40};
    SafetensorsWriteTensor t[] = {
        {"model.layers.10.w", ST_F32, 2, {2, 3}, a},
        {"model.layers.2.w", ST_F32, 1, {0}, a},
        {"bf", ST_BF16, 1, {3}, b},
        {"ints", ST_I64, 1, {2}, c},
        {"scalar", ST_F32, 0, {0}, a},
    };
    const char *path = harness_tmp_path("round.safetensors");
    CHECK(safetensors_write(path, t, 5) == 0, "write: %s", err_msg());

    char *data;
    size_t len;
    CHECK(read_file(path, &data, &len) == 0, "read back");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | (uint8_t)data[i];
    CHECK(n % 8 == 0, "header length %llu is a multiple of 8", (unsigned long long)n);
    /* Layout order: dtype descending (I64 > F32 > BF16), then names byte-wise. */
    const char *expect =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"ints\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
        "\"model.layers.10.w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[16,40]},"
        "\"model.layers.2.w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[40,40]},"
        "\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[40,44]},"
        "\"bf\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[44,50]}}";
    size_t elen = strlen(expect);
    CHECK(n >= elen && memcmp(data + 8, expect, elen) == 0, "header:\n%.*s", (int)n, data + 8);
    for (size_t i = elen; i < n; i++)
        CHECK(data[8 + i] == ' ', "padding is spaces");
    CHECK(len == 8 + n + 50, "file length %zu", len);
    free(data);

    SafetensorsFile f;
    CHECK(safetensors_open(&f, path) == 0, "open: %s", err_msg());
    CHECK(f.n_tensors == 5, "5 tensors");
    const SafetensorsTensor *w = safetensors_find(&f, "model.layers.10.w");
    float got[6];
    CHECK(w && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3, "shape");
    CHECK(w && safetensors_to_f32(w, got) == 0 && memcmp(got, a, sizeof a) == 0, "f32 data");
    const SafetensorsTensor *bt = safetensors_find(&f, "bf");
    CHECK(bt && safetensors_to_f32(bt, got) == 0 && got[0] == 1.0f && got[1] == 2.0f &&
              got[2] == -3.0f,
          "bf16 -> f32");
    const SafetensorsTensor *it = safetensors_find(&f, "ints");
    CHECK(it && memcmp(it->data, c, sizeof c) == 0, "i64 data");
    CHECK(it && safetensors_to_f32(it, got) != 0, "integer tensors do not convert to f32");
    const SafetensorsTensor *s = safetensors_find(&f, "scalar");
    CHECK(s && s->ndim == 0 && s->numel == 1, "scalar");
    CHECK(safetensors_find(&f, "absent") == NULL, "absent name");
    safetensors_close(&f);

    SafetensorsWriteTensor dup[] = {{"x", ST_F32, 1, {1}, a}, {"x", ST_F32, 1, {1}, a}};
    CHECK(safetensors_write(harness_tmp_path("dup.safetensors"), dup, 2) != 0,
          "duplicate names refused");
    CHECK(!file_exists(harness_tmp_path("dup.safetensors")), "nothing written for a refused file");
}

/* Writes 8-byte length + header + `data_bytes` zero bytes, then expects open() to fail with
 * a message containing `want`. */
static void expect_bad(const char *name, const char *header, uint64_t header_len, size_t data_bytes,
                       const char *want) {
    size_t hl = strlen(header);
    size_t total = 8 + hl + data_bytes;
    uint8_t *buf = calloc(1, total + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(header_len >> (8 * i));
    memcpy(buf + 8, header, hl);
    const char *path = harness_tmp_path(name);
    harness_write_file(path, buf, total);
    free(buf);
    SafetensorsFile f;
    int rc = safetensors_open(&f, path);
    CHECK(rc != 0, "%s: expected an error", name);
    if (rc == 0) {
        safetensors_close(&f);
        return;
    }
    CHECK(strstr(err_msg(), want) != NULL, "%s: message \"%s\" lacks \"%s\"", name, err_msg(),
          want);
    CHECK(strstr(err_msg(), path) != NULL, "%s: message names the file", name);
}

static void test_malformed(void) {
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    uint64_t okn = strlen(ok);
    expect_bad("truncated-data.st", ok, okn, 4, "truncated");
    expect_bad("trailing.st", ok, okn, 12, "trailing");
    expect_bad("header-past-end.st", ok, okn + 100, 8, "past the end");
    expect_bad("huge-header.st", ok, 200000000ull, 8, "100 MB");
    expect_bad("empty-header.st", "", 0, 0, "start with '{'");
    expect_bad("not-json.st", "{\"a\":", 5, 0, "invalid JSON");
    expect_bad("not-object.st", "[1]", 3, 0, "start with '{'");
    const char *dtype = "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_bad("dtype.st", dtype, strlen(dtype), 8, "unknown dtype \"F33\"");
    const char *fp8 = "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    expect_bad("fp8.st", fp8, strlen(fp8), 2, "not supported");
    const char *size = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
    expect_bad("size-mismatch.st", size, strlen(size), 8, "needs 12");
    const char *past = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[100,108]}}";
    expect_bad("offsets-past-end.st", past, strlen(past), 16, "begin at 100");
    const char *overlap = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                          "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
    expect_bad("overlap.st", overlap, strlen(overlap), 8, "without gaps or overlaps");
    const char *dup = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
    expect_bad("duplicate.st", dup, strlen(dup), 8, "duplicate");
    const char *meta = "{\"__metadata__\":{\"format\":1}}";
    expect_bad("metadata.st", meta, strlen(meta), 0, "not a string");
    const char *extra = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}";
    expect_bad("extra-key.st", extra, strlen(extra), 4, "exactly the keys");
    const char *neg = "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}";
    expect_bad("negative-dim.st", neg, strlen(neg), 4, "non-negative");
    SafetensorsFile f;
    harness_write_file(harness_tmp_path("short.st"), "\x10\0\0\0", 4);
    CHECK(safetensors_open(&f, harness_tmp_path("short.st")) != 0 && strstr(err_msg(), "too short"),
          "4-byte file: %s", err_msg());
    CHECK(safetensors_open(&f, harness_tmp_path("does-not-exist")) != 0 &&
              strstr(err_msg(), "cannot open"),
          "missing file: %s", err_msg());
}

int main(void) {
    test_layout_and_round_trip();
    test_malformed();
    return harness_finish("test_safetensors");
}
