/*
 * One pass over a PyTorch Profiler (kineto) Chrome-trace JSON document that returns the fields traceinsight
 * reads as flat columns, without a Python object per event.
 *
 * Why native: a kineto trace is 10^5..10^7 small JSON objects. Any decoder that builds an object per event and
 * then gathers fields into columns spends most of its time allocating and walking those objects; scanning the
 * bytes once and writing numbers straight into arrays is an order of magnitude cheaper.
 *
 * Scope is deliberately narrow. Only the well-formed common case is handled here: when the document holds anything
 * this scanner does not model (a timestamp written as a string, a float pid, a non-object event, ...), scan()
 * returns {"fallback": reason} and the caller uses the general msgspec decoder, which also produces the error
 * messages for invalid JSON. A file cut short inside the event array is handled here: the complete events before
 * the cut are returned with "truncated": True.
 *
 * Validity: the scanner accepts exactly what the general decoder accepts. Every value it skips is still checked
 * against the JSON grammar (strings, escapes, numbers, literals, brackets), nesting deeper than MAX_DEPTH is
 * declined (the general decoder refuses it with the same limit), and a string the general decoder would decode is
 * checked for UTF-8 (a bad byte sets "bad_utf8", as the general decoder's replacement warns). Anything else that
 * is odd declines the document, so the general decoder, which gives every error message, decides it.
 *
 * Safety: every read is bounds-checked against the end of the buffer; nesting is skipped with a fixed stack,
 * never by recursion; string and number tokens are never copied unboundedly.
 *
 * Strings are interned per column: the result holds, per table, the distinct raw (still JSON-escaped) byte strings
 * in order of first appearance, and each row holds int32 codes (-1 = absent). Unescaping happens in Python, once
 * per distinct string.
 *
 * A large event array may be scanned by two threads at once (``split_after``: "Two threads for one large event
 * array" below); the result is the one-thread scan's, byte for byte, whatever the document holds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#endif
/* The event array of a large file is scanned by two threads (``split``): POSIX threads and GCC's atomics. */
#if (defined(__unix__) || defined(__APPLE__)) && defined(__GNUC__)
#include <pthread.h>
#define CAN_SPLIT 1
#else
#define CAN_SPLIT 0
#endif

/* ------------------------------------------------------------------------------------------------------------ */
/* Column: a malloc'd array exposed through the buffer protocol, so numpy.frombuffer wraps it without a copy.    */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t nbytes;
} ColumnObject;

static void column_dealloc(ColumnObject *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int column_getbuffer(ColumnObject *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : (char *)"", self->nbytes, 0, flags);
}

static PyBufferProcs column_as_buffer = {(getbufferproc)column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceinsight.ingest._kineto_scan.Column",
    .tp_basicsize = sizeof(ColumnObject),
    .tp_dealloc = (destructor)column_dealloc,
    .tp_as_buffer = &column_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column of fixed-size values; wrap with numpy.frombuffer.",
};

/* ------------------------------------------------------------------------------------------------------------ */
/* Intern tables: open addressing over (pointer, length) spans of the input buffer.                              */

typedef struct {
    const char *p;
    Py_ssize_t len;
    uint64_t hash;
    int32_t code; /* -1 = empty slot */
} Slot;

/* The interned texts are copied into blocks of their own as they are first seen, so a repeat is compared with a
   copy in a few hot cache lines rather than with its first occurrence somewhere behind the cursor in the file (a
   page given back by release_behind, faulted in again by the comparison; memcmp was 3 % of a load's CPU). */
#define ARENA_BLOCK ((size_t)64 << 10)

typedef struct {
    char **blocks;
    size_t n_blocks, cap_blocks;
    char *cur;
    size_t left;
} Arena;

static const char *arena_copy(Arena *a, const char *p, size_t len) {
    if (!len) return ""; /* an empty text: a pointer that is not NULL (the arena may have no block yet) */
    if (len > a->left) {
        size_t size = len > ARENA_BLOCK ? len : ARENA_BLOCK;
        if (a->n_blocks == a->cap_blocks) {
            size_t cap = a->cap_blocks ? a->cap_blocks * 2 : 16;
            char **b = realloc(a->blocks, cap * sizeof(char *));
            if (!b) return NULL;
            a->blocks = b;
            a->cap_blocks = cap;
        }
        char *block = malloc(size ? size : 1);
        if (!block) return NULL;
        a->blocks[a->n_blocks++] = block;
        a->cur = block;
        a->left = size;
    }
    char *out = a->cur;
    if (len) memcpy(out, p, len);
    a->cur += len;
    a->left -= len;
    return out;
}

static void arena_free(Arena *a) {
    for (size_t i = 0; i < a->n_blocks; i++) free(a->blocks[i]);
    free(a->blocks);
    memset(a, 0, sizeof(*a));
}

typedef struct {
    Slot *slots;
    size_t mask;
    int32_t count;
    Slot *order; /* code -> span (in the arena) */
    size_t order_cap;
    Arena texts;
} Intern;

static int intern_init(Intern *t) {
    t->mask = 255;
    t->count = 0;
    t->slots = malloc(sizeof(Slot) * (t->mask + 1));
    t->order_cap = 64;
    t->order = malloc(sizeof(Slot) * t->order_cap);
    memset(&t->texts, 0, sizeof(t->texts));
    if (!t->slots || !t->order) return -1;
    for (size_t i = 0; i <= t->mask; i++) t->slots[i].code = -1;
    return 0;
}

static void intern_free(Intern *t) {
    free(t->slots);
    free(t->order);
    arena_free(&t->texts);
    t->slots = NULL;
    t->order = NULL;
}

/* Kernel names run to hundreds of characters: 32 bytes per step in four independent multiply-xorshift lanes (one
   lane's chain of multiplies would bound the speed), folded together with the tail; the length seeds every lane. */
static inline uint64_t mix_word(uint64_t h, uint64_t w) {
    h = (h ^ w) * 0xff51afd7ed558ccdULL;
    return h ^ (h >> 32);
}

static uint64_t hash_bytes(const char *p, Py_ssize_t n, const char *limit) {
    const Py_ssize_t total = n;
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    if (n >= 32) {
        uint64_t a = h, b = h ^ 0x6a09e667f3bcc909ULL, c = h ^ 0xbb67ae8584caa73bULL, d = h ^ 0x3c6ef372fe94f82bULL;
        while (n >= 32) {
            uint64_t w[4];
            memcpy(w, p, 32);
            a = mix_word(a, w[0]);
            b = mix_word(b, w[1]);
            c = mix_word(c, w[2]);
            d = mix_word(d, w[3]);
            p += 32;
            n -= 32;
        }
        h = mix_word(mix_word(mix_word(a, b), c), d);
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mix_word(h, w);
        p += 8;
        n -= 8;
    }
    if (n > 0) {
        /* The tail in one 8-byte load, never a byte copy into a word (the load would wait on the bytes' stores):
           the string's last 8 bytes when it has 8, else its first n bytes of a word the buffer still holds. */
        uint64_t w = 0;
        if (total >= 8) {
            memcpy(&w, p + n - 8, 8);
        }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        else if (limit - p >= 8) {
            memcpy(&w, p, 8);
            w &= ~0ULL >> (64 - 8 * n);
        }
#endif
        else {
            memcpy(&w, p, (size_t)n);
        }
        h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 32);
}

