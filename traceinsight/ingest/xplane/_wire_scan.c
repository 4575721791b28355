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

/* A kept str/bytes stat value, made a str only after the walk (which runs without the GIL). The reader parses these
 * values as text, so bytes_value becomes str too, invalid UTF-8 replaced. */
typedef struct {
    const uint8_t *s, *e;
} StrSpan;

typedef struct {
    StatRec *recs;
    Py_ssize_t len, cap;
    StrSpan *strs;
    Py_ssize_t n_strs, cap_strs;
} StatOut;

/* Walk results: 0, or what went wrong. The walkers make no Python call (so they can run without the GIL); the
 * caller turns a code into an exception. The wording is the reader's: the upb path maps its DecodeError onto the
 * same two texts, so both paths report the same error for the same bytes. */
enum { E_OK = 0, E_WIRE = 1, E_UTF8 = 2, E_NOMEM = 3, E_PY = 4 };
static const char *ERR_WIRE = "truncated or corrupt wire format";
static const char *ERR_UTF8 = "a string field is not valid UTF-8";

/* upb's default nesting limit: the top message has 100 levels, every submessage or group takes one. */
#define DEPTH_LIMIT 100

static int set_error(int rc)
{
    if (rc == E_WIRE)
        PyErr_SetString(PyExc_ValueError, ERR_WIRE);
    else if (rc == E_UTF8)
        PyErr_SetString(PyExc_ValueError, ERR_UTF8);
    else if (rc == E_NOMEM)
        PyErr_NoMemory();
    return -1; /* E_PY: the exception is set already */
}

/* Read a varint of at most maxlen bytes at *pp (< end). 0 and advances, or -1. The limits are upb's: 10 bytes for a
 * value (bits past 64 dropped), 5 for a key or a length (their range is checked by the caller). */
static inline int rd_varint(const uint8_t **pp, const uint8_t *end, int maxlen, uint64_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < maxlen; i++) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Read a field key as upb does: at most 5 bytes and 32 bits, wire type 0 to 5 (3 and 4 are group start and end,
 * which the callers skip or match), field number > 0 except inside a skipped group (upb does not look there). */
static inline int rd_key_in(const uint8_t **pp, const uint8_t *end, uint32_t *field, unsigned *wt, uint64_t lowest)
{
    uint64_t key;
    if (rd_varint(pp, end, 5, &key) || key > 0xFFFFFFFFu || key < lowest || (key & 7) > 5)
        return E_WIRE;
    *wt = (unsigned)(key & 7);
    *field = (uint32_t)(key >> 3);
    return 0;
}

static inline int rd_key(const uint8_t **pp, const uint8_t *end, uint32_t *field, unsigned *wt)
{
    return rd_key_in(pp, end, field, wt, 8);
}

/* Read a length prefix (at most 5 bytes, below 2^31 - 1, as upb) and the span it covers, checked against end. */
static inline int rd_span(const uint8_t **pp, const uint8_t *end, const uint8_t **s, const uint8_t **e)
{
    uint64_t len;
    if (rd_varint(pp, end, 5, &len) || len >= 0x7FFFFFFF || len > (uint64_t)(end - *pp))
        return E_WIRE;
    *s = *pp;
    *e = *pp + len;
    *pp = *e;
    return 0;
}

static inline int rd_value(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
    return rd_varint(pp, end, 10, v) ? E_WIRE : 0;
}

static int skip_value(const uint8_t **pp, const uint8_t *end, uint32_t field, unsigned wt, int depth);

/* Skip a group whose start key (field) was just read, in a message with `depth` levels left: its fields up to the
 * end key of the same field number, as upb skips an unknown group. */
static int skip_group(const uint8_t **pp, const uint8_t *end, uint32_t field, int depth)
{
    if (--depth < 0)
        return E_WIRE;
    for (;;) {
        uint32_t f;
        unsigned wt;
        if (*pp >= end || rd_key_in(pp, end, &f, &wt, 0))
            return E_WIRE;
        if (wt == 4)
            return f == field ? 0 : E_WIRE;
        int rc = skip_value(pp, end, f, wt, depth);
        if (rc)
            return rc;
    }
}

