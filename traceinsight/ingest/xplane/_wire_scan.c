/* Native walker for the XSpace protobuf wire format: the planes' metadata, and lines, events and the stats the
 * reader uses as flat arrays.
 *
 * Why C: an xplane.pb holds millions of small XEvent/XStat messages. upb can only hand them to Python as one object
 * each, and column-wise numpy decoding needs a dozen passes over them; a single sequential walk over the bytes is
 * an order of magnitude cheaper. No Python object is made per event: events come back as int64 columns in one
 * bytes object, wanted stats as fixed-size records; only stat strings the reader keeps become Python objects.
 * The plane level (names, metadata maps, plane stats) is walked here too, so a load needs no protobuf runtime
 * (importing it and building the message classes costs more than decoding a small capture).
 *
 * Safety: the input is untrusted. Every varint, length and fixed-width read is bounds-checked against the end of
 * the enclosing message before the bytes are touched; anything malformed raises ValueError (the caller turns it
 * into TraceReadError). Plain C99 and the CPython API; no numpy.
 *
 * Field numbers (tensorflow/tsl/profiler/protobuf/xplane.proto):
 *   XSpace: planes=1 errors=2 warnings=3 hostnames=4
 *   XPlane: name=2 lines=3 event_metadata=4 (map<int64, XEventMetadata{name=2}>) stat_metadata=5 (map<int64,
 *           XStatMetadata{name=2}>) stats=6; a map entry is {key=1, value=2}
 *   XLine: id=1 name=2 timestamp_ns=3 events=4 display_name=11
 *   XEvent: metadata_id=1 offset_ps=2 | num_occurrences=5 (oneof), duration_ps=3 stats=4
 *   XStat: metadata_id=1, value oneof: double=2 uint64=3 int64=4 str=5 bytes=6 ref=7
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One wanted stat: the owning event (global index), the key code the caller chose for its metadata id, the oneof
 * member set last (0 = none, else its field number) and its raw value (string/bytes: index into the strings list). */
typedef struct {
    int64_t ev;
    uint64_t val;
    int32_t key;
    int32_t which;
} StatRec;

typedef struct {
    StatRec *recs;
    Py_ssize_t len, cap;
    PyObject *strings; /* list */
} StatOut;

static const char *ERR_TRUNC = "a field runs past the end of its message";

/* Read a varint at *pp (< end). Returns 0 and advances, or -1 (runs off the end, or longer than 10 bytes). */
static int rd_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Read a field key. Returns 0, or -1 with a Python error set (bad varint, field 0, group or unknown wire type). */
static int rd_key(const uint8_t **pp, const uint8_t *end, uint32_t *field, unsigned *wt)
{
    uint64_t key;
    if (rd_varint(pp, end, &key)) {
        PyErr_SetString(PyExc_ValueError, ERR_TRUNC);
        return -1;
    }
    *wt = (unsigned)(key & 7);
    uint64_t f = key >> 3;
    if (f == 0 || f > 0x1FFFFFFF || *wt == 3 || *wt == 4 || *wt > 5) {
        PyErr_SetString(PyExc_ValueError, "invalid field key (corrupt data, groups are not supported)");
        return -1;
    }
    *field = (uint32_t)f;
    return 0;
}

/* Read a length prefix and the span it covers, checked against end. 0, or -1 with a Python error set. */
static int rd_span(const uint8_t **pp, const uint8_t *end, const uint8_t **s, const uint8_t **e)
{
    uint64_t len;
    if (rd_varint(pp, end, &len) || len > (uint64_t)(end - *pp)) {
        PyErr_SetString(PyExc_ValueError, ERR_TRUNC);
        return -1;
    }
    *s = *pp;
    *e = *pp + len;
    *pp = *e;
    return 0;
}

