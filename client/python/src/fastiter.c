/* feedclient._fastiter: next() of a Loader's epoch with a batch ready,
 * in C (issue 31 item 5: <= 20 us in the median after a training step).
 *
 * _EpochIter (feedclient/_epoch.py) derives from Iter when this module
 * loads: Iter holds its attributes (_loader, _gen, _epoch, ...) and its
 * tp_iternext does what _EpochIter._next's reuse path does, without a
 * Python frame, a bytecode or a ctypes call: the Loader's lock, the
 * checks, one feed_next_desc(), the cached entry of the slot
 * (feedclient._reuse) and a fresh Batch over its tensors. Everything else
 * (no batch ready, the end of the epoch, errors, a slot seen for the first
 * time or at new addresses, skipped samples, another epoch's batch, a
 * closed or forked Loader, transform=) goes to the Python methods, which
 * stay the one definition of what next() does: _next (the whole call),
 * _delivered (after a call that returned r) and _check. Without this
 * module (no compiler or Python headers where the package was built),
 * _EpochIter is the same class over a Python base, with _next as __next__.
 *
 * Arming (_arm, from _EpochIter.__init__ when the stream reuses its
 * tensors): feed_next_desc's address in the libfeedclient that ctypes
 * loaded, the stream's C pointer object (st: a stream closed since, whose
 * st is None then, is never called), and the addresses of its out buffers
 * (bp, and the descriptor with the spans after it).
 *
 * A batch's end (feedclient._reuse.dropped, from Batch.__del__ on any
 * thread) in C too: dropped() and the counts it compares, snapshot(), for
 * the entries settled with them (_Entry.drop says which pair an entry
 * uses: the counts of one are not the other's).
 *
 * Limited API (abi3, CPython >= 3.11): one build serves every interpreter.
 * Threads: Iter's next() on the Loader's thread, dropped() on any (as
 * Batch.__del__); the GIL held throughout except in feed_next_desc. */
#define Py_LIMITED_API 0x030B0000
#include <Python.h>
#include <structmember.h>

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "feed/stream.h"

/* feed_next_desc, and feed_release, called through the addresses ctypes
 * gives (the libfeedclient it loaded; this module never links it) */
typedef int (*next_desc_fn)(struct feed_stream *st, int timeout_ms, uint64_t note_ns,
			    struct feed_batch **ret, struct feed_batch_desc *desc,
			    struct feed_field_span *spans, uint32_t nfields);
typedef int (*release_fn)(struct feed_batch *b);

/* The stream's out buffer (feedclient._stream: one c_uint64 array) is the
 * descriptor's words, then each field's span: read here as words. */
enum { DESC_WORDS = 7 };
_Static_assert(sizeof(struct feed_batch_desc) == DESC_WORDS * sizeof(uint64_t) &&
	       offsetof(struct feed_batch_desc, epoch) == 0 &&
	       offsetof(struct feed_batch_desc, index) == 8 &&
	       offsetof(struct feed_batch_desc, nsamples) == 16 &&
	       offsetof(struct feed_batch_desc, slot) == 24 &&
	       offsetof(struct feed_batch_desc, padded) == 32 &&
	       offsetof(struct feed_batch_desc, nreplaced) == 40 &&
	       offsetof(struct feed_batch_desc, ndropped) == 48,
	       "struct feed_batch_desc is not what feedclient._stream lays out");
_Static_assert(sizeof(struct feed_field_span) == 2 * sizeof(uint64_t),
	       "struct feed_field_span is not two words");

typedef struct {
	PyObject_HEAD
	/* the attributes of _EpochIter (Python reads and writes them) */
	PyObject *loader, *gen, *epoch, *stream, *done, *pending, *failed, *fast;
	/* armed: all set, or fn NULL */
	next_desc_fn fn;
	PyObject *st;          /* the stream's c_void_p when armed */
	struct feed_stream *st_ptr;
	struct feed_batch **bp;   /* the stream's bp (c_void_p) */
	uint64_t *desc;        /* its descriptor, then 2 words per field */
	uint32_t nspans;
	unsigned long forks;   /* forks when armed */
	PyObject *acquire, *release;   /* the Loader's lock's bound methods */
	PyObject *batch_type, *torch;
	/* the stream's, fixed while its st is the armed one */
	PyObject *s_acq, *s_rel;       /* its lock's (refs and held) */
	PyObject *slots, *append;      /* its deque of slots delivered, and append */
	PyObject *cache;               /* slot number -> _Entry */
	Py_ssize_t slots_max;
} Iter;

/* interned names and constants, made once */
static PyObject *s_sig, *s_fork_gen, *s_gen, *s_st, *s_note_ns, *s_cache,
	*s_slot, *s_b, *s_held, *s_lock, *s_refs, *s_slots, *s_ref, *s_slots_max, *s_items,
	*s__slot, *s__entry, *s_epoch, *s_index, *s_padded, *s__torch, *s_replaced, *s_dropped,
	*s__box, *s_tidy, *s_append, *s__next, *s__delivered, *s__check, *s_acquire,
	*s_release;
