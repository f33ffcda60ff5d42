/* safetensors files: a validating, mmap-based reader and a writer that lays files out
 * exactly as the reference `safetensors` library does (spec: hf-formats.md §1).
 *
 * Reader invariants, all checked by safetensors_open() before anything is returned:
 *  1. 8 <= file size, header length N <= 100 MB, 8 + N <= file size, header starts with '{'.
 *  2. The header is a JSON object without duplicate keys; every member but __metadata__
 *     has exactly dtype, shape and data_offsets of the right JSON types.
 *  3. Sorted by offset, the tensors tile the data buffer from 0 without gaps or overlaps,
 *     and each one's byte length equals prod(shape) * element size.
 *  4. The data buffer ends exactly at the end of the file.
 * Tensor data pointers stay valid until safetensors_close(). */
#ifndef RLHF_IO_SAFETENSORS_H
#define RLHF_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define SAFETENSORS_MAX_DIMS 8

/* Listed in the reference writer's "alignment" order; the writer sorts by it, descending. */
typedef enum {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_DTYPE_COUNT
} SafetensorsDtype;

typedef struct {
    char *name;
    SafetensorsDtype dtype;
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    const void *data; /* into the mapping (reader) */
} SafetensorsTensor;

typedef struct {
    char *path;
    void *map;
    size_t map_len;
    size_t n_tensors;
    SafetensorsTensor *tensors;
} SafetensorsFile;

const char *safetensors_dtype_name(SafetensorsDtype dt);
size_t safetensors_dtype_size(SafetensorsDtype dt);

/* Maps and validates `path`. Returns 0, or -1 with an error naming the file and the rule
 * it breaks; on failure *f is left closed. */
int safetensors_open(SafetensorsFile *f, const char *path);
/* The same over `len` bytes at `data` (a file's bytes received in memory, e.g. an HTTP body),
 * which the caller keeps alive and frees after safetensors_close; `name` names it in errors. */
int safetensors_open_buffer(SafetensorsFile *f, const void *data, size_t len, const char *name);
void safetensors_close(SafetensorsFile *f);

/* The tensor called `name`, or NULL. */
const SafetensorsTensor *safetensors_find(const SafetensorsFile *f, const char *name);

/* Converts a floating tensor (F32, F16, BF16, F64) to fp32 in `out` (numel floats).
 * Returns -1 with an error for other dtypes. */
int safetensors_to_f32(const SafetensorsTensor *t, float *out);

/* One tensor to write: `data` holds nbytes = numel * size(dtype) bytes, little-endian. */
typedef struct {
    const char *name;
    SafetensorsDtype dtype;
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    const void *data;
} SafetensorsWriteTensor;

/* Writes the tensors to `path` atomically, with {"format":"pt"} metadata, tensors sorted by
 * dtype (descending) then name, header padded to 8 bytes. Names must be unique. */
int safetensors_write(const char *path, const SafetensorsWriteTensor *tensors, size_t n);

#endif