static int intern_grow(Intern *t) {
    size_t new_mask = t->mask * 2 + 1;
    Slot *ns = malloc(sizeof(Slot) * (new_mask + 1));
    if (!ns) return -1;
    for (size_t i = 0; i <= new_mask; i++) ns[i].code = -1;
    for (size_t i = 0; i <= t->mask; i++) {
        if (t->slots[i].code < 0) continue;
        size_t j = t->slots[i].hash & new_mask;
        while (ns[j].code >= 0) j = (j + 1) & new_mask;
        ns[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = ns;
    t->mask = new_mask;
    return 0;
}

/* Code of the span, adding it when new; -1 on memory error. */
/* ``limit``: the end of the buffer p lies in (the hash may read a word past the span, never past that). */
static int32_t intern(Intern *t, const char *p, Py_ssize_t len, const char *limit) {
    uint64_t h = hash_bytes(p, len, limit);
    size_t j = h & t->mask;
    while (t->slots[j].code >= 0) {
        Slot *s = &t->slots[j];
        if (s->hash == h && s->len == len && memcmp(s->p, p, (size_t)len) == 0) return s->code;
        j = (j + 1) & t->mask;
    }
    if (t->count == INT32_MAX - 1) return -1;
    if ((size_t)t->count >= t->order_cap) {
        size_t cap = t->order_cap * 2;
        Slot *o = realloc(t->order, sizeof(Slot) * cap);
        if (!o) return -1;
        t->order = o;
        t->order_cap = cap;
    }
    const char *copy = arena_copy(&t->texts, p, (size_t)len);
    if (!copy) return -1;
    Slot s = {copy, len, h, t->count};
    t->slots[j] = s;
    t->order[t->count] = s;
    t->count++;
    if ((size_t)t->count * 2 > t->mask) {
        if (intern_grow(t) < 0) return -1;
    }
    return s.code;
}

static PyObject *intern_list(Intern *t) {
    PyObject *out = PyList_New(t->count);
    if (!out) return NULL;
    for (int32_t i = 0; i < t->count; i++) {
        PyObject *b = PyBytes_FromStringAndSize(t->order[i].p, t->order[i].len);
        if (!b) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, b);
    }
    return out;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Row storage: one growable array per column, all with the same capacity.                                        */

enum { I_PH, I_CAT, I_NAME, I_PID_STR, I_TID_STR, I_GRID, I_BLOCK, I_DIMS, I_ARGNAME, I_TYPES, I_CONCRETE, N_I32 };
static const char *I32_NAMES[N_I32] = {"ph", "cat", "name", "pid_str", "tid_str", "grid", "block", "input_dims", "arg_name",
                                       "input_types", "concrete_inputs"};

enum { L_PID, L_TID, N_I64 };
static const char *I64_NAMES[N_I64] = {"pid", "tid"};

enum { F_TS, F_DUR, F_CORR, F_EXT, F_EXT_LEGACY, F_DEVICE, F_STREAM, F_BYTES, F_REGS, F_SHMEM, F_OCC, N_F64 };
static const char *F64_NAMES[N_F64] = {"ts", "dur", "correlation", "external_id", "external_id_legacy", "device",
                                       "stream", "bytes", "registers", "shared_mem", "occupancy"};

enum { T_PH, T_CAT, T_NAME, T_IDS, T_DIM3, T_DIMS, T_ARGNAME, T_TYPES, T_CONCRETE, N_TABLES };
static const char *TABLE_NAMES[N_TABLES] = {"ph", "cat", "name", "ids", "dim3", "input_dims", "arg_name", "input_types",
                                           "concrete_inputs"};

typedef struct {
    int32_t *i32[N_I32];
    int64_t *i64[N_I64];
    double *f64[N_F64];
    size_t n, cap;
    /* Nonzero while the arrays must not move (two threads write into them, ``split``): at most this many rows;
       a reservation past it is refused with FULL instead of growing the arrays. */
    size_t fixed;
    /* The columns this table keeps, one bit per column (i32, then i64, then f64); 0: all. The side tables of
       instant and metadata events keep only what their readers use: an instant event copied whole would write
       148 bytes of which 28 are read (1.1 M allocator records on the 1.9 GB replica: 130 MB never read). */
    uint32_t only;
} Rows;

_Static_assert(N_I32 + N_I64 + N_F64 <= 32, "one bit per column in Rows.only");
#define COL_BIT(k) ((uint32_t)1 << (k))
#define I64_BIT(k) COL_BIT(N_I32 + (k))
#define F64_BIT(k) COL_BIT(N_I32 + N_I64 + (k))
/* What the readers of instant events (allocator records: columns.py's _native_memory) and of metadata events
   (process and thread names) use. */
#define INSTANT_COLUMNS (COL_BIT(I_NAME) | COL_BIT(I_PID_STR) | COL_BIT(I_TID_STR) | I64_BIT(L_PID) | I64_BIT(L_TID) | F64_BIT(F_TS))
#define META_COLUMNS (COL_BIT(I_NAME) | COL_BIT(I_PID_STR) | COL_BIT(I_TID_STR) | COL_BIT(I_ARGNAME) | I64_BIT(L_PID) | I64_BIT(L_TID))

static inline int rows_keep(const Rows *r, int flat) {
    return !r->only || (r->only & COL_BIT(flat));
}

/* The allocator fields of instant events (``[memory]``, ``[OutOfMemory]``): kept apart from the complete-event
   columns, so events without them pay nothing for them. */
enum { M_ADDR, M_BYTES, M_TOTAL_ALLOC, M_TOTAL_RES, M_DEV_TYPE, M_DEV_ID, N_MEM };
static const char *MEM_NAMES[N_MEM] = {"addr", "bytes", "total_allocated", "total_reserved", "device_type", "device_id"};

typedef struct {
    double *f64[N_MEM];
    size_t n, cap;
} MemRows;

static int mem_reserve(MemRows *r, size_t want) {
    if (want <= r->cap) return 0;
    size_t cap = r->cap ? r->cap : 1024;
    while (cap < want) cap *= 2;
    if (want > 2 * r->cap + 1024) cap = want; /* a size for the whole array (size_tables), not one more row */
    for (int k = 0; k < N_MEM; k++) {
        double *p = realloc(r->f64[k], cap * sizeof(double));
        if (!p) return -1;
        r->f64[k] = p;
    }
    r->cap = cap;
    return 0;
}

static void mem_free(MemRows *r) {
    for (int k = 0; k < N_MEM; k++) free(r->f64[k]);
    memset(r, 0, sizeof(*r));
}

/* The allocator field an args key names, or -1. */
static int mem_key(const char *k, Py_ssize_t n) {
    static const char *keys[N_MEM] = {"Addr", "Bytes", "Total Allocated", "Total Reserved", "Device Type", "Device Id"};
    for (int i = 0; i < N_MEM; i++) {
        size_t len = strlen(keys[i]);
        if ((size_t)n == len && memcmp(k, keys[i], len) == 0) return i;
    }
    return -1;
}

enum { FULL = -5 }; /* a table whose arrays may not move (Rows.fixed) is full */

static int rows_reserve(Rows *r, size_t want) {
    if (r->fixed) return want <= r->fixed ? 0 : FULL; /* the capacity reaches ``fixed`` already */
    if (want <= r->cap) return 0;
    size_t cap = r->cap ? r->cap : 4096;
    while (cap < want) cap *= 2;
    if (want > 2 * r->cap + 4096) cap = want; /* a size for the whole array (size_tables), not one more row */
    for (int k = 0; k < N_I32; k++) {
        if (!rows_keep(r, k)) continue;
        int32_t *p = realloc(r->i32[k], cap * sizeof(int32_t));
        if (!p) return -1;
        r->i32[k] = p;
    }
    for (int k = 0; k < N_I64; k++) {
        if (!rows_keep(r, N_I32 + k)) continue;
        int64_t *p = realloc(r->i64[k], cap * sizeof(int64_t));
        if (!p) return -1;
        r->i64[k] = p;
    }
    for (int k = 0; k < N_F64; k++) {
        if (!rows_keep(r, N_I32 + N_I64 + k)) continue;
        double *p = realloc(r->f64[k], cap * sizeof(double));
        if (!p) return -1;
        r->f64[k] = p;
    }
    r->cap = cap;
    return 0;
}

static void rows_free(Rows *r) {
    for (int k = 0; k < N_I32; k++) free(r->i32[k]);
    for (int k = 0; k < N_I64; k++) free(r->i64[k]);
    for (int k = 0; k < N_F64; k++) free(r->f64[k]);
    memset(r, 0, sizeof(*r));
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Scanner                                                                                                        */

enum { OK = 0, TRUNC = -2, FALLBACK = -1, NOMEM = -3 };

/* The deepest nesting taken (the top-level object is level 1). decode.MAX_DEPTH is the same limit. */
#define MAX_DEPTH 256

typedef struct {
    const char *base, *p, *end;
    const char *why; /* reason for FALLBACK */
    int outer;       /* containers around the event objects: 1 for a bare array, 2 inside {"traceEvents": [...]} */
    int bad_utf8;    /* a string the general decoder decodes holds bytes that are not UTF-8 */
    Intern tables[N_TABLES];
    Rows rows; /* complete events (ph "X") */
    Rows meta; /* metadata events (ph "M"): process and thread names */
    Rows instant; /* instant events (ph "i" / "I"): allocator records among them */
    MemRows mem;  /* their allocator fields, row for row */
    double mem_args[N_MEM]; /* the allocator fields of the event being scanned */
    size_t events;
    int release;          /* give back the buffer's pages behind the cursor: RELEASE_FILE or RELEASE_EVENTS (0: never) */
    const char *released; /* the mapping's pages before this (page-aligned) address are given back */
    size_t split_after;   /* after this many events, a second thread takes the second half of the array (0: never) */
    struct Helper *helper; /* that thread, while it runs */
    const int *cancel;    /* set (atomically) by the first thread when the second's work is not wanted */
} Scan;

#define AT_END(s) ((s)->p >= (s)->end)
#define FAIL(s, reason) ((s)->why = (reason), FALLBACK)

static inline void skip_ws(Scan *s) {
    while (s->p < s->end) {
        char c = *s->p;
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return;
        s->p++;
    }
}

static const uint64_t ONES = 0x0101010101010101ULL, HIGHS = 0x8080808080808080ULL;

/* Non-zero when some byte of w is zero / is below n (n <= 128): the classic word-at-a-time tests. The lowest flag
   set always marks a byte that qualifies (false flags occur only above a true one). */
static inline uint64_t has_zero(uint64_t w) { return (w - ONES) & ~w & HIGHS; }
static inline uint64_t has_less(uint64_t w, unsigned n) { return (w - ONES * n) & ~w & HIGHS; }

/* The first byte from q that a string scan must look at: a quote, a backslash, a control character or (with
   ``high``) a byte that is not ASCII; ``end`` when there is none. Sixteen bytes a step with SSE2, eight without. */
static inline const unsigned char *find_special(const unsigned char *q, const unsigned char *end, int high) {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), ctrl = _mm_set1_epi8(0x1F);
    while (end - q >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)q);
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                 _mm_cmpeq_epi8(_mm_min_epu8(x, ctrl), x)); /* x <= 0x1F */
        unsigned mask = (unsigned)_mm_movemask_epi8(m);
        if (high) mask |= (unsigned)_mm_movemask_epi8(x);
        if (mask) return q + __builtin_ctz(mask);
        q += 16;
    }
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t hi = high ? HIGHS : 0;
    while (end - q >= 8) {
        uint64_t w;
        memcpy(&w, q, 8);
        uint64_t m = has_zero(w ^ (ONES * '"')) | has_zero(w ^ (ONES * '\\')) | has_less(w, 0x20) | (w & hi);
        if (m) return q + (__builtin_ctzll(m) >> 3);
        q += 8;
    }
