/* Native core of the what-if replay (traceinsight/whatif.py, ``replay``): one sequential pass over the replayed
 * events of a dependency graph.
 *
 * Why C: the pass is inherently sequential (each task's start reads the replayed ends of its predecessors) and a
 * step window holds hundreds of thousands of tasks; in Python the loop and the conversion of the graph's arrays
 * to lists cost a few hundred ms per replay, here a few ms. The pure-Python loop in whatif.py is the reference:
 * both give the same numbers (tests/test_whatif_native.py holds them to it).
 *
 * Inputs are the graph's flat arrays as contiguous buffers (int64 unless noted; n = number of nodes):
 *   window (m)        node id of a task start, or -1 - id for the return of a blocking call
 *   ntype (n)         node type; BLOCKING (2) calls end at their return event, not at start + dur
 *   prev, cross, launch (n), -1 for none; prev_lat, cross_lat, launch_lat, dur, own (n)
 *   wait_on (n, bool bytes)
 *   end_ptr (e + 1), end_waits: for the e-th return event in window order, the GPU tasks it waits for are
 *                     end_waits[end_ptr[e] .. end_ptr[e + 1])
 *   ns, ne (n, writable): the original start / end on entry, the replayed ones on return.
 * Every index is checked before use (ValueError); a sum that would overflow int64 raises OverflowError, as the
 * pure path does when it converts its result back to int64. Plain C99 and the CPython API; no numpy. The GIL is
 * released during the pass.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BLOCKING 2

enum { OK = 0, BAD_INDEX = 1, OVERFLOW = 2 };

static int add_ok(int64_t a, int64_t b, int64_t *out)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return 0;
    *out = a + b;
    return 1;
}

typedef struct {
    const int64_t *window, *ntype, *prev, *plat, *cross, *clat, *launch, *llat, *dur, *own, *end_ptr, *end_waits;
    const uint8_t *wait_on;
    int64_t *ns, *ne;
    Py_ssize_t n, m, e, nw;
} Replay;

static int run(const Replay *r)
{
    const Py_ssize_t n = r->n;
    Py_ssize_t ends = 0;
    for (Py_ssize_t k = 0; k < r->m; k++) {
        int64_t i = r->window[k];
        if (i < 0) { /* a blocking call returns */
            i = -1 - i;
            if (i >= n || ends >= r->e)
                return BAD_INDEX;
            int64_t own = r->own[i], e;
            if (!add_ok(r->ns[i], own, &e))
                return OVERFLOW;
            if (r->wait_on[i]) {
                int64_t a = r->end_ptr[ends], b = r->end_ptr[ends + 1];
                if (a < 0 || b < a || b > r->nw)
                    return BAD_INDEX;
                for (int64_t j = a; j < b; j++) {
                    int64_t w = r->end_waits[j], x;
                    if (w < 0 || w >= n)
                        return BAD_INDEX;
                    if (!add_ok(r->ne[w], own, &x))
                        return OVERFLOW;
                    if (x > e)
                        e = x;
                }
            }
            ends++;
            r->ne[i] = e;
            continue;
        }
        if (i >= n)
            return BAD_INDEX;
        int64_t t = 0, x;
        int have = 0;
        int64_t p = r->prev[i], c = r->cross[i], la = r->launch[i];
        if (p >= n || c >= n || la >= n)
            return BAD_INDEX;
        if (p >= 0) {
            if (!add_ok(r->ne[p], r->plat[i], &t))
                return OVERFLOW;
            have = 1;
        }
        if (c >= 0) {
            if (!add_ok(r->ne[c], r->clat[i], &x))
                return OVERFLOW;
            if (!have || x > t)
                t = x;
            have = 1;
        }
        if (la >= 0) {
            if (!add_ok(r->ns[la], r->llat[i], &x))
                return OVERFLOW;
            if (!have || x > t)
                t = x;
            have = 1;
        }
        if (!have)
            t = r->ns[i];
        r->ns[i] = t;
        if (r->ntype[i] != BLOCKING && !add_ok(t, r->dur[i], &r->ne[i]))
            return OVERFLOW;
    }
    return OK;
}

PyDoc_STRVAR(replay_doc,
             "replay(window, ntype, prev, prev_lat, cross, cross_lat, launch, launch_lat, dur, own, wait_on, end_ptr, "
             "end_waits, ns, ne) -> None\n\nReplay the window's events in order, writing the new starts and ends into "
             "ns and ne (see whatif.replay).");

static PyObject *replay(PyObject *self, PyObject *args)
{
    enum { NB = 15 };
    Py_buffer b[NB];
    memset(b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*y*y*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6],
                          &b[7], &b[8], &b[9], &b[10], &b[11], &b[12], &b[13], &b[14]))
        return NULL;
    PyObject *result = NULL;
    Replay r;
    const Py_ssize_t n = b[13].len / 8;
    int ok_sizes = b[13].len % 8 == 0 && b[14].len == b[13].len && b[0].len % 8 == 0 && b[11].len % 8 == 0 &&
                   b[11].len >= 8 && b[12].len % 8 == 0 && b[10].len == n;
    for (int k = 1; k <= 9; k++)
        ok_sizes = ok_sizes && b[k].len == 8 * n;
    if (!ok_sizes) {
        PyErr_SetString(PyExc_ValueError, "replay: arrays of mismatched sizes");
        goto done;
    }
    r.window = b[0].buf;
    r.ntype = b[1].buf;
    r.prev = b[2].buf;
    r.plat = b[3].buf;
    r.cross = b[4].buf;
    r.clat = b[5].buf;
    r.launch = b[6].buf;
    r.llat = b[7].buf;
    r.dur = b[8].buf;
    r.own = b[9].buf;
    r.wait_on = b[10].buf;
    r.end_ptr = b[11].buf;
    r.end_waits = b[12].buf;
    r.ns = b[13].buf;
    r.ne = b[14].buf;
    r.n = n;
    r.m = b[0].len / 8;
    r.e = b[11].len / 8 - 1;
    r.nw = b[12].len / 8;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run(&r);
    Py_END_ALLOW_THREADS
    if (rc == BAD_INDEX)
        PyErr_SetString(PyExc_ValueError, "replay: a node index is out of range");
    else if (rc == OVERFLOW)
        PyErr_SetString(PyExc_OverflowError, "replay: a replayed time does not fit in int64");
    else
        result = Py_NewRef(Py_None);
done:
    for (int k = 0; k < NB; k++)
        PyBuffer_Release(&b[k]);
    return result;
}

static PyMethodDef methods[] = {
    {"replay", replay, METH_VARARGS, replay_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_replay", "Native what-if replay pass (see whatif.replay for the pure-Python equivalent).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__replay(void) { return PyModule_Create(&module); }