/* Skip a field's value of wire type wt; an end-group key outside its group is corrupt. 0 or an error code. */
static int skip_value(const uint8_t **pp, const uint8_t *end, uint32_t field, unsigned wt, int depth)
{
    uint64_t v;
    const uint8_t *s, *e;
    switch (wt) {
    case 0:
        return rd_value(pp, end, &v);
    case 2:
        return rd_span(pp, end, &s, &e);
    case 3:
        return skip_group(pp, end, field, depth);
    case 4:
        return E_WIRE;
    default: {
        Py_ssize_t width = wt == 1 ? 8 : 4;
        if (end - *pp < width)
            return E_WIRE;
        *pp += width;
        return 0;
    }
    }
}

/* Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as upb checks a proto3 string. */
static int utf8_ok(const uint8_t *s, const uint8_t *e)
{
    while (s < e) {
        uint8_t c = *s;
        if (c < 0x80) {
            s++;
            uint64_t w;
            while (e - s >= 8 && (memcpy(&w, s, 8), !(w & 0x8080808080808080ull))) /* ASCII, 8 bytes at a time */
                s += 8;
            continue;
        }
        Py_ssize_t n = e - s;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            if (n < 2 || (s[1] & 0xC0) != 0x80)
                return 0;
            s += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
            if (n < 3 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80)
                return 0;
            s += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
            if (n < 4 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
                return 0;
            s += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* The end of the data parse_space walks, for rd_string. parse_space holds the GIL throughout, so one static is safe;
 * scan_events (run without the GIL) never reads strings strictly. */
static const uint8_t *data_end;

/* A string field's span, read and checked: 0, E_WIRE or E_UTF8. upb reads a string that runs past its message but
 * not past the data, checks its UTF-8, and finds the overrun only at the message's end: bad UTF-8 in those bytes
 * is then the fault it reports, so it is here too. */
static inline int rd_string(const uint8_t **pp, const uint8_t *end, const uint8_t **s, const uint8_t **e)
{
    const uint8_t *q = *pp;
    int rc = rd_span(pp, end, s, e);
    if (rc) {
        uint64_t len;
        if (data_end && !rd_varint(&q, data_end, 5, &len) && len < 0x7FFFFFFF && len <= (uint64_t)(data_end - q) &&
            !utf8_ok(q, q + len))
            return E_UTF8;
        return rc;
    }
    return utf8_ok(*s, *e) ? 0 : E_UTF8;
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
 * varints as raw bits; str/bytes as the span [ss, se)). `strict`: every str_value must be valid UTF-8, as upb
 * checks the stats it decodes (plane and metadata stats; the reader decodes event stats leniently, on both paths).
 * 0 or an error code. */
static int walk_stat(const uint8_t *p, const uint8_t *e, int depth, int strict, uint64_t *mid, int32_t *which,
                     uint64_t *val, const uint8_t **ss, const uint8_t **se)
{
    uint64_t v;
    int rc;
    *mid = *val = 0;
    *which = 0;
    *ss = *se = p;
    while (p < e) {
        uint32_t f;
        unsigned wt;
        if ((rc = rd_key(&p, e, &f, &wt)))
            return rc;
        if (wt == 0 && (f == 1 || f == 3 || f == 4 || f == 7)) {
            if ((rc = rd_value(&p, e, &v)))
                return rc;
            if (f == 1)
                *mid = v;
            else
                *val = v, *which = (int32_t)f;
        } else if (wt == 1 && f == 2) {
            if (e - p < 8)
                return E_WIRE;
            *val = le64(p), *which = 2;
            p += 8;
        } else if (wt == 2 && (f == 5 || f == 6)) {
            if ((rc = strict && f == 5 ? rd_string(&p, e, ss, se) : rd_span(&p, e, ss, se)))
                return rc;
            *which = (int32_t)f;
        } else if ((rc = skip_value(&p, e, f, wt, depth))) {
            return rc;
        }
    }
    return 0;
}

static int grow(void **buf, Py_ssize_t *cap, Py_ssize_t len, size_t item, Py_ssize_t first)
{
    if (len < *cap)
        return 0;
    Py_ssize_t n = *cap ? *cap * 2 : first;
    void *b = realloc(*buf, (size_t)n * item);
    if (!b)
        return E_NOMEM;
    *buf = b;
    *cap = n;
    return 0;
}

/* Decode one XStat (at depth `depth`); keep it when its metadata id is one of the (id, key) pairs in `wanted`. */
static int scan_stat(const uint8_t *p, const uint8_t *e, int depth, int64_t ev, const char *wanted,
                     Py_ssize_t n_wanted, StatOut *out)
{
    uint64_t mid, val;
    int32_t which;
    const uint8_t *ss, *se;
    int rc = walk_stat(p, e, depth, 0, &mid, &which, &val, &ss, &se);
    if (rc)
        return rc;
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
        if (grow((void **)&out->strs, &out->cap_strs, out->n_strs, sizeof(StrSpan), 256))
            return E_NOMEM;
        out->strs[out->n_strs] = (StrSpan){ss, se};
        val = (uint64_t)out->n_strs++;
    }
    if (grow((void **)&out->recs, &out->cap, out->len, sizeof(StatRec), 4096))
        return E_NOMEM;
    StatRec *r = &out->recs[out->len++];
    r->ev = ev;
    r->val = val;
    r->key = (int32_t)key;
    r->which = which;
    return 0;
}

#define EVENT_DEPTH (DEPTH_LIMIT - 3) /* XSpace > XPlane > XLine > XEvent */

/* Decode one XEvent into row `ev` of the three columns; its stats go through scan_stat when any are wanted. */
static int scan_event(const uint8_t *p, const uint8_t *e, int64_t ev, int64_t *cols, Py_ssize_t n,
                      const char *wanted, Py_ssize_t n_wanted, StatOut *out)
{
    uint64_t mid = 0, off = 0, dur = 0, v;
    const uint8_t *ss, *se;
    int rc;
    while (p < e) {
        uint32_t f;
        unsigned wt;
        if ((rc = rd_key(&p, e, &f, &wt)))
            return rc;
        if (wt == 0 && (f == 1 || f == 2 || f == 3 || f == 5)) {
            if ((rc = rd_value(&p, e, &v)))
                return rc;
            if (f == 1)
                mid = v;
            else if (f == 2)
                off = v;
            else if (f == 3)
                dur = v;
            else
                off = 0; /* num_occurrences shares the oneof with offset_ps: the member set last wins */
        } else if (wt == 2 && f == 4) {
            if ((rc = rd_span(&p, e, &ss, &se)))
                return rc;
            if (n_wanted && (rc = scan_stat(ss, se, EVENT_DEPTH - 1, ev, wanted, n_wanted, out)))
                return rc;
        } else if ((rc = skip_value(&p, e, f, wt, EVENT_DEPTH))) {
            return rc;
        }
    }
    cols[ev] = (int64_t)mid;
    cols[n + ev] = (int64_t)off;
    cols[2 * n + ev] = (int64_t)dur;
    return 0;
}

/* The walk of scan_events over every line, with no Python call: 0, an error code, or -2 - k for argument error k. */
static int scan_lines(const uint8_t *base, Py_ssize_t size, const char *spans, Py_ssize_t n_lines,
                      const char *const *wanted, const Py_ssize_t *n_wanted, int64_t *cols, Py_ssize_t n,
                      StatOut *out)
{
    int64_t ev = 0;
    int rc;
    for (Py_ssize_t i = 0; i < n_lines; i++) {
        int64_t s, e;
        memcpy(&s, spans + 16 * i, 8);
        memcpy(&e, spans + 16 * i + 8, 8);
        if (s < 0 || e < s || e > size)
            return -2;
        const uint8_t *p = base + s, *end = base + e, *es, *ee;
        while (p < end) {
            uint32_t f;
            unsigned wt;
            if ((rc = rd_key(&p, end, &f, &wt)))
                return rc;
            if (f == 4 && wt == 2) {
                if ((rc = rd_span(&p, end, &es, &ee)))
                    return rc;
                if (ev >= n)
                    return -3;
                if ((rc = scan_event(es, ee, ev, cols, n, wanted[i], n_wanted[i], out)))
                    return rc;
                ev++;
            } else if ((rc = skip_value(&p, end, f, wt, EVENT_DEPTH + 1))) {
                return rc;
            }
        }
    }
    return ev != n ? -4 : 0;
}

PyDoc_STRVAR(scan_events_doc,
"scan_events(data, spans, wanted, n_events) -> (columns, stats, strings)\n\n"
"Decode the events of the XLines at ``spans`` (bytes: int64 start, end pairs into ``data``), in order.\n"
"``wanted[i]`` (bytes: int64 metadata id, key pairs) lists the stats to keep for line i (b'' = none).\n"
"``columns``: bytes of 3 x n_events int64 (metadata_id, offset_ps, duration_ps); ``stats``: bytes of records\n"
"(int64 event, uint64 value, int32 key, int32 oneof field; 0 = unset) in event and file order, where a str/bytes\n"
"value is an index into ``strings`` (str either way, invalid UTF-8 replaced). ValueError on malformed input or when the lines hold other than n_events.\n"
"The walk runs without the GIL, so threads can decode several files at once.");

static PyObject *scan_events(PyObject *self, PyObject *args)
{
    Py_buffer view, spans;
    PyObject *wanted_list, *wanted_tuple = NULL, *cols_obj = NULL, *strings = NULL, *result = NULL;
    Py_ssize_t n;
    StatOut out = {NULL, 0, 0, NULL, 0, 0};
    const char **wanted = NULL;
    Py_ssize_t *n_wanted = NULL;
    if (!PyArg_ParseTuple(args, "y*y*O!n:scan_events", &view, &spans, &PyList_Type, &wanted_list, &n))
        return NULL;
    Py_ssize_t n_lines = spans.len / (Py_ssize_t)(2 * sizeof(int64_t));
    if (spans.len % (Py_ssize_t)(2 * sizeof(int64_t)) || PyList_GET_SIZE(wanted_list) != n_lines || n < 0 ||
        n > PY_SSIZE_T_MAX / 24) {
        PyErr_SetString(PyExc_ValueError, "scan_events: spans, wanted and n_events do not agree");
        goto done;
    }
    /* a tuple keeps the tables alive while the GIL is released, whatever happens to the list */
    wanted_tuple = PyList_AsTuple(wanted_list);
    cols_obj = PyBytes_FromStringAndSize(NULL, 3 * n * (Py_ssize_t)sizeof(int64_t));
    wanted = PyMem_Malloc((size_t)(n_lines ? n_lines : 1) * sizeof(char *));
    n_wanted = PyMem_Malloc((size_t)(n_lines ? n_lines : 1) * sizeof(Py_ssize_t));
    if (!wanted_tuple || !cols_obj || !wanted || !n_wanted) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_lines; i++) {
        PyObject *w = PyTuple_GET_ITEM(wanted_tuple, i);
        if (!PyBytes_Check(w) || PyBytes_GET_SIZE(w) % 16) {
            PyErr_SetString(PyExc_ValueError, "scan_events: a line span or wanted table is out of range");
            goto done;
        }
        wanted[i] = PyBytes_AS_STRING(w);
        n_wanted[i] = PyBytes_GET_SIZE(w) / 16;
    }
    int64_t *cols = (int64_t *)PyBytes_AS_STRING(cols_obj);
    const char *sp = spans.buf;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan_lines(view.buf, view.len, sp, n_lines, wanted, n_wanted, cols, n, &out);
    Py_END_ALLOW_THREADS
    if (rc == -2) {
        PyErr_SetString(PyExc_ValueError, "scan_events: a line span or wanted table is out of range");
        goto done;
    } else if (rc == -3 || rc == -4) {
        PyErr_Format(PyExc_ValueError, "scan_events: the lines hold %s events than counted", rc == -3 ? "more" : "fewer");
        goto done;
    } else if (rc) {
        set_error(rc);
        goto done;
    }
    strings = PyList_New(out.n_strs);
    if (!strings)
        goto done;
    for (Py_ssize_t i = 0; i < out.n_strs; i++) {
        StrSpan *t = &out.strs[i];
        PyObject *o = PyUnicode_DecodeUTF8((const char *)t->s, t->e - t->s, "replace");
        if (!o)
            goto done;
        PyList_SET_ITEM(strings, i, o);
    }
    result = Py_BuildValue("(Oy#O)", cols_obj, out.recs ? (const char *)out.recs : "",
                           out.len * (Py_ssize_t)sizeof(StatRec), strings);
done:
    free(out.recs);
    free(out.strs);
    PyMem_Free(wanted);
    PyMem_Free(n_wanted);
    Py_XDECREF(strings);
    Py_XDECREF(wanted_tuple);
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


/* A string field as str: its bytes were checked by rd_string, so only memory can fail. */
static PyObject *utf8(const uint8_t *s, const uint8_t *e)
{
    return PyUnicode_DecodeUTF8((const char *)s, e - s, NULL);
}

/* Depths below the XSpace (DEPTH_LIMIT levels): a plane takes one, its lines, map entries and stats two, a map
 * entry's value three, a stat inside event metadata four. */
#define PLANE_DEPTH (DEPTH_LIMIT - 1)

/* The header of one XLine (its events are only counted): a tuple
 * (plane, start, end, id, name, display_name, timestamp_ns, n_events); start/end are offsets into the whole buffer.
 * Every name occurrence is checked as it is read, so the first fault found is the one upb reports. */
static PyObject *line_head(const uint8_t *base, const uint8_t *s, const uint8_t *e, Py_ssize_t plane)
{
    const uint8_t *p = s, *name = s, *name_end = s, *dname = s, *dname_end = s, *vs, *ve;
    uint64_t id = 0, ts = 0, v;
    Py_ssize_t n_events = 0;
    int rc = 0;
    while (p < e && !rc) {
        uint32_t f;
        unsigned wt;
        if ((rc = rd_key(&p, e, &f, &wt)))
            break;
        if (wt == 0 && (f == 1 || f == 3)) {
            if (!(rc = rd_value(&p, e, &v))) {
                if (f == 1)
                    id = v;
                else
                    ts = v;
            }
        } else if (wt == 2 && f == 4) {
            if (!(rc = rd_span(&p, e, &vs, &ve)))
                n_events++;
        } else if (wt == 2 && (f == 2 || f == 11)) {
            if (!(rc = rd_string(&p, e, &vs, &ve))) {
                if (f == 2)
                    name = vs, name_end = ve;
                else
                    dname = vs, dname_end = ve;
            }
        } else {
            rc = skip_value(&p, e, f, wt, PLANE_DEPTH - 1);
        }
    }
    if (rc) {
        set_error(rc);
        return NULL;
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

/* An XEventMetadata (is_event) or XStatMetadata value at `depth`, checked as upb decodes it; its name (field 2,
 * the last one) is returned as a span. 0 or an error code. */
static int metadata_value(const uint8_t *p, const uint8_t *e, int depth, int is_event, const uint8_t **ns,
                          const uint8_t **ne)
{
    uint64_t v, mid, val;
    int32_t which;
    const uint8_t *vs, *ve, *ss, *se;
    int rc;
    while (p < e) {
        uint32_t f;
        unsigned wt;
        if ((rc = rd_key(&p, e, &f, &wt)))
            return rc;
        if (wt == 2 && (f == 2 || (is_event ? f == 4 : f == 3))) { /* name; display_name or description */
            if ((rc = rd_string(&p, e, &vs, &ve)))
                return rc;
            if (f == 2)
                *ns = vs, *ne = ve;
        } else if (is_event && wt == 2 && f == 5) { /* stats */
            if ((rc = rd_span(&p, e, &vs, &ve)) || (rc = walk_stat(vs, ve, depth - 1, 1, &mid, &which, &val, &ss, &se)))
                return rc;
        } else if (is_event && wt == 2 && f == 6) { /* child_id, packed */
            if ((rc = rd_span(&p, e, &vs, &ve)))
                return rc;
            while (vs < ve)
                if ((rc = rd_value(&vs, ve, &v)))
                    return rc;
        } else if ((rc = skip_value(&p, e, f, wt, depth))) {
            return rc;
        }
    }
    return 0;
}

/* One map entry {key=1 int64, value=2 message} at depth PLANE_DEPTH - 1: its key and the value's name. Repeated
 * fields resolve as upb does: the last key, and the last name across repeated (merged) values. An entry with any
 * other field (or a key or value of another wire type) is checked but left out of the map (`*odd` set), as upb
 * keeps such an entry among the plane's unknown fields instead. */
static int map_entry(const uint8_t *p, const uint8_t *e, int is_event, int64_t *key, const uint8_t **ns,
                     const uint8_t **ne, int *odd)
{
    uint64_t v;
    const uint8_t *vs, *ve;
    int rc;
    const int depth = PLANE_DEPTH - 1;
    *key = 0;
    *odd = 0;
    *ns = *ne = p;
    while (p < e) {
        uint32_t f;
        unsigned wt;
        if ((rc = rd_key(&p, e, &f, &wt)))
            return rc;
        if (f == 1 && wt == 0) {
            if ((rc = rd_value(&p, e, &v)))
                return rc;
            *key = (int64_t)v;
        } else if (f == 2 && wt == 2) {
            if ((rc = rd_span(&p, e, &vs, &ve)) || (rc = metadata_value(vs, ve, depth - 1, is_event, ns, ne)))
                return rc;
        } else if ((rc = skip_value(&p, e, f, wt, depth))) {
            return rc;
        } else {
            *odd = 1;
        }
    }
    return 0;
}

static int idvec_push(IdVec *vec, int64_t x)
{
    if (grow((void **)&vec->v, &vec->cap, vec->len, sizeof(int64_t), 256))
        return E_NOMEM;
    vec->v[vec->len++] = x;
    return 0;
}

/* Add one map entry to (ids, names). 0 or an error code. */
static int add_entry(const uint8_t *s, const uint8_t *e, int is_event, IdVec *ids, PyObject *names)
{
    int64_t key;
    const uint8_t *ns, *ne;
    int odd;
    int rc = map_entry(s, e, is_event, &key, &ns, &ne, &odd);
    if (rc || odd || (rc = idvec_push(ids, key)))
        return rc;
    PyObject *name = utf8(ns, ne);
    rc = name ? PyList_Append(names, name) : -1;
    Py_XDECREF(name);
    return rc ? E_PY : 0;
}

/* A plane-level XStat as (metadata_id, oneof field number or 0, value); a ref value stays its id. */
static PyObject *plane_stat(const uint8_t *p, const uint8_t *e)
{
    uint64_t mid, val;
    int32_t which;
    const uint8_t *ss, *se;
    int rc = walk_stat(p, e, PLANE_DEPTH - 1, 1, &mid, &which, &val, &ss, &se);
    if (rc) {
        set_error(rc);
        return NULL;
    }
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
        int rc = rd_key(&p, e, &f, &wt);
        if (!rc && (wt != 2 || f < 2 || f > 6))
            rc = skip_value(&p, e, f, wt, PLANE_DEPTH);
        else if (!rc)
            rc = f == 2 ? rd_string(&p, e, &vs, &ve) : rd_span(&p, e, &vs, &ve);
        if (rc) {
            set_error(rc);
            goto done;
        }
        if (wt != 2 || f < 2 || f > 6)
            continue;
        switch (f) {
        case 2:
            name = vs, name_end = ve;
            break;
        case 3:
            rc = append_new(lines, line_head(base, vs, ve, plane)) ? E_PY : 0;
            break;
        case 4:
        case 5:
            rc = add_entry(vs, ve, f == 4, f == 4 ? &md : &sm, f == 4 ? md_names : sm_names);
            break;
        default:
            rc = append_new(stats, plane_stat(vs, ve)) ? E_PY : 0;
        }
        if (rc) {
            set_error(rc);
            goto done;
        }
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
    data_end = e;
    PyObject *planes = PyList_New(0), *lines = PyList_New(0), *result = NULL;
    PyObject *strs[3] = {PyList_New(0), PyList_New(0), PyList_New(0)}; /* errors, warnings, hostnames */
    Py_ssize_t plane = 0;
    if (!planes || !lines || !strs[0] || !strs[1] || !strs[2])
        goto done;
    while (p < e) {
        uint32_t f;
        unsigned wt;
        int rc = rd_key(&p, e, &f, &wt);
        if (!rc && (wt != 2 || f < 1 || f > 4)) {
            if (!(rc = skip_value(&p, e, f, wt, DEPTH_LIMIT)))
                continue;
        } else if (!rc) {
            rc = f == 1 ? rd_span(&p, e, &vs, &ve) : rd_string(&p, e, &vs, &ve);
        }
        if (rc) {
            set_error(rc);
            goto done;
        }
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
    data_end = NULL;
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
    "Native XSpace wire walker (see wire.py for the pure-numpy equivalent).", -1, methods, NULL, NULL, NULL, NULL,
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