/* Read a varint field value. 0, or -1 with a Python error set. */
static int rd_value(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
    if (rd_varint(pp, end, v)) {
        PyErr_SetString(PyExc_ValueError, ERR_TRUNC);
        return -1;
    }
    return 0;
}

/* Skip a field's value of wire type wt (0, 1, 2 or 5: rd_key rejects the rest). 0, or -1 with a Python error. */
static int skip_value(const uint8_t **pp, const uint8_t *end, unsigned wt)
{
    uint64_t v;
    const uint8_t *s, *e;
    switch (wt) {
    case 0:
        return rd_value(pp, end, &v);
    case 2:
        return rd_span(pp, end, &s, &e);
    default: {
        Py_ssize_t width = wt == 1 ? 8 : 4;
        if (end - *pp < width) {
            PyErr_SetString(PyExc_ValueError, ERR_TRUNC);
            return -1;
        }
        *pp += width;
        return 0;
    }
    }
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* scan_events */

/* Walk one XStat: its metadata id, the oneof member set last (field number, 0 = none) and its value (fixed64 and
 * varints as raw bits; str/bytes as the span [ss, se)). 0, or -1 with a Python error set. */
static int walk_stat(const uint8_t *p, const uint8_t *e, uint64_t *mid, int32_t *which, uint64_t *val,
                     const uint8_t **ss, const uint8_t **se)
{
    uint64_t v;
    *mid = *val = 0;
    *which = 0;
    *ss = *se = p;
    while (p < e) {
        uint32_t f;
        unsigned wt;
        if (rd_key(&p, e, &f, &wt))
            return -1;
        if (wt == 0 && (f == 1 || f == 3 || f == 4 || f == 7)) {
            if (rd_value(&p, e, &v))
                return -1;
            if (f == 1)
                *mid = v;
            else
                *val = v, *which = (int32_t)f;
        } else if (wt == 1 && f == 2) {
            if (e - p < 8) {
                PyErr_SetString(PyExc_ValueError, ERR_TRUNC);
                return -1;
            }
            *val = le64(p), *which = 2;
            p += 8;
        } else if (wt == 2 && (f == 5 || f == 6)) {
            if (rd_span(&p, e, ss, se))
                return -1;
            *which = (int32_t)f;
        } else if (skip_value(&p, e, wt)) {
            return -1;
        }
    }
    return 0;
}

/* Decode one XStat; keep it when its metadata id is one of the (id, key) pairs in `wanted`. */
static int scan_stat(const uint8_t *p, const uint8_t *e, int64_t ev, const char *wanted, Py_ssize_t n_wanted,
                     StatOut *out)
{
    uint64_t mid, val;
    int32_t which;
    const uint8_t *ss, *se;
    if (walk_stat(p, e, &mid, &which, &val, &ss, &se))
        return -1;
    Py_ssize_t k = 0;
    int64_t id, key;
    for (; k < n_wanted; k++) {
        memcpy(&id, wanted + 16 * k, 8);
        if ((uint64_t)id == mid)
            break;
    }
    if (k == n_wanted)
        return 0;
    memcpy(&key, wanted + 16 * k + 8, 8);
    if (which == 5 || which == 6) {
        PyObject *s = which == 5 ? PyUnicode_DecodeUTF8((const char *)ss, se - ss, "replace")
                                 : PyBytes_FromStringAndSize((const char *)ss, se - ss);
        if (!s)
            return -1;
        val = (uint64_t)PyList_GET_SIZE(out->strings);
        int rc = PyList_Append(out->strings, s);
        Py_DECREF(s);
        if (rc)
            return -1;
    }
    if (out->len == out->cap) {
        Py_ssize_t cap = out->cap ? out->cap * 2 : 4096;
        StatRec *r = realloc(out->recs, (size_t)cap * sizeof(StatRec));
        if (!r) {
            PyErr_NoMemory();
            return -1;
        }
        out->recs = r;
        out->cap = cap;
    }
    StatRec *r = &out->recs[out->len++];
    r->ev = ev;
    r->val = val;
    r->key = (int32_t)key;
    r->which = which;
    return 0;
}

/* Decode one XEvent into row `ev` of the three columns; its stats go through scan_stat when any are wanted. */
static int scan_event(const uint8_t *p, const uint8_t *e, int64_t ev, int64_t *cols, Py_ssize_t n,
                      const char *wanted, Py_ssize_t n_wanted, StatOut *out)
{
    uint64_t mid = 0, off = 0, dur = 0, v;
    const uint8_t *ss, *se;
    while (p < e) {
        uint32_t f;
        unsigned wt;
        if (rd_key(&p, e, &f, &wt))
            return -1;
        if (wt == 0 && (f == 1 || f == 2 || f == 3 || f == 5)) {
            if (rd_value(&p, e, &v))
                return -1;
            if (f == 1)
                mid = v;
            else if (f == 2)
                off = v;
            else if (f == 3)
                dur = v;
            else
                off = 0; /* num_occurrences shares the oneof with offset_ps: the member set last wins */
        } else if (wt == 2 && f == 4) {
            if (rd_span(&p, e, &ss, &se))
                return -1;
            if (n_wanted && scan_stat(ss, se, ev, wanted, n_wanted, out))
                return -1;
        } else if (skip_value(&p, e, wt)) {
            return -1;
        }
    }
    cols[ev] = (int64_t)mid;
    cols[n + ev] = (int64_t)off;
    cols[2 * n + ev] = (int64_t)dur;
    return 0;
}

PyDoc_STRVAR(scan_events_doc,
"scan_events(data, spans, wanted, n_events) -> (columns, stats, strings)\n\n"
"Decode the events of the XLines at ``spans`` (bytes: int64 start, end pairs into ``data``), in order.\n"
"``wanted[i]`` (bytes: int64 metadata id, key pairs) lists the stats to keep for line i (b'' = none).\n"
"``columns``: bytes of 3 x n_events int64 (metadata_id, offset_ps, duration_ps); ``stats``: bytes of records\n"
"(int64 event, uint64 value, int32 key, int32 oneof field; 0 = unset) in event and file order, where a str/bytes\n"
"value is an index into ``strings``. ValueError on malformed input or when the lines hold other than n_events.");

static PyObject *scan_events(PyObject *self, PyObject *args)
{
    Py_buffer view, spans;
    PyObject *wanted_list, *cols_obj = NULL, *result = NULL;
    Py_ssize_t n;
    StatOut out = {NULL, 0, 0, NULL};
    if (!PyArg_ParseTuple(args, "y*y*O!n:scan_events", &view, &spans, &PyList_Type, &wanted_list, &n))
        return NULL;
    const uint8_t *base = view.buf;
    Py_ssize_t n_lines = spans.len / (Py_ssize_t)(2 * sizeof(int64_t));
    if (spans.len % (Py_ssize_t)(2 * sizeof(int64_t)) || PyList_GET_SIZE(wanted_list) != n_lines || n < 0 ||
        n > PY_SSIZE_T_MAX / 24) {
        PyErr_SetString(PyExc_ValueError, "scan_events: spans, wanted and n_events do not agree");
        goto done;
    }
    cols_obj = PyBytes_FromStringAndSize(NULL, 3 * n * (Py_ssize_t)sizeof(int64_t));
    out.strings = PyList_New(0);
    if (!cols_obj || !out.strings)
        goto done;
    int64_t *cols = (int64_t *)PyBytes_AS_STRING(cols_obj);
    int64_t ev = 0;
    for (Py_ssize_t i = 0; i < n_lines; i++) {
        int64_t s, e;
        memcpy(&s, (const char *)spans.buf + 16 * i, 8);
        memcpy(&e, (const char *)spans.buf + 16 * i + 8, 8);
        PyObject *w = PyList_GET_ITEM(wanted_list, i);
        if (s < 0 || e < s || e > view.len || !PyBytes_Check(w) || PyBytes_GET_SIZE(w) % 16) {
            PyErr_SetString(PyExc_ValueError, "scan_events: a line span or wanted table is out of range");
            goto done;
        }
        const char *wanted = PyBytes_AS_STRING(w);
        Py_ssize_t n_wanted = PyBytes_GET_SIZE(w) / 16;
        const uint8_t *p = base + s, *end = base + e, *es, *ee;
        while (p < end) {
            uint32_t f;
            unsigned wt;
            if (rd_key(&p, end, &f, &wt))
                goto done;
            if (f == 4 && wt == 2) {
                if (rd_span(&p, end, &es, &ee))
                    goto done;
                if (ev >= n) {
                    PyErr_SetString(PyExc_ValueError, "scan_events: the lines hold more events than counted");
                    goto done;
                }
                if (scan_event(es, ee, ev, cols, n, wanted, n_wanted, &out))
                    goto done;
                ev++;
            } else if (skip_value(&p, end, wt)) {
                goto done;
            }
        }
    }
    if (ev != n) {
        PyErr_SetString(PyExc_ValueError, "scan_events: the lines hold fewer events than counted");
        goto done;
    }
    result = Py_BuildValue("(Oy#O)", cols_obj, out.recs ? (const char *)out.recs : "",
                           out.len * (Py_ssize_t)sizeof(StatRec), out.strings);
done:
    free(out.recs);
    Py_XDECREF(out.strings);
    Py_XDECREF(cols_obj);
    PyBuffer_Release(&view);
    PyBuffer_Release(&spans);
    return result;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* parse_space */

/* A growable int64 array (metadata ids). */
typedef struct {
    int64_t *v;
    Py_ssize_t len, cap;
} IdVec;

static int idvec_push(IdVec *vec, int64_t x)
{
    if (vec->len == vec->cap) {
        Py_ssize_t cap = vec->cap ? vec->cap * 2 : 256;
        int64_t *v = realloc(vec->v, (size_t)cap * sizeof(int64_t));
        if (!v) {
            PyErr_NoMemory();
            return -1;
        }
        vec->v = v;
        vec->cap = cap;
    }
    vec->v[vec->len++] = x;
    return 0;
}

/* A proto3 string field as str; invalid UTF-8 raises UnicodeDecodeError (a ValueError), as upb refuses it. */
static PyObject *utf8(const uint8_t *s, const uint8_t *e)
{
    return PyUnicode_DecodeUTF8((const char *)s, e - s, NULL);
}

/* The header of one XLine (its events are only counted): a tuple
 * (plane, start, end, id, name, display_name, timestamp_ns, n_events); start/end are offsets into the whole buffer. */
static PyObject *line_head(const uint8_t *base, const uint8_t *s, const uint8_t *e, Py_ssize_t plane)
{
    const uint8_t *p = s, *name = s, *name_end = s, *dname = s, *dname_end = s, *vs, *ve;
    uint64_t id = 0, ts = 0, v;
    Py_ssize_t n_events = 0;
    while (p < e) {
        uint32_t f;
        unsigned wt;
        if (rd_key(&p, e, &f, &wt))
            return NULL;
        if (wt == 0 && (f == 1 || f == 3)) {
            if (rd_value(&p, e, &v))
                return NULL;
            if (f == 1)
                id = v;
            else
                ts = v;
        } else if (wt == 2 && (f == 2 || f == 4 || f == 11)) {
            if (rd_span(&p, e, &vs, &ve))
                return NULL;
            if (f == 4)
                n_events++;
            else if (f == 2)
                name = vs, name_end = ve;
            else
                dname = vs, dname_end = ve;
        } else if (skip_value(&p, e, wt)) {
            return NULL;
        }
    }
    PyObject *py_name = utf8(name, name_end);
    PyObject *py_dname = py_name ? utf8(dname, dname_end) : NULL;
    if (!py_dname) {
        Py_XDECREF(py_name);
        return NULL;
    }
    return Py_BuildValue("(nnnLNNLn)", plane, (Py_ssize_t)(s - base), (Py_ssize_t)(e - base), (long long)(int64_t)id,
                         py_name, py_dname, (long long)(int64_t)ts, n_events);
}

/* One map entry {key=1 int64, value=2 message}: its key and the value's field 2 (the name). Repeated fields
 * resolve as upb does: the last key, and the last name across repeated (merged) values. 0, or -1 with an error. */
static int map_entry(const uint8_t *p, const uint8_t *e, int64_t *key, const uint8_t **ns, const uint8_t **ne)
{
    uint64_t v;
    const uint8_t *vs, *ve;
    *key = 0;
    *ns = *ne = p;
    while (p < e) {
        uint32_t f;
        unsigned wt;
        if (rd_key(&p, e, &f, &wt))
            return -1;
        if (f == 1 && wt == 0) {
            if (rd_value(&p, e, &v))
                return -1;
            *key = (int64_t)v;
        } else if (f == 2 && wt == 2) {
            if (rd_span(&p, e, &vs, &ve))
                return -1;
            while (vs < ve) {
                if (rd_key(&vs, ve, &f, &wt))
                    return -1;
                if (f == 2 && wt == 2) {
                    if (rd_span(&vs, ve, ns, ne))
                        return -1;
                } else if (skip_value(&vs, ve, wt)) {
                    return -1;
                }
            }
        } else if (skip_value(&p, e, wt)) {
            return -1;
        }
    }
    return 0;
}

/* Add one map entry to (ids, names). */
static int add_entry(const uint8_t *s, const uint8_t *e, IdVec *ids, PyObject *names)
{
    int64_t key;
    const uint8_t *ns, *ne;
    if (map_entry(s, e, &key, &ns, &ne) || idvec_push(ids, key))
        return -1;
    PyObject *name = utf8(ns, ne);
    int rc = name ? PyList_Append(names, name) : -1;
    Py_XDECREF(name);
    return rc;
}

/* A plane-level XStat as (metadata_id, oneof field number or 0, value); a ref value stays its id. */
static PyObject *plane_stat(const uint8_t *p, const uint8_t *e)
{
    uint64_t mid, val;
    int32_t which;
    const uint8_t *ss, *se;
    if (walk_stat(p, e, &mid, &which, &val, &ss, &se))
        return NULL;
    PyObject *value;
    switch (which) {
    case 2: {
        double d;
        memcpy(&d, &val, sizeof d);
        value = PyFloat_FromDouble(d);
        break;
    }
    case 3:
    case 7:
        value = PyLong_FromUnsignedLongLong(val);
        break;
    case 4:
        value = PyLong_FromLongLong((long long)(int64_t)val);
        break;
    case 5:
        value = utf8(ss, se);
        break;
    case 6:
        value = PyBytes_FromStringAndSize((const char *)ss, se - ss);
        break;
    default:
        Py_INCREF(Py_None);
        value = Py_None;
    }
    return value ? Py_BuildValue("(LiN)", (long long)(int64_t)mid, (int)which, value) : NULL;
}

static int append_new(PyObject *list, PyObject *item)
{
    int rc = item ? PyList_Append(list, item) : -1;
    Py_XDECREF(item);
    return rc;
}

/* One XPlane as (name, event metadata ids, their names, stat metadata ids, their names, stats); ids are bytes of
 * int64 in file order (a repeated map key: the last entry wins). Line headers are appended to `lines`. */
static PyObject *parse_plane(const uint8_t *base, const uint8_t *p, const uint8_t *e, Py_ssize_t plane,
                             PyObject *lines)
{
    const uint8_t *name = p, *name_end = p, *vs, *ve;
    IdVec md = {NULL, 0, 0}, sm = {NULL, 0, 0};
    PyObject *md_names = PyList_New(0), *sm_names = PyList_New(0), *stats = PyList_New(0), *result = NULL;
    if (!md_names || !sm_names || !stats)
        goto done;
    while (p < e) {
        uint32_t f;
        unsigned wt;
        if (rd_key(&p, e, &f, &wt))
            goto done;
        if (wt != 2 || f < 2 || f > 6) {
            if (skip_value(&p, e, wt))
                goto done;
            continue;
        }
        if (rd_span(&p, e, &vs, &ve))
            goto done;
        int rc = 0;
        switch (f) {
        case 2:
            name = vs, name_end = ve;
            break;
        case 3:
            rc = append_new(lines, line_head(base, vs, ve, plane));
            break;
        case 4:
            rc = add_entry(vs, ve, &md, md_names);
            break;
        case 5:
            rc = add_entry(vs, ve, &sm, sm_names);
            break;
        default:
            rc = append_new(stats, plane_stat(vs, ve));
        }
        if (rc)
            goto done;
    }
    PyObject *py_name = utf8(name, name_end);
    if (py_name)
        result = Py_BuildValue("(Ny#Oy#OO)", py_name, md.v ? (const char *)md.v : "", md.len * 8, md_names,
                               sm.v ? (const char *)sm.v : "", sm.len * 8, sm_names, stats);
done:
    free(md.v);
    free(sm.v);
    Py_XDECREF(md_names);
    Py_XDECREF(sm_names);
    Py_XDECREF(stats);
    return result;
}

PyDoc_STRVAR(parse_space_doc,
"parse_space(data) -> (planes, errors, warnings, hostnames, lines)\n\n"
"``planes``: per XPlane, (name, event metadata ids, names, stat metadata ids, names, stats) where ids are bytes of\n"
"int64 and stats are (metadata_id, oneof field number or 0, value; a ref stays its id).\n"
"``lines``: per XLine, in file order, (plane index, start, end, id, name, display_name, timestamp_ns, n_events);\n"
"start/end delimit the line's bytes in ``data`` for scan_events. Raises ValueError on malformed input.");

static PyObject *parse_space(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:parse_space", &view))
        return NULL;
    const uint8_t *base = view.buf, *p = base, *e = base + view.len, *vs, *ve;
    PyObject *planes = PyList_New(0), *lines = PyList_New(0), *result = NULL;
    PyObject *strs[3] = {PyList_New(0), PyList_New(0), PyList_New(0)}; /* errors, warnings, hostnames */
    Py_ssize_t plane = 0;
    if (!planes || !lines || !strs[0] || !strs[1] || !strs[2])
        goto done;
    while (p < e) {
        uint32_t f;
        unsigned wt;
        if (rd_key(&p, e, &f, &wt))
            goto done;
        if (wt != 2 || f < 1 || f > 4) {
            if (skip_value(&p, e, wt))
                goto done;
            continue;
        }
        if (rd_span(&p, e, &vs, &ve))
            goto done;
        PyObject *item = f == 1 ? parse_plane(base, vs, ve, plane++, lines) : utf8(vs, ve);
        if (append_new(f == 1 ? planes : strs[f - 2], item))
            goto done;
    }
    result = PyTuple_Pack(5, planes, strs[0], strs[1], strs[2], lines);
done:
    Py_XDECREF(planes);
    Py_XDECREF(lines);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(strs[i]);
    PyBuffer_Release(&view);
    return result;
}

/* ---------------------------------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"parse_space", parse_space, METH_VARARGS, parse_space_doc},
    {"scan_events", scan_events, METH_VARARGS, scan_events_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wire_scan",
    "Native XSpace wire walker (see proto/wire.py for the pure-numpy equivalent).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wire_scan(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "STAT_RECORD_SIZE", (long)sizeof(StatRec))) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