static PyObject *args_false, *zero, *empty;
static PyObject *s_stream, *s_reuse_lock, *s_ts, *s_addrs, *s_meta, *s_free1, *s_k, *s_shape,
	*s_stride, *s_storage_offset, *s_requires_grad, *s_close, *s_stream_fork_gen;

/* forks of this process, counted in each child (an iterator armed before
 * one does not run in the child: the stream is the parent's) */
static volatile unsigned long forks;

static void forked_child(void)
{
	forks++;
}

/* set by _setup(): feed_release, and feedclient._stream's globals (_fork_gen) */
static release_fn feed_release_fn;
static PyObject *stream_globals;

/* *slot = v (a new reference), the old one dropped after */
#define SET_REF(slot, v) do { PyObject *old_ = (PyObject *)(slot); (slot) = (v); \
		Py_XDECREF(old_); } while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);   /* time.perf_counter_ns's clock */
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int is_true_attr(PyObject *o, PyObject *name)
{
	PyObject *v = PyObject_GetAttr(o, name);
	int t;

	if (!v)
		return -1;
	t = PyObject_IsTrue(v);
	Py_DECREF(v);
	return t;
}

/* a.name += add (ints); 0 or -1 */
static int attr_add(PyObject *o, PyObject *name, long add)
{
	PyObject *v = PyObject_GetAttr(o, name), *d, *w;
	int r;

	if (!v)
		return -1;
	d = PyLong_FromLong(add);
	w = d ? PyNumber_Add(v, d) : NULL;
	Py_DECREF(v);
	Py_XDECREF(d);
	if (!w)
		return -1;
	r = PyObject_SetAttr(o, name, w);
	Py_DECREF(w);
	return r;
}

/* self.<meth>(args...) */
static PyObject *meth(PyObject *self, PyObject *name, PyObject *a, PyObject *b)
{
	PyObject *fn = PyObject_GetAttr(self, name), *r;

	if (!fn)
		return NULL;
	r = PyObject_CallFunctionObjArgs(fn, a, b, NULL);
	Py_DECREF(fn);
	return r;
}

/* The Loader's lock, taken without waiting: 1, 0 (held elsewhere), -1. */
static int lock_try(Iter *it)
{
	PyObject *r = PyObject_Call(it->acquire, args_false, NULL);
	int t;

	if (!r)
		return -1;
	t = PyObject_IsTrue(r);
	Py_DECREF(r);
	return t;
}

/* Whether the fast path may run now (the Loader's lock held): what
 * _EpochIter._next checks before its reuse path, all false (a closed
 * Loader has a new _gen; a forked child counted a fork since _arm). 1 yes,
 * 0 no, -1 error. */
static int may_run(Iter *it)
{
	PyObject *g;
	int eq;

	if (!it->fn || it->forks != forks || it->fast != Py_True || it->pending != Py_None ||
	    it->done != Py_False)
		return 0;
	g = PyObject_GetAttr(it->loader, s_gen);
	if (!g)
		return -1;
	eq = PyObject_RichCompareBool(g, it->gen, Py_EQ);
	Py_DECREF(g);
	if (eq <= 0)
		return eq;
	g = PyObject_GetAttr(it->stream, s_st);
	if (!g)
		return -1;
	eq = g == it->st;
	Py_DECREF(g);
	return eq;
}

/* The entry of the slot just delivered when its tensors can be handed out
 * as they are (the same addresses, the same C batch: its sig, the spans
 * then the batch as native u64s, is this delivery's), taken out of the
 * cache; NULL with no error when not (the Python path decides then). */
static PyObject *cached_entry(Iter *it, PyObject *cache)
{
	uint64_t *desc = it->desc;
	size_t n = 2 * (size_t)it->nspans;
	PyObject *key, *e, *sig;
	char *p;
	Py_ssize_t len;
	int ok;

	key = PyLong_FromUnsignedLongLong(desc[3]);
	if (!key)
		return NULL;
	e = PyDict_GetItem(cache, key);   /* borrowed */
	if (!e) {
		Py_DECREF(key);
		return NULL;
	}
	sig = PyObject_GetAttr(e, s_sig);
	if (!sig || PyBytes_AsStringAndSize(sig, &p, &len) < 0) {
		Py_XDECREF(sig);
		Py_DECREF(key);
		return NULL;
	}
	ok = (size_t)len == (n + 1) * sizeof(uint64_t) &&
	     memcmp(p, desc + DESC_WORDS, n * sizeof(uint64_t)) == 0 &&
	     memcmp(p + n * sizeof(uint64_t), &(uint64_t){(uintptr_t)*it->bp},
		    sizeof(uint64_t)) == 0;
	Py_DECREF(sig);
	if (!ok) {
		Py_DECREF(key);
		return NULL;
	}
	Py_INCREF(e);
	if (PyDict_DelItem(cache, key) < 0) {
		Py_DECREF(e);
		e = NULL;
	}
	Py_DECREF(key);
	return e;
}