#endif
    for (; q < end; q++) {
        unsigned char c = *q;
        if (c == '"' || c == '\\' || c < 0x20 || (high && c >= 0x80)) return q;
    }
    return q;
}

static inline int hex_val(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Four hex digits at q: their value in *cp. */
static int read_hex4(Scan *s, const unsigned char *q, unsigned *cp) {
    const unsigned char *end = (const unsigned char *)s->end;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        if (q + i >= end) return TRUNC;
        int h = hex_val(q[i]);
        if (h < 0) return FAIL(s, "an invalid unicode escape in a string");
        v = v << 4 | (unsigned)h;
    }
    *cp = v;
    return OK;
}

/* At a backslash: past one valid escape (a \u high surrogate must pair with a \u low one, as the general decoder
   demands). */
static int scan_escape(Scan *s, const unsigned char **qp) {
    const unsigned char *q = *qp, *end = (const unsigned char *)s->end;
    if (q + 1 >= end) return TRUNC;
    unsigned char e = q[1];
    if (e != 'u') {
        if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
            *qp = q + 2;
            return OK;
        }
        return FAIL(s, "an invalid escape in a string");
    }
    unsigned cp, lo;
    int rc = read_hex4(s, q + 2, &cp);
    if (rc) return rc;
    q += 6;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return FAIL(s, "a lone UTF-16 surrogate in a string");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (q >= end) return TRUNC;
        if (q[0] != '\\') return FAIL(s, "a lone UTF-16 surrogate in a string");
        if (q + 1 >= end) return TRUNC;
        if (q[1] != 'u') return FAIL(s, "a lone UTF-16 surrogate in a string");
        rc = read_hex4(s, q + 2, &lo);
        if (rc) return rc;
        if (lo < 0xDC00 || lo > 0xDFFF) return FAIL(s, "a lone UTF-16 surrogate in a string");
        q += 6;
    }
    *qp = q;
    return OK;
}

/* The length of the valid UTF-8 sequence at q (Python's strict decoder: no overlong forms, no surrogates, nothing
   past U+10FFFF); 0 when invalid, -1 when the input ends inside it. */
static int utf8_len(const unsigned char *q, const unsigned char *end) {
    unsigned char c = q[0], lo = 0x80, hi = 0xBF;
    int n;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 3;
    else if (c == 0xED) n = 3, hi = 0x9F;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) n = 4, hi = 0x8F;
    else return 0;
    for (int i = 1; i < n; i++) {
        if (q + i >= end) return -1;
        unsigned char b = q[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return 0;
    }
    return n;
}

/* At an opening quote: validates the string (escapes, no raw control character) and gives its raw content span
   (escapes kept); p ends after the closing quote. ``esc`` (when given) says whether it holds an escape. With
   ``utf8``, bytes that are not UTF-8 set s->bad_utf8 (the string is one the general decoder decodes) once the
   string closes: the general decoder finds a string's end before it checks its bytes, so a string cut short by
   the end of the file is a cut to it, never bad UTF-8. */
static inline int scan_string_v(Scan *s, const char **out, Py_ssize_t *len, int *esc, int utf8) {
    const unsigned char *start = (const unsigned char *)s->p + 1, *q = start, *end = (const unsigned char *)s->end;
    int has_esc = 0, bad = 0;
    for (;;) {
        q = find_special(q, end, utf8);
        if (q >= end) return TRUNC;
        unsigned char c = *q;
        if (c == '"') break;
        if (c == '\\') {
            has_esc = 1;
            int rc = scan_escape(s, &q);
            if (rc) return rc;
        } else if (c < 0x20) {
            return FAIL(s, "a control character inside a string");
        } else if (c >= 0x80 && utf8) {
            int n = utf8_len(q, end);
            if (n < 0) return TRUNC;
            if (n == 0) {
                bad = 1;
                n = 1;
            }
            q += n;
        } else {
            q++;
        }
    }
    *out = (const char *)start;
    *len = (const char *)q - (const char *)start;
    s->p = (const char *)q + 1;
    if (esc) *esc = has_esc;
    s->bad_utf8 |= bad;
    return OK;
}

/* A validated escaped string, unescaped as far as comparing it with ASCII names needs: escapes of ASCII characters
   become them, any other character a 0xFF byte (no name matches it). Its length, or -1 when longer than ``cap``. */
static Py_ssize_t unescape_ascii(const char *raw, Py_ssize_t n, char *buf, Py_ssize_t cap) {
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < n; o++) {
        if (o >= cap) return -1;
        unsigned char c = (unsigned char)raw[i];
        if (c != '\\') {
            buf[o] = c < 0x80 ? (char)c : (char)0xFF;
            i++;
            continue;
        }
        char e = raw[i + 1];
        if (e != 'u') {
            buf[o] = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
            i += 2;
            continue;
        }
        unsigned cp = 0;
        for (int k = 0; k < 4; k++) cp = cp << 4 | (unsigned)hex_val((unsigned char)raw[i + 2 + k]);
        buf[o] = cp < 0x80 ? (char)cp : (char)0xFF;
        i += (cp >= 0xD800 && cp <= 0xDBFF) ? 12 : 6;
    }
    return o;
}

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

/* A JSON number. *is_int is set for a plain integer that fits int64 (its value in *iv).
   Doubles are correctly rounded: exact mantissa / exact power of ten when both fit (Clinger's fast path),
   otherwise CPython's own correctly rounded, locale-independent parser. */
/* Eight ASCII digits at q as their value, or -1 when the eight bytes are not all digits. Timestamps run to 16
   digits: two words instead of sixteen steps of a loop whose every step waits on the previous one. */
static inline int64_t eight_digits(const char *q) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w;
    memcpy(&w, q, 8);
    if (((w + 0x4646464646464646ULL) | (w - 0x3030303030303030ULL)) & 0x8080808080808080ULL) return -1;
    w -= 0x3030303030303030ULL;
    w = (w * 10 + (w >> 8)) & 0x00FF00FF00FF00FFULL;                               /* pairs: 10a + b */
    w = (w * 100 + (w >> 16)) & 0x0000FFFF0000FFFFULL;                             /* quads */
    return (int64_t)((w * 10000 + (w >> 32)) & 0xFFFFFFFFULL);                      /* all eight */
#else
    (void)q;
    return -1;
#endif
}

static int scan_number(Scan *s, double *d, int64_t *iv, int *is_int) {
    const char *q = s->p, *end = s->end;
    int neg = 0;
    if (q < end && *q == '-') {
        neg = 1;
        q++;
    }
    uint64_t mant = 0;
    int ndig = 0, nfrac = 0, exp_or_dot = 0, big = 0;
    const char *digits = q;
    for (int64_t v; ndig <= 11 && end - q >= 8 && (v = eight_digits(q)) >= 0; q += 8, ndig += 8) mant = mant * 100000000ULL + (uint64_t)v;
    while (q < end && is_digit(*q)) {
        if (ndig < 19) mant = mant * 10 + (uint64_t)(*q - '0'); else big = 1;
        ndig++;
        q++;
    }
    if (q == digits) return q >= end ? TRUNC : FAIL(s, "a value that is not valid JSON");
    if (q - digits > 1 && *digits == '0') return FAIL(s, "a number with a leading zero");
    if (q < end && *q == '.') {
        exp_or_dot = 1;
        q++;
        const char *f = q;
        for (int64_t v; ndig <= 11 && end - q >= 8 && (v = eight_digits(q)) >= 0; q += 8, ndig += 8, nfrac += 8)
            mant = mant * 100000000ULL + (uint64_t)v;
        while (q < end && is_digit(*q)) {
            if (ndig < 19) {
                mant = mant * 10 + (uint64_t)(*q - '0');
                nfrac++;
            } else {
                big = 1;
            }
            ndig++;
            q++;
        }
        if (q == f) return q >= end ? TRUNC : FAIL(s, "a value that is not valid JSON");
    }
    int has_exp = 0;
    if (q < end && (*q == 'e' || *q == 'E')) {
        has_exp = 1;
        q++;
        if (q < end && (*q == '+' || *q == '-')) q++;
        const char *e = q;
        while (q < end && is_digit(*q)) q++;
        if (q == e) return q >= end ? TRUNC : FAIL(s, "a value that is not valid JSON");
    }
    if (q >= end) return TRUNC; /* the number may go on past the cut */
    *is_int = 0;
    if (!exp_or_dot && !has_exp && !big && ndig <= 18) {
        *iv = neg ? -(int64_t)mant : (int64_t)mant;
        *d = (double)*iv;
        *is_int = 1;
    } else if (!has_exp && !big && mant <= (1ULL << 53) && nfrac <= 22) {
        double v = (double)mant / POW10[nfrac];
        *d = neg ? -v : v;
    } else {
        char buf[80];
        size_t n = (size_t)(q - s->p);
        if (n >= sizeof(buf)) return FAIL(s, "a number longer than 79 characters");
        memcpy(buf, s->p, n);
        buf[n] = '\0';
        /* strtod, not PyOS_string_to_double: this runs without the GIL. Both round correctly; strtod reads the
           locale's decimal point, so a JSON '.' is swapped for it where the process changed LC_NUMERIC. */
        const char *dp = localeconv()->decimal_point;
        if (dp && dp[0] && dp[0] != '.' && !dp[1]) {
            for (size_t i = 0; i < n; i++)
                if (buf[i] == '.') buf[i] = dp[0];
        }
        char *stop = NULL;
        double v = strtod(buf, &stop);
        if (stop != buf + n) return FAIL(s, "a value that is not valid JSON");
        *d = v; /* overflow gives +-inf (as Python's float() does not, but its parser here did): dropped later */
    }
    s->p = q;
    return OK;
}

