/*
 * feedbench.h: the pieces of feedbench (a trainer-shaped reader of feedd)
 * that its files share.
 *
 *   feedbench.c          options, forking the jobs, the final check, output
 *   feedbench_job.c      one job: connect, open a stream, read, measure
 *   feedbench_verify.c   what --verify records per batch and checks at the end
 *   feedbench_measure.c  clock, checksum, percentiles, JSON strings
 *
 * Jobs run in child processes (or in feedbench itself when there is one);
 * what they report and record lives in one MAP_SHARED anonymous mapping the
 * parent creates before fork() and reads after waitpid(), which orders
 * every write of a child before the parent's reads. No locks: each job
 * writes only its own result and the positions its rank owns.
 */
#ifndef FEEDBENCH_H
#define FEEDBENCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FB_EXIT_FAIL 1           /* a job or the verification failed */
#define FB_EXIT_USAGE 2          /* bad command line, or a refused feature */
#define FB_MSG_MAX 256

/* The command line, parsed once; read-only afterwards. */
struct fb_opts {
	const char *socket;       /* NULL: $FEEDD_SOCKET or the default */
	const char *dataset;      /* required */
	const char *pipeline;     /* NULL: the daemon's identity */
	const char *group;        /* NULL, or every job joins this group */
	uint32_t batch;           /* samples per batch */
	uint32_t credits;         /* 0: the library's default */
	uint32_t window;          /* block order: blocks per window, 0 = daemon's */
	uint32_t jobs;            /* processes, each with its own connection */
	uint64_t epochs;          /* >= 1 */
	uint64_t seed;
	int order;                /* FEED_ORDER_* */
	uint32_t nodes, node;     /* --order node: this process is node `node` of
				   * `nodes`; job j is rank node * L + j of
				   * nodes * L (L = jobs with --world, else 1) */
	int node_deal;            /* FEED_NODE_DEAL_* */
	double step_ms;           /* busy time per batch, imitating a step */
	int timeout_ms;           /* longest wait for one batch */
	bool world;               /* job j is rank j of jobs */
	bool pad_last;            /* every batch full: the last wraps around */
	bool verify;              /* check every epoch's samples */
	bool no_touch;            /* views only: no byte read, no checksum */
	bool wake;                /* credits 1: every feed_next() sleeps */
	bool json;                /* one JSON object per job per line */
	bool workers_note;        /* print the daemon's workers and note */
	int on_error;             /* FEED_ON_ERROR_*: --on-error fail|skip */
	uint64_t max_bad;         /* --max-bad (skip), 0 = the daemon's default */
};

/* What one job measured. Lives in shared memory; written by its job only. */
struct fb_result {
	bool done;                /* the job ran to the end of its stream */
	bool local_ok;            /* --verify: its own per-batch checks passed */
	uint32_t rank, world;
	uint32_t credits;         /* granted by the daemon */
	uint64_t start_epoch, start_batch; /* its first batch (a group's joiner: mid-epoch) */
	uint32_t daemon_workers;  /* feed_stats().workers */
	uint64_t epochs;          /* epochs completed */
	uint64_t batches, samples, bytes;       /* everything read */
	uint64_t timed_samples, timed_bytes;    /* after the first batch */
	double wall_s;            /* first batch consumed to the last consumed */
	double stall_s;           /* of wall_s: inside feed_next() calls that slept */
	double cpu_s;             /* this job's CPU time from the first batch to the end */
	uint64_t fast_calls, wake_calls;        /* batches by path */
	double p50_us, p99_us;    /* fast path: a batch was ready */
	double wake_p50_us, wake_p99_us;        /* slept: publish -> return */
	double own_p50_us;        /* a batch's time in the reader, feed_next (waits
				   * included) to release, --step-ms excluded */
	double clock_ns;          /* cost of one clock_gettime() pair */
	uint64_t checksum;        /* over every byte of every field, in order */
	uint64_t replaced;        /* samples replaced (--on-error skip) */
	char note[FB_MSG_MAX];    /* the daemon's advice at open */
	char pipeline[FB_MSG_MAX];/* canonical, as the daemon reports it */
};

/* Verification record of one epoch set: for every epoch, the sample read
 * at each global position < N, then at each padding position N + k.
 * FB_UNSEEN marks a position nobody reported. */
#define FB_UNSEEN UINT64_MAX
/* Or'ed into a position's sample: a replacement (--on-error skip). */
#define FB_REPLACED ((uint64_t)1 << 62)

struct fb_verify {
	uint64_t n;               /* dataset samples */
	uint64_t epochs;
	uint32_t batch, world;
	uint64_t per_rank;        /* samples per rank per epoch */
	uint64_t batches;         /* per rank per epoch: ceil(per_rank / batch) */
	uint64_t pad;             /* padding positions per epoch */
	uint64_t first_epoch;     /* the first checked: a group's late joiner's
				   * partial first epoch is not */
	uint64_t *pos;            /* [epochs][n + pad], in shared memory */
};

/* The shared mapping's header; results and verification sets follow. */
struct fb_shared {
	_Atomic uint32_t arrived; /* jobs past opening (or failing to) */
	uint32_t jobs;
};

/* feedbench_measure.c */
uint64_t fb_now_ns(void);
uint64_t fb_cpu_ns(void);
double fb_clock_cost_ns(void);
void fb_spin_ns(uint64_t ns);
uint64_t fb_hash(uint64_t seed, const void *data, size_t len);
uint64_t fb_combine(uint64_t acc, uint64_t h);
double fb_percentile_us(uint64_t *ns, uint64_t n, double q);

/* feedbench_verify.c */
/* Bytes of the positions of one set; 0 when they would pass 4 GiB. */
size_t fb_verify_bytes(uint64_t n, uint64_t epochs, uint32_t batch, uint32_t world,
		       bool pad_last);
/* Fills v for its geometry and marks every position unseen. */
void fb_verify_init(struct fb_verify *v, uint64_t *pos, uint64_t n, uint64_t epochs,
		    uint32_t batch, uint32_t world, bool pad_last);
/* Records batch `index` of `epoch` read by `rank` and checks it against
 * the daemon's partition (order.h): size, padded flag, indices. Returns 0,
 * or -1 with the first problem in msg. */
int fb_verify_batch(struct fb_verify *v, uint32_t rank, uint64_t epoch, uint64_t index,
		    const uint64_t *samples, uint32_t nsamples, bool padded,
		    const uint64_t *replaced, char *msg, size_t cap);
/* After every rank of the set finished: each epoch holds every sample of
 * [0, N) exactly once, and every padding position repeats the position it
 * wraps to. With replacements (--on-error skip): every sample once outside
 * the replaced positions but as many as they are, and each replaced
 * position holds the sample of the next position not replaced (the next
 * good sample of the epoch's global order). Returns 0, or -1 with the epoch and sample index in msg. */
int fb_verify_check(const struct fb_verify *v, char *msg, size_t cap);

/* feedbench_job.c */
/* Runs job j (rank j of jobs with --world) into *res; vset is its
 * verification set or NULL. Prints its errors to stderr. Returns 0 or
 * FB_EXIT_FAIL. */
int fb_job_run(const struct fb_opts *o, uint32_t j, struct fb_shared *sh, struct fb_result *res,
	       struct fb_verify *vset);

#endif
