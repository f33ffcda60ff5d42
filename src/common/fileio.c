#include "common/fileio.h"

#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int read_file(const char *path, char **data, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return err_set("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(fp);
        return err_set("%s: is a directory, expected a file", path);
    }
    if (fseek(fp, 0, SEEK_END) != 0) {
        fclose(fp);
        return err_set("%s: cannot seek: %s", path, strerror(errno));
    }
    long size = ftell(fp);
    if (size < 0) {
        fclose(fp);
        return err_set("%s: cannot read (not a regular file?)", path);
    }
    rewind(fp);
    char *buf = xmalloc_checked((size_t)size + 1, path);
    if (!buf) {
        fclose(fp);
        return -1;
    }
    size_t got = fread(buf, 1, (size_t)size, fp);
    int failed = ferror(fp);
    fclose(fp);
    if (failed || got != (size_t)size) {
        free(buf);
        return err_set("%s: read failed", path);
    }
    buf[size] = '\0';
    *data = buf;
    if (len) *len = (size_t)size;
    return 0;
}

bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int path_join(char *buf, size_t cap, const char *dir, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap) return err_set("path too long: %s/%s", dir, name);
    return 0;
}

int atomic_file_open(AtomicFile *af, const char *path) {
    memset(af, 0, sizeof *af);
    size_t n = strlen(path) + 32;
    af->final_path = xstrdup(path);
    af->temp_path = xmalloc(n);
    snprintf(af->temp_path, n, "%s.tmp.%ld", path, (long)getpid());
    af->fp = fopen(af->temp_path, "wb");
    if (!af->fp) {
        err_set("%s: cannot create (writing %s): %s", path, af->temp_path, strerror(errno));
        free(af->final_path);
        free(af->temp_path);
        memset(af, 0, sizeof *af);
        return -1;
    }
    return 0;
}

static void fsync_parent_dir(const char *path) {
    char *copy = xstrdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd); /* best effort: some filesystems refuse fsync on directories */
        close(fd);
    }
    free(copy);
}

int atomic_file_commit(AtomicFile *af) {
    int rc = 0;
    if (fflush(af->fp) != 0 || ferror(af->fp) || fsync(fileno(af->fp)) != 0) {
        rc = err_set("%s: write failed: %s", af->final_path, strerror(errno));
    }
    if (fclose(af->fp) != 0 && rc == 0) {
        rc = err_set("%s: write failed: %s", af->final_path, strerror(errno));
    }
    af->fp = NULL;
    if (rc == 0 && rename(af->temp_path, af->final_path) != 0) {
        rc = err_set("%s: cannot rename into place: %s", af->final_path, strerror(errno));
    }
    if (rc != 0) {
        unlink(af->temp_path);
    } else {
        fsync_parent_dir(af->final_path);
    }
    free(af->final_path);
    free(af->temp_path);
    memset(af, 0, sizeof *af);
    return rc;
}

void atomic_file_abort(AtomicFile *af) {
    if (af->fp) fclose(af->fp);
    if (af->temp_path) unlink(af->temp_path);
    free(af->final_path);
    free(af->temp_path);
    memset(af, 0, sizeof *af);
}

int write_file_atomic(const char *path, const void *data, size_t len) {
    AtomicFile af;
    if (atomic_file_open(&af, path) != 0) return -1;
    if (len && fwrite(data, 1, len, af.fp) != len) {
        atomic_file_abort(&af);
        return err_set("%s: write failed", path);
    }
    return atomic_file_commit(&af);
}

int make_dirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return err_set("%s: cannot create: %s", buf, strerror(errno));
        *p = c;
        if (!c) break;
    }
    return 0;
}