/* _reuse's delivery of a cached entry's slot (_batch._reused_batch's
 * first branch): held again, counted, queued for detach_oldest. */
static int redeliver(Iter *it, PyObject *slot)
{
	PyObject *r, *ref;
	Py_ssize_t len;
	int bad;

	if (PyObject_SetAttr(slot, s_held, Py_True) < 0)
		return -1;
	r = PyObject_CallNoArgs(it->s_acq);
	if (!r)
		return -1;
	Py_DECREF(r);
	bad = attr_add(it->stream, s_refs, 1) < 0 || attr_add(it->stream, s_held, 1) < 0;
	r = PyObject_CallNoArgs(it->s_rel);
	if (!r || bad) {
		Py_XDECREF(r);
		return -1;
	}
	Py_DECREF(r);
	ref = PyObject_GetAttr(slot, s_ref);
	r = ref ? PyObject_CallFunctionObjArgs(it->append, ref, NULL) : NULL;
	Py_XDECREF(ref);
	if (!r)
		return -1;
	Py_DECREF(r);
	len = PyObject_Size(it->slots);
	if (len < 0)
		return -1;
	if (len > it->slots_max) {
		r = PyObject_CallMethodObjArgs(it->stream, s_tidy, NULL);
		if (!r)
			return -1;
		Py_DECREF(r);
	}
	return 0;
}

static int set_u64(PyObject *o, PyObject *name, uint64_t v)
{
	PyObject *x = PyLong_FromUnsignedLongLong(v);
	int r;

	if (!x)
		return -1;
	r = PyObject_SetAttr(o, name, x);
	Py_DECREF(x);
	return r;
}

/* The Batch of entry e (its slot delivered again): what _reused_batch
 * makes, when no sample was replaced or dropped. */
static PyObject *make_batch(Iter *it, PyObject *e)
{
	uint64_t *desc = it->desc;
	PyObject *items, *slot, *batch;

	items = PyObject_GetAttr(e, s_items);
	if (!items)
		return NULL;
	batch = PyObject_CallFunctionObjArgs(it->batch_type, items, NULL);
	Py_DECREF(items);
	if (!batch)
		return NULL;
	slot = PyObject_GetAttr(e, s_slot);
	if (!slot || PyObject_SetAttr(batch, s__slot, slot) < 0 ||
	    PyObject_SetAttr(batch, s__entry, e) < 0 ||
	    set_u64(batch, s_epoch, desc[0]) < 0 || set_u64(batch, s_index, desc[1]) < 0 ||
	    PyObject_SetAttr(batch, s_padded, desc[4] == 1 ? Py_True : Py_False) < 0 ||
	    PyObject_SetAttr(batch, s__torch, it->torch) < 0 ||
	    PyObject_SetAttr(batch, s_replaced, empty) < 0 ||
	    PyObject_SetAttr(batch, s_dropped, empty) < 0) {
		Py_XDECREF(slot);
		Py_DECREF(batch);
		return NULL;
	}
	Py_DECREF(slot);
	return batch;
}

