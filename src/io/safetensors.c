#include "io/safetensors.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/float16.h"
#include "common/json_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER_BYTES 100000000ull

static const char *const dtype_names[ST_DTYPE_COUNT] = {
    [ST_BOOL] = "BOOL", [ST_U8] = "U8",     [ST_I8] = "I8",   [ST_I16] = "I16", [ST_U16] = "U16",
    [ST_F16] = "F16",   [ST_BF16] = "BF16", [ST_I32] = "I32", [ST_U32] = "U32", [ST_F32] = "F32",
    [ST_F64] = "F64",   [ST_I64] = "I64",   [ST_U64] = "U64",
};
static const size_t dtype_sizes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = 1, [ST_U8] = 1,   [ST_I8] = 1,  [ST_I16] = 2, [ST_U16] = 2,
    [ST_F16] = 2,  [ST_BF16] = 2, [ST_I32] = 4, [ST_U32] = 4, [ST_F32] = 4,
    [ST_F64] = 8,  [ST_I64] = 8,  [ST_U64] = 8,
};

const char *safetensors_dtype_name(SafetensorsDtype dt) {
    return dtype_names[dt];
}

size_t safetensors_dtype_size(SafetensorsDtype dt) {
    return dtype_sizes[dt];
}

/* Valid safetensors dtypes this engine has no use for: named, so the error says so. */
static const char *const unsupported_dtypes[] = {"F4",          "F6_E2M3",     "F6_E3M2",
                                                 "F8_E5M2",     "F8_E4M3",     "F8_E8M0",
                                                 "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64"};

static int parse_dtype(const char *s, SafetensorsDtype *out) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        if (strcmp(s, dtype_names[i]) == 0) {
            *out = (SafetensorsDtype)i;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof unsupported_dtypes / sizeof *unsupported_dtypes; i++) {
        if (strcmp(s, unsupported_dtypes[i]) == 0)
            return err_set("dtype \"%s\" is valid safetensors but not supported here", s);
    }
    return err_set("unknown dtype \"%s\" (expected one of F32, F16, BF16, F64, I64, I32, I16, I8, "
                   "U8, BOOL, ...)",
                   s);
}

static int parse_tensor_info(const char *name, json_t *info, SafetensorsTensor *t, uint64_t *begin,
                             uint64_t *end) {
    if (!json_is_object(info)) return err_set("tensor \"%s\": expected an object", name);
    if (json_object_size(info) != 3)
        return err_set("tensor \"%s\": expected exactly the keys dtype, shape, data_offsets", name);
    json_t *dtype = json_object_get(info, "dtype");
    json_t *shape = json_object_get(info, "shape");
    json_t *offsets = json_object_get(info, "data_offsets");
    if (!json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offsets))
        return err_set(
            "tensor \"%s\": expected dtype (string), shape (array), data_offsets (array)", name);
    if (parse_dtype(json_string_value(dtype), &t->dtype) != 0)
        return err_prefix("tensor \"%s\"", name);
    size_t ndim = json_array_size(shape);
    if (ndim > SAFETENSORS_MAX_DIMS)
        return err_set("tensor \"%s\": %zu dimensions (at most %d supported)", name, ndim,
                       SAFETENSORS_MAX_DIMS);
    t->ndim = (int)ndim;
    uint64_t numel = 1;
    for (size_t i = 0; i < ndim; i++) {
        int64_t d;
        if (json_as_int64(json_array_get(shape, i), &d) != 0 || d < 0)
            return err_set("tensor \"%s\": shape[%zu] is not a non-negative integer", name, i);
        if (d > 0 && numel > UINT64_MAX / 16 / (uint64_t)d)
            return err_set("tensor \"%s\": shape too large", name);
        numel *= (uint64_t)d;
        t->shape[i] = d;
    }
    int64_t b, e;
    if (json_array_size(offsets) != 2 || json_as_int64(json_array_get(offsets, 0), &b) != 0 ||
        json_as_int64(json_array_get(offsets, 1), &e) != 0 || b < 0 || e < b)
        return err_set("tensor \"%s\": data_offsets must be [begin, end] with 0 <= begin <= end",
                       name);
    uint64_t nbytes = numel * dtype_sizes[t->dtype];
    if ((uint64_t)(e - b) != nbytes)
        return err_set("tensor \"%s\": data_offsets span %lld bytes but %s%s needs %llu", name,
                       (long long)(e - b), dtype_names[t->dtype], ndim ? " of that shape" : "",
                       (unsigned long long)nbytes);
    t->numel = (int64_t)numel;
    t->nbytes = (size_t)nbytes;
    *begin = (uint64_t)b;
    *end = (uint64_t)e;
    return 0;
}

