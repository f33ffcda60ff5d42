/* A frozen bf16 embedding left in its safetensors file (model.h: Model.embed_map): the table is
 * read only at the rows of the tokens a forward pass sees, so copying it (1.09 GB for Qwen2.5-7B's
 * 152064 x 3584) would hold a gigabyte of which a step reads a few hundred rows.
 *
 * Invariants:
 *  1. The mapping is the tensor's own bytes, mapped read-only and private from the file at the
 *     page below the tensor's offset: embed16 = embed_map + (offset - page-aligned offset). It is
 *     never written, so every page the process drops is read again, the same, from the file.
 *  2. Only an untied embedding is mapped: a tied one is also the lm_head, whose every row each
 *     forward reads, so leaving it in the file would save nothing.
 *  3. Linux counts the mapping's resident pages in VmRSS/VmHWM (as RssFile): the rows a gather
 *     touched (and the kernel's fault-around, up to 64 KiB around each). model_release_embedding
 *     drops them after each gather, so the resident part is one forward's rows, not every row
 *     the run has seen. */
#include "common/error.h"
#include "model/model_loading.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The file of ck whose mapping holds t's bytes; NULL when none does. */
static const SafetensorsFile *file_of(const HfWeights *ck, const SafetensorsTensor *t) {
    for (int k = 0; k < ck->n_files; k++) {
        const SafetensorsFile *f = &ck->files[k];
        const char *base = f->map, *data = t->data;
        if (base && data >= base && data + t->nbytes <= base + f->map_len) return f;
    }
    return NULL;
}

const uint16_t *model_map_embedding(Model *m, const HfWeights *ck, const SafetensorsTensor *t) {
    long page = sysconf(_SC_PAGESIZE);
    const SafetensorsFile *f = file_of(ck, t);
    /* invariant 2; a bf16 file only (other dtypes are converted); a row of bf16 needs 2-byte
     * alignment, which a file with an odd header length breaks */
    if (m->cfg.tie_word_embeddings || t->dtype != ST_BF16 || !f || page <= 0 ||
        ((uintptr_t)t->data & 1) != 0)
        return NULL;
    size_t offset = (size_t)((const char *)t->data - (const char *)f->map);
    size_t aligned = offset & ~(size_t)(page - 1);
    size_t len = offset - aligned + t->nbytes;
    int fd = open(f->path, O_RDONLY);
    if (fd < 0) return NULL; /* the caller copies the table instead */
    struct stat st;
    void *map = MAP_FAILED;
    /* the file must still hold the bytes validated through ck's mapping (invariant 1) */
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == (uint64_t)f->map_len)
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, (off_t)aligned);
    close(fd);
    if (map == MAP_FAILED) return NULL;
    m->embed_map = map;
    m->embed_map_len = len;
    return (const uint16_t *)((const char *)map + (offset - aligned));
}

void model_release_embedding(const Model *m) {
    if (m->embed_map)
        (void)madvise(m->embed_map, m->embed_map_len,
                      MADV_DONTNEED); /* advice: failure costs resident memory only */
}

void model_unmap_embedding(Model *m) {
    if (m->embed_map) munmap(m->embed_map, m->embed_map_len);
    m->embed_map = NULL;
    m->embed_map_len = 0;
}
