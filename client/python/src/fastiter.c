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
 * Limited API (abi3, CPython >= 3.11): one build serves every interpreter.
 * Threads: the Loader's thread, the GIL held except in feed_next_desc. */
#define Py_LIMITED_API 0x030B0000
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <time.h>

typedef int (*next_desc_fn)(void *st, int timeout_ms, uint64_t note_ns, void **ret,
			    uint64_t *desc, uint64_t *spans, uint32_t nfields);

enum { DESC_WORDS = 7 };   /* struct feed_batch_desc (feed/stream.h) */

typedef struct {
	PyObject_HEAD
	/* the attributes of _EpochIter (Python reads and writes them) */
	PyObject *loader, *gen, *epoch, *stream, *done, *pending, *failed, *fast;
	/* armed: all set, or fn NULL */
	next_desc_fn fn;
	PyObject *st;          /* the stream's c_void_p when armed */
	void *st_ptr;
	void **bp;             /* the stream's bp (c_void_p) */
	uint64_t *desc;        /* its descriptor, then 2 words per field */
	uint32_t nspans;
	PyObject *acquire, *release;   /* the Loader's lock's bound methods */
	PyObject *batch_type, *torch, *fork_dict;
	/* the stream's, fixed while its st is the armed one */
	PyObject *s_acq, *s_rel;       /* its lock's (refs and held) */
	PyObject *slots, *append;      /* its deque of slots delivered, and append */
	PyObject *cache;               /* slot number -> _Entry */
	Py_ssize_t slots_max;
} Iter;

/* interned names and constants, made once */
static PyObject *s_closed, *s_fork_gen, *s_gen, *s_st, *s_note_ns, *s_cache, *s_spans,
	*s_slot, *s_b, *s_held, *s_lock, *s_refs, *s_slots, *s_ref, *s_slots_max, *s_items,
	*s__slot, *s__entry, *s_epoch, *s_index, *s_padded, *s__torch, *s_replaced, *s_dropped,
	*s__box, *s_tidy, *s_append, *s__next, *s__delivered, *s__check, *s_acquire,
	*s_release;
static PyObject *args_false, *zero, *empty;

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
 * _EpochIter._next checks before its reuse path, all false. 1 yes, 0 no,
 * -1 error. */