/* The ready path, the Loader's lock held and may_run() true. */
static PyObject *ready(Iter *it)
{
	PyObject *note_o, *e, *batch, *r_o;
	uint64_t note;
	int r;

	note_o = PyObject_GetAttr(it->stream, s_note_ns);
	if (!note_o)
		return NULL;
	note = PyLong_AsUnsignedLongLong(note_o);
	Py_DECREF(note_o);
	if (PyErr_Occurred() || PyObject_SetAttr(it->stream, s_note_ns, zero) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	r = it->fn(it->st_ptr, 0, note, it->bp, (struct feed_batch_desc *)it->desc,
		   (struct feed_field_span *)(it->desc + DESC_WORDS), it->nspans);
	Py_END_ALLOW_THREADS
	if (r == 0 && it->desc[5] == 0 && it->desc[6] == 0) {
		e = cached_entry(it, it->cache);
		if (e) {
			PyObject *slot = PyObject_GetAttr(e, s_slot);

			batch = slot && redeliver(it, slot) == 0 ? make_batch(it, e) : NULL;
			Py_XDECREF(slot);
			Py_DECREF(e);
			if (!batch)
				return NULL;
			/* another epoch's batch: _check raises, naming both */
			if (!PyLong_Check(it->epoch) ||
			    it->desc[0] != PyLong_AsUnsignedLongLong(it->epoch)) {
				PyObject *s, *out;

				PyErr_Clear();   /* a negative _epoch: not this batch's */
				s = PyObject_GetAttr(batch, s__slot);

				out = s ? meth((PyObject *)it, s__check, batch, s) : NULL;
				Py_XDECREF(s);
				Py_DECREF(batch);
				return out;
			}
			return batch;
		}
		if (PyErr_Occurred())
			return NULL;
	}
	r_o = PyLong_FromLong(r);
	if (!r_o)
		return NULL;
	batch = meth((PyObject *)it, s__delivered, r_o, NULL);
	Py_DECREF(r_o);
	return batch;
}

/* _EpochIter._next's finally: the loop's time in next() noted on the
 * Loader's stream of now, the lock let go. */
static void leave(Iter *it, uint64_t t0)
{
	PyObject *exc_t, *exc_v, *exc_tb, *box, *s = NULL, *r;

	PyErr_Fetch(&exc_t, &exc_v, &exc_tb);
	box = PyObject_GetAttr(it->loader, s__box);
	if (box) {
		s = PySequence_GetItem(box, 0);
		Py_DECREF(box);
	}
	if (s && s != Py_None && attr_add(s, s_note_ns, (long)(now_ns() - t0)) < 0)
		PyErr_WriteUnraisable((PyObject *)it);
	Py_XDECREF(s);
	PyErr_Clear();
	r = PyObject_CallNoArgs(it->release);
	if (!r)
		PyErr_WriteUnraisable((PyObject *)it);
	Py_XDECREF(r);
	PyErr_Restore(exc_t, exc_v, exc_tb);
}

static PyObject *iter_next(PyObject *self)
{
	Iter *it = (Iter *)self;
	uint64_t t0 = now_ns();
	PyObject *out;
	int t;

	if (it->fn && it->loader) {
		t = lock_try(it);
		if (t < 0)
			return NULL;
		if (t) {
			t = may_run(it);
			if (t > 0) {
				out = ready(it);
				leave(it, t0);
				return out;
			}
			leave(it, t0);   /* the Python path takes it again */
			if (t < 0)
				return NULL;
		}
	}
	return PyObject_CallMethodObjArgs(self, s__next, NULL);
}

/* lock.acquire and lock.release, bound: 0 or -1 */
static int lock_methods(PyObject *lock, PyObject **acq, PyObject **rel)
{
	PyObject *a = PyObject_GetAttr(lock, s_acquire);
	PyObject *r = a ? PyObject_GetAttr(lock, s_release) : NULL;

	if (!r) {
		Py_XDECREF(a);
		return -1;
	}
	SET_REF(*acq, a);
	SET_REF(*rel, r);
	return 0;
}

/* The stream's objects the ready path uses (self._stream's): its
 * slots_max, cache, deque of slots and its append, its lock's methods.
 * 0 or -1. */
static int arm_stream(Iter *it)
{
	PyObject *max, *cache, *slots, *append, *slock;
	int r;

	max = PyObject_GetAttr(it->stream, s_slots_max);
	if (!max)
		return -1;
	it->slots_max = PyLong_AsSsize_t(max);
	Py_DECREF(max);
	if (it->slots_max < 0 && PyErr_Occurred())
		return -1;
	cache = PyObject_GetAttr(it->stream, s_cache);
	if (!cache)
		return -1;
	SET_REF(it->cache, cache);
	if (!PyDict_Check(cache)) {
		PyErr_SetString(PyExc_TypeError, "_arm: the stream's cache is not a dict");
		return -1;
	}
	slots = PyObject_GetAttr(it->stream, s_slots);
	if (!slots)
		return -1;
	SET_REF(it->slots, slots);
	append = PyObject_GetAttr(slots, s_append);
	if (!append)
		return -1;
	SET_REF(it->append, append);
	slock = PyObject_GetAttr(it->stream, s_lock);
	if (!slock)
		return -1;
	r = lock_methods(slock, &it->s_acq, &it->s_rel);
	Py_DECREF(slock);
	return r;
}

/* _arm(fn, st, st_ptr, bp, desc, nspans, lock, batch_type, torch): the
 * stream is self._stream, set before */
static PyObject *iter_arm(PyObject *self, PyObject *args)
{
	Iter *it = (Iter *)self;
	unsigned long long fn, st_ptr, bp, desc;
	unsigned int nspans;
	PyObject *st, *lock, *batch_type, *torch;

	if (!PyArg_ParseTuple(args, "KOKKKIOOO", &fn, &st, &st_ptr, &bp, &desc, &nspans,
			      &lock, &batch_type, &torch))
		return NULL;
	if (!fn || !st_ptr || !bp || !desc || !it->stream) {
		PyErr_SetString(PyExc_ValueError, "_arm: a NULL address or no _stream");
		return NULL;
	}
	it->fn = NULL;
	if (arm_stream(it) < 0 || lock_methods(lock, &it->acquire, &it->release) < 0)
		return NULL;
	Py_INCREF(st);
	SET_REF(it->st, st);
	Py_INCREF(batch_type);
	SET_REF(it->batch_type, batch_type);
	Py_INCREF(torch);
	SET_REF(it->torch, torch);
	it->st_ptr = (struct feed_stream *)(uintptr_t)st_ptr;
	it->bp = (struct feed_batch **)(uintptr_t)bp;
	it->desc = (uint64_t *)(uintptr_t)desc;
	it->nspans = nspans;
	it->forks = forks;
	it->fn = (next_desc_fn)(uintptr_t)fn;
	Py_RETURN_NONE;
}

static PyObject *iter_armed(PyObject *self, PyObject *unused)
{
	(void)unused;
	return PyBool_FromLong(((Iter *)self)->fn != NULL);
}

/* The counts _reuse compares, the C way: the slot's references (less the
 * held_slot ones the caller holds), then per tensor its references and the
 * strong counts of its TensorImpl and StorageImpl (e.addrs: the words'
 * addresses, valid while the tensor lives; low 32 bits, _reuse._STRONG).
 * A new list, or NULL. */
static PyObject *snap(PyObject *e, Py_ssize_t held_slot)
{
	PyObject *slot, *ts = NULL, *addrs = NULL, *out = NULL;
	Py_ssize_t n;

	slot = PyObject_GetAttr(e, s_slot);
	if (!slot)
		return NULL;
	ts = PyObject_GetAttr(e, s_ts);
	addrs = ts ? PyObject_GetAttr(e, s_addrs) : NULL;
	if (!addrs || !PyTuple_Check(ts) || !PyTuple_Check(addrs) ||
	    PyTuple_Size(addrs) != 2 * PyTuple_Size(ts)) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "snapshot: an _Entry's ts and addrs disagree");
		goto out;
	}
	n = PyTuple_Size(ts);
	out = PyList_New(1 + 3 * n);
	if (!out)
		goto out;
	/* less this function's own reference */
	PyList_SetItem(out, 0, PyLong_FromSsize_t(Py_REFCNT(slot) - 1 - held_slot));
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *row = PyTuple_GetItem(ts, i), *t = row ? PyTuple_GetItem(row, 0) : NULL;
		unsigned long long a[2];

		if (!t)
			goto bad;
		for (int j = 0; j < 2; j++) {
			a[j] = PyLong_AsUnsignedLongLong(PyTuple_GetItem(addrs, 2 * i + j));
			if (PyErr_Occurred())
				goto bad;
		}
		PyList_SetItem(out, 1 + 3 * i, PyLong_FromSsize_t(Py_REFCNT(t)));
		PyList_SetItem(out, 2 + 3 * i, PyLong_FromUnsignedLongLong(
			*(volatile uint64_t *)(uintptr_t)a[0] & 0xFFFFFFFFu));
		PyList_SetItem(out, 3 + 3 * i, PyLong_FromUnsignedLongLong(
			*(volatile uint64_t *)(uintptr_t)a[1] & 0xFFFFFFFFu));
	}
	if (PyErr_Occurred())
		goto bad;
	goto out;