typedef struct {
    uint64_t begin, end;
    size_t index;
} Span;

static int span_cmp(const void *a, const void *b) {
    const Span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Invariants 2-4 on an already mapped file. */
static int parse_header(SafetensorsFile *f, const uint8_t *base, uint64_t header_len,
                        uint64_t file_len) {
    json_t *root;
    if (json_load_text((const char *)base + 8, header_len, "header", &root) != 0) return -1;
    int rc = -1;
    Span *spans = NULL;
    if (!json_is_object(root)) {
        err_set("header: expected a JSON object");
        goto done;
    }
    size_t n = json_object_size(root);
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta) {
        n--;
        const char *k;
        json_t *v;
        if (!json_is_object(meta)) {
            err_set("__metadata__: expected an object of strings");
            goto done;
        }
        json_object_foreach(meta, k, v) {
            if (!json_is_string(v)) {
                err_set("__metadata__: value of \"%s\" is not a string", k);
                goto done;
            }
        }
    }
    f->tensors = xcalloc(n, sizeof *f->tensors);
    spans = xcalloc(n, sizeof *spans);
    size_t i = 0;
    const char *name;
    json_t *info;
    json_object_foreach(root, name, info) {
        if (strcmp(name, "__metadata__") == 0) continue;
        SafetensorsTensor *t = &f->tensors[i];
        t->name = xstrdup(name);
        f->n_tensors = i + 1;
        if (parse_tensor_info(name, info, t, &spans[i].begin, &spans[i].end) != 0) goto done;
        spans[i].index = i;
        i++;
    }
    qsort(spans, n, sizeof *spans, span_cmp);
    uint64_t expect = 0;
    for (i = 0; i < n; i++) {
        if (spans[i].begin != expect) {
            err_set("tensor \"%s\": data_offsets begin at %llu, expected %llu (tensors must tile "
                    "the data buffer without gaps or overlaps)",
                    f->tensors[spans[i].index].name, (unsigned long long)spans[i].begin,
                    (unsigned long long)expect);
            goto done;
        }
        expect = spans[i].end;
    }
    uint64_t data_start = 8 + header_len;
    if (data_start + expect != file_len) {
        if (data_start + expect > file_len)
            err_set("tensor data ends at byte %llu but the file has only %llu bytes (truncated?)",
                    (unsigned long long)(data_start + expect), (unsigned long long)file_len);
        else
            err_set("%llu unexpected trailing bytes after the tensor data",
                    (unsigned long long)(file_len - data_start - expect));
        goto done;
    }
    for (i = 0; i < n; i++)
        f->tensors[spans[i].index].data = base + data_start + spans[i].begin;
    rc = 0;
done:
    free(spans);
    json_decref(root);
    return rc;
}

/* Invariants 1-4 over the file's bytes base[0..file_len): fills f's tensors. */
static int parse_bytes(SafetensorsFile *f, const uint8_t *base, uint64_t file_len) {
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = (header_len << 8) | base[i];
    if (header_len > MAX_HEADER_BYTES) {
        err_set("invalid safetensors file: header length %llu exceeds the 100 MB limit",
                (unsigned long long)header_len);
        return -1;
    }
    if (8 + header_len > file_len) {
        err_set("invalid safetensors file: header length %llu runs past the end of the file "
                "(%llu bytes; truncated?)",
                (unsigned long long)header_len, (unsigned long long)file_len);
        return -1;
    }
    if (header_len == 0 || base[8] != '{') {
        err_set("invalid safetensors file: header does not start with '{'");
        return -1;
    }
    return parse_header(f, base, header_len, file_len);
}

int safetensors_open(SafetensorsFile *f, const char *path) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return err_set("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set("%s: not a regular file", path);
    }
    uint64_t file_len = (uint64_t)st.st_size;
    if (file_len < 8) {
        close(fd);
        return err_set("%s: invalid safetensors file: %llu bytes, too short for the 8-byte header "
                       "length",
                       path, (unsigned long long)file_len);
    }
    void *map = mmap(NULL, (size_t)file_len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return err_set("%s: cannot map: %s", path, strerror(errno));
    f->path = xstrdup(path);
    f->map = map;
    f->map_len = (size_t)file_len;

    if (parse_bytes(f, map, file_len) != 0) goto fail;
    return 0;
fail:
    err_prefix("%s", path);
    safetensors_close(f);
    return -1;
}