static int scan_literal(Scan *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->p) < n) return memcmp(s->p, word, (size_t)(s->end - s->p)) == 0 ? TRUNC : FAIL(s, "a value that is not valid JSON");
    if (memcmp(s->p, word, n) != 0) return FAIL(s, "a value that is not valid JSON");
    s->p += n;
    return OK;
}

/* A number, checked against the JSON grammar only (a skipped value needs no conversion). */
static int skip_number(Scan *s) {
    const char *q = s->p, *end = s->end;
    if (*q == '-') q++;
    if (q >= end) return TRUNC;
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        while (q < end && is_digit(*q)) q++;
    } else {
        return FAIL(s, "a value that is not valid JSON");
    }
    if (q < end && *q == '.') {
        const char *f = ++q;
        while (q < end && is_digit(*q)) q++;
        if (q == f) return q >= end ? TRUNC : FAIL(s, "a value that is not valid JSON");
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < end && (*q == '+' || *q == '-')) q++;
        const char *e = q;
        while (q < end && is_digit(*q)) q++;
        if (q == e) return q >= end ? TRUNC : FAIL(s, "a value that is not valid JSON");
    }
    if (q >= end) return TRUNC; /* the number may go on past the cut */
    s->p = q;
    return OK;
}

static int skip_scalar(Scan *s) {
    char c = *s->p;
    if (c == 't') return scan_literal(s, "true", 4);
    if (c == 'f') return scan_literal(s, "false", 5);
    if (c == 'n') return scan_literal(s, "null", 4);
    if (c == '-' || is_digit(c)) return skip_number(s);
    return FAIL(s, "a value that is not valid JSON");
}

/* Past whitespace to the next token; TRUNC at the end of the input. */
static inline int next_token(Scan *s) {
    skip_ws(s);
    return AT_END(s) ? TRUNC : OK;
}

/* Past a member's key and colon (p at the key's opening quote) to its value. */
static int skip_key(Scan *s, int utf8) {
    if (*s->p != '"') return FAIL(s, "a value that is not valid JSON");
    const char *k;
    Py_ssize_t n;
    int rc = scan_string_v(s, &k, &n, NULL, utf8);
    if (rc || (rc = next_token(s))) return rc;
    if (*s->p != ':') return FAIL(s, "a value that is not valid JSON");
    s->p++;
    return next_token(s);
}

/* Skips one value of any type, checking it against the JSON grammar; ``depth`` containers enclose it, and one
   that would nest deeper than MAX_DEPTH declines the document. With ``utf8``, its strings are ones the general
   decoder decodes (their bytes are checked). No recursion: the closers of the open containers are on a stack. */
static int skip_value(Scan *s, int depth, int utf8) {
    if (AT_END(s)) return TRUNC;
    char c = *s->p;
    if (c == '"') {
        const char *str;
        Py_ssize_t n;
        return scan_string_v(s, &str, &n, NULL, utf8);
    }
    if (c != '{' && c != '[') return skip_scalar(s);
    char closers[MAX_DEPTH];
    int top = 0, rc;
    for (;;) {
        c = *s->p; /* at a value */
        if (c == '{' || c == '[') {
            if (depth + top >= MAX_DEPTH) return FAIL(s, "nesting deeper than the limit");
            char close = c == '{' ? '}' : ']';
            closers[top++] = close;
            s->p++;
            if ((rc = next_token(s))) return rc;
            if (*s->p != close) {
                if (close == '}' && (rc = skip_key(s, utf8))) return rc;
                continue;
            }
            s->p++;
            top--;
        } else if (c == '"') {
            const char *str;
            Py_ssize_t n;
            if ((rc = scan_string_v(s, &str, &n, NULL, utf8))) return rc;
        } else if ((rc = skip_scalar(s))) {
            return rc;
        }
        /* after a value: the next member, or the close of one or more containers */
        for (;;) {
            if (top == 0) return OK;
            if ((rc = next_token(s))) return rc;
            if (*s->p == ',') {
                s->p++;
                if ((rc = next_token(s))) return rc;
                if (closers[top - 1] == '}' && (rc = skip_key(s, utf8))) return rc;
                break;
            }
            if (*s->p != closers[top - 1]) return FAIL(s, "a value that is not valid JSON");
            s->p++;
            top--;
        }
    }
}

/* After a member value: ',' (more) returns 1, the closing char returns 0. */
static int after_member(Scan *s, char close) {
    skip_ws(s);
    if (AT_END(s)) return TRUNC;
    if (*s->p == ',') {
        s->p++;
        return 1;
    }
    if (*s->p == close) {
        s->p++;
        return 0;
    }
    return FAIL(s, "a value that is not valid JSON");
}

#define KEYBUF 64

/* At a key: its span (unescaped into ``buf`` when it holds escapes, so "p\u0068" is "ph" as for the general
   decoder), then past the colon to the value. */
static inline int scan_key(Scan *s, const char **key, Py_ssize_t *klen, char *buf) {
    skip_ws(s);
    if (AT_END(s)) return TRUNC;
    if (*s->p != '"') return FAIL(s, "a value that is not valid JSON");
    int esc = 0;
    int rc = scan_string_v(s, key, klen, &esc, 0);
    if (rc) return rc;
    if (esc) {
        Py_ssize_t n = unescape_ascii(*key, *klen, buf, KEYBUF);
        if (n < 0) { /* longer than any name matched: a stand-in that matches none */
            buf[0] = (char)0xFF;
            n = 1;
        }
        *key = buf;
        *klen = n;
    }
    skip_ws(s);
    if (AT_END(s)) return TRUNC;
    if (*s->p != ':') return FAIL(s, "a value that is not valid JSON");
    s->p++;
    skip_ws(s);
    return AT_END(s) ? TRUNC : OK;
}

#define KEY_IS(k, n, lit) ((n) == (Py_ssize_t)(sizeof(lit) - 1) && memcmp((k), (lit), sizeof(lit) - 1) == 0)

/* A string holding a number, as profilers write some args ("bytes": "1024"): that number; any other string
   ("0x0", "auto") counts as absent. Same rule as the general decoder's, so both agree. */
static double number_in_string(const char *str, Py_ssize_t n) {
    char buf[72];
    if (n <= 0 || n > 64) return NAN;
    /* the general decoder's pattern takes leading zeros ("007"), which JSON numbers may not have: drop them */
    Py_ssize_t sign = str[0] == '-', z = sign;
    while (z + 1 < n && str[z] == '0' && is_digit(str[z + 1])) z++;
    if (z > sign) {
        if (sign) buf[0] = '-';
        memcpy(buf + sign, str + z, (size_t)(n - z));
        n = n - z + sign;
        str = buf;
    }
    memmove(buf, str, (size_t)n);
    buf[n] = ' '; /* a delimiter, so the number is not taken for one cut short */
    Scan sub;
    memset(&sub, 0, sizeof(sub));
    sub.base = sub.p = buf;
    sub.end = buf + n + 1;
    double d;
    int64_t iv;
    int is_int;
    if (scan_number(&sub, &d, &iv, &is_int) != OK || sub.p != buf + n) return NAN;
    return d;
}

/* A number or null into a double column; a string through number_in_string when ``strings_ok``; anything else
   is left to the general decoder. */
static int scan_float_field(Scan *s, double *out, int strings_ok) {
    char c = *s->p;
    if (c == 'n') {
        *out = NAN;
        return scan_literal(s, "null", 4);
    }
    if (c == '-' || is_digit(c)) {
        int64_t iv;
        int is_int;
        return scan_number(s, out, &iv, &is_int);
    }
    if (c == '"' && strings_ok) {
        const char *str;
        Py_ssize_t n;
        int esc = 0;
        int rc = scan_string_v(s, &str, &n, &esc, 1);
        if (rc) return rc;
        if (esc) return FAIL(s, "a numeric field written with escapes");
        /* a long string that may be a number: the general decoder reads it (same value, same range checks) */
        if (n > 64 && (str[0] == '-' || is_digit(str[0]))) return FAIL(s, "a numeric string longer than 64 characters");
        *out = number_in_string(str, n);
        return OK;
    }
    return FAIL(s, "a timestamp or duration that is not a number");
}

