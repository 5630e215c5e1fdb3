/* clock.c (test) — common/clock.h, the one clock: now_s is monotonic, in seconds, and moves
 * with time; ms_until gives poll() 0 for a deadline passed, rounds up, and caps at an hour. */
#include "common/clock.h"
#include "t/lib/tap.h"

#include <time.h>

int main(void)
{
	struct timespec nap = {0, 50 * 1000 * 1000};
	double a = now_s(), b, c;
	int same = 1;

	for (int i = 0; i < 100000; i++) {
		b = now_s();
		if (b < a)
			same = 0;
		a = b;
	}
	ok(same, "now_s never goes back");
	a = now_s();
	nanosleep(&nap, NULL);
	c = now_s() - a;
	ok(c >= 0.045 && c < 5, "a 50 ms sleep is 0.05 s on it: %.4f s", c);

	ok(ms_until(now_s() - 1) == 0, "a deadline passed: 0");
	int ms = ms_until(now_s() + 0.0001);
	ok(ms >= 0 && ms <= 1, "0.1 ms left: rounded up to at most 1 ms (%d)", ms);
	ms = ms_until(now_s() + 2);
	ok(ms > 1900 && ms <= 2001, "2 s left: about 2000 ms (%d)", ms);
	is_int(ms_until(now_s() + 1e7), 3600 * 1000, "a far deadline: an hour at most");
	return done_testing();
}