static int may_run(Iter *it)
{
	PyObject *g, *fg;
	int t, eq;

	if (!it->fn || !it->fast || it->fast != Py_True || it->pending != Py_None ||
	    it->done != Py_False)
		return 0;
	t = is_true_attr(it->loader, s_closed);
	if (t)
		return t < 0 ? -1 : 0;
	g = PyObject_GetAttr(it->loader, s_fork_gen);
	if (!g)
		return -1;
	fg = PyDict_GetItem(it->fork_dict, s_fork_gen);   /* borrowed */
	eq = fg ? PyObject_RichCompareBool(g, fg, Py_EQ) : 0;
	Py_DECREF(g);
	if (eq <= 0)
		return eq;
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
 * as they are (the same addresses, the same C batch), taken out of the
 * cache; NULL with no error when not (the Python path decides then). */
static PyObject *cached_entry(Iter *it, PyObject *cache)
{
	uint64_t *desc = it->desc, *spans = desc + DESC_WORDS;
	PyObject *key, *e, *sp = NULL, *slot = NULL, *b = NULL;
	Py_ssize_t n;
	int ok = 0;

	key = PyLong_FromUnsignedLongLong(desc[3]);
	if (!key)
		return NULL;
	e = PyDict_GetItem(cache, key);   /* borrowed */
	if (!e)
		goto out;
	sp = PyObject_GetAttr(e, s_spans);
	if (!sp || !PyList_Check(sp))
		goto out;
	n = PyList_Size(sp);
	if (n != 2 * (Py_ssize_t)it->nspans)
		goto out;
	for (Py_ssize_t i = 0; i < n; i++) {
		unsigned long long v = PyLong_AsUnsignedLongLong(PyList_GetItem(sp, i));

		if (v == (unsigned long long)-1 && PyErr_Occurred())
			goto out;
		if (v != spans[i])
			goto out;
	}
	slot = PyObject_GetAttr(e, s_slot);
	b = slot ? PyObject_GetAttr(slot, s_b) : NULL;
	if (!b)
		goto out;
	{
		unsigned long long bv = PyLong_AsUnsignedLongLong(b);

		if (bv == (unsigned long long)-1 && PyErr_Occurred())
			goto out;
		ok = bv == (unsigned long long)(uintptr_t)*it->bp;
	}
out:
	Py_XDECREF(sp);
	Py_XDECREF(slot);
	Py_XDECREF(b);
	if (PyErr_Occurred()) {
		Py_DECREF(key);
		return NULL;
	}
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
	r = it->fn(it->st_ptr, 0, note, it->bp, it->desc, it->desc + DESC_WORDS, it->nspans);
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
			if (it->desc[0] != PyLong_AsUnsignedLongLong(it->epoch)) {
				PyObject *s = PyObject_GetAttr(batch, s__slot), *out;

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

/* _arm(fn, st, st_ptr, bp, desc, nspans, lock, batch_type, torch,
 *      fork_globals): the stream is self._stream, set before */
static PyObject *iter_arm(PyObject *self, PyObject *args)
{
	Iter *it = (Iter *)self;
	unsigned long long fn, st_ptr, bp, desc;
	unsigned int nspans;
	PyObject *st, *lock, *batch_type, *torch, *fork_dict, *slock, *slots, *append, *cache;
	PyObject *max;
	Py_ssize_t slots_max;

	if (!PyArg_ParseTuple(args, "KOKKKIOOOO!", &fn, &st, &st_ptr, &bp, &desc, &nspans,
			      &lock, &batch_type, &torch, &PyDict_Type, &fork_dict))
		return NULL;
	if (!fn || !st_ptr || !bp || !desc || !it->stream) {
		PyErr_SetString(PyExc_ValueError, "_arm: a NULL address or no _stream");
		return NULL;
	}
	max = PyObject_GetAttr(it->stream, s_slots_max);
	if (!max)
		return NULL;
	slots_max = PyLong_AsSsize_t(max);
	Py_DECREF(max);
	if (slots_max < 0 && PyErr_Occurred())
		return NULL;
	cache = PyObject_GetAttr(it->stream, s_cache);
	if (!cache)
		return NULL;
	if (!PyDict_Check(cache)) {
		Py_DECREF(cache);
		PyErr_SetString(PyExc_TypeError, "_arm: the stream's cache is not a dict");
		return NULL;
	}
	SET_REF(it->cache, cache);
	slots = PyObject_GetAttr(it->stream, s_slots);
	if (!slots)
		return NULL;
	SET_REF(it->slots, slots);
	append = PyObject_GetAttr(slots, s_append);
	if (!append)
		return NULL;
	SET_REF(it->append, append);
	slock = PyObject_GetAttr(it->stream, s_lock);
	if (!slock)
		return NULL;
	if (lock_methods(slock, &it->s_acq, &it->s_rel) < 0 ||
	    lock_methods(lock, &it->acquire, &it->release) < 0) {
		Py_DECREF(slock);
		return NULL;
	}
	Py_DECREF(slock);
	it->slots_max = slots_max;
	Py_INCREF(st);
	SET_REF(it->st, st);
	Py_INCREF(batch_type);
	SET_REF(it->batch_type, batch_type);
	Py_INCREF(torch);
	SET_REF(it->torch, torch);
	Py_INCREF(fork_dict);
	SET_REF(it->fork_dict, fork_dict);
	it->st_ptr = (void *)(uintptr_t)st_ptr;
	it->bp = (void **)(uintptr_t)bp;
	it->desc = (uint64_t *)(uintptr_t)desc;
	it->nspans = nspans;
	it->fn = (next_desc_fn)(uintptr_t)fn;
	Py_RETURN_NONE;
}

static PyObject *iter_armed(PyObject *self, PyObject *unused)
{
	(void)unused;
	return PyBool_FromLong(((Iter *)self)->fn != NULL);
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
	Py_VISIT(it->fork_dict);
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
	Py_CLEAR(it->fork_dict);
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
		{&s_closed, "_closed"}, {&s_fork_gen, "_fork_gen"}, {&s_gen, "_gen"},
		{&s_st, "st"}, {&s_note_ns, "note_ns"}, {&s_cache, "cache"}, {&s_spans, "spans"},
		{&s_slot, "slot"}, {&s_b, "b"}, {&s_held, "held"}, {&s_lock, "lock"},
		{&s_refs, "refs"}, {&s_slots, "slots"}, {&s_ref, "ref"},
		{&s_slots_max, "slots_max"}, {&s_items, "items"}, {&s__slot, "_slot"},
		{&s__entry, "_entry"}, {&s_epoch, "epoch"}, {&s_index, "index"},
		{&s_padded, "padded"}, {&s__torch, "_torch"}, {&s_replaced, "replaced"},
		{&s_dropped, "dropped"}, {&s__box, "_box"}, {&s_tidy, "tidy"},
		{&s_append, "append"}, {&s__next, "_next"}, {&s__delivered, "_delivered"},
		{&s__check, "_check"}, {&s_acquire, "acquire"}, {&s_release, "release"},
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (intern(names[i].p, names[i].s) < 0)
			return -1;
	args_false = Py_BuildValue("(O)", Py_False);
	zero = PyLong_FromLong(0);
	empty = PyTuple_New(0);
	if (!args_false || !zero || !empty)
		return -1;
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

static struct PyModuleDef fastiter_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "feedclient._fastiter",
	.m_doc = "next() of a feedclient Loader with a batch ready, in C.",
	.m_size = 0,
	.m_slots = fastiter_slots,
};

PyMODINIT_FUNC PyInit__fastiter(void)
{
	return PyModuleDef_Init(&fastiter_module);
}