static int scan_str_field(Scan *s, Intern *t, int32_t *out, int *first_char) {
    if (*s->p != '"') return FAIL(s, "a name, phase or category that is not a string");
    const char *str;
    Py_ssize_t n;
    int esc = 0;
    /* the phase is compared here, never decoded in Python: its UTF-8 is checked here */
    int rc = scan_string_v(s, &str, &n, &esc, first_char != NULL);
    if (rc) return rc;
    if (first_char) {
        char buf[2];
        const char *v = str;
        Py_ssize_t m = n;
        if (esc) {
            m = unescape_ascii(str, n, buf, 2);
            v = buf;
        }
        *first_char = m == 1 ? (unsigned char)v[0] : 0;
    }
    int32_t code = intern(t, str, n, s->end);
    if (code < 0) return NOMEM;
    *out = code;
    return OK;
}

/* pid / tid: an integer, or a string such as "stream 7" or "Spans" (interned). */
static int scan_id_field(Scan *s, int64_t *num, int32_t *str_code) {
    if (*s->p == '"') {
        *num = 0;
        return scan_str_field(s, &s->tables[T_IDS], str_code, NULL);
    }
    double d;
    int is_int = 0;
    int rc = scan_number(s, &d, num, &is_int);
    if (rc) return rc;
    if (!is_int) return FAIL(s, "a pid or tid that is not an integer");
    *str_code = -1;
    return OK;
}

/* The raw span of any value, interned. */
static int scan_raw_field(Scan *s, Intern *t, int32_t *out, int depth, int utf8) {
    const char *start = s->p;
    int rc = skip_value(s, depth, utf8);
    if (rc) return rc;
    int32_t code = intern(t, start, s->p - start, s->end);
    if (code < 0) return NOMEM;
    *out = code;
    return OK;
}

/* Past an opening bracket: 1 when the container closes at once, 0 when members follow, TRUNC at the end. */
static int open_container(Scan *s, char close) {
    s->p++;
    skip_ws(s);
    if (AT_END(s)) return TRUNC;
    if (*s->p == close) {
        s->p++;
        return 1;
    }
    return 0;
}

/* The args of an event; a repeated "args" replaces the earlier one, as in the general decoder. */
static void args_defaults(Rows *r, size_t row) {
    for (int k = F_CORR; k < N_F64; k++) r->f64[k][row] = NAN;
    r->i32[I_GRID][row] = r->i32[I_BLOCK][row] = r->i32[I_DIMS][row] = r->i32[I_ARGNAME][row] = -1;
    r->i32[I_TYPES][row] = r->i32[I_CONCRETE][row] = -1;
}

static void mem_defaults(Scan *s) {
    for (int k = 0; k < N_MEM; k++) s->mem_args[k] = NAN;
}

static int scan_args(Scan *s, size_t row, int again) {
    Rows *r = &s->rows;
    const int depth = s->outer + 2; /* containers around a value in args: the outer ones, the event, args */
    if (again) { /* a repeated "args" replaces the earlier one; the first finds the row's defaults in place */
        args_defaults(r, row);
        mem_defaults(s);
    }
    int rc0 = open_container(s, '}');
    if (rc0) return rc0 < 0 ? rc0 : OK;
    for (;;) {
        const char *k;
        Py_ssize_t n;
        char kbuf[KEYBUF];
        int rc = scan_key(s, &k, &n, kbuf);
        if (rc) return rc;
        double *f = NULL;
        if (KEY_IS(k, n, "correlation")) f = &r->f64[F_CORR][row];
        else if (KEY_IS(k, n, "External id")) f = &r->f64[F_EXT][row];
        else if (KEY_IS(k, n, "external id")) f = &r->f64[F_EXT_LEGACY][row];
        else if (KEY_IS(k, n, "device")) f = &r->f64[F_DEVICE][row];
        else if (KEY_IS(k, n, "stream")) f = &r->f64[F_STREAM][row];
        else if (KEY_IS(k, n, "bytes")) f = &r->f64[F_BYTES][row];
        else if (KEY_IS(k, n, "registers per thread")) f = &r->f64[F_REGS][row];
        else if (KEY_IS(k, n, "shared memory")) f = &r->f64[F_SHMEM][row];
        else if (KEY_IS(k, n, "est. achieved occupancy %")) f = &r->f64[F_OCC][row];
        else {
            int m = mem_key(k, n);
            if (m >= 0) f = &s->mem_args[m];
        }
        if (f) {
            rc = scan_float_field(s, f, 1);
        } else if (KEY_IS(k, n, "grid") || KEY_IS(k, n, "block")) {
            int32_t *dst = &r->i32[k[0] == 'g' ? I_GRID : I_BLOCK][row];
            /* the general decoder decodes these (typed Any): their strings' UTF-8 is checked */
            if (*s->p == '[') {
                rc = scan_raw_field(s, &s->tables[T_DIM3], dst, depth, 1);
            } else {
                *dst = -1;
                rc = skip_value(s, depth, 1);
            }
        } else if (KEY_IS(k, n, "Input Dims")) {  /* raw text on both paths, never decoded */
            rc = scan_raw_field(s, &s->tables[T_DIMS], &r->i32[I_DIMS][row], depth, 0);
        } else if (KEY_IS(k, n, "Input dims")) {  /* PyTorch 1.8's spelling: used when "Input Dims" is absent */
            if (r->i32[I_DIMS][row] == -1)
                rc = scan_raw_field(s, &s->tables[T_DIMS], &r->i32[I_DIMS][row], depth, 0);
            else
                rc = skip_value(s, depth, 0);
        } else if (KEY_IS(k, n, "Input type")) {  /* raw text, as Input Dims: read by the FLOPs model */
            rc = scan_raw_field(s, &s->tables[T_TYPES], &r->i32[I_TYPES][row], depth, 0);
        } else if (KEY_IS(k, n, "Concrete Inputs")) {
            rc = scan_raw_field(s, &s->tables[T_CONCRETE], &r->i32[I_CONCRETE][row], depth, 0);
        } else if (KEY_IS(k, n, "name")) {
            if (*s->p == '"') {
                rc = scan_str_field(s, &s->tables[T_ARGNAME], &r->i32[I_ARGNAME][row], NULL);
            } else {
                r->i32[I_ARGNAME][row] = -1;
                rc = skip_value(s, depth, 1);
            }
        } else {
            rc = skip_value(s, depth, 0);
        }
        if (rc) return rc;
        rc = after_member(s, '}');
        if (rc <= 0) return rc;
    }
}

static int copy_row(Rows *dst, const Rows *src, size_t row) {
    if (rows_reserve(dst, dst->n + 1) < 0) return -1;
    size_t d = dst->n++;
    for (int k = 0; k < N_I32; k++)
        if (dst->i32[k]) dst->i32[k][d] = src->i32[k][row];
    for (int k = 0; k < N_I64; k++)
        if (dst->i64[k]) dst->i64[k][d] = src->i64[k][row];
    for (int k = 0; k < N_F64; k++)
        if (dst->f64[k]) dst->f64[k][d] = src->f64[k][row];
    return 0;
}

static void row_defaults(Rows *r, size_t row) {
    for (int k = 0; k < N_I32; k++) r->i32[k][row] = -1;
    r->i64[L_PID][row] = 0;
    r->i64[L_TID][row] = 0;
    for (int k = 0; k < N_F64; k++) r->f64[k][row] = NAN;
}

/* One event object. Complete events (ph "X") stay in rows, metadata events ("M") are copied to meta; others are
   only counted. */
static int scan_event(Scan *s) {
    Rows *r = &s->rows;
    if (*s->p != '{') return FAIL(s, "an element of traceEvents that is not an object");
    int reserved = rows_reserve(r, r->n + 1);
    if (reserved < 0) return reserved == FULL ? FULL : NOMEM; /* nothing read yet: the event can be scanned again */
    size_t row = r->n;
    row_defaults(r, row);
    mem_defaults(s);
    int ph = 0, seen_args = 0;
    int rc0 = open_container(s, '}');
    if (rc0 < 0) return rc0;
    if (rc0) {
        s->events++;
        return OK;
    }
    for (;;) {
        const char *k;
        Py_ssize_t n;
        char kbuf[KEYBUF];
        int rc = scan_key(s, &k, &n, kbuf);
        if (rc) return rc;
        if (KEY_IS(k, n, "ph")) rc = scan_str_field(s, &s->tables[T_PH], &r->i32[I_PH][row], &ph);
        else if (KEY_IS(k, n, "cat")) rc = scan_str_field(s, &s->tables[T_CAT], &r->i32[I_CAT][row], NULL);
        else if (KEY_IS(k, n, "name")) rc = scan_str_field(s, &s->tables[T_NAME], &r->i32[I_NAME][row], NULL);
        else if (KEY_IS(k, n, "pid")) rc = scan_id_field(s, &r->i64[L_PID][row], &r->i32[I_PID_STR][row]);
        else if (KEY_IS(k, n, "tid")) rc = scan_id_field(s, &r->i64[L_TID][row], &r->i32[I_TID_STR][row]);
        else if (KEY_IS(k, n, "ts")) rc = scan_float_field(s, &r->f64[F_TS][row], 0);
        else if (KEY_IS(k, n, "dur")) rc = scan_float_field(s, &r->f64[F_DUR][row], 0);
        else if (KEY_IS(k, n, "args")) {
            if (*s->p == '{') rc = scan_args(s, row, seen_args);
            else if (*s->p == 'n') {
                args_defaults(r, row); /* "args": null replaces an earlier args too */
                mem_defaults(s);
                rc = scan_literal(s, "null", 4);
            } else rc = FAIL(s, "an args field that is not an object");
            seen_args = 1;
        } else {
            rc = skip_value(s, s->outer + 1, 0);
        }
        if (rc) return rc;
        rc = after_member(s, '}');
        if (rc < 0) return rc;
        if (rc == 0) break;
    }
    s->events++;
    if (ph == 'X') {
        r->n++;
    } else if (ph == 'M') {
        if (copy_row(&s->meta, r, row) < 0) return NOMEM;
    } else if (ph == 'i' || ph == 'I') {
        if (copy_row(&s->instant, r, row) < 0 || mem_reserve(&s->mem, s->mem.n + 1) < 0) return NOMEM;
        for (int k = 0; k < N_MEM; k++) s->mem.f64[k][s->mem.n] = s->mem_args[k];
        s->mem.n++;
    }
    return OK;
}

