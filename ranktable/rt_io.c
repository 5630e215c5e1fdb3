/* rt_io.c — rank-table files: read whole (bounded), write atomically (atomic_file.c), so a
 * reader sees the old table or the new one, never a part. Owns file handling only; JSON is
 * rt_json.c's. */
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/readfile.h"
#include "ranktable/rt_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int rt_read(struct ranktable *rt, const char *path, struct dp_error *err)
{
	char *buf;
	size_t len;
	int rv;

	memset(rt, 0, sizeof(*rt));
	if (dp_read_file(path, RT_FILE_MAX, 0, &buf, &len, err) != 0) {
		if (errno == EISDIR || errno == EINVAL)
			errprintf(err, "%s: not a regular file: not a rank table", path);
		else if (errno == EFBIG)
			errprintf(err, "%s: not a rank table", err->text);
		return -1;
	}
	rv = rt_parse(rt, buf, len, path, err);
	free(buf);
	return rv;
}

int rt_write_atomic(const struct ranktable *rt, const char *path, enum rt_schema schema,
		    unsigned mode, struct dp_error *err)
{
	char *text;
	int rv;

	if (!(text = rt_to_json(rt, schema, err)))
		return errprefix(err, "%s: not written", path);
	rv = af_write(path, text, strlen(text), mode, err);
	free(text);
	return rv;
}
