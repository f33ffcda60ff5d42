#include "report/tb_writer.h"

#include "common/error.h"
#include "common/fileio.h"
#include "tb_event.pb-c.h"

#include <errno.h>
#include <isa-l/crc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint32_t tb_masked_crc32c(const void *data, size_t len) {
    /* ISA-L's crc32_iscsi leaves out CRC-32C's initial and final inversion */
    uint32_t crc = crc32_iscsi((unsigned char *)data, (int)len, 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static int fail(TbWriter *w, const char *what) {
    int e = errno;
    if (w->fp) fclose(w->fp);
    w->fp = NULL; /* invariant 1 */
    return err_set("%s: cannot %s: %s", w->path, what, e ? strerror(e) : "write error");
}

/* One TFRecord holding the packed event. */
static int write_event(TbWriter *w, const RlhfTb__Event *ev) {
    if (!w->fp) return err_set("%s: the event file is closed after an earlier error", w->path);
    size_t len = rlhf_tb__event__get_packed_size(ev);
    unsigned char *rec = xmalloc(len + 16);
    for (int i = 0; i < 8; i++)
        rec[i] = (unsigned char)((uint64_t)len >> (8 * i));
    put_le32(rec + 8, tb_masked_crc32c(rec, 8));
    rlhf_tb__event__pack(ev, rec + 12);
    put_le32(rec + 12 + len, tb_masked_crc32c(rec + 12, len));
    errno = 0;
    size_t wrote = fwrite(rec, 1, len + 16, w->fp);
    free(rec);
    return wrote == len + 16 ? 0 : fail(w, "write");
}

int tb_writer_open(TbWriter *w, const char *log_dir) {
    memset(w, 0, sizeof *w);
    if (make_dirs(log_dir) != 0) return -1;
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    double now = (double)time(NULL);
    char name[512];
    snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%d.0", (long long)now, host,
             (int)getpid());
    if (path_join(w->path, sizeof w->path, log_dir, name) != 0) return -1;
    w->fp = fopen(w->path, "wb");
    if (!w->fp) return err_set("%s: cannot create: %s", w->path, strerror(errno));
    RlhfTb__Event ev = RLHF_TB__EVENT__INIT;
    ev.wall_time = now;
    ev.what_case = RLHF_TB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    if (write_event(w, &ev) != 0) return -1;
    return tb_writer_flush(w);
}

int tb_writer_scalar(TbWriter *w, const char *tag, double value, int64_t step, double wall_time) {
    RlhfTb__SummaryValue v = RLHF_TB__SUMMARY_VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = RLHF_TB__SUMMARY_VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)value;
    RlhfTb__SummaryValue *values[1] = {&v};
    RlhfTb__Summary summary = RLHF_TB__SUMMARY__INIT;
    summary.n_value = 1;
    summary.value = values;
    RlhfTb__Event ev = RLHF_TB__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = RLHF_TB__EVENT__WHAT_SUMMARY;
    ev.summary = &summary;
    return write_event(w, &ev);
}

int tb_writer_flush(TbWriter *w) {
    if (!w->fp) return err_set("%s: the event file is closed after an earlier error", w->path);
    errno = 0;
    return fflush(w->fp) == 0 ? 0 : fail(w, "write");
}

void tb_writer_close(TbWriter *w) {
    if (w->fp) fclose(w->fp);
    w->fp = NULL;
}