bad:
	Py_CLEAR(out);
out:
	Py_DECREF(slot);
	Py_XDECREF(ts);
	Py_XDECREF(addrs);
	return out;
}

static PyObject *fi_snapshot(PyObject *mod, PyObject *args)
{
	PyObject *e;
	Py_ssize_t held = 0;

	(void)mod;
	if (!PyArg_ParseTuple(args, "O|n", &e, &held))
		return NULL;
	return snap(e, held);
}

/* _reuse._whole: the dying batch holds each of e's tensors under its own
 * key, and nothing else. 1, 0, -1. */
static int whole(PyObject *e, PyObject *batch)
{
	PyObject *items = PyObject_GetAttr(e, s_items), *k, *v;
	Py_ssize_t pos = 0;
	int ok;

	if (!items)
		return -1;
	ok = PyDict_Check(items) && PyDict_Check(batch) && PyDict_Size(batch) == PyDict_Size(items);
	while (ok && PyDict_Next(items, &pos, &k, &v))
		ok = PyDict_GetItem(batch, k) == v;
	Py_DECREF(items);
	return ok;
}

/* _reuse._meta(e.items) == e.meta: no tensor's shape, strides, offset or
 * requires_grad changed in place. 1, 0, -1. */
static int meta_same(PyObject *e)
{
	PyObject *ts = PyObject_GetAttr(e, s_ts), *meta = ts ? PyObject_GetAttr(e, s_meta) : NULL;
	Py_ssize_t n;
	int ok;

	if (!meta) {
		Py_XDECREF(ts);
		return -1;
	}
	ok = PyTuple_Check(ts) && PyList_Check(meta) && PyList_Size(meta) == PyTuple_Size(ts);
	n = ok ? PyTuple_Size(ts) : 0;
	for (Py_ssize_t i = 0; ok > 0 && i < n; i++) {
		PyObject *t = PyTuple_GetItem(PyTuple_GetItem(ts, i), 0);
		PyObject *m = PyList_GetItem(meta, i), *v[4];

		if (!PyTuple_Check(m) || PyTuple_Size(m) != 4) {
			ok = 0;
			break;
		}
		v[0] = PyObject_GetAttr(t, s_shape);
		v[1] = v[0] ? PyObject_CallMethodObjArgs(t, s_stride, NULL) : NULL;
		v[2] = v[1] ? PyObject_CallMethodObjArgs(t, s_storage_offset, NULL) : NULL;
		v[3] = v[2] ? PyObject_GetAttr(t, s_requires_grad) : NULL;
		for (int j = 0; j < 4; j++) {
			if (ok > 0)
				ok = v[j] ? PyObject_RichCompareBool(v[j], PyTuple_GetItem(m, j), Py_EQ) : -1;
			Py_XDECREF(v[j]);
		}
	}
	Py_DECREF(ts);
	Py_DECREF(meta);
	return ok;
}

