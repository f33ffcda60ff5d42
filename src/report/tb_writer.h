/* A TensorBoard event file written natively: what torch.utils.tensorboard.SummaryWriter writes
 * for add_scalar, readable by TensorBoard and its EventAccumulator.
 *
 * The file is a TFRecord stream: each record is the data's length (uint64, little-endian), the
 * masked CRC-32C of those 8 bytes, the data, and the data's masked CRC-32C. The data is an
 * Event protobuf (tb_event.proto, packed by protobuf-c); the first one carries the file version
 * "brain.Event:2", each later one a single scalar (tag, float value) at a step, as add_scalar
 * writes it. CRC-32C comes from Intel's ISA-L (crc32_iscsi).
 *
 * Invariants:
 *  1. A record is written whole or not at all as far as this writer knows: after a failed
 *     write the writer is closed (fp NULL) and every later call fails, so a torn record is never
 *     followed by another one.
 *  2. Records are flushed at every tb_writer_flush: a reader sees each log entry once its
 *     line is in metrics.jsonl. */
#ifndef RLHF_REPORT_TB_WRITER_H
#define RLHF_REPORT_TB_WRITER_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *fp;
    char path[4096];
} TbWriter;

/* Creates log_dir (and its parents) and in it a new event file named as SummaryWriter names
 * it: events.out.tfevents.<unix time, 10 digits>.<host name>.<pid>.0, whose first record is the
 * file-version event. Returns 0, or -1 with an error naming the path. */
int tb_writer_open(TbWriter *w, const char *log_dir);

/* Appends one scalar event (wall_time in seconds since the epoch; value stored as float, as
 * TensorBoard's simple_value is). Returns 0, or -1 with an error naming the file (invariant 1). */
int tb_writer_scalar(TbWriter *w, const char *tag, double value, int64_t step, double wall_time);

/* Flushes what was written to the file (invariant 2). Returns 0, or -1 with an error. */
int tb_writer_flush(TbWriter *w);

/* Closes the file. Safe on a zeroed, failed or closed writer. */
void tb_writer_close(TbWriter *w);

/* The masked CRC-32C TFRecord framing uses (exposed for the unit test): rotate right by 15 and
 * add 0xa282ead8. */
uint32_t tb_masked_crc32c(const void *data, size_t len);

#endif
