/* tbevents.h — rank 0's TensorBoard event file (output.tensorboard): scalars TensorBoard reads
 * from OUTDIR, beside metrics.jsonl. The file is TensorFlow's record format: each record is
 *
 *     uint64 length, uint32 masked CRC-32C of those 8 bytes, length bytes of data,
 *     uint32 masked CRC-32C of the data           (little endian; mask: tb_mask_crc)
 *
 * and each record's data a serialized tensorflow.Event protocol buffer (event.proto and
 * summary.proto, as TensorBoard publishes them), encoded here by hand: the first has the
 * wall time and file_version "brain.Event:2", the second a SessionLog START at the first
 * step this run will log (so that TensorBoard, reading a resumed run's new file after the
 * old ones, drops the points the old run logged past its last checkpoint: they are logged
 * again), then one Event per call of tb_scalars: wall_time, step and a Summary of
 * {tag, simple_value} values.
 *
 * Every run opens a new file, events.out.tfevents.<unix seconds>.<host>.<pid>.<n>, as
 * TensorFlow's and TensorBoard's writers name theirs (TensorBoard reads every file of a
 * directory, in name order, as one run; the seconds are past the newest file's already there,
 * so that a resumed run's file sorts after its predecessors'). A record is written whole or not at
 * all, as metrics.c writes a line: one write(2), cut back where the file system takes only part;
 * the first failure is said once on stderr, naming the file, and training goes on. */
#ifndef DPTRAIN_TBEVENTS_H
#define DPTRAIN_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include "common/error.h"

/* All zero (as in a struct that holds one): no file, events go nowhere (other ranks,
 * output.tensorboard false). */
struct tbevents {
	int open; /* fd is path's */
	int fd;
	int warned; /* the failure of a write was said */
	char path[4096];
};

/* Creates dir's new event file and writes its first two records (the file version, and
 * SessionLog START at first_step: the first step whose scalars this run writes, the
 * checkpoint's step + 1 on a resumed run). -1 with err naming the file. */
int tb_open(struct tbevents *tb, const char *dir, long first_step, struct dp_error *err);
/* One Event at step with n scalars: tags[i] = values[i] (each a float32 in the file). */
void tb_scalars(struct tbevents *tb, long step, int n, const char *const *tags,
		const double *values);
/* One scalar: tb_scalars with n = 1. */
void tb_scalar(struct tbevents *tb, const char *tag, long step, double value);
void tb_close(struct tbevents *tb);

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial and final xor ~0) of p[0..n),
 * and the record format's mask of a CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t tb_crc32c(const void *p, size_t n);
uint32_t tb_mask_crc(uint32_t crc);
/* The record of n bytes of data into out (n + 16 bytes); returns n + 16. */
size_t tb_frame(uint8_t *out, const void *data, size_t n);

#endif