/* _Stream.release(b): feed_release(b), then the stream's counts; closes the
 * stream when that was its last reference. 0 or -1. */
static int stream_release(PyObject *s, PyObject *b)
{
	PyObject *fg = PyObject_GetAttr(s, s_stream_fork_gen), *now, *lock, *r;
	unsigned long long bp;
	int same, rc, last = 0;

	if (!fg)
		return -1;
	now = PyDict_GetItem(stream_globals, s_fork_gen);   /* borrowed */
	same = now ? PyObject_RichCompareBool(fg, now, Py_EQ) : -1;
	Py_DECREF(fg);
	if (same <= 0)
		return same;   /* a forked child: the slot is the parent's */
	bp = PyLong_AsUnsignedLongLong(b);
	if (PyErr_Occurred())
		return -1;
	rc = feed_release_fn((struct feed_batch *)(uintptr_t)bp);
	if (rc < 0)
		return 0;      /* released already: nothing of ours to count */
	lock = PyObject_GetAttr(s, s_lock);
	r = lock ? PyObject_CallMethodObjArgs(lock, s_acquire, NULL) : NULL;
	if (!r) {
		Py_XDECREF(lock);
		return -1;
	}
	Py_DECREF(r);
	rc = attr_add(s, s_held, -1) < 0 || attr_add(s, s_refs, -1) < 0 ? -1 : 0;
	if (rc == 0) {
		PyObject *refs = PyObject_GetAttr(s, s_refs);

		rc = refs ? 0 : -1;
		last = refs && PyLong_AsLong(refs) == 0;
		Py_XDECREF(refs);
	}
	r = PyObject_CallMethodObjArgs(lock, s_release, NULL);
	Py_DECREF(lock);
	if (!r)
		return -1;
	Py_DECREF(r);
	if (rc == 0 && last) {
		r = PyObject_CallMethodObjArgs(s, s_close, NULL);
		if (!r)
			return -1;
		Py_DECREF(r);
	}
	return rc;
}

/* s.cache[e.k] = e: 1 or -1 */
static int cache_put(PyObject *s, PyObject *e)
{
	PyObject *cache = PyObject_GetAttr(s, s_cache);
	PyObject *k = cache ? PyObject_GetAttr(e, s_k) : NULL;
	int t = k && PyObject_SetItem(cache, k, e) == 0 ? 1 : -1;

	Py_XDECREF(cache);
	Py_XDECREF(k);
	return t;
}

/* o.name() with any error set before kept (the call's own dropped then):
 * 0, or -1 when the call failed. */
static int call_keeping_error(PyObject *o, PyObject *name)
{
	PyObject *et, *ev, *etb, *r;

	PyErr_Fetch(&et, &ev, &etb);
	r = PyObject_CallMethodObjArgs(o, name, NULL);
	Py_XDECREF(r);
	if (et)
		PyErr_Restore(et, ev, etb);
	return r ? 0 : -1;
}

/* dropped()'s decision, s.reuse_lock held and slot held once by the
 * caller: when nothing but the dying batch holds e's tensors (the counts
 * say how many hold each, not who: a tensor moved out of the dict,
 * batch.pop("label"), keeps the dict's count, hence whole()), the slot
 * goes back and e into the cache unless a tensor changed in place. 1, 0
 * (kept), -1. */
static int drop_locked(PyObject *e, PyObject *batch, PyObject *slot, PyObject *s)
{
	PyObject *now, *free1, *st, *b;
	int t = is_true_attr(slot, s_held);

	if (t > 0)
		t = whole(e, batch);
	if (t > 0) {
		now = snap(e, 1);
		free1 = now ? PyObject_GetAttr(e, s_free1) : NULL;
		t = free1 ? PyObject_RichCompareBool(now, free1, Py_EQ) : -1;
		Py_XDECREF(now);
		Py_XDECREF(free1);
	}
	if (t <= 0)
		return t;
	if (PyObject_SetAttr(slot, s_held, Py_False) < 0)
		return -1;
	st = PyObject_GetAttr(s, s_st);
	t = st ? (st != Py_None ? meta_same(e) : 0) : -1;
	Py_XDECREF(st);
	if (t > 0)
		t = cache_put(s, e);
	b = t >= 0 ? PyObject_GetAttr(slot, s_b) : NULL;
	t = b && stream_release(s, b) == 0 ? 1 : -1;
	Py_XDECREF(b);
	return t;
}