/* What may be given back: a read-only mapping of a file (its bytes stay in the page cache and are read again if
   touched), or memory holding the only copy of the bytes (a gzip file inflated into anonymous memory), of which
   only the event array's pages are given back, never the header around it, which the caller reads afterwards. */
enum { RELEASE_FILE = 1, RELEASE_EVENTS = 2 };

/* The mapped bytes scanned since the last release that are given back at once: large enough that the calls cost
   nothing, small enough that the mapping never holds much of a gigabyte file in memory. */
#define RELEASE_STEP ((Py_ssize_t)32 << 20)

/* Gives the pages of a file mapping the cursor has passed back to the kernel, so a file of several GB is never
   resident beside the columns made from it (a mapped page counts in the process's memory once touched). The file
   stays in the page cache: an interned string that points behind the cursor reads the same bytes again (a minor
   fault) when it is compared or copied out. Only for a shared read-only file mapping: on anonymous memory
   MADV_DONTNEED would zero the bytes, so the caller says which it passed. */
static inline Py_ssize_t page_size(void) {
#if defined(__unix__) || defined(__APPLE__)
    static Py_ssize_t page = 0; /* two scanning threads may both set it: to the same value */
    if (!page) {
        long ps = sysconf(_SC_PAGESIZE);
        page = ps > 0 ? (Py_ssize_t)ps : 4096;
    }
    return page;
#else
    return 4096;
#endif
}

static void release_behind(Scan *s) {
#if defined(MADV_DONTNEED) && (defined(__unix__) || defined(__APPLE__))
    Py_ssize_t page = page_size();
    uintptr_t from = (uintptr_t)s->released, to = (uintptr_t)s->p & ~(uintptr_t)(page - 1);
    if (to > from && madvise((void *)from, (size_t)(to - from), MADV_DONTNEED) == 0) s->released = (const char *)to;
    else s->release = 0; /* refused (not a mapping after all): stop trying, nothing is lost */
#else
    s->release = 0;
#endif
}

/* After this many events of a large array, the tables are sized for the whole of it from the share of the bytes
   read so far (with a margin). Growing by doubling instead leaves the blocks it outgrew behind, touched: under the
   load's allocator settings (ingest/heap.py) they stay in the heap, and on the 1.9 GB replica they were 600 MB of
   page faults (a third of the scan's system time) that the columns made later reused only in part. Capacity that
   is reserved and never written costs address space only, and the columns give it back when they are handed over.
   A file whose events grow larger further on is not harmed: past the estimate the tables double as before. */
#define SIZE_AFTER_EVENTS 32768
#define SIZE_MIN_BYTES ((Py_ssize_t)64 << 20)