int safetensors_open_buffer(SafetensorsFile *f, const void *data, size_t len, const char *name) {
    memset(f, 0, sizeof *f);
    f->path = xstrdup(name);
    if (len < 8) {
        err_set("invalid safetensors file: %zu bytes, too short for the 8-byte header length", len);
    } else if (parse_bytes(f, data, len) == 0) {
        return 0;
    }
    err_prefix("%s", name);
    safetensors_close(f);
    return -1;
}

void safetensors_close(SafetensorsFile *f) {
    for (size_t i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const SafetensorsTensor *safetensors_find(const SafetensorsFile *f, const char *name) {
    for (size_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

int safetensors_to_f32(const SafetensorsTensor *t, float *out) {
    const uint8_t *src = t->data;
    size_t n = (size_t)t->numel;
    switch (t->dtype) {
    case ST_F32:
        memcpy(out, src, n * 4);
        return 0;
    case ST_BF16:
    case ST_F16: {
        float (*widen)(uint16_t) = t->dtype == ST_BF16 ? bf16_to_f32 : f16_to_f32;
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = widen(h);
        }
        return 0;
    }
    case ST_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            out[i] = (float)d;
        }
        return 0;
    default:
        return err_set("tensor \"%s\": dtype %s is not a floating-point type", t->name,
                       dtype_names[t->dtype]);
    }
}

/* ---- writer ---- */

static int write_order_cmp(const void *a, const void *b) {
    const SafetensorsWriteTensor *x = *(const SafetensorsWriteTensor *const *)a;
    const SafetensorsWriteTensor *y = *(const SafetensorsWriteTensor *const *)b;
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

static size_t tensor_nbytes(const SafetensorsWriteTensor *t) {
    size_t n = dtype_sizes[t->dtype];
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

int safetensors_write(const char *path, const SafetensorsWriteTensor *tensors, size_t n) {
    const SafetensorsWriteTensor **order = xmalloc((n ? n : 1) * sizeof *order);
    for (size_t i = 0; i < n; i++)
        order[i] = &tensors[i];
    qsort(order, n, sizeof *order, write_order_cmp);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            err_set("%s: tensor name \"%s\" written twice", path, order[i]->name);
            free(order);
            return -1;
        }
    }

    /* The header is built by hand: its member order (metadata first, tensors in layout
     * order, keys dtype/shape/data_offsets) is part of the reference format. */
    size_t cap = 256 + n * 160, len = 0;
    char *hdr = xmalloc(cap);
    len += (size_t)snprintf(hdr, cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        const SafetensorsWriteTensor *t = order[i];
        json_t *jname = json_string(t->name);
        char *quoted = jname ? json_dumps(jname, JSON_ENCODE_ANY) : NULL;
        json_decref(jname);
        if (!quoted) {
            free(order);
            free(hdr);
            return err_set("%s: tensor name is not valid UTF-8", path);
        }
        size_t need = strlen(quoted) + 64 + 24 * (size_t)t->ndim + 48;
        if (len + need + 16 > cap) {
            cap = (len + need + 16) * 2;
            hdr = xrealloc(hdr, cap);
        }
        len += (size_t)snprintf(hdr + len, cap - len, ",%s:{\"dtype\":\"%s\",\"shape\":[", quoted,
                                dtype_names[t->dtype]);
        free(quoted);
        for (int d = 0; d < t->ndim; d++)
            len += (size_t)snprintf(hdr + len, cap - len, "%s%lld", d ? "," : "",
                                    (long long)t->shape[d]);
        uint64_t end = offset + tensor_nbytes(t);
        len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%llu,%llu]}",
                                (unsigned long long)offset, (unsigned long long)end);
        offset = end;
    }
    hdr[len++] = '}';
    while (len % 8 != 0)
        hdr[len++] = ' ';

    AtomicFile af;
    int rc = atomic_file_open(&af, path);
    if (rc == 0) {
        uint8_t len_bytes[8];
        for (int i = 0; i < 8; i++)
            len_bytes[i] = (uint8_t)((uint64_t)len >> (8 * i));
        int ok = fwrite(len_bytes, 1, 8, af.fp) == 8 && fwrite(hdr, 1, len, af.fp) == len;
        for (size_t i = 0; ok && i < n; i++) {
            size_t nb = tensor_nbytes(order[i]);
            ok = nb == 0 || fwrite(order[i]->data, 1, nb, af.fp) == nb;
        }
        if (!ok) {
            int err = errno;
            atomic_file_abort(&af);
            rc = err_set("%s: write failed: %s", path, strerror(err));
        } else {
            rc = atomic_file_commit(&af);
        }
    }
    free(hdr);
    free(order);
    return rc;
}
