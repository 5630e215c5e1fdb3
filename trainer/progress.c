/* progress.c — progress.h. */
#include "trainer/progress.h"

#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

void progress_init(struct progress *p, FILE *out, enum progress_mode mode, int rank0, long step0,
		   long total, double t0)
{
	memset(p, 0, sizeof(*p));
	p->out = out;
	p->rank0 = rank0;
	p->quiet = mode == PROGRESS_OFF;
	p->tty = rank0 && mode == PROGRESS_AUTO && isatty(fileno(out));
	p->step0 = step0;
	p->total = total;
	p->t0 = t0;
}

double progress_eta(const struct progress *p, long step, double now)
{
	if (step <= p->step0 || now <= p->t0)
		return -1;
	if (step >= p->total)
		return 0;
	return (double)(p->total - step) * (now - p->t0) / (double)(step - p->step0);
}

void progress_duration(char *buf, size_t n, double s)
{
	if (s < 0) {
		snprintf(buf, n, "?");
		return;
	}
	long t = (long)(s + 0.5);
	snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

void progress_where(FILE *out, const char *dir, int metrics)
{
	if (!dir)
		return;
	if (metrics)
		fprintf(out,
			"dptrain: output in %s: metrics %s/metrics.jsonl, report %s/report.html\n",
			dir, dir, dir);
	else
		fprintf(out, "dptrain: output in %s (output.metrics is false: no metrics.jsonl)\n",
			dir);
	fflush(out);
}

void progress_break(struct progress *p)
{
	if (p->open)
		fputc('\n', p->out);
	p->open = 0;
}

void progress_loss(struct progress *p, const char *line, int epoch, int epochs, long step,
		   double now)
{
	if (p->quiet)
		return;
	if (!p->rank0) {
		fprintf(p->out, "%s\n", line);
		fflush(p->out);
		return;
	}
	char el[32], eta[32], prog[160];
	progress_duration(el, sizeof(el), now - p->t0);
	progress_duration(eta, sizeof(eta), progress_eta(p, step, now));
	double pct = p->total > 0 ? 100.0 * (double)step / (double)p->total : 0;
	if (!p->tty) {
		fprintf(p->out, "%s\n", line);
		fprintf(p->out, "dptrain: step %ld/%ld (%.1f%%), epoch %d/%d, elapsed %s, ETA %s\n",
			step, p->total, pct, epoch, epochs, el, eta);
		fflush(p->out);
		return;
	}
	/* one line, redrawn: cut to the terminal's width so that \r reaches its start */
	snprintf(prog, sizeof(prog), " | %ld/%ld %.0f%% ETA %s", step, p->total, pct, eta);
	struct winsize ws;
	size_t cols = ioctl(fileno(p->out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? ws.ws_col : 80;
	size_t room = cols - 1, lp = strlen(prog), ll = strlen(line);
	if (lp >= room)
		lp = room, ll = 0;
	else if (ll > room - lp)
		ll = room - lp;
	fprintf(p->out, "\r%.*s%.*s\033[K", (int)ll, line, (int)lp, prog);
	fflush(p->out);
	p->open = 1;
	if (step >= p->total)
		progress_break(p);
}