static int size_tables(Scan *s, const char *first) {
    double read = (double)(s->p - first), total = (double)(s->end - first);
    if (read <= 0 || total < (double)SIZE_MIN_BYTES) return 0;
    double scale = total / read * 1.125;
    if (!s->rows.fixed && rows_reserve(&s->rows, (size_t)((double)s->rows.n * scale) + 4096) < 0) return -1;
    if (s->instant.n && rows_reserve(&s->instant, (size_t)((double)s->instant.n * scale) + 1024) < 0) return -1;
    if (s->mem.n && mem_reserve(&s->mem, (size_t)((double)s->mem.n * scale) + 1024) < 0) return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Two threads for one large event array                                                                          */
/*
 * Why: the scan is most of a gigabyte load, and a machine has more than one core. After ``split_after`` events
 * the first thread picks a place near the middle of what is left where an event seems to begin (``split_point``)
 * and starts a second thread there; it goes on up to that place. Landing exactly on it proves it an event
 * boundary of the array (the first thread only ever stops between events), so the second thread's events are the
 * ones a single scan would have read from there: its rows join the first's, its strings are interned into the
 * first thread's tables in the order it met them (the codes a single scan gives, since it would meet them in that
 * order after every string of the first half), its counts are added. Passing the place without landing on it (it
 * lay inside an event: an array of objects in an argument) cancels the second thread and the first reads on
 * alone, as does any end of the first half's scan before it (a cut, a declined document). The result is the
 * single scan's whatever happens; only the time differs.
 *
 * Both threads write the complete events' columns into the same arrays, sized for the whole array: the first
 * from row 0, the second from an estimate of the first half's rows with a margin (``offset``). Neither may move
 * the arrays (Rows.fixed): a thread that would pass its share stops (the first cancels the second and reads on
 * alone; the second's work is dropped). On landing, the second thread's rows move down to follow the first's
 * (within pages both threads wrote already), string codes translated on the way. Its other tables (instant and
 * metadata events, allocator fields) are its own and appended.
 */
#define CANCELLED (-4)
#if CAN_SPLIT
#define IS_CANCELLED(s) ((s)->cancel && __atomic_load_n((s)->cancel, __ATOMIC_RELAXED))
#else
#define IS_CANCELLED(s) 0
#endif
/* How far past the middle a place where an event begins is looked for (kineto writes one per few hundred bytes). */
#define SPLIT_SEARCH ((Py_ssize_t)1 << 20)

static int scan_elements(Scan *s, const char **last_complete, const char *first);
static void drop_helper(Scan *s);

typedef struct Helper {
    Scan s;
    const char *start; /* its first event: where the first thread must land */
    const char *last;  /* the end of its last complete event */
    size_t offset;     /* the row its events are written from, in the first thread's arrays */
    int rc;            /* how its scan ended: OK (the array closed), TRUNC, FALLBACK, NOMEM, FULL or CANCELLED */
    int cancel;
#if CAN_SPLIT
    pthread_t thread;
#endif
} Helper;

/* A place at or after ``from`` where an event seems to begin: a '{' after a '}' and a comma, outside strings,
   found from the first line break (JSON strings hold no raw line break, so a scan from there knows which bytes
   are inside strings). NULL when there is none within SPLIT_SEARCH (a document on one line). */
static inline const char *past_blanks(const char *r, const char *stop) {
    while (r < stop && (*r == ' ' || *r == '\n' || *r == '\r' || *r == '\t')) r++;
    return r;
}

static const char *split_point(const char *from, const char *end) {
    const char *q = memchr(from, '\n', (size_t)(end - from));
    if (!q) return NULL;
    const char *stop = end - q > SPLIT_SEARCH ? q + SPLIT_SEARCH : end;
    for (int in_str = 0; q < stop; q++) {
        char c = *q;
        if (in_str) {
            if (c == '\\') q++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '}') {
            const char *r = past_blanks(q + 1, stop);
            if (r >= stop || *r != ',') continue;
            r = past_blanks(r + 1, stop);
            if (r < stop && *r == '{') return r;
        }
    }
    return NULL;
}

/* Complete events (ph "X") per byte in [a, b), from the phases in SAMPLE_WINDOWS windows spread over it: the
   share of complete events changes along a file (a profile opens with the host's ops; flow events and allocator
   records come in bursts), so the rows the first events held per byte say little of a half of the file. An
   estimate only: it places the second thread's rows (a wrong one costs time, never a wrong row); 0 when no
   phase is written as kineto writes it. */
#define SAMPLE_WINDOWS 64
#define SAMPLE_BYTES ((Py_ssize_t)64 << 10)

static double x_per_byte(const char *a, const char *b) {
    Py_ssize_t span = b - a, step = span / SAMPLE_WINDOWS;
    Py_ssize_t width = step < SAMPLE_BYTES ? step : SAMPLE_BYTES, seen = 0;
    if (width < 64) {
        width = span;
        step = span;
    }
    size_t count = 0;
    for (const char *w = a; w + width <= b; w += step) {
        const char *q = w, *end = w + width;
        while ((q = memchr(q, 'p', (size_t)(end - q))) != NULL) {
            if (end - q >= 8 && q[-1] == '"' && q[1] == 'h' && q[2] == '"') {
                const char *v = q + 3;
                while (v < end && (*v == ' ' || *v == ':')) v++;
                if (end - v >= 3 && v[0] == '"' && v[1] == 'X' && v[2] == '"') count++;
            }
            q++;
        }
        seen += width;
        if (step == span) break;
    }
    return seen ? (double)count / (double)seen : 0.0;
}

static void scan_free(Scan *s) {
    for (int t = 0; t < N_TABLES; t++) intern_free(&s->tables[t]);
    rows_free(&s->rows);
    rows_free(&s->meta);
    rows_free(&s->instant);
    mem_free(&s->mem);
}

#if CAN_SPLIT
static void *helper_main(void *arg) {
    Helper *h = arg;
    h->last = h->start;
    h->rc = scan_elements(&h->s, &h->last, h->start);
    return NULL;
}
#endif

/* Starts the second thread near the middle of what is left of the array (see above); nothing when there is no
   place to start it or it cannot be made (the first thread then reads the whole array, as without a split).
   ``first``: where the array's events begin (the rows per byte so far estimate both halves). */
static void start_helper(Scan *s, const char *first) {
#if CAN_SPLIT
    Rows *r = &s->rows;
    const char *at = split_point(s->p + (s->end - s->p) / 2, s->end);
    if (!at || s->p <= first) return;
    double before = x_per_byte(s->p, at), after = x_per_byte(at, s->end);
    if (before <= 0.0 || after <= 0.0) before = after = (double)r->n / (double)(s->p - first); /* not kineto's spelling */
    size_t offset = r->n + (size_t)(before * (double)(at - s->p) * 1.04) + 4096;
    size_t cap = offset + (size_t)(after * (double)(s->end - at) * 1.04) + 4096;
    if (rows_reserve(r, cap) < 0) return;
    Helper *h = calloc(1, sizeof(Helper));
    if (!h) return;
    h->start = at;
    h->offset = offset;
    Scan *t = &h->s;
    t->base = s->base;
    t->p = at;
    t->end = s->end;
    t->outer = s->outer;
    t->release = s->release;
    uintptr_t page = (uintptr_t)page_size();
    t->released = (const char *)(((uintptr_t)at + page - 1) & ~(page - 1)); /* never a page the first thread reads */
    t->instant.only = INSTANT_COLUMNS;
    t->meta.only = META_COLUMNS;
    t->cancel = &h->cancel;
    /* the complete events go into the first thread's arrays, from ``offset`` */
    for (int k = 0; k < N_I32; k++) t->rows.i32[k] = r->i32[k] + offset;
    for (int k = 0; k < N_I64; k++) t->rows.i64[k] = r->i64[k] + offset;
    for (int k = 0; k < N_F64; k++) t->rows.f64[k] = r->f64[k] + offset;
    t->rows.cap = t->rows.fixed = r->cap - offset;
    int k;
    for (k = 0; k < N_TABLES; k++) {
        if (intern_init(&t->tables[k]) < 0) break;
    }
    r->fixed = offset;
    s->helper = h;
    if (k < N_TABLES || pthread_create(&h->thread, NULL, helper_main, h) != 0) drop_helper(s); /* never started */
#else
    (void)s;
    (void)first;
#endif
}

/* Drops the second thread's state (its thread has ended); the first thread's arrays may grow again. */
static void drop_helper(Scan *s) {
    Helper *h = s->helper;
    memset(&h->s.rows, 0, sizeof(h->s.rows)); /* the arrays are the first thread's */
    scan_free(&h->s);
    free(h);
    s->helper = NULL;
    s->rows.fixed = 0;
}

/* Cancels the second thread, waits for it and drops what it made. */
static void stop_helper(Scan *s) {
    Helper *h = s->helper;
    if (!h) return;
#if CAN_SPLIT
    __atomic_store_n(&h->cancel, 1, __ATOMIC_RELAXED);
    pthread_join(h->thread, NULL);
#endif
    drop_helper(s);
}

/* The table each string column's codes index. */
static const int COLUMN_TABLE[N_I32] = {T_PH, T_CAT, T_NAME, T_IDS, T_IDS, T_DIM3, T_DIM3, T_DIMS, T_ARGNAME, T_TYPES,
                                        T_CONCRETE};

/* n string codes from ``from`` to ``to`` through ``map`` (the second thread's code -> the first's; -1 stays -1).
   Forward, one at a time: ``to`` may lie at or before ``from`` in the same array. */
static void translate_codes(int32_t *to, const int32_t *from, size_t n, const int32_t *map) {
    for (size_t i = 0; i < n; i++) {
        int32_t v = from[i];
        to[i] = v < 0 ? v : map[v];
    }
}

/* ``src``'s rows after ``dst``'s, string codes through ``maps`` (per table: the helper's code -> the first's). */
static int append_rows(Rows *dst, const Rows *src, int32_t *const *maps) {
    if (!src->n) return 0;
    if (rows_reserve(dst, dst->n + src->n) < 0) return -1;
    for (int k = 0; k < N_I32; k++) {
        if (!rows_keep(dst, k)) continue;
        translate_codes(dst->i32[k] + dst->n, src->i32[k], src->n, maps[COLUMN_TABLE[k]]);
    }
    for (int k = 0; k < N_I64; k++)
        if (rows_keep(dst, N_I32 + k)) memcpy(dst->i64[k] + dst->n, src->i64[k], src->n * sizeof(int64_t));
    for (int k = 0; k < N_F64; k++)
        if (rows_keep(dst, N_I32 + N_I64 + k)) memcpy(dst->f64[k] + dst->n, src->f64[k], src->n * sizeof(double));
    dst->n += src->n;
    return 0;
}

/* The second thread's complete events, written from row ``offset`` of the same arrays, moved down to follow the
   first thread's (row ``r->n``; never past ``offset``), string codes translated on the way. */
static void join_rows(Rows *r, size_t offset, size_t n, int32_t *const *maps) {
    for (int k = 0; k < N_I32; k++) translate_codes(r->i32[k] + r->n, r->i32[k] + offset, n, maps[COLUMN_TABLE[k]]);
    if (offset != r->n) {
        for (int k = 0; k < N_I64; k++) memmove(r->i64[k] + r->n, r->i64[k] + offset, n * sizeof(int64_t));
        for (int k = 0; k < N_F64; k++) memmove(r->f64[k] + r->n, r->f64[k] + offset, n * sizeof(double));
    }
    r->n += n;
}

/* The second thread's events after the first's (see above). */
static int merge_helper(Scan *s, Helper *h) {
    Scan *t = &h->s;
    int32_t *maps[N_TABLES] = {NULL};
    int rc = OK;
    for (int k = 0; k < N_TABLES && rc == OK; k++) {
        Intern *from = &t->tables[k];
        maps[k] = malloc(sizeof(int32_t) * (from->count ? (size_t)from->count : 1));
        if (!maps[k]) {
            rc = NOMEM;
            break;
        }
        for (int32_t c = 0; c < from->count; c++) {
            const Slot *x = &from->order[c];
            int32_t code = intern(&s->tables[k], x->p, x->len, x->p + x->len);
            if (code < 0) {
                rc = NOMEM;
                break;
            }
            maps[k][c] = code;
        }
    }
    if (rc == OK) {
        s->rows.fixed = 0;
        join_rows(&s->rows, h->offset, t->rows.n, maps);
        if (append_rows(&s->meta, &t->meta, maps) < 0 || append_rows(&s->instant, &t->instant, maps) < 0) rc = NOMEM;
    }
    if (rc == OK && t->mem.n) {
        if (mem_reserve(&s->mem, s->mem.n + t->mem.n) < 0) {
            rc = NOMEM;
        } else {
            for (int k = 0; k < N_MEM; k++) memcpy(s->mem.f64[k] + s->mem.n, t->mem.f64[k], t->mem.n * sizeof(double));
            s->mem.n += t->mem.n;
        }
    }
    for (int k = 0; k < N_TABLES; k++) free(maps[k]);
    if (rc == OK) {
        s->events += t->events;
        s->bad_utf8 |= t->bad_utf8;
    }
    return rc;
}

/* The first thread at an event boundary at or past the second thread's start. Landed on it and the second thread
   read to the end of the array: its outcome is the array's (its events merged). Otherwise (passed it, or the
   second thread filled its share) the second thread is dropped and 1 returned: the first reads on alone. */
static int join_helper(Scan *s, const char **last_complete) {
    Helper *h = s->helper;
    if (s->p != h->start) {
        stop_helper(s);
        return 1;
    }
#if CAN_SPLIT
    pthread_join(h->thread, NULL);
#endif
    int rc = h->rc;
    if (rc == FULL) {
        drop_helper(s);
        return 1;
    }
    if (rc == OK || rc == TRUNC) {
        int m = merge_helper(s, h);
        if (m != OK) rc = m;
    }
    if (rc == FALLBACK) s->why = h->s.why;
    s->p = h->s.p;
    if (h->last != h->start) *last_complete = h->last; /* else the last complete event is the first thread's */
    drop_helper(s);
    return rc;
}

/* The events of an array from the one at s->p (``first``: where the array's events begin); on a cut, the events
   completed before it stay and TRUNC is returned. */
static int scan_elements(Scan *s, const char **last_complete, const char *first) {
    for (;;) {
        skip_ws(s);
        if (AT_END(s)) return TRUNC;
        if (s->helper && s->p >= s->helper->start) {
            int rc = join_helper(s, last_complete);
            if (rc != 1) return rc;
        }
        if (IS_CANCELLED(s)) return CANCELLED;
        int rc = scan_event(s);
        if (rc == FULL && s->helper) { /* the first half holds more rows than estimated: read on alone */
            stop_helper(s);
            rc = scan_event(s);
        }
        if (rc) return rc;
        *last_complete = s->p;
        if (s->events == SIZE_AFTER_EVENTS && size_tables(s, first) < 0) return NOMEM;
        if (s->events == s->split_after && !s->helper) start_helper(s, first);
        if (s->release && s->p - s->released >= RELEASE_STEP) release_behind(s);
        rc = after_member(s, ']');
        if (rc <= 0) return rc;
    }
}

/* The event array; on a cut, the events completed before it stay and TRUNC is returned. */
static int scan_events(Scan *s, const char **last_complete) {
    int rc0 = open_container(s, ']');
    if (rc0) return rc0 < 0 ? rc0 : OK;
    if (s->release == RELEASE_EVENTS) { /* from the first page wholly inside the array */
        uintptr_t page = (uintptr_t)page_size();
        s->released = (const char *)(((uintptr_t)s->p + page - 1) & ~(page - 1));
    }
    int rc = scan_elements(s, last_complete, s->p);
    stop_helper(s); /* the first half ended before the second thread's start: its work is not wanted */
    return rc;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Python entry point                                                                                             */

static PyObject *column_from(void *data, size_t nbytes) {
    ColumnObject *col = PyObject_New(ColumnObject, &ColumnType);
    if (!col) {
        free(data);
        return NULL;
    }
    /* The capacity past the rows is kept, not given back: it was never written, so it costs address space only.
       Given back under the load's allocator settings (ingest/heap.py) it became a free block of untouched pages
       beside the column, which the arrays made next took before the touched blocks the scan had outgrown, so
       they were faulted in afresh (shrinking cost 30 k more page faults on the 1.9 GB replica than keeping). */
    if (!nbytes) {
        free(data);
        data = NULL;
    }
    col->data = data;
    col->nbytes = (Py_ssize_t)nbytes;
    return (PyObject *)col;
}

static int put_columns(PyObject *out, const char *key, const char **names, int count, void **arrays, size_t itemsize, size_t n) {
    PyObject *d = PyDict_New();
    if (!d) return -1;
    for (int k = 0; k < count; k++) {
        if (!arrays[k] && n) continue; /* a column this table does not keep: not in the result */
        PyObject *col = column_from(arrays[k], n * itemsize);
        arrays[k] = NULL;
        if (!col || PyDict_SetItemString(d, names[k], col) < 0) {
            Py_XDECREF(col);
            Py_DECREF(d);
            return -1;
        }
        Py_DECREF(col);
    }
    int rc = PyDict_SetItemString(out, key, d);
    Py_DECREF(d);
    return rc;
}

static PyObject *fallback_result(const char *why) {
    return Py_BuildValue("{s:s}", "fallback", why);
}

static PyObject *rows_dict(Rows *r) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    if (put_columns(d, "i32", I32_NAMES, N_I32, (void **)r->i32, sizeof(int32_t), r->n) < 0 ||
        put_columns(d, "i64", I64_NAMES, N_I64, (void **)r->i64, sizeof(int64_t), r->n) < 0 ||
        put_columns(d, "f64", F64_NAMES, N_F64, (void **)r->f64, sizeof(double), r->n) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *build_result(Scan *s, Py_ssize_t span_start, Py_ssize_t span_end, int truncated) {
    PyObject *out = Py_BuildValue("{s:O,s:n,s:O,s:(nn),s:O}", "fallback", Py_None, "events", (Py_ssize_t)s->events,
                                  "truncated", truncated ? Py_True : Py_False, "span", span_start, span_end,
                                  "bad_utf8", s->bad_utf8 ? Py_True : Py_False);
    if (!out) return NULL;
    if (put_columns(out, "instant_memory", MEM_NAMES, N_MEM, (void **)s->mem.f64, sizeof(double), s->mem.n) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    const char *keys[3] = {"complete", "metadata", "instant"};
    Rows *groups[3] = {&s->rows, &s->meta, &s->instant};
    for (int g = 0; g < 3; g++) {
        PyObject *d = rows_dict(groups[g]);
        if (!d || PyDict_SetItemString(out, keys[g], d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(d);
    }
    PyObject *tables = PyDict_New();
    if (!tables || PyDict_SetItemString(out, "strings", tables) < 0) {
        Py_XDECREF(tables);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(tables);
    for (int t = 0; t < N_TABLES; t++) {
        PyObject *lst = intern_list(&s->tables[t]);
        if (!lst || PyDict_SetItemString(tables, TABLE_NAMES[t], lst) < 0) {
            Py_XDECREF(lst);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(lst);
    }
    return out;
}

/* Runs over the top level: a bare event array, or an object whose "traceEvents" member is the array. */
typedef struct {
    int rc; /* OK, FALLBACK (why in Scan) or NOMEM */
    Py_ssize_t span_start, span_end;
    int truncated;
} Outcome;

#define DECLINE(s, reason) ((s)->why = (reason), o.rc = FALLBACK, o)

/* Runs over the top level: a bare event array, or an object whose "traceEvents" member is the array. Pure C (no
   Python object, no Python error): the caller runs it with the GIL released. */
static Outcome run(Scan *s) {
    Outcome o = {OK, -1, -1, 0};
    skip_ws(s);
    if (AT_END(s)) return DECLINE(s, "the document is empty");
    const char *last = NULL;
    if (*s->p == '[') {
        const char *open = s->p;
        last = open + 1;
        s->outer = 1;
        int rc = scan_events(s, &last);
        if (rc == NOMEM) return o.rc = NOMEM, o;
        if (rc == FALLBACK) return DECLINE(s, s->why);
        if (rc == OK && (skip_ws(s), !AT_END(s))) return DECLINE(s, "characters after the document");
        o.truncated = rc == TRUNC;
        o.span_start = open - s->base;
        o.span_end = (o.truncated ? last : s->p) - s->base;
        return o;
    }
    if (*s->p != '{') return DECLINE(s, "the document is not a JSON object or array");
    s->outer = 2;
    s->p++;
    skip_ws(s);
    if (AT_END(s)) return DECLINE(s, "the document is cut short before its events");
    if (*s->p == '}') return DECLINE(s, "the document has no traceEvents");
    Py_ssize_t span_start = -1, span_end = -1;
    int truncated = 0;
    for (;;) {
        const char *k;
        Py_ssize_t n;
        char kbuf[KEYBUF];
        int rc = scan_key(s, &k, &n, kbuf);
        if (rc == OK && KEY_IS(k, n, "traceEvents")) {
            if (span_start >= 0) return DECLINE(s, "traceEvents appears twice");
            if (*s->p != '[') return DECLINE(s, "traceEvents is not an array");
            span_start = s->p - s->base;
            last = s->p + 1;
            rc = scan_events(s, &last);
            if (rc == TRUNC) {
                span_end = last - s->base;
                truncated = 1;
                break;
            }
            span_end = s->p - s->base;
        } else if (rc == OK) {
            rc = skip_value(s, 1, 0);
        }
        if (rc == OK) rc = after_member(s, '}');
        if (rc == 0) {
            skip_ws(s);
            if (!AT_END(s)) return DECLINE(s, "characters after the document");
            break;
        }
        if (rc == 1) continue;
        if (rc == NOMEM) return o.rc = NOMEM, o;
        if (rc == FALLBACK) return DECLINE(s, s->why);
        /* cut short outside the event array: every event is there, only trailing header keys may be lost */
        if (span_start < 0) return DECLINE(s, "the document is cut short before its events");
        truncated = 1;
        break;
    }
    if (span_start < 0) return DECLINE(s, "the document has no traceEvents");
    o.span_start = span_start;
    o.span_end = span_end;
    o.truncated = truncated;
    return o;
}

static PyObject *scan(PyObject *module, PyObject *args) {
    PyObject *arg;
    int release = 0;
    Py_ssize_t split_after = 0;
    if (!PyArg_ParseTuple(args, "O|in:scan", &arg, &release, &split_after)) return NULL;
    if (release != 0 && release != RELEASE_FILE && release != RELEASE_EVENTS) {
        PyErr_SetString(PyExc_ValueError, "release must be 0, 1 (a file mapping) or 2 (the event array only)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Scan s;
    memset(&s, 0, sizeof(s));
    s.base = s.p = view.buf;
    s.end = s.base + view.len;
    /* a mapping starts on a page boundary; anything else is not one, and is never released */
    s.release = ((uintptr_t)s.base & (uintptr_t)(page_size() - 1)) == 0 ? release : 0;
    s.instant.only = INSTANT_COLUMNS;
    s.meta.only = META_COLUMNS;
    s.released = s.base;
    s.split_after = split_after > 0 ? (size_t)split_after : 0;
    PyObject *out = NULL;
    int t;
    for (t = 0; t < N_TABLES; t++) {
        if (intern_init(&s.tables[t]) < 0) break;
    }
    if (t < N_TABLES) {
        PyErr_NoMemory();
    } else {
        Outcome o;
        Py_BEGIN_ALLOW_THREADS /* the scan touches no Python object: other threads (other rank files) run meanwhile */
        o = run(&s);
        Py_END_ALLOW_THREADS
        if (o.rc == NOMEM) out = PyErr_NoMemory();
        else if (o.rc == FALLBACK) out = fallback_result(s.why);
        else out = build_result(&s, o.span_start, o.span_end, o.truncated);
    }
    scan_free(&s);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, release=0, split_after=0) -> dict: the kineto events of a JSON document as columns, or\n"
     "{'fallback': reason}. release: 1, data is a read-only mapping of a file, whose pages may be given back as the\n"
     "scan passes them; 2, data is anonymous memory whose event array's pages may be given back (they read as zeros\n"
     "after: the caller reads the file again if it needs them). split_after: after this many events a second thread\n"
     "scans the second half of the event array (0: one thread); the result is the same."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_kineto_scan",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m && PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