/* dropped(e, batch): feedclient._reuse.dropped for an entry settled with
 * snapshot(), from Batch.__del__ on any thread: drop_locked() under the
 * stream's reuse_lock when the slot is still held; else nothing here (the
 * _Slot's __del__ releases it with the last tensor). */
static PyObject *fi_dropped(PyObject *mod, PyObject *args)
{
	PyObject *e, *batch, *slot, *s, *rl, *r;
	int t;

	(void)mod;
	if (!PyArg_ParseTuple(args, "OO", &e, &batch))
		return NULL;
	if (!feed_release_fn) {
		PyErr_SetString(PyExc_RuntimeError, "feedclient._fastiter: _setup() not called");
		return NULL;
	}
	slot = PyObject_GetAttr(e, s_slot);
	if (!slot)
		return NULL;
	s = PyObject_GetAttr(slot, s_stream);
	t = !s ? -1 : s == Py_None ? 0 : is_true_attr(slot, s_held);
	if (t > 0) {
		rl = PyObject_GetAttr(s, s_reuse_lock);
		r = rl ? PyObject_CallMethodObjArgs(rl, s_acquire, NULL) : NULL;
		t = r ? drop_locked(e, batch, slot, s) : -1;
		if (r && call_keeping_error(rl, s_release) < 0)
			t = -1;
		Py_XDECREF(r);
		Py_XDECREF(rl);
	}
	Py_XDECREF(s);
	Py_DECREF(slot);
	if (t < 0) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_RuntimeError, "feedclient._fastiter.dropped failed");
		return NULL;
	}
	Py_RETURN_NONE;
}

/* _setup(feed_release's address, feedclient._stream's globals) */
static PyObject *fi_setup(PyObject *mod, PyObject *args)
{
	unsigned long long fn;
	PyObject *g;

	(void)mod;
	if (!PyArg_ParseTuple(args, "KO!", &fn, &PyDict_Type, &g))
		return NULL;
	if (!fn) {
		PyErr_SetString(PyExc_ValueError, "_setup: a NULL feed_release");
		return NULL;
	}
	Py_INCREF(g);
	SET_REF(stream_globals, g);
	feed_release_fn = (release_fn)(uintptr_t)fn;
	Py_RETURN_NONE;
}

static int iter_traverse(PyObject *self, visitproc visit, void *arg)
{
	Iter *it = (Iter *)self;

	Py_VISIT(Py_TYPE(self));
	Py_VISIT(it->loader);
	Py_VISIT(it->gen);
	Py_VISIT(it->epoch);
	Py_VISIT(it->stream);
	Py_VISIT(it->done);
	Py_VISIT(it->pending);
	Py_VISIT(it->failed);
	Py_VISIT(it->fast);
	Py_VISIT(it->st);
	Py_VISIT(it->acquire);
	Py_VISIT(it->release);
	Py_VISIT(it->batch_type);
	Py_VISIT(it->torch);
	Py_VISIT(it->s_acq);
	Py_VISIT(it->s_rel);
	Py_VISIT(it->slots);
	Py_VISIT(it->append);
	Py_VISIT(it->cache);
	return 0;
}

static int iter_clear(PyObject *self)
{
	Iter *it = (Iter *)self;

	it->fn = NULL;
	Py_CLEAR(it->loader);
	Py_CLEAR(it->gen);
	Py_CLEAR(it->epoch);
	Py_CLEAR(it->stream);
	Py_CLEAR(it->done);
	Py_CLEAR(it->pending);
	Py_CLEAR(it->failed);
	Py_CLEAR(it->fast);
	Py_CLEAR(it->st);
	Py_CLEAR(it->acquire);
	Py_CLEAR(it->release);
	Py_CLEAR(it->batch_type);
	Py_CLEAR(it->torch);
	Py_CLEAR(it->s_acq);
	Py_CLEAR(it->s_rel);
	Py_CLEAR(it->slots);
	Py_CLEAR(it->append);
	Py_CLEAR(it->cache);
	return 0;
}

static void iter_dealloc(PyObject *self)
{
	PyTypeObject *tp = Py_TYPE(self);
	freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	PyObject_GC_UnTrack(self);
	iter_clear(self);
	tp_free(self);
	Py_DECREF(tp);
}

static PyObject *iter_self(PyObject *self)
{
	Py_INCREF(self);
	return self;
}

