/* Whole-file reads and crash-safe writes.
 *
 * Writes never modify the destination in place: an AtomicFile writes to a temporary
 * name in the destination's directory, and only atomic_file_commit() makes it visible
 * (fflush, fsync, rename, fsync of the directory). Until then the old file, if any,
 * is untouched; atomic_file_abort() (or a crash) leaves at worst a stray temp file. */
#ifndef RLHF_COMMON_FILEIO_H
#define RLHF_COMMON_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Reads the whole file into a NUL-terminated buffer the caller frees.
 * Returns 0, or -1 with an error naming the path. */
int read_file(const char *path, char **data, size_t *len);

bool file_exists(const char *path);
bool dir_exists(const char *path);

/* path_join(buf, cap, "dir", "name") -> "dir/name"; returns -1 (error set) on overflow. */
int path_join(char *buf, size_t cap, const char *dir, const char *name);

/* mkdir -p. Returns 0, or -1 with an error naming the directory that could not be made. */
int make_dirs(const char *path);

typedef struct {
    FILE *fp;         /* write through this */
    char *final_path; /* where it lands on commit */
    char *temp_path;  /* where it is written meanwhile */
} AtomicFile;

/* Opens the temporary file. Returns 0, or -1 with an error. */
int atomic_file_open(AtomicFile *af, const char *path);
/* Flushes, fsyncs and renames into place. Returns 0, or -1 (the temp file is removed). */
int atomic_file_commit(AtomicFile *af);
/* Discards the temporary file; the destination keeps its old contents. */
void atomic_file_abort(AtomicFile *af);

/* Writes `len` bytes to `path` atomically. */
int write_file_atomic(const char *path, const void *data, size_t len);

#endif
