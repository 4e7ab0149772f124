/*
 * feedpack_progress.c: the progress line on stderr. Draws only when stderr
 * is a terminal (and no --quiet), at the first tick, then at most 10 times
 * a second, and clears itself at the end, so
 * logs and pipes never see it. Never touches stdout. One thread.
 */
#include <stdio.h>
#include <unistd.h>

#include "feedpack.h"

#define PROGRESS_INTERVAL 0.1  /* seconds between redraws */
#define PROGRESS_BAR 30        /* characters of the bar */

double progress_elapsed(const struct timespec *since)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - since->tv_sec) + (double)(now.tv_nsec - since->tv_nsec) * 1e-9;
}

void progress_start(struct pack_progress *p, const char *what, const char *unit,
		    uint64_t total_bytes)
{
	*p = (struct pack_progress){
		.on = isatty(STDERR_FILENO) == 1,
		.what = what,
		.unit = unit,
		.total = total_bytes,
	};
	clock_gettime(CLOCK_MONOTONIC, &p->start);
	p->last = p->start;
	p->last.tv_sec -= 1; /* the first tick draws: a short run shows its line too */
}

static void progress_draw(struct pack_progress *p, uint64_t done, uint64_t count)
{
	double secs = progress_elapsed(&p->start);
	double mbs = secs > 0 ? (double)done / 1e6 / secs : 0;
	char bar[PROGRESS_BAR + 1];

	if (p->total) {
		double frac = (double)done / (double)p->total;
		int fill = (int)(frac * PROGRESS_BAR);
		if (fill > PROGRESS_BAR)
			fill = PROGRESS_BAR;
		for (int i = 0; i < PROGRESS_BAR; i++)
			bar[i] = i < fill ? '#' : '.';
		bar[PROGRESS_BAR] = '\0';
		double eta = done && frac < 1 ? secs * (1 - frac) / frac : 0;
		fprintf(stderr, "\r%s [%s] %3.0f%% %llu %s %.1f MB/s ETA %d:%02d\033[K", p->what,
			bar, frac * 100, (unsigned long long)count, p->unit, mbs, (int)eta / 60,
			(int)eta % 60);
	} else {
		fprintf(stderr, "\r%s %.1f MB %llu %s %.1f MB/s\033[K", p->what, (double)done / 1e6,
			(unsigned long long)count, p->unit, mbs);
	}
	fflush(stderr);
	p->drawn = true;
}

void progress_tick(struct pack_progress *p, uint64_t done_bytes, uint64_t count)
{
	if (!p->on || progress_elapsed(&p->last) < PROGRESS_INTERVAL)
		return;
	clock_gettime(CLOCK_MONOTONIC, &p->last);
	progress_draw(p, done_bytes, count);
}

void progress_end(struct pack_progress *p)
{
	if (p->drawn) {
		fprintf(stderr, "\r\033[K");
		fflush(stderr);
	}
	p->drawn = false;
}