#define MEMBER(n, f) {n, T_OBJECT, offsetof(Iter, f), 0, NULL}
static PyMemberDef iter_members[] = {
	MEMBER("_loader", loader), MEMBER("_gen", gen), MEMBER("_epoch", epoch),
	MEMBER("_stream", stream), MEMBER("_done", done), MEMBER("_pending", pending),
	MEMBER("_failed", failed), MEMBER("_fast", fast),
	{NULL, 0, 0, 0, NULL},
};

static PyMethodDef iter_methods[] = {
	{"_arm", iter_arm, METH_VARARGS, "Arms the C path (feedclient._epoch)."},
	{"_armed", iter_armed, METH_NOARGS, "Whether the C path is armed."},
	{NULL, NULL, 0, NULL},
};

static PyType_Slot iter_slots[] = {
	{Py_tp_doc, "The C part of feedclient._epoch._EpochIter (next() with a batch ready)."},
	{Py_tp_traverse, iter_traverse},
	{Py_tp_clear, iter_clear},
	{Py_tp_dealloc, iter_dealloc},
	{Py_tp_iter, iter_self},
	{Py_tp_iternext, iter_next},
	{Py_tp_members, iter_members},
	{Py_tp_methods, iter_methods},
	{0, NULL},
};

static PyType_Spec iter_spec = {
	.name = "feedclient._fastiter.Iter",
	.basicsize = sizeof(Iter),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
	.slots = iter_slots,
};

static int intern(PyObject **p, const char *s)
{
	*p = PyUnicode_InternFromString(s);
	return *p ? 0 : -1;
}

static int fastiter_exec(PyObject *m)
{
	PyObject *tp;
	struct { PyObject **p; const char *s; } names[] = {
		{&s_sig, "sig"}, {&s_fork_gen, "_fork_gen"}, {&s_gen, "_gen"},
		{&s_st, "st"}, {&s_note_ns, "note_ns"}, {&s_cache, "cache"}, 
		{&s_slot, "slot"}, {&s_b, "b"}, {&s_held, "held"}, {&s_lock, "lock"},
		{&s_refs, "refs"}, {&s_slots, "slots"}, {&s_ref, "ref"},
		{&s_slots_max, "slots_max"}, {&s_items, "items"}, {&s__slot, "_slot"},
		{&s__entry, "_entry"}, {&s_epoch, "epoch"}, {&s_index, "index"},
		{&s_padded, "padded"}, {&s__torch, "_torch"}, {&s_replaced, "replaced"},
		{&s_dropped, "dropped"}, {&s__box, "_box"}, {&s_tidy, "tidy"},
		{&s_append, "append"}, {&s__next, "_next"}, {&s__delivered, "_delivered"},
		{&s__check, "_check"}, {&s_acquire, "acquire"}, {&s_release, "release"},
		{&s_stream, "stream"}, {&s_reuse_lock, "reuse_lock"}, {&s_ts, "ts"},
		{&s_addrs, "addrs"}, {&s_meta, "meta"}, {&s_free1, "free1"}, {&s_k, "k"},
		{&s_shape, "shape"}, {&s_stride, "stride"}, {&s_storage_offset, "storage_offset"},
		{&s_requires_grad, "requires_grad"}, {&s_close, "_close"},
		{&s_stream_fork_gen, "fork_gen"},
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (intern(names[i].p, names[i].s) < 0)
			return -1;
	args_false = Py_BuildValue("(O)", Py_False);
	zero = PyLong_FromLong(0);
	empty = PyTuple_New(0);
	if (!args_false || !zero || !empty)
		return -1;
	if (pthread_atfork(NULL, NULL, forked_child) != 0) {
		PyErr_SetString(PyExc_RuntimeError, "feedclient._fastiter: pthread_atfork failed");
		return -1;
	}
	tp = PyType_FromSpec(&iter_spec);
	if (!tp)
		return -1;
	if (PyModule_AddObject(m, "Iter", tp) < 0) {
		Py_DECREF(tp);
		return -1;
	}
	return 0;
}

static PyModuleDef_Slot fastiter_slots[] = {
	{Py_mod_exec, fastiter_exec},
	{0, NULL},
};

static PyMethodDef fastiter_methods[] = {
	{"snapshot", fi_snapshot, METH_VARARGS,
	 "snapshot(entry, held_slot=0): the counts dropped() compares (feedclient._reuse)."},
	{"dropped", fi_dropped, METH_VARARGS,
	 "dropped(entry, batch): feedclient._reuse.dropped for entries settled with snapshot()."},
	{"_setup", fi_setup, METH_VARARGS,
	 "_setup(feed_release address, feedclient._stream globals)."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastiter_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "feedclient._fastiter",
	.m_doc = "next() of a feedclient Loader with a batch ready, and its release, in C.",
	.m_size = 0,
	.m_methods = fastiter_methods,
	.m_slots = fastiter_slots,
};

PyMODINIT_FUNC PyInit__fastiter(void)
{
	return PyModuleDef_Init(&fastiter_module);
}
