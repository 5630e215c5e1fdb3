/* comm_fail.c — the failure both collective engines keep once they fail (comm.h). */
#include "trainer/dist/comm.h"

int comm_failv(struct comm_failure *f, const char *op, struct dp_error *err, const char *fmt,
	       va_list ap)
{
	if (!f->failed) {
		f->failed = 1;
		verrprintf(&f->msg, fmt, ap);
		errprefix(&f->msg, "%s", op);
	}
	return errprintf(err, "%s", f->msg.text);
}
