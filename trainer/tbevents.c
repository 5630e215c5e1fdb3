/* tbevents.c — tbevents.h. */
#define _GNU_SOURCE
#include "trainer/tbevents.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/append.h"
#include "common/error.h"
#include "common/openfile.h"

uint32_t tb_crc32c(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint32_t crc = 0xffffffffu;
	while (n--) { /* a bit at a time: a record is a few hundred bytes every log_every steps */
		crc ^= *b++;
		for (int k = 0; k < 8; k++)
			crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
	}
	return crc ^ 0xffffffffu;
}

uint32_t tb_mask_crc(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static uint8_t *put_le(uint8_t *o, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		*o++ = (uint8_t)(v >> (8 * i));
	return o;
}

size_t tb_frame(uint8_t *out, const void *data, size_t n)
{
	put_le(out, n, 8);
	put_le(out + 8, tb_mask_crc(tb_crc32c(out, 8)), 4);
	memcpy(out + 12, data, n);
	put_le(out + 12 + n, tb_mask_crc(tb_crc32c(data, n)), 4);
	return n + 16;
}

/* ---------------------------------------------------------------------------------------
 * Protocol buffer encoding: a field's key is (number << 3) | wire type, varint 0, 64-bit 1,
 * length-delimited 2, 32-bit 5; integers are varints (7 bits a byte, low first, the high bit
 * set on all but the last; an int64 below zero takes 10 bytes). */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static size_t varint_len(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static uint8_t *put_varint(uint8_t *o, uint64_t v)
{
	while (v >= 0x80) {
		*o++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*o++ = (uint8_t)v;
	return o;
}

static uint8_t *put_key(uint8_t *o, int field, int wt)
{
	return put_varint(o, (uint64_t)((field << 3) | wt));
}

/* A length-delimited field's key and length (its n bytes follow). */
static uint8_t *put_len(uint8_t *o, int field, size_t n)
{
	return put_varint(put_key(o, field, WT_LEN), n);
}

/* Event fields (event.proto) */
enum {
	EV_WALL_TIME = 1,    /* double */
	EV_STEP = 2,	     /* int64 */
	EV_FILE_VERSION = 3, /* string */
	EV_SUMMARY = 5,	     /* Summary */
	EV_SESSION_LOG = 7,  /* SessionLog */
};
/* Summary: repeated Value value = 1; Value: string tag = 1, float simple_value = 2;
 * SessionLog: SessionStatus status = 1 (START = 1) */
enum { SUM_VALUE = 1, VAL_TAG = 1, VAL_SIMPLE = 2, SL_STATUS = 1, SL_START = 1 };

static double wall_time(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* The Event's wall_time and step (both always written: a proto3 reader takes a default value
 * written out as well as one left out). */
static uint8_t *put_head(uint8_t *o, long step)
{
	double t = wall_time();
	uint64_t bits;
	memcpy(&bits, &t, sizeof(bits));
	o = put_le(put_key(o, EV_WALL_TIME, WT_I64), bits, 8);
	return put_varint(put_key(o, EV_STEP, WT_VARINT), (uint64_t)(int64_t)step);
}

#define HEAD_MAX (1 + 8 + 1 + 10)

/* The record of the event in ev[0..n), written whole or not at all. */
static void write_record(struct tbevents *tb, const uint8_t *ev, size_t n)
{
	uint8_t *rec = malloc(n + 16);
	if (!rec)
		return;
	size_t len = tb_frame(rec, ev, n);
	dp_append_or_warn(tb->fd, rec, len, tb->path, "an event", &tb->warned);
	free(rec);
}

void tb_scalars(struct tbevents *tb, long step, int n, const char *const *tags,
		const double *values)
{
	if (!tb->open || n <= 0)
		return;
	size_t sum = 0, *vlen = malloc((size_t)n * sizeof(*vlen));
	if (!vlen)
		return;
	for (int i = 0; i < n; i++) {
		size_t t = strlen(tags[i]);
		vlen[i] = 1 + varint_len(t) + t + 1 + 4;
		sum += 1 + varint_len(vlen[i]) + vlen[i];
	}
	uint8_t *ev = malloc(HEAD_MAX + 1 + varint_len(sum) + sum), *o = ev;
	if (ev) {
		o = put_len(put_head(o, step), EV_SUMMARY, sum);
		for (int i = 0; i < n; i++) {
			size_t t = strlen(tags[i]);
			float f = (float)values[i];
			uint32_t bits;
			memcpy(&bits, &f, sizeof(bits));
			o = put_len(o, SUM_VALUE, vlen[i]);
			o = put_len(o, VAL_TAG, t);
			memcpy(o, tags[i], t);
			o = put_le(put_key(o + t, VAL_SIMPLE, WT_I32), bits, 4);
		}
		write_record(tb, ev, (size_t)(o - ev));
	}
	free(ev);
	free(vlen);
}

void tb_scalar(struct tbevents *tb, const char *tag, long step, double value)
{
	tb_scalars(tb, step, 1, &tag, &value);
}

/* The seconds for a new file's name: now, or past the newest event file in dir when that one
 * is not older (a resumed run within the same second, or a node whose clock is behind).
 * TensorBoard reads a directory's files in name order and, once on a file, never goes back to
 * one that sorts before it: a resumed run's file must sort after its predecessors'. */
static long name_seconds(const char *dir)
{
	static const char prefix[] = "events.out.tfevents.";
	long now = (long)time(NULL), newest = -1;
	DIR *d = opendir(dir);
	struct dirent *e;
	if (!d)
		return now;
	while ((e = readdir(d))) {
		char *end;
		if (strncmp(e->d_name, prefix, sizeof(prefix) - 1) != 0)
			continue;
		errno = 0;
		long s = strtol(e->d_name + sizeof(prefix) - 1, &end, 10);
		if (!errno && *end == '.' && s > newest)
			newest = s;
	}
	closedir(d);
	return newest >= now ? newest + 1 : now;
}

int tb_open(struct tbevents *tb, const char *dir, long first_step, struct dp_error *err)
{
	static int counter; /* files this process opened */
	char host[256] = "localhost";
	struct dp_error oerr;

	tb->open = 0;
	tb->warned = 0;
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	for (char *h = host; *h; h++)
		if (*h == '/')
			*h = '_';
	long secs = name_seconds(dir);
	for (int tries = 0;; tries++) {
		snprintf(tb->path, sizeof(tb->path), "%s/events.out.tfevents.%010ld.%s.%ld.%d", dir,
			 secs, host, (long)getpid(), counter++);
		tb->fd = dp_open_regular(tb->path, O_WRONLY | O_CREAT | O_EXCL, 0644, DP_OPEN_MINE,
					 NULL, &oerr);
		if (tb->fd >= 0)
			break;
		if (errno != EEXIST || tries == 100)
			return errprintf(err, "%s: cannot create: %s", tb->path,
					 errno == EINVAL ? oerr.text : strerror(errno));
	}
	tb->open = 1;

	static const char version[] = "brain.Event:2";
	uint8_t ev[HEAD_MAX + 2 + sizeof(version)], *o;
	o = put_len(put_head(ev, 0), EV_FILE_VERSION, sizeof(version) - 1);
	memcpy(o, version, sizeof(version) - 1);
	write_record(tb, ev, (size_t)(o + sizeof(version) - 1 - ev));
	/* SessionLog START: TensorBoard takes a run's first as its start and every later one as
	 * a restart, dropping what it read before at this step and after */
	o = put_len(put_head(ev, first_step), EV_SESSION_LOG, 2);
	o = put_varint(put_key(o, SL_STATUS, WT_VARINT), SL_START);
	write_record(tb, ev, (size_t)(o - ev));
	return 0;
}

void tb_close(struct tbevents *tb)
{
	if (tb->open)
		close(tb->fd);
	tb->open = 0;
}
