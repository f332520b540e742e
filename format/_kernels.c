/* Compiled loops of the 2.1/2.2 codecs: range gathers, FastLanes unpacking, RLE expansion,
 * byte-stream-split joins, FSST decoding and the Variable / Flat(1) chunk kernels; the range
 * gather also serves the store's scattered reads (format.io.store.FileReader.read_spans).
 * One more serves vector search: `ivf_topk` scores IVF partitions and keeps each query's
 * nearest rows (format.index.vector.search); `hnsw_topk` searches partitions through their HNSW
 * graphs and `hnsw_build` builds them (format.index.vector.hnsw).
 *
 * The Python modules of format/file/v21 (gather, bitpacking, rle, byte_stream_split, fsst,
 * compression) and the store validate arguments, allocate outputs with numpy and call these functions; they
 * are not a public API. Conventions:
 *
 * - Arrays arrive through the buffer protocol ("y*" read-only, "w*" writable), C-contiguous.
 *   Index arrays (starts, sizes, counts, ...) are int64; they are read with memcpy, so they
 *   need no alignment. Arrays accessed as typed words (bit-packed words and the values
 *   unpacked from them, FSST string ends) must be aligned to their item size: the wrappers
 *   guarantee it and the kernels refuse otherwise.
 * - Checking kernels return the first failing (status, index) in the order the errors are
 *   reported; status codes are module constants (OK, SHORT, OUTSIDE, ...).
 * - Copying kernels trust ranges a checking kernel has validated. They still test, once per
 *   range or chunk (never per element), that what they read and write lies inside the
 *   buffers they were given, and raise ValueError otherwise: a wrapper bug must not turn into
 *   an out-of-bounds access.
 * - Arithmetic on values read from a file never overflows: bounds are compared as
 *   `s > size - n` rather than `s + n > size` (with n, s >= 0 known), products as quotients.
 * - Loops run without the GIL (decoding runs in a thread pool) when they do enough work to
 *   pay for releasing it, see BEGIN_NOGIL.
 *
 * One more serves 2.0 files: `rebase_ends` turns a run of a Binary page's stored end offsets
 * into Arrow's (format.file.v20.step_rows). And `unpack4x` / `postings_full` decode the
 * BitPacker4x blocks of full-text posting lists (format.index.fts.postings).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <float.h>
#include <math.h>

enum {
    OK,
    SHORT,
    OUTSIDE,
    BAD_OFFSET,
    BYTES_OUTSIDE,
    DECREASING,
    MISALIGNED,
    TOO_MANY,
    TOO_WIDE,
    TOO_SHORT,
    BAD_CODE,
    TRAILING_ESCAPE,
    FULL,
    NULL_ENDS,
    GUARD /* a copying kernel was given ranges no checking kernel validated */
};

#define BLOCK 1024 /* values per FastLanes block */
#define FSST_ESCAPE 255
#define FSST_SLACK 512 /* symbols are stored as 8 bytes; poisoned codes run further (FSST) */

/* Releasing the GIL costs little, but a thread that re-acquires it while another runs Python
 * may wait out the interpreter's switch interval (5 ms): tiny loops keep the GIL (as numpy
 * does below ~500 elements). `work` estimates the elements or bytes a loop touches. */
#define NOGIL_MIN_WORK 8192
#define BEGIN_NOGIL(work)                                                                      \
    {                                                                                          \
        PyThreadState *_save = (work) >= NOGIL_MIN_WORK ? PyEval_SaveThread() : NULL;
#define END_NOGIL                                                                              \
    if (_save)                                                                                 \
        PyEval_RestoreThread(_save);                                                           \
    }

/* FastLanes row order: row r of lane l holds value FL_ORDER[r / 8] * 16 + (r % 8) * 128 + l
 * (see bitpacking.py). */
static const int FL_ORDER[8] = {0, 4, 2, 6, 1, 5, 3, 7};

/* GCC peels loops of up to 16 iterations completely before it vectorises: the 16 lanes of a
 * 64-bit FastLanes row (and the 16 words of an 8/16-bit one) then end up as scalar code. */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_PEEL _Pragma("GCC unroll 1")
#else
#define NO_PEEL
#endif

/* The unpacking loops are also built for AVX2, chosen at load time where the CPU has it (an
 * ifunc: glibc on x86_64): 256-bit shifts unpack 25-45 % faster than the SSE2 baseline that
 * a portable build targets. Elsewhere, the one portable build. */
#if defined(__x86_64__) && defined(__GLIBC__) && (defined(__GNUC__) || defined(__clang__))
#define AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#else
#define AVX2_CLONE
#endif

/* -- helpers -------------------------------------------------------------------------------- */

/* Element i of an int64 array (any alignment). */
static inline int64_t at64(const Py_buffer *b, Py_ssize_t i)
{
    int64_t v;
    memcpy(&v, (const char *)b->buf + 8 * i, 8);
    return v;
}

static inline void put64(Py_buffer *b, Py_ssize_t i, int64_t v)
{
    memcpy((char *)b->buf + 8 * i, &v, 8);
}

/* The same on a bare pointer. Loops that store bytes use these on local copies of the
 * buffers' pointers: a byte store may alias any field of a Py_buffer whose address was taken
 * (by PyArg_ParseTuple), which would make the compiler reload them at every element. */
static inline int64_t ld64(const char *p, Py_ssize_t i)
{
    int64_t v;
    memcpy(&v, p + 8 * i, 8);
    return v;
}

static inline void st64(char *p, Py_ssize_t i, int64_t v)
{
    memcpy(p + 8 * i, &v, 8);
}

static inline Py_ssize_t len64(const Py_buffer *b)
{
    return b->len / 8;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define LE32(x) __builtin_bswap32(x)
#define LE64(x) __builtin_bswap64(x)
#else
#define LE32(x) (x)
#define LE64(x) (x)
#endif

/* The `nbytes`-byte (1..8) little-endian unsigned integer at p (any alignment). */
static inline uint64_t load_le(const uint8_t *p, int nbytes)
{
    if (nbytes == 4) { /* offsets: one load */
        uint32_t v;
        memcpy(&v, p, 4);
        return LE32(v);
    }
    if (nbytes == 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        return LE64(v);
    }
    uint64_t v = 0;
    for (int b = 0; b < nbytes; b++)
        v |= (uint64_t)p[b] << (8 * b);
    return v;
}

/* The native `size`-byte (1, 2, 4 or 8) unsigned word at p. */
static inline uint64_t load_word(const uint8_t *p, int size)
{
    switch (size) {
    case 1:
        return *p;
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

/* Whether [start, start + n) lies inside [0, size); negative int64 values arrive as huge
 * unsigned ones and fail. */
static inline int fits(uint64_t start, uint64_t n, uint64_t size)
{
    return start <= size && n <= size - start;
}

/* Whether `n` items of `item` bytes from item `start` lie inside `size` bytes. */
static inline int fits_items(uint64_t start, uint64_t n, uint64_t item, uint64_t size)
{
    return start <= size / item && n <= (size / item) - start;
}

static int aligned(const void *p, Py_ssize_t item)
{
    return ((uintptr_t)p & (uintptr_t)(item - 1)) == 0;
}

static int word_size_ok(int bits)
{
    return bits == 8 || bits == 16 || bits == 32 || bits == 64;
}

/* ValueError unless every int64 array in `bufs` holds `n` items (or `n` is -1: the first's). */
static int same_lengths(const char *fn, Py_ssize_t n, int count, Py_buffer **bufs)
{
    for (int k = 0; k < count; k++) {
        if (bufs[k]->len % 8 || (n >= 0 && len64(bufs[k]) != n)) {
            PyErr_Format(PyExc_ValueError, "%s: int64 arrays of different lengths", fn);
            return -1;
        }
        if (n < 0)
            n = len64(bufs[k]);
    }
    return 0;
}

static PyObject *guard_error(const char *fn)
{
    PyErr_Format(PyExc_ValueError, "%s: ranges outside the buffers (not validated first)", fn);
    return NULL;
}

static void release(int count, Py_buffer **bufs)
{
    for (int k = 0; k < count; k++)
        PyBuffer_Release(bufs[k]);
}

/* -- gather --------------------------------------------------------------------------------- */

PyDoc_STRVAR(first_bad_range_doc,
             "first_bad_range(size, starts, lengths) -> index of the first range [s, s + n) not "
             "inside [0, size), or -1.");

static PyObject *first_bad_range(PyObject *self, PyObject *args)
{
    long long size;
    Py_buffer st, ln;
    if (!PyArg_ParseTuple(args, "Ly*y*", &size, &st, &ln))
        return NULL;
    Py_buffer *all[] = {&st, &ln};
    PyObject *res = NULL;
    if (size < 0)
        PyErr_SetString(PyExc_ValueError, "first_bad_range: negative size");
    else if (same_lengths("first_bad_range", -1, 2, all) == 0) {
        Py_ssize_t n = len64(&st), bad = -1;
        BEGIN_NOGIL(n * 4)
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t s = at64(&st, i), l = at64(&ln, i);
            if (l < 0 || s < 0 || s > size - l) {
                bad = i;
                break;
            }
        }
        END_NOGIL
        res = PyLong_FromSsize_t(bad);
    }
    release(2, all);
    return res;
}

PyDoc_STRVAR(first_bad_position_doc,
             "first_bad_position(size, pos, nbytes) -> index of the first position p with "
             "[p, p + nbytes) not inside [0, size), or -1.");

static PyObject *first_bad_position(PyObject *self, PyObject *args)
{
    long long size;
    int nbytes;
    Py_buffer pos;
    if (!PyArg_ParseTuple(args, "Ly*i", &size, &pos, &nbytes))
        return NULL;
    Py_buffer *all[] = {&pos};
    PyObject *res = NULL;
    if (size < 0 || nbytes < 0)
        PyErr_SetString(PyExc_ValueError, "first_bad_position: negative size");
    else if (same_lengths("first_bad_position", -1, 1, all) == 0) {
        Py_ssize_t n = len64(&pos), bad = -1;
        BEGIN_NOGIL(n * 4)
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t p = at64(&pos, i);
            if (p < 0 || p > size - nbytes) {
                bad = i;
                break;
            }
        }
        END_NOGIL
        res = PyLong_FromSsize_t(bad);
    }
    release(1, all);
    return res;
}

PyDoc_STRVAR(copy_ranges_doc,
             "copy_ranges(data, starts, lengths, itemsize, out): the validated ranges of "
             "`itemsize`-byte items back to back into `out`.");

static PyObject *copy_ranges(PyObject *self, PyObject *args)
{
    Py_buffer data, st, ln, out;
    Py_ssize_t item;
    if (!PyArg_ParseTuple(args, "y*y*y*nw*", &data, &st, &ln, &item, &out))
        return NULL;
    Py_buffer *all[] = {&data, &st, &ln, &out};
    PyObject *res = NULL;
    if (item < 1)
        PyErr_SetString(PyExc_ValueError, "copy_ranges: item size below 1");
    else if (same_lengths("copy_ranges", -1, 2, all + 1) == 0) {
        const char *src = data.buf;
        char *dst = out.buf;
        uint64_t n_in = data.len / item, n_out = out.len / item, o = 0;
        Py_ssize_t n = len64(&st);
        int bad = 0;
        BEGIN_NOGIL(out.len)
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t s = at64(&st, i), k = at64(&ln, i);
            if (!fits(s, k, n_in) || !fits(o, k, n_out)) {
                bad = 1;
                break;
            }
            memcpy(dst + o * item, src + s * item, k * item);
            o += k;
        }
        END_NOGIL
        res = bad ? guard_error("copy_ranges") : Py_NewRef(Py_None);
    }
    release(4, all);
    return res;
}

PyDoc_STRVAR(read_uint_doc,
             "read_uint(data, pos, nbytes, out): the `nbytes`-byte little-endian unsigned "
             "integers at the validated byte positions `pos` into the uint64 array `out`.");

static PyObject *read_uint(PyObject *self, PyObject *args)
{
    Py_buffer data, pos, out;
    int nbytes;
    if (!PyArg_ParseTuple(args, "y*y*iw*", &data, &pos, &nbytes, &out))
        return NULL;
    Py_buffer *all[] = {&data, &pos, &out};
    PyObject *res = NULL;
    if (nbytes < 1 || nbytes > 8)
        PyErr_Format(PyExc_ValueError, "read_uint of %d-byte integers", nbytes);
    else if (same_lengths("read_uint", -1, 2, all + 1) == 0) {
        const uint8_t *src = data.buf;
        const char *at = pos.buf;
        char *dst = out.buf;
        const uint64_t size = data.len;
        const Py_ssize_t n = len64(&pos);
        int bad = 0;
        BEGIN_NOGIL(n * 4)
/* A constant N lets load_le become one load. */
#define READ_UINTS(N)                                                                          \
    for (Py_ssize_t i = 0; i < n; i++) {                                                       \
        uint64_t p = ld64(at, i);                                                              \
        if (!fits(p, (N), size)) {                                                             \
            bad = 1;                                                                           \
            break;                                                                             \
        }                                                                                      \
        st64(dst, i, (int64_t)load_le(src + p, (N)));                                          \
    }
        switch (nbytes) {
        case 2:
            READ_UINTS(2)
            break;
        case 4:
            READ_UINTS(4)
            break;
        case 8:
            READ_UINTS(8)
            break;
        default:
            READ_UINTS(nbytes)
        }
#undef READ_UINTS
        END_NOGIL
        res = bad ? guard_error("read_uint") : Py_NewRef(Py_None);
    }
    release(3, all);
    return res;
}

/* -- FastLanes bit-packing ------------------------------------------------------------------ */

/* unpack_block_T(in, width, out): unpack the FastLanes block at `in` (width <= T, and
 * width * 1024 / T words there) into out[0:1024]. Row r of all lanes is one contiguous run of
 * both the input and the output, so the lane loop vectorises (shifts by a loop-invariant
 * amount). A row starting at bit `shift` of its word spills into the next word when
 * shift + width > T; `back` = T - shift is then in 1..T-1, so no shift is by T or more.
 * Used for 32- and 64-bit words; 8/16-bit ones go through DEFINE_UNPACK_BLOCK_SWAR. */
#define DEFINE_UNPACK_BLOCK(T, BITS)                                                           \
    AVX2_CLONE static void unpack_block_##BITS(const T *restrict in, unsigned width,           \
                                               T *restrict out)                           \
    {                                                                                          \
        enum { LANES = BLOCK / BITS };                                                         \
        if (width == 0) {                                                                      \
            memset(out, 0, BLOCK * sizeof(T));                                                 \
            return;                                                                            \
        }                                                                                      \
        const T mask = width == BITS ? (T)~(T)0 : (T)(((uint64_t)1 << width) - 1);             \
        for (unsigned r = 0; r < BITS; r++) {                                                  \
            const unsigned first = r * width, shift = first % BITS;                            \
            const T *src = in + (first / BITS) * LANES;                                        \
            T *dst = out + FL_ORDER[r / 8] * 16 + (r % 8) * 128;                               \
            if (shift + width > BITS) {                                                        \
                const T *nxt = src + LANES;                                                    \
                const unsigned back = BITS - shift;                                            \
                NO_PEEL for (int j = 0; j < LANES; j++)                                        \
                    dst[j] = (T)((T)(src[j] >> shift) | (T)(nxt[j] << back)) & mask;           \
            } else {                                                                           \
                NO_PEEL for (int j = 0; j < LANES; j++)                                        \
                    dst[j] = (T)(src[j] >> shift) & mask;                                      \
            }                                                                                  \
        }                                                                                      \
    }

DEFINE_UNPACK_BLOCK(uint32_t, 32)
DEFINE_UNPACK_BLOCK(uint64_t, 64)

/* 8- and 16-bit words have no vector shifts on x86 (the compiler widens every lane), so these
 * shift 64-bit words holding 64 / T lanes each (SWAR). Bits that a 64-bit shift carries across
 * a lane boundary are masked off: a row keeps `width` <= T - shift bits of its own lane from
 * `src` (`own` = the T - shift low bits of every lane), and in a spill the bits from `nxt`
 * shifted up by `back` (the complement of `own`, dropping what came from the lane below). */
#define DEFINE_UNPACK_BLOCK_SWAR(T, BITS)                                                      \
    AVX2_CLONE static void unpack_block_##BITS(const T *restrict in, unsigned width,           \
                                               T *restrict out)                           \
    {                                                                                          \
        enum { WORDS = BLOCK / 64 }; /* 64-bit words per row: 1024 / T lanes of T bits */      \
        const uint64_t ones = ~(uint64_t)0 / ((T)~(T)0); /* 1 in the low bit of each lane */   \
        if (width == 0) {                                                                      \
            memset(out, 0, BLOCK * sizeof(T));                                                 \
            return;                                                                            \
        }                                                                                      \
        const uint64_t mask = ones * (width == BITS ? (T)~(T)0 : (T)((1u << width) - 1));      \
        for (unsigned r = 0; r < BITS; r++) {                                                  \
            const unsigned first = r * width, shift = first % BITS;                            \
            const char *src = (const char *)(in + (first / BITS) * (BLOCK / BITS));            \
            char *dst = (char *)(out + FL_ORDER[r / 8] * 16 + (r % 8) * 128);                  \
            if (shift + width > BITS) {                                                        \
                const char *nxt = src + BLOCK / 8;                                             \
                const unsigned back = BITS - shift;                                            \
                const uint64_t own = ones * (T)(((T)~(T)0) >> shift);                          \
                NO_PEEL for (int j = 0; j < WORDS; j++) {                                      \
                    uint64_t lo, hi, v;                                                        \
                    memcpy(&lo, src + 8 * j, 8);                                               \
                    memcpy(&hi, nxt + 8 * j, 8);                                               \
                    v = (((lo >> shift) & own) | ((hi << back) & ~own)) & mask;                \
                    memcpy(dst + 8 * j, &v, 8);                                                \
                }                                                                              \
            } else {                                                                           \
                NO_PEEL for (int j = 0; j < WORDS; j++) {                                      \
                    uint64_t v;                                                                \
                    memcpy(&v, src + 8 * j, 8);                                                \
                    v = (v >> shift) & mask;                                                   \
                    memcpy(dst + 8 * j, &v, 8);                                                \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

DEFINE_UNPACK_BLOCK_SWAR(uint8_t, 8)
DEFINE_UNPACK_BLOCK_SWAR(uint16_t, 16)

/* Unpack the block of `bits`-bit words at word `at` of `words` into `out` (1024 words). */
static void unpack_block(const char *words, uint64_t at, int width, int bits, char *out)
{
    switch (bits) {
    case 8:
        unpack_block_8((const uint8_t *)words + at, width, (uint8_t *)out);
        break;
    case 16:
        unpack_block_16((const uint16_t *)words + at, width, (uint16_t *)out);
        break;
    case 32:
        unpack_block_32((const uint32_t *)words + at, width, (uint32_t *)out);
        break;
    default:
        unpack_block_64((const uint64_t *)words + at, width, (uint64_t *)out);
    }
}

/* ValueError unless `bits` is a word size and both word arrays are aligned to it. */
static int words_ok(const char *fn, int bits, const Py_buffer *words, const Py_buffer *out)
{
    if (!word_size_ok(bits)) {
        PyErr_Format(PyExc_ValueError, "%s: %d-bit words", fn, bits);
        return 0;
    }
    if (!aligned(words->buf, bits / 8) || !aligned(out->buf, bits / 8)) {
        PyErr_Format(PyExc_ValueError, "%s: word arrays not aligned to %d bytes", fn, bits / 8);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(unpack_blocks_doc,
             "unpack_blocks(words, width, bits, out): unpack len(out) / 1024 FastLanes blocks "
             "packed at `width` from the `bits`-bit `words`.");

static PyObject *unpack_blocks(PyObject *self, PyObject *args)
{
    Py_buffer words, out;
    int width, bits;
    if (!PyArg_ParseTuple(args, "y*iiw*", &words, &width, &bits, &out))
        return NULL;
    Py_buffer *all[] = {&words, &out};
    PyObject *res = NULL;
    if (words_ok("unpack_blocks", bits, &words, &out)) {
        const int item = bits / 8;
        const uint64_t per = (uint64_t)width * (BLOCK / bits); /* words per block */
        const uint64_t nblocks = out.len / (BLOCK * item);
        if (width < 0 || width > bits || (per && nblocks > (uint64_t)(words.len / item) / per))
            res = guard_error("unpack_blocks");
        else {
            BEGIN_NOGIL(out.len)
            for (uint64_t b = 0; b < nblocks; b++)
                unpack_block(words.buf, b * per, width, bits, (char *)out.buf + b * BLOCK * item);
            END_NOGIL
            res = Py_NewRef(Py_None);
        }
    }
    release(2, all);
    return res;
}

PyDoc_STRVAR(inline_check_doc,
             "inline_check(words, starts, sizes, counts, bits) -> (status, chunk, values): the "
             "first failing check of InlineBitpacking chunks (TOO_MANY, OUTSIDE, TOO_WIDE, "
             "TOO_SHORT, in report order), and the number of values.");

static PyObject *inline_check(PyObject *self, PyObject *args)
{
    Py_buffer words, st, sz, ct;
    int bits;
    if (!PyArg_ParseTuple(args, "y*y*y*y*i", &words, &st, &sz, &ct, &bits))
        return NULL;
    Py_buffer *all[] = {&words, &st, &sz, &ct};
    PyObject *res = NULL;
    if (!word_size_ok(bits))
        PyErr_Format(PyExc_ValueError, "inline_check: %d-bit words", bits);
    else if (same_lengths("inline_check", -1, 3, all + 1) == 0) {
        const int item = bits / 8;
        const uint8_t *w = words.buf;
        const int64_t n_words = words.len / item, n = len64(&ct);
        int status = OK;
        Py_ssize_t bad = 0;
        int64_t total = 0;
        BEGIN_NOGIL(n * 16)
        for (Py_ssize_t i = 0; i < n && status == OK; i++) {
            int64_t c = at64(&ct, i);
            if (c < 0 || c > BLOCK)
                status = TOO_MANY, bad = i;
            else
                total += c;
        }
        for (Py_ssize_t i = 0; i < n && status == OK; i++) {
            int64_t s = at64(&st, i), size = at64(&sz, i);
            if (size < 1 || s < 0 || s > n_words - size)
                status = OUTSIDE, bad = i;
        }
        /* The width is the chunk's first word, compared unsigned: a huge one must not wrap. */
        for (Py_ssize_t i = 0; i < n && status == OK; i++)
            if (load_word(w + at64(&st, i) * item, item) > (uint64_t)bits)
                status = TOO_WIDE, bad = i;
        for (Py_ssize_t i = 0; i < n && status == OK; i++) {
            int64_t width = load_word(w + at64(&st, i) * item, item);
            if (at64(&sz, i) < 1 + width * (BLOCK / bits))
                status = TOO_SHORT, bad = i;
        }
        END_NOGIL
        res = Py_BuildValue("(inL)", status, bad, (long long)(status == OK ? total : 0));
    }
    release(4, all);
    return res;
}

PyDoc_STRVAR(inline_unpack_doc,
             "inline_unpack(words, starts, counts, bits, out): all validated InlineBitpacking "
             "chunks' values back to back.");

static PyObject *inline_unpack(PyObject *self, PyObject *args)
{
    Py_buffer words, st, ct, out;
    int bits;
    if (!PyArg_ParseTuple(args, "y*y*y*iw*", &words, &st, &ct, &bits, &out))
        return NULL;
    Py_buffer *all[] = {&words, &st, &ct, &out};
    PyObject *res = NULL;
    if (words_ok("inline_unpack", bits, &words, &out) &&
        same_lengths("inline_unpack", -1, 2, all + 1) == 0) {
        const int item = bits / 8;
        const uint64_t n_words = words.len / item, n_out = out.len / item;
        const Py_ssize_t n = len64(&ct);
        uint64_t scratch[BLOCK]; /* a short chunk's block: 1024 words of up to 8 bytes */
        uint64_t o = 0;
        int bad = 0;
        BEGIN_NOGIL(out.len)
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t s = at64(&st, i), c = at64(&ct, i);
            uint64_t width = s < n_words ? load_word((const uint8_t *)words.buf + s * item, item)
                                         : 0;
            if (s >= n_words || width > (uint64_t)bits ||
                !fits(s + 1, width * (BLOCK / bits), n_words) || c > BLOCK ||
                !fits(o, c, n_out)) {
                bad = 1;
                break;
            }
            char *dst = (char *)out.buf + o * item;
            if (c == BLOCK)
                unpack_block(words.buf, s + 1, (int)width, bits, dst);
            else if (c) {
                unpack_block(words.buf, s + 1, (int)width, bits, (char *)scratch);
                memcpy(dst, scratch, c * item);
            }
            o += c;
        }
        END_NOGIL
        res = bad ? guard_error("inline_unpack") : Py_NewRef(Py_None);
    }
    release(4, all);
    return res;
}

/* Whether an OutOfLineBitpacking buffer of `size` words at word `s` of `n_words` is outside
 * them or too short for `count` values: full blocks of `wpb` words, then a tail that is raw
 * (`tail` words) iff the buffer has exactly full * wpb + tail words, else one padded block.
 * Compared through quotients: no product of file values can overflow. */
static int outofline_bad(int64_t n_words, int64_t s, int64_t size, int64_t count, int64_t wpb)
{
    if (count < 0 || size < 0 || s < 0 || s > n_words - size)
        return 1;
    uint64_t full = count / BLOCK, tail = count % BLOCK, sz = size, w = wpb;
    int raw = tail > 0 && (w == 0 ? sz == tail
                                  : sz >= tail && (sz - tail) % w == 0 && (sz - tail) / w == full);
    if (raw)
        return 0;
    uint64_t blocks = full + (tail > 0);
    return w > 0 && blocks > sz / w;
}

PyDoc_STRVAR(outofline_check_doc,
             "outofline_check(n_words, starts, sizes, counts, wpb) -> the first chunk whose "
             "OutOfLineBitpacking buffer is too short or out of bounds, or -1.");

static PyObject *outofline_check(PyObject *self, PyObject *args)
{
    long long n_words, wpb;
    Py_buffer st, sz, ct;
    if (!PyArg_ParseTuple(args, "Ly*y*y*L", &n_words, &st, &sz, &ct, &wpb))
        return NULL;
    Py_buffer *all[] = {&st, &sz, &ct};
    PyObject *res = NULL;
    if (n_words < 0 || wpb < 0)
        PyErr_SetString(PyExc_ValueError, "outofline_check: negative size");
    else if (same_lengths("outofline_check", -1, 3, all) == 0) {
        Py_ssize_t n = len64(&ct), bad = -1;
        BEGIN_NOGIL(n * 8)
        for (Py_ssize_t i = 0; i < n; i++) {
            if (outofline_bad(n_words, at64(&st, i), at64(&sz, i), at64(&ct, i), wpb)) {
                bad = i;
                break;
            }
        }
        END_NOGIL
        res = PyLong_FromSsize_t(bad);
    }
    release(3, all);
    return res;
}

PyDoc_STRVAR(outofline_unpack_doc,
             "outofline_unpack(words, starts, sizes, counts, width, bits, out): validated "
             "OutOfLineBitpacking chunks: full blocks unpacked in place, then the tail raw or "
             "through a scratch block.");

static PyObject *outofline_unpack(PyObject *self, PyObject *args)
{
    Py_buffer words, st, sz, ct, out;
    int width, bits;
    if (!PyArg_ParseTuple(args, "y*y*y*y*iiw*", &words, &st, &sz, &ct, &width, &bits, &out))
        return NULL;
    Py_buffer *all[] = {&words, &st, &sz, &ct, &out};
    PyObject *res = NULL;
    if (words_ok("outofline_unpack", bits, &words, &out) &&
        same_lengths("outofline_unpack", -1, 3, all + 1) == 0) {
        const int item = bits / 8;
        const int64_t n_words = words.len / item, n_out = out.len / item;
        const int64_t wpb = (int64_t)width * (BLOCK / bits);
        const Py_ssize_t n = len64(&ct);
        uint64_t scratch[BLOCK];
        int64_t o = 0;
        int bad = width < 0 || width > bits;
        BEGIN_NOGIL(out.len)
        for (Py_ssize_t i = 0; i < n && !bad; i++) {
            int64_t s = at64(&st, i), size = at64(&sz, i), c = at64(&ct, i);
            if (outofline_bad(n_words, s, size, c, wpb) || c > n_out - o) {
                bad = 1;
                break;
            }
            int64_t full = c / BLOCK, tail = c % BLOCK;
            char *dst = (char *)out.buf + o * item;
            for (int64_t b = 0; b < full; b++)
                unpack_block(words.buf, s + b * wpb, width, bits, dst + b * BLOCK * item);
            if (tail) {
                int64_t at = s + full * wpb;
                if (size == full * wpb + tail) /* raw tail words */
                    memcpy(dst + full * BLOCK * item, (const char *)words.buf + at * item,
                           tail * item);
                else {
                    unpack_block(words.buf, at, width, bits, (char *)scratch);
                    memcpy(dst + full * BLOCK * item, scratch, tail * item);
                }
            }
            o += c;
        }
        END_NOGIL
        res = bad ? guard_error("outofline_unpack") : Py_NewRef(Py_None);
    }
    release(5, all);
    return res;
}

/* -- run-length ----------------------------------------------------------------------------- */

PyDoc_STRVAR(check_runs_doc,
             "check_runs(lengths, runs, counts) -> (chunk, covered): the first chunk whose u8 "
             "run lengths do not add up to its count and what they add up to; (len(counts), 0) "
             "if the chunks claim other than all the runs; else (-1, 0).");

static PyObject *check_runs(PyObject *self, PyObject *args)
{
    Py_buffer lengths, runs, ct;
    if (!PyArg_ParseTuple(args, "y*y*y*", &lengths, &runs, &ct))
        return NULL;
    Py_buffer *all[] = {&lengths, &runs, &ct};
    PyObject *res = NULL;
    if (same_lengths("check_runs", -1, 2, all + 1) == 0) {
        const uint8_t *len = lengths.buf;
        const int64_t n_runs = lengths.len, n = len64(&ct);
        int64_t bad = -1, covered = 0, r = 0;
        BEGIN_NOGIL(n_runs + n * 4)
        for (int64_t i = 0; i < n; i++) {
            int64_t k = at64(&runs, i);
            if (k < 0 || k > n_runs - r) {
                bad = n;
                break;
            }
            int64_t sum = 0;
            for (int64_t j = r; j < r + k; j++)
                sum += len[j];
            if (sum != at64(&ct, i)) {
                bad = i, covered = sum;
                break;
            }
            r += k;
        }
        if (bad < 0 && r != n_runs)
            bad = n;
        END_NOGIL
        res = Py_BuildValue("(LL)", (long long)bad, (long long)covered);
    }
    release(3, all);
    return res;
}

/* Fill out[o : o + k] with the `item`-byte value at v (any alignment), T-wide stores. */
#define FILL_RUNS(T)                                                                           \
    for (int64_t r = 0; r < n_runs && !bad; r++) {                                             \
        uint64_t k = len[r];                                                                   \
        if (k > n_out - o) {                                                                   \
            bad = 1;                                                                           \
            break;                                                                             \
        }                                                                                      \
        T v;                                                                                   \
        memcpy(&v, src + r * sizeof(T), sizeof(T));                                            \
        T *d = (T *)out.buf + o;                                                               \
        for (uint64_t j = 0; j < k; j++)                                                       \
            d[j] = v;                                                                          \
        o += k;                                                                                \
    }

PyDoc_STRVAR(rle_expand_doc,
             "rle_expand(values, lengths, itemsize, out): every run value repeated its u8 "
             "length times, back to back.");

static PyObject *rle_expand(PyObject *self, PyObject *args)
{
    Py_buffer values, lengths, out;
    Py_ssize_t item;
    if (!PyArg_ParseTuple(args, "y*y*nw*", &values, &lengths, &item, &out))
        return NULL;
    Py_buffer *all[] = {&values, &lengths, &out};
    PyObject *res = NULL;
    if (item < 1 || values.len != lengths.len * item)
        res = guard_error("rle_expand");
    else {
        const uint8_t *len = lengths.buf, *src = values.buf;
        const int64_t n_runs = lengths.len;
        const uint64_t n_out = out.len / item;
        uint64_t o = 0;
        int bad = 0, typed = (item == 1 || item == 2 || item == 4 || item == 8) &&
                             aligned(out.buf, item);
        BEGIN_NOGIL(out.len)
        if (typed && item == 1)
            FILL_RUNS(uint8_t)
        else if (typed && item == 2)
            FILL_RUNS(uint16_t)
        else if (typed && item == 4)
            FILL_RUNS(uint32_t)
        else if (typed)
            FILL_RUNS(uint64_t)
        else {
            for (int64_t r = 0; r < n_runs; r++) {
                uint64_t k = len[r];
                if (k > n_out - o) {
                    bad = 1;
                    break;
                }
                for (uint64_t j = 0; j < k; j++)
                    memcpy((char *)out.buf + (o + j) * item, src + r * item, item);
                o += k;
            }
        }
        END_NOGIL
        res = bad ? guard_error("rle_expand") : Py_NewRef(Py_None);
    }
    release(3, all);
    return res;
}

/* -- byte-stream-split ---------------------------------------------------------------------- */

/* Chunk of n values: value j's byte b is byte j of stream b (streams of n bytes from `in`).
 * With a constant width the inner loop unrolls and each output value is written once. */
#define JOIN_CHUNK(W)                                                                          \
    for (uint64_t j = 0; j < n; j++)                                                           \
        for (int b = 0; b < (W); b++)                                                          \
            dst[j * (W) + b] = in[b * n + j];

PyDoc_STRVAR(bss_join_doc,
             "bss_join(data, starts, counts, width, out): undo byte-stream-split for validated "
             "chunks: chunk i's `counts[i] * width` stream bytes at `starts[i]`.");

static PyObject *bss_join(PyObject *self, PyObject *args)
{
    Py_buffer data, st, ct, out;
    int width;
    if (!PyArg_ParseTuple(args, "y*y*y*iw*", &data, &st, &ct, &width, &out))
        return NULL;
    Py_buffer *all[] = {&data, &st, &ct, &out};
    PyObject *res = NULL;
    if (width < 1)
        PyErr_SetString(PyExc_ValueError, "bss_join: width below 1");
    else if (same_lengths("bss_join", -1, 2, all + 1) == 0) {
        const Py_ssize_t m = len64(&ct);
        uint64_t o = 0; /* output values so far */
        int bad = 0;
        BEGIN_NOGIL(out.len)
        for (Py_ssize_t i = 0; i < m; i++) {
            uint64_t s = at64(&st, i), n = at64(&ct, i);
            if (!fits(s, 0, data.len) || n > (data.len - s) / width ||
                !fits_items(o, n, width, out.len)) {
                bad = 1;
                break;
            }
            const uint8_t *in = (const uint8_t *)data.buf + s;
            uint8_t *dst = (uint8_t *)out.buf + o * width;
            if (width == 4)
                JOIN_CHUNK(4)
            else if (width == 8)
                JOIN_CHUNK(8)
            else
                JOIN_CHUNK(width)
            o += n;
        }
        END_NOGIL
        res = bad ? guard_error("bss_join") : Py_NewRef(Py_None);
    }
    release(4, all);
    return res;
}

PyDoc_STRVAR(take_items_doc,
             "take_items(offsets, data, idx, width, base, out_offsets) -> (bytes, nulls): the "
             "variable-width dictionary items idx - base (`width`-byte unsigned indices; below "
             "`base`: an empty row, counted in `nulls`) back to back, with 16 bytes to spare, "
             "their ends into the int32 `out_offsets` (n + 1, from 0). `offsets` are the items' "
             "int64 bounds in `data`, which has 16 bytes to spare after the last item.");

static PyObject *take_items(PyObject *self, PyObject *args)
{
    Py_buffer offs, data, idx, oo;
    int width;
    long long base;
    if (!PyArg_ParseTuple(args, "y*y*y*iLw*", &offs, &data, &idx, &width, &base, &oo))
        return NULL;
    Py_buffer *all[] = {&offs, &data, &idx, &oo};
    PyObject *res = NULL;
    const Py_ssize_t m = len64(&offs), n = width > 0 ? idx.len / width : 0;
    if ((width != 1 && width != 2 && width != 4 && width != 8) || idx.len % width || m < 1 ||
        offs.len % 8 || oo.len != 4 * (n + 1) || !aligned(oo.buf, 4) || base < 0 || base > 1)
        PyErr_SetString(PyExc_ValueError, "take_items: bad widths, offsets or base");
    else {
        const char *bounds = offs.buf;
        const uint8_t *ix = idx.buf;
        int32_t *ends = oo.buf;
        const uint64_t items = (uint64_t)m - 1, dlen = data.len;
        uint64_t o = 0;
        Py_ssize_t nulls = 0;
        int bad = 0;
        BEGIN_NOGIL(n + m)
        /* Items inside the data with 16 bytes to spare, in order. */
        for (Py_ssize_t k = 0; k < m && !bad; k++) {
            const int64_t e = ld64(bounds, k);
            if (e < 0 || (uint64_t)e + 16 > dlen || (k && e < ld64(bounds, k - 1)))
                bad = 1;
        }
        ends[0] = 0;
/* Both loops once per index width: a constant width makes load_le one load. */
#define TAKE_ENDS(W)                                                                           \
    for (Py_ssize_t i = 0; i < n && !bad; i++) {                                               \
        const uint64_t v = load_le(ix + i * (W), (W)), k = v - base;                           \
        if (v >= (uint64_t)base) {                                                             \
            if (k >= items) {                                                                  \
                bad = 1;                                                                       \
                break;                                                                         \
            }                                                                                  \
            o += ld64(bounds, k + 1) - ld64(bounds, k);                                        \
            if (o > INT32_MAX) {                                                               \
                bad = 1;                                                                       \
                break;                                                                         \
            }                                                                                  \
        } else                                                                                 \
            nulls++;                                                                           \
        ends[i + 1] = (int32_t)o;                                                              \
    }
        switch (width) {
        case 1:
            TAKE_ENDS(1)
            break;
        case 2:
            TAKE_ENDS(2)
            break;
        case 4:
            TAKE_ENDS(4)
            break;
        default:
            TAKE_ENDS(8)
        }
#undef TAKE_ENDS
        END_NOGIL
        PyObject *bytes = NULL;
        if (bad)
            guard_error("take_items");
        else if ((bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)o + 16)) != NULL) {
            const uint8_t *src = data.buf;
            uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(bytes);
            BEGIN_NOGIL(n)
#define TAKE_COPY(W)                                                                           \
    for (Py_ssize_t i = 0; i < n; i++) {                                                       \
        const uint64_t v = load_le(ix + i * (W), (W)), k = v - base;                           \
        const int32_t at = ends[i], len = ends[i + 1] - at;                                    \
        if (len == 0)                                                                          \
            continue;                                                                          \
        if (v < (uint64_t)base || k >= items || at < 0 || len < 0 || (uint64_t)at + len > o)   \
            break; /* the inputs changed under us: stop rather than overrun */                 \
        const uint64_t s = ld64(bounds, k);                                                    \
        if (len <= 16) /* one store; the bytes past `len` are overwritten next */              \
            memcpy(dst + at, src + s, 16);                                                     \
        else                                                                                   \
            memcpy(dst + at, src + s, len);                                                    \
    }
            switch (width) {
            case 1:
                TAKE_COPY(1)
                break;
            case 2:
                TAKE_COPY(2)
                break;
            case 4:
                TAKE_COPY(4)
                break;
            default:
                TAKE_COPY(8)
            }
#undef TAKE_COPY
            END_NOGIL
            res = Py_BuildValue("(Nn)", bytes, nulls);
        }
    }
    release(4, all);
    return res;
}

/* -- FSST ----------------------------------------------------------------------------------- */

/* FSST_POISON: the length given the escape and unused codes in the decoder's own table, so
 * that eight codes decoded at once without looking at them (at most 8 x 8 = 64 bytes when all
 * are symbols) reveal any such code by advancing further; the block is then decoded again a
 * code at a time. Writes may then run 7 x FSST_POISON + 8 bytes past a block's 64, which
 * FSST_SLACK covers. */
#define FSST_POISON 64
#define HAS_FF_BYTE(w) ((~(w) - 0x0101010101010101ull) & (w) & 0x8080808080808080ull)

/* One code at a time with every check, up to `k` codes or the string's end; returns the
 * position after them, or NULL with *status set. */
static const uint8_t *fsst_codes(const uint8_t *p, const uint8_t *e, int k, const uint64_t *sym,
                                 const uint8_t *len, uint8_t **q_io, int *status,
                                 int64_t *detail)
{
    uint8_t *q = *q_io;
    const uint8_t *stop = e - p > k ? p + k : e;
    while (p < stop) {
        const unsigned c = *p;
        if (len[c] != FSST_POISON) {
            memcpy(q, &sym[c], 8);
            q += len[c];
            p += 1;
        } else if (c == FSST_ESCAPE) {
            if (p + 1 >= e) {
                *status = TRAILING_ESCAPE;
                return NULL;
            }
            *q++ = p[1];
            p += 2;
        } else {
            *status = BAD_CODE, *detail = c;
            return NULL;
        }
    }
    *q_io = q;
    return p;
}

/* Tables whose symbols are all one or two bytes (FSST's table for high-entropy strings:
 * identifiers, hashes, tokens, random text) decode 32 codes at a time where the CPU has
 * AVX-512 VBMI2 (Ice Lake and later, Zen 4): each code's two candidate bytes are looked up
 * side by side (lanes 2i, 2i + 1, 256-entry tables through byte permutes) and the second
 * bytes of one-byte symbols squeezed out (a byte compress); a string end inside a block lands
 * after the bytes its codes kept. On the benchmark's random text (1.05 bytes per code) the
 * kernel decodes 6 GB/s from cache against the scalar loop's 2 (replaying a scan's calls:
 * 2.8 against 1.7 GB/s, the pages streaming from memory). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FSST_SHORT 1
#include <immintrin.h>

#define FSST_TWO 0x80  /* FsstShort.kind: a two-byte symbol */
#define FSST_NONE 0x40 /* ... an escape or an unused code: left to the scalar loop */

typedef struct {
    uint8_t first[256], second[256], kind[256];
} FsstShort;

#define SHORT_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vbmi2,bmi2,popcnt")))

static inline SHORT_TARGET __m512i lookup256(const __m512i t[4], __m512i idx, __mmask64 high)
{
    return _mm512_mask_blend_epi8(high, _mm512_permutex2var_epi8(t[0], idx, t[1]),
                                  _mm512_permutex2var_epi8(t[2], idx, t[3]));
}

/* From *p_io (inside string *s_io: its codes start at *j_io, the strings before it end at
 * *o_io in out), whole blocks of 32 codes while they lie before the chunk's `last` code and
 * their bytes fit in `room`; stops after a block holding a code that is not a symbol, at that
 * code. Records the end of every string finished; GUARD for an offset out of order. Blocks go
 * in segments of up to SHORT_SEGMENT, their kept-byte masks noted, and the string ends of a
 * segment are placed after it: a test per block for a string end would mispredict about
 * every other block (strings of tens of codes), costing as much as the decoding. */
#define SHORT_SEGMENT 64
static SHORT_TARGET int fsst_short_blocks(const FsstShort *t, const uint8_t *data,
                                          uint64_t n_data, uint64_t base, int width,
                                          int64_t count, const uint8_t *last, int64_t *ends,
                                          uint8_t *out, uint64_t room, const uint8_t **p_io,
                                          uint8_t **q_io, int64_t *s_io, uint64_t *j_io,
                                          uint64_t *o_io)
{
    static const uint8_t pairs[64] = {
        0,  0,  1,  1,  2,  2,  3,  3,  4,  4,  5,  5,  6,  6,  7,  7,  8,  8,  9,  9,  10, 10,
        11, 11, 12, 12, 13, 13, 14, 14, 15, 15, 16, 16, 17, 17, 18, 18, 19, 19, 20, 20, 21, 21,
        22, 22, 23, 23, 24, 24, 25, 25, 26, 26, 27, 27, 28, 28, 29, 29, 30, 30, 31, 31};
    __m512i first[4], second[4], kind[4];
    for (int i = 0; i < 4; i++) {
        first[i] = _mm512_loadu_si512(t->first + 64 * i);
        second[i] = _mm512_loadu_si512(t->second + 64 * i);
        kind[i] = _mm512_loadu_si512(t->kind + 64 * i);
    }
    const __m512i dup = _mm512_loadu_si512(pairs);
    const __m512i two = _mm512_set1_epi8((char)FSST_TWO), none = _mm512_set1_epi8(FSST_NONE);
    const __mmask64 odd = 0xAAAAAAAAAAAAAAAAull, even = 0x5555555555555555ull;
    const uint8_t *p = *p_io;
    uint8_t *q = *q_io;
    int64_t s = *s_io;
    uint64_t j = *j_io, o = *o_io;
    uint64_t end = base + load_le(data + base + s * width, width);
    if (end > n_data || end < j)
        return GUARD;
    __mmask64 kept[SHORT_SEGMENT + 1]; /* block b's kept bytes; kept[nb] = 0 */
    uint64_t at[SHORT_SEGMENT + 1];    /* where block b's bytes start in out */
    for (;;) {
        /* (p passes `last` where offsets inside the chunk run past its last one: the scalar
         * loop decodes up to such an end, inside the data, and meets the bad offset next) */
        uint64_t nb = last > p ? (uint64_t)(last - p) / 32 : 0;
        const uint64_t fit = (room - (uint64_t)(q - out)) / 64;
        nb = nb < fit ? nb : fit;
        nb = nb < SHORT_SEGMENT ? nb : SHORT_SEGMENT;
        if (nb == 0)
            break;
        uint64_t covered = 32 * nb; /* codes decoded in this segment */
        for (uint64_t b = 0; b < nb; b++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(p + 32 * b));
            const __m512i codes = _mm512_permutexvar_epi8(dup, _mm512_castsi256_si512(raw));
            const __mmask64 high = _mm512_movepi8_mask(codes);
            const __m512i k = lookup256(kind, codes, high);
            const __m512i bytes = _mm512_mask_blend_epi8(odd, lookup256(first, codes, high),
                                                         lookup256(second, codes, high));
            const __mmask64 bad = _mm512_test_epi8_mask(k, none) & even;
            __mmask64 keep = even | (_mm512_test_epi8_mask(k, two) & odd);
            if (__builtin_expect(bad != 0, 0)) {
                const unsigned n = (unsigned)__builtin_ctzll(bad) / 2;
                keep = _bzhi_u64(keep, 2 * n);
                covered = 32 * b + n, nb = b + 1;
            }
            _mm512_storeu_si512(q, _mm512_maskz_compress_epi8(keep, bytes));
            kept[b] = keep, at[b] = (uint64_t)(q - out);
            q += _mm_popcnt_u64(keep);
        }
        kept[nb] = 0, at[nb] = (uint64_t)(q - out);
        const uint64_t from = (uint64_t)(p - data);
        while (end - from <= covered) { /* (end >= j >= from) */
            const uint64_t rel = end - from, b = rel / 32;
            o = at[b] + (uint64_t)_mm_popcnt_u64(_bzhi_u64(kept[b], 2 * (rel - 32 * b)));
            ends[s] = (int64_t)o;
            j = end;
            if (++s > count)
                break;
            end = base + load_le(data + base + s * width, width);
            if (end > n_data || end < j) {
                *s_io = s, *j_io = j, *o_io = o;
                return GUARD;
            }
        }
        p += covered;
        if (covered < 32 * nb || s > count)
            break;
    }
    *p_io = p, *q_io = q, *s_io = s, *j_io = j, *o_io = o;
    return OK;
}

/* The short table for `sym`/`len` where every symbol is one or two bytes and the CPU decodes
 * them in blocks, else NULL. */
static const FsstShort *fsst_short_table(FsstShort *t, const uint64_t *sym, const uint8_t *len,
                                         uint64_t widest)
{
    static int vbmi2 = -1;
    if (vbmi2 < 0)
        vbmi2 = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi") &&
                __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("bmi2");
    if (!vbmi2 || widest > 2)
        return NULL;
    for (int c = 0; c < 256; c++) {
        t->first[c] = (uint8_t)sym[c];
        t->second[c] = (uint8_t)(sym[c] >> 8);
        t->kind[c] = len[c] == 2 ? FSST_TWO : len[c] == 1 ? 0 : FSST_NONE;
    }
    return t;
}
#endif

/* Decode the strings first + 1 ..= count of the Variable chunk at `base` (offsets of `width`
 * bytes relative to it) into out[*o:], string s's end going to ends[s]. Symbols are stored as
 * 8 bytes whatever their length. With a short table (`shorts`), blocks of 32 codes across
 * string ends; where a block stops (an escape, the chunk's last codes, little room) the rest
 * of that string goes through the scalar loop, and blocks resume with the next string (after
 * a few strings, doubling, when they keep stopping early). The scalar loop: eight codes at a
 * time where none of them is an escape (one word test) and all are symbols (the poisoned
 * lengths), else a code at a time (a 2.2 full scan of the benchmark's random text: 0.25-0.29
 * against 0.30-0.41 s per pull in this function, one code at a time throughout). Stops with
 * FULL before a string whose worst case (`widest` bytes per code: the table's longest symbol;
 * an escape's two codes make one byte) may not fit in `room` bytes, *s_at then being the last
 * string done and *o_io its end. Stores run past the string's end by less than FSST_SLACK, as
 * they start inside `room`. */
static int fsst_chunk(const uint8_t *data, uint64_t n_data, uint64_t base, int width,
                      int64_t first, int64_t count, const uint64_t *sym, const uint8_t *len,
                      const void *shorts, uint64_t widest, int64_t *ends, uint8_t *out,
                      uint64_t room, uint64_t *o_io, int64_t *s_at, int64_t *detail)
{
    uint64_t o = *o_io; /* the end of the last whole string */
    uint64_t j = base + load_le(data + base + first * width, width); /* ... its codes' end */
    const uint8_t *p = data + (j <= n_data ? j : 0); /* the next code (j past the data: the
                                                      * first string's check stops it) */
    uint8_t *q = out + o;        /* the next byte out */
    int status = OK;
    int64_t s = first + 1;
#ifdef FSST_SHORT
    const uint8_t *last = NULL; /* the chunk's codes' end, for the blocks */
    int skip = 0, backoff = 1;
    if (shorts && count > first) {
        const uint64_t l = base + load_le(data + base + count * width, width);
        if (l <= n_data && l >= j) /* (else the scalar loop meets the bad offset) */
            last = data + l;
    }
#else
    (void)shorts;
#endif
    while (s <= count) {
#ifdef FSST_SHORT
        if (last && skip == 0) {
            const uint8_t *from = p;
            status = fsst_short_blocks(shorts, data, n_data, base, width, count, last, ends, out,
                                       room, &p, &q, &s, &j, &o);
            if (status != OK || s > count)
                break;
            if (p - from < 64)
                skip = backoff, backoff = backoff < 256 ? 2 * backoff : 256;
            else
                backoff = 1;
        } else if (skip)
            skip--;
#endif
        const uint64_t end = base + load_le(data + base + s * width, width);
        if (end > n_data || end < j) {
            status = GUARD;
            break;
        }
        const uint8_t *e = data + end; /* p <= e: blocks stop inside string s */
        if ((uint64_t)(e - p) * widest > room - (uint64_t)(q - out)) { /* q - out <= room */
            status = FULL, *detail = (int64_t)((end - j) * widest);
            break;
        }
        while (p && e - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            w = LE64(w);
            if (!HAS_FF_BYTE(w)) {
                uint8_t *q0 = q;
                for (int b = 0; b < 8; b++) {
                    const unsigned c = (unsigned)(w >> (8 * b)) & 0xFF;
                    memcpy(q, &sym[c], 8);
                    q += len[c];
                }
                if (q - q0 <= 64) {
                    p += 8;
                    continue;
                }
                q = q0; /* an unused code among them: again, one at a time */
            }
            p = fsst_codes(p, e, 8, sym, len, &q, &status, detail);
        }
        if (p && p < e)
            p = fsst_codes(p, e, 8, sym, len, &q, &status, detail);
        if (status != OK)
            break;
        o = (uint64_t)(q - out);
        j = end;
        ends[s++] = (int64_t)o;
    }
    *o_io = o;
    *s_at = s - 1;
    return status;
}

PyDoc_STRVAR(fsst_expand_doc,
             "fsst_expand(data, starts, counts, width, table, out_offsets, out, state) -> "
             "(status, detail): FSST-decode validated Variable chunks from the resume point "
             "`state` (chunk, its string, strings before it, bytes out) on. For FULL, `state` "
             "points at the string that may not fit and `detail` is the room it needs; for "
             "BAD_CODE `detail` is the code.");

static PyObject *fsst_expand(PyObject *self, PyObject *args)
{
    Py_buffer data, st, ct, table, offs, out, state;
    int width;
    if (!PyArg_ParseTuple(args, "y*y*y*iy*w*w*w*", &data, &st, &ct, &width, &table, &offs, &out,
                          &state))
        return NULL;
    Py_buffer *all[] = {&data, &st, &ct, &table, &offs, &out, &state};
    PyObject *res = NULL;
    if (table.len != 256 * 16 || len64(&state) != 4 || out.len < FSST_SLACK ||
        (width != 4 && width != 8))
        PyErr_SetString(PyExc_ValueError, "fsst_expand: bad table, state, output or width");
    else if (same_lengths("fsst_expand", -1, 2, all + 1) == 0) {
        const Py_ssize_t m = len64(&ct), n_offs = len64(&offs);
        const uint64_t room = out.len - FSST_SLACK;
        int64_t *ends = offs.buf;
        int64_t k = at64(&state, 2), first = at64(&state, 1), detail = 0, s = 0;
        uint64_t o = at64(&state, 3);
        int status = OK;
        if (!aligned(offs.buf, 8) || o > room || k < 0 || first < 0)
            status = GUARD;
        /* The table's 16 bytes per code (symbol, then its length: 0 for the escape and unused
         * codes) as the symbols and their lengths apart, those codes' lengths poisoned. */
        uint64_t sym[256], widest = 1;
        uint8_t len[256];
        for (int c = 0; c < 256; c++) {
            const uint8_t *entry = (const uint8_t *)table.buf + 16 * c;
            memcpy(&sym[c], entry, 8);
            len[c] = entry[8] >= 1 && entry[8] <= 8 ? entry[8] : FSST_POISON;
            if (len[c] != FSST_POISON && len[c] > widest)
                widest = len[c];
        }
        const void *shorts = NULL;
#ifdef FSST_SHORT
        FsstShort short_table;
        shorts = fsst_short_table(&short_table, sym, len, widest);
#endif
        BEGIN_NOGIL(data.len)
        for (Py_ssize_t i = at64(&state, 0); i < m && status == OK; i++) {
            uint64_t base = at64(&st, i);
            int64_t c = at64(&ct, i);
            /* The chunk's c + 1 offsets inside the data, its ends inside out_offsets. */
            if (base >= (uint64_t)data.len || c < 0 || first > c || c >= n_offs - k ||
                (uint64_t)c + 1 > (data.len - base) / width) {
                status = GUARD;
                break;
            }
            status = fsst_chunk(data.buf, data.len, base, width, first, c, sym, len, shorts, widest,
                                ends + k, out.buf, room, &o, &s, &detail);
            if (status == FULL) {
                put64(&state, 0, i), put64(&state, 1, s), put64(&state, 2, k);
                put64(&state, 3, (int64_t)o);
                break;
            }
            k += c;
            first = 0;
        }
        if (status == OK)
            put64(&state, 3, (int64_t)o);
        END_NOGIL
        if (status == GUARD)
            res = guard_error("fsst_expand");
        else
            res = Py_BuildValue("(iL)", status, (long long)detail);
    }
    release(7, all);
    return res;
}

/* -- Flat and Variable chunks --------------------------------------------------------------- */

PyDoc_STRVAR(check_prefixes_doc,
             "check_prefixes(size, starts, sizes, nbytes) -> (status, chunk): the first chunk "
             "whose buffer is shorter than `nbytes` (SHORT), then the first whose `nbytes` run "
             "past the data (OUTSIDE), or (OK, 0).");

static PyObject *check_prefixes(PyObject *self, PyObject *args)
{
    long long size;
    Py_buffer st, sz, nb;
    if (!PyArg_ParseTuple(args, "Ly*y*y*", &size, &st, &sz, &nb))
        return NULL;
    Py_buffer *all[] = {&st, &sz, &nb};
    PyObject *res = NULL;
    if (size < 0)
        PyErr_SetString(PyExc_ValueError, "check_prefixes: negative size");
    else if (same_lengths("check_prefixes", -1, 3, all) == 0) {
        const Py_ssize_t n = len64(&st);
        Py_ssize_t bad = 0;
        int status = OK;
        BEGIN_NOGIL(n * 4)
        for (Py_ssize_t i = 0; i < n && status == OK; i++)
            if (at64(&sz, i) < at64(&nb, i))
                status = SHORT, bad = i;
        for (Py_ssize_t i = 0; i < n && status == OK; i++) {
            int64_t s = at64(&st, i), k = at64(&nb, i);
            if (k < 0 || s < 0 || s > size - k)
                status = OUTSIDE, bad = i;
        }
        END_NOGIL
        res = Py_BuildValue("(in)", status, bad);
    }
    release(3, all);
    return res;
}

/* Append the first c bits (LSB-first) of the bytes at src to the zeroed bitmap dst at bit o,
 * a byte at a time: source byte k lands in dst bytes o / 8 + k (shifted up by sh = o % 8) and
 * o / 8 + k + 1 (its top sh bits); the last, partial byte is masked to its remaining bits. No
 * byte past bit o + c - 1 is written, so the caller only needs o + c <= 8 * len(dst). */
static void append_bits(const uint8_t *src, uint64_t c, uint8_t *dst, uint64_t o)
{
    const unsigned sh = o % 8, rem = c % 8;
    const uint64_t full = c / 8;
    uint8_t *d = dst + o / 8;
    if (sh == 0) {
        memcpy(d, src, full);
        if (rem)
            d[full] = (uint8_t)(src[full] & ((1u << rem) - 1));
        return;
    }
    for (uint64_t k = 0; k < full; k++) {
        d[k] |= (uint8_t)(src[k] << sh);
        d[k + 1] = (uint8_t)(src[k] >> (8 - sh)); /* still zero: bits are only appended */
    }
    if (rem) {
        const unsigned b = src[full] & ((1u << rem) - 1);
        d[full] |= (uint8_t)(b << sh);
        if (sh + rem > 8)
            d[full + 1] = (uint8_t)(b >> (8 - sh));
    }
}

PyDoc_STRVAR(copy_bits_doc,
             "copy_bits(data, starts, counts, out): append the first `counts[i]` bits "
             "(LSB-first) of each validated chunk at byte `starts[i]` to the zeroed bitmap "
             "`out`.");

static PyObject *copy_bits(PyObject *self, PyObject *args)
{
    Py_buffer data, st, ct, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &data, &st, &ct, &out))
        return NULL;
    Py_buffer *all[] = {&data, &st, &ct, &out};
    PyObject *res = NULL;
    if (same_lengths("copy_bits", -1, 2, all + 1) == 0) {
        const uint8_t *src = data.buf;
        uint8_t *dst = out.buf;
        const Py_ssize_t n = len64(&ct);
        const uint64_t out_bits = (uint64_t)out.len * 8;
        uint64_t o = 0; /* bits written */
        int bad = 0;
        BEGIN_NOGIL(out.len * 8)
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t s = at64(&st, i), c = at64(&ct, i);
            if (c > out_bits - o || !fits(s, (c + 7) / 8, data.len)) { /* c <= out_bits */
                bad = 1;
                break;
            }
            append_bits(src + s, c, dst, o);
            o += c;
        }
        END_NOGIL
        res = bad ? guard_error("copy_bits") : Py_NewRef(Py_None);
    }
    release(4, all);
    return res;
}

PyDoc_STRVAR(variable_check_doc,
             "variable_check(data, starts, sizes, counts, width) -> (status, chunk, bytes): the "
             "first failed check of Variable chunks in report order (SHORT, OUTSIDE, "
             "BAD_OFFSET, BYTES_OUTSIDE, then DECREASING), and the strings' total byte size.");

static PyObject *variable_check(PyObject *self, PyObject *args)
{
    Py_buffer data, st, sz, ct;
    int width;
    if (!PyArg_ParseTuple(args, "y*y*y*y*i", &data, &st, &sz, &ct, &width))
        return NULL;
    Py_buffer *all[] = {&data, &st, &sz, &ct};
    PyObject *res = NULL;
    if (width < 1 || width > 8)
        PyErr_Format(PyExc_ValueError, "variable_check: %d-byte offsets", width);
    else if (same_lengths("variable_check", -1, 3, all + 1) == 0) {
        const uint8_t *d = data.buf;
        const int64_t size = data.len, n = len64(&ct);
        int status = OK;
        int64_t bad = 0, decreasing = -1;
        uint64_t total = 0;
        BEGIN_NOGIL(size)
        /* Room for the count + 1 offsets: compared as counts (c + 1 > q <=> c >= q), so a
         * huge count cannot overflow. */
        for (int64_t i = 0; i < n && status == OK; i++) {
            int64_t c = at64(&ct, i), bytes = at64(&sz, i);
            if (c < 0 || bytes < 0 || c >= bytes / width)
                status = SHORT, bad = i;
        }
        for (int64_t i = 0; i < n && status == OK; i++) {
            int64_t s = at64(&st, i);
            if (s < 0 || s > size - (at64(&ct, i) + 1) * width)
                status = OUTSIDE, bad = i;
        }
        for (int64_t i = 0; i < n && status == OK; i++) {
            const int64_t c = at64(&ct, i);
            const uint64_t low = (uint64_t)(c + 1) * width, high = at64(&sz, i);
            const uint8_t *p = d + at64(&st, i);
            uint64_t prev = low;
            for (int64_t j = 0; j <= c; j++) {
                uint64_t off = load_le(p + j * width, width);
                if (off < low || off > high) {
                    status = BAD_OFFSET, bad = i;
                    break;
                }
                if (off < prev && decreasing < 0)
                    decreasing = i;
                prev = off;
            }
        }
        /* The chunk's bytes [s + first, s + last) inside the data; offsets are <= the chunk
         * size (an int64), and s <= size, so `size - s` cannot overflow. */
        for (int64_t i = 0; i < n && status == OK; i++) {
            const int64_t s = at64(&st, i), c = at64(&ct, i);
            const uint64_t first = load_le(d + s, width), last = load_le(d + s + c * width, width);
            if (last < first || last > (uint64_t)(size - s))
                status = BYTES_OUTSIDE, bad = i;
            else
                total += last - first;
        }
        if (status == OK && decreasing >= 0)
            status = DECREASING, bad = decreasing;
        END_NOGIL
        if (total > (uint64_t)PY_SSIZE_T_MAX) /* overlapping chunks: no such allocation */
            total = PY_SSIZE_T_MAX;
        res = Py_BuildValue("(iLL)", status, (long long)bad,
                            (long long)(status == OK ? total : 0));
    }
    release(4, all);
    return res;
}

PyDoc_STRVAR(variable_gather_doc,
             "variable_gather(data, starts, counts, width, offsets, out): validated Variable "
             "chunks -> int64 offsets from 0 and all strings' bytes.");

static PyObject *variable_gather(PyObject *self, PyObject *args)
{
    Py_buffer data, st, ct, offs, out;
    int width;
    if (!PyArg_ParseTuple(args, "y*y*y*iw*w*", &data, &st, &ct, &width, &offs, &out))
        return NULL;
    Py_buffer *all[] = {&data, &st, &ct, &offs, &out};
    PyObject *res = NULL;
    if (width < 1 || width > 8 || offs.len < 8)
        PyErr_SetString(PyExc_ValueError, "variable_gather: bad width or offsets");
    else if (same_lengths("variable_gather", -1, 2, all + 1) == 0) {
        const uint8_t *d = data.buf;
        const char *starts = st.buf, *counts = ct.buf;
        char *ends = offs.buf;
        uint8_t *dst = out.buf;
        const uint64_t size = data.len, n_out = out.len, n_offs = len64(&offs);
        const Py_ssize_t m = len64(&ct);
        uint64_t o = 0, k = 0;
        int bad = 0;
        BEGIN_NOGIL(n_out + n_offs * 4)
        st64(ends, 0, 0);
        for (Py_ssize_t i = 0; i < m; i++) {
            const uint64_t s = ld64(starts, i), c = ld64(counts, i);
            if (c >= n_offs - k || !fits(s, 0, size) || c + 1 > (size - s) / width) {
                bad = 1;
                break;
            }
            const uint64_t first = load_le(d + s, width), last = load_le(d + s + c * width, width);
            if (last < first || last > size - s || !fits(o, last - first, n_out)) {
                bad = 1;
                break;
            }
            /* Offsets are 4 or 8 bytes: a constant width makes each one a single load. */
            if (width == 4)
                for (uint64_t j = 1; j <= c; j++)
                    st64(ends, ++k, (int64_t)(o + load_le(d + s + j * 4, 4) - first));
            else
                for (uint64_t j = 1; j <= c; j++)
                    st64(ends, ++k, (int64_t)(o + load_le(d + s + j * width, width) - first));
            memcpy(dst + o, d + s + first, last - first);
            o += last - first;
        }
        END_NOGIL
        res = bad ? guard_error("variable_gather") : Py_NewRef(Py_None);
    }
    release(5, all);
    return res;
}

PyDoc_STRVAR(word_layout_doc,
             "word_layout(size, starts, sizes, width, word_starts, word_sizes) -> (status, "
             "chunk): chunk buffers read as `width`-byte words. OUTSIDE / SHORT (not whole "
             "words) for the first bad chunk, MISALIGNED if some buffer does not start on a "
             "word boundary (word starts are then meaningless), else OK.");

static PyObject *word_layout(PyObject *self, PyObject *args)
{
    long long size;
    int width;
    Py_buffer st, sz, ws, wz;
    if (!PyArg_ParseTuple(args, "Ly*y*iw*w*", &size, &st, &sz, &width, &ws, &wz))
        return NULL;
    Py_buffer *all[] = {&st, &sz, &ws, &wz};
    PyObject *res = NULL;
    if (size < 0 || width < 1)
        PyErr_SetString(PyExc_ValueError, "word_layout: negative size or width below 1");
    else if (same_lengths("word_layout", -1, 4, all) == 0) {
        const Py_ssize_t n = len64(&st);
        Py_ssize_t bad = 0;
        int status = OK, misaligned = 0;
        BEGIN_NOGIL(n * 8)
        for (Py_ssize_t i = 0; i < n && status == OK; i++) {
            int64_t s = at64(&st, i), k = at64(&sz, i);
            if (k < 0 || s < 0 || s > size - k)
                status = OUTSIDE, bad = i;
        }
        for (Py_ssize_t i = 0; i < n && status == OK; i++) {
            int64_t s = at64(&st, i), k = at64(&sz, i);
            if (k % width) {
                status = SHORT, bad = i;
                break;
            }
            misaligned |= s % width != 0;
            put64(&ws, i, s / width);
            put64(&wz, i, k / width);
        }
        END_NOGIL
        if (status == OK && misaligned)
            status = MISALIGNED;
        res = Py_BuildValue("(in)", status, bad);
    }
    release(4, all);
    return res;
}

/* -- IVF vector search ---------------------------------------------------------------------- */

/* The storage kinds and metrics of `ivf_topk` (format.index.vector.search passes them). */
enum { IVF_PQ, IVF_SQ, IVF_FLAT };
enum { METRIC_L2, METRIC_COSINE, METRIC_DOT };

#define IVF_BLOCK 256 /* rows scored at once before they go through the heap */

/* Whether (da, ia) sorts before (db, ib): by distance, NaN last, then row id. */
static inline int ivf_before(float da, uint64_t ia, float db, uint64_t ib)
{
    int na = da != da, nb = db != db;
    if (na | nb)
        return na == nb ? ia < ib : nb;
    return da < db || (da == db && ia < ib);
}

/* A max-heap of at most `cap` (distance, row id) entries: the worst kept sits at 0. */
typedef struct {
    float *d;
    uint64_t *id;
    int64_t n, cap;
} IvfHeap;

static void ivf_sift_down(IvfHeap *h, int64_t i)
{
    float d = h->d[i];
    uint64_t id = h->id[i];
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && ivf_before(h->d[c], h->id[c], h->d[c + 1], h->id[c + 1]))
            c++;
        if (!ivf_before(d, id, h->d[c], h->id[c]))
            break;
        h->d[i] = h->d[c], h->id[i] = h->id[c];
        i = c;
    }
    h->d[i] = d, h->id[i] = id;
}

static inline void ivf_push(IvfHeap *h, float d, uint64_t id)
{
    if (h->n == h->cap) {
        if (d > h->d[0] || !ivf_before(d, id, h->d[0], h->id[0]))
            return;
        h->d[0] = d, h->id[0] = id;
        ivf_sift_down(h, 0);
        return;
    }
    int64_t i = h->n++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!ivf_before(h->d[p], h->id[p], d, id))
            break;
        h->d[i] = h->d[p], h->id[i] = h->id[p];
        i = p;
    }
    h->d[i] = d, h->id[i] = id;
}

/* How one (query, partition) pair's rows are scored. */
typedef struct {
    int kind, metric;
    Py_ssize_t width; /* PQ: m * 256 table entries; SQ, FLAT: the dimension */
    double scale, start, step; /* SQ: l2 scale, dot value = start + code * step */
} IvfParams;

/* PQ: a row's distance is base + bias[row] + sum_j table[j][code j]; clamped at 0 but for
 * dot. Codes are row-major (n, m): rows go 4 at a time, their sums held in registers. */
static void ivf_score_pq(const IvfParams *p, const double *t, double base, const uint8_t *codes,
                         const double *bias, Py_ssize_t r0, Py_ssize_t count, float *out)
{
    const Py_ssize_t m = p->width / 256;
    const int clamp = p->metric != METRIC_DOT;
    Py_ssize_t b = 0;
    for (; b + 4 <= count; b += 4) {
        const Py_ssize_t r = r0 + b;
        const uint8_t *c0 = codes + r * m, *c1 = c0 + m, *c2 = c1 + m, *c3 = c2 + m;
        double s0 = base, s1 = base, s2 = base, s3 = base;
        if (bias)
            s0 += bias[r], s1 += bias[r + 1], s2 += bias[r + 2], s3 += bias[r + 3];
        for (Py_ssize_t j = 0; j < m; j++) {
            const double *tj = t + j * 256;
            s0 += tj[c0[j]], s1 += tj[c1[j]], s2 += tj[c2[j]], s3 += tj[c3[j]];
        }
        if (clamp) {
            s0 = s0 > 0.0 ? s0 : 0.0, s1 = s1 > 0.0 ? s1 : 0.0;
            s2 = s2 > 0.0 ? s2 : 0.0, s3 = s3 > 0.0 ? s3 : 0.0;
        }
        out[b] = (float)s0, out[b + 1] = (float)s1, out[b + 2] = (float)s2, out[b + 3] = (float)s3;
    }
    for (; b < count; b++) {
        const Py_ssize_t r = r0 + b;
        const uint8_t *c = codes + r * m;
        double s = base + (bias ? bias[r] : 0.0);
        for (Py_ssize_t j = 0; j < m; j++)
            s += t[j * 256 + c[j]];
        out[b] = (float)(clamp && s < 0.0 ? 0.0 : s);
    }
}

/* Sums over a row's `w` values in four interleaved float64 partial sums (independent
 * additions: the loop runs at the processor's width, not its addition latency). */
#define SUM4(EXPR)                                                                             \
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;                                           \
    Py_ssize_t i = 0;                                                                          \
    for (; i + 4 <= w; i += 4) {                                                               \
        a0 += EXPR(i), a1 += EXPR(i + 1), a2 += EXPR(i + 2), a3 += EXPR(i + 3);                \
    }                                                                                          \
    for (; i < w; i++)                                                                         \
        a0 += EXPR(i);

/* SQ codes (rows of `w` bytes) or FLAT vectors (rows of `w` float32) against a query. */
static void ivf_score_dense(const IvfParams *p, const double *q, const void *data,
                            Py_ssize_t r0, Py_ssize_t count, float *out)
{
    const Py_ssize_t w = p->width;
    if (p->kind == IVF_SQ) {
        for (Py_ssize_t b = 0; b < count; b++) {
            const uint8_t *c = (const uint8_t *)data + (r0 + b) * w;
            if (p->metric == METRIC_DOT) {
#define SQ_DOT(k) (q[k] * (p->start + c[k] * p->step))
                SUM4(SQ_DOT)
                out[b] = (float)(1.0 - ((a0 + a1) + (a2 + a3)));
            } else {
                /* quantized query and codes are integers: the sum is exact */
#define SQ_L2(k) ((q[k] - c[k]) * (q[k] - c[k]))
                SUM4(SQ_L2)
                out[b] = (float)((a0 + a1) + (a2 + a3)) * (float)p->scale; /* a float32 product */
            }
        }
        return;
    }
    double qq = 0.0;
    if (p->metric == METRIC_COSINE) {
#define QQ(k) (q[k] * q[k])
        SUM4(QQ)
        qq = (a0 + a1) + (a2 + a3);
    }
    for (Py_ssize_t b = 0; b < count; b++) {
        const float *v = (const float *)data + (r0 + b) * w;
        if (p->metric == METRIC_L2) {
#define L2(k) (((double)v[k] - q[k]) * ((double)v[k] - q[k]))
            SUM4(L2)
            out[b] = (float)((a0 + a1) + (a2 + a3));
            continue;
        }
#define DOT(k) ((double)v[k] * q[k])
        double dot;
        {
            SUM4(DOT)
            dot = (a0 + a1) + (a2 + a3);
        }
        if (p->metric == METRIC_DOT) {
            out[b] = (float)(1.0 - dot);
            continue;
        }
#define XX(k) ((double)v[k] * v[k])
        SUM4(XX)
        out[b] = (float)(1.0 - dot / sqrt(qq * ((a0 + a1) + (a2 + a3))));
    }
}
#undef SUM4
#undef SQ_DOT
#undef SQ_L2
#undef QQ
#undef L2
#undef DOT
#undef XX

/* The buffers of every item of a tuple (NULL items allowed where `optional`): 0, or -1 with
 * an exception set and none of them held. */
static int tuple_buffers(const char *fn, PyObject *tuple, Py_buffer *out, int optional,
                         const char *what)
{
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (optional && item == Py_None) {
            out[i].obj = NULL, out[i].buf = NULL, out[i].len = 0;
            continue;
        }
        if (PyObject_GetBuffer(item, &out[i], PyBUF_C_CONTIGUOUS) < 0) {
            for (Py_ssize_t k = 0; k < i; k++)
                if (out[k].obj)
                    PyBuffer_Release(&out[k]);
            PyErr_Format(PyExc_ValueError, "%s: %s %zd is not a contiguous buffer", fn, what, i);
            return -1;
        }
    }
    return 0;
}

/* What ivf_topk and hnsw_topk share: the queries, the (query, partition) pairs, the per-query
 * heaps they fill (buffers parsed by the kernel, released by ivf_call_release) and every
 * partition's data, row ids, PQ bias and row mask (taken by ivf_call_take). */
typedef struct {
    int kind, metric;
    Py_ssize_t width, fetch, nq, npairs, parts, item;
    double scale, start, step, lower, upper;
    Py_buffer qs, pq, ps, pb, oi, od, oc;
    Py_buffer *data, *ids, *bias, *mask; /* one a partition; bias and mask items may be empty */
} IvfCall;

/* Check a parsed call and take its partitions' buffers (`bias`, `masks`: None, or a tuple of
 * None or a buffer a partition): 0, or -1 with an exception set and no partition held. */
static int ivf_call_take(IvfCall *c, const char *fn, PyObject *data, PyObject *ids,
                         PyObject *bias, PyObject *masks)
{
    Py_buffer *pairs[] = {&c->pq, &c->ps, &c->pb};
    c->data = NULL;
    c->parts = PyTuple_GET_SIZE(data);
    c->npairs = len64(&c->pq);
    c->nq = c->width > 0 ? (Py_ssize_t)(c->qs.len / 8 / c->width) : 0;
    if (c->kind < IVF_PQ || c->kind > IVF_FLAT || c->metric < METRIC_L2 ||
        c->metric > METRIC_DOT || c->width < 1 || c->fetch < 1 ||
        (c->kind == IVF_PQ && c->width % 256)) {
        PyErr_Format(PyExc_ValueError, "%s: bad kind, metric, width or fetch", fn);
        return -1;
    }
    if ((bias != Py_None && (!PyTuple_Check(bias) || PyTuple_GET_SIZE(bias) != c->parts)) ||
        (masks != Py_None && (!PyTuple_Check(masks) || PyTuple_GET_SIZE(masks) != c->parts)) ||
        PyTuple_GET_SIZE(ids) != c->parts || same_lengths(fn, c->npairs, 3, pairs) ||
        c->qs.len != (Py_ssize_t)(c->nq * c->width * 8) || c->oc.len != c->nq * 8 ||
        c->oi.len != c->nq * c->fetch * 8 || c->od.len != c->nq * c->fetch * 4) {
        PyErr_Format(PyExc_ValueError, "%s: arrays of inconsistent sizes", fn);
        return -1;
    }
    if (!aligned(c->qs.buf, 8) || !aligned(c->pb.buf, 8) || !aligned(c->oi.buf, 8) ||
        !aligned(c->od.buf, 4) || !aligned(c->oc.buf, 8)) {
        PyErr_Format(PyExc_ValueError, "%s: misaligned arrays", fn);
        return -1;
    }
    const Py_ssize_t slots = c->parts ? c->parts : 1;
    c->data = PyMem_Calloc(4 * slots, sizeof(Py_buffer));
    if (c->data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->ids = c->data + slots, c->bias = c->ids + slots, c->mask = c->bias + slots;
    if (tuple_buffers(fn, data, c->data, 0, "data") < 0 ||
        tuple_buffers(fn, ids, c->ids, 0, "ids") < 0 ||
        (bias != Py_None && tuple_buffers(fn, bias, c->bias, 1, "bias") < 0) ||
        (masks != Py_None && tuple_buffers(fn, masks, c->mask, 1, "masks") < 0))
        goto fail;
    /* every partition's buffers agree with its row count, every pair and heap is in range */
    c->item = c->kind == IVF_PQ ? c->width / 256 : c->kind == IVF_SQ ? c->width : c->width * 4;
    int bad = 0;
    for (Py_ssize_t s = 0; s < c->parts && !bad; s++) {
        Py_ssize_t n = c->ids[s].len / 8;
        bad = c->ids[s].len % 8 || c->data[s].len != n * c->item || !aligned(c->ids[s].buf, 8) ||
              (c->kind == IVF_FLAT && !aligned(c->data[s].buf, 4)) ||
              (c->bias[s].obj && (c->bias[s].len != n * 8 || !aligned(c->bias[s].buf, 8))) ||
              (c->mask[s].obj && c->mask[s].len != n) || n > (Py_ssize_t)UINT32_MAX;
    }
    const int64_t *pair_q = c->pq.buf, *pair_s = c->ps.buf, *count = c->oc.buf;
    for (Py_ssize_t i = 0; i < c->npairs && !bad; i++)
        bad = pair_q[i] < 0 || pair_q[i] >= c->nq || pair_s[i] < 0 || pair_s[i] >= c->parts;
    for (Py_ssize_t i = 0; i < c->nq && !bad; i++)
        bad = count[i] < 0 || count[i] > c->fetch;
    if (!bad)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: partition or pair out of range", fn);
fail:
    for (Py_ssize_t s = 0; s < 4 * slots; s++)
        if (c->data[s].obj)
            PyBuffer_Release(&c->data[s]);
    PyMem_Free(c->data);
    c->data = NULL;
    return -1;
}

/* Release what a call holds: its partitions' buffers (if taken) and its parsed buffers. */
static void ivf_call_release(IvfCall *c)
{
    if (c->data != NULL) {
        const Py_ssize_t slots = c->parts ? c->parts : 1;
        for (Py_ssize_t s = 0; s < 4 * slots; s++)
            if (c->data[s].obj)
                PyBuffer_Release(&c->data[s]);
        PyMem_Free(c->data);
        c->data = NULL;
    }
    Py_buffer *all[] = {&c->qs, &c->pq, &c->ps, &c->pb, &c->oi, &c->od, &c->oc};
    release(7, all);
}

PyDoc_STRVAR(
    ivf_topk_doc,
    "ivf_topk(kind, metric, queries, width, scale, start, step, pair_query, pair_slot, "
    "pair_base, data, ids, bias, fetch, out_ids, out_dist, out_count, lower, upper): score the "
    "rows of each (query, partition) pair and keep, per query, the `fetch` best by (distance, "
    "row id), NaN last, of those at lower <= distance < upper when a bound is finite. data[slot] holds a partition's PQ codes (n, m) uint8, SQ "
    "codes (n, dim) uint8 or vectors (n, dim) float32, ids[slot] its row ids (uint64), "
    "bias[slot] its per-row PQ terms (float64) or bias is None; queries holds `width` float64 "
    "values a query (PQ: its m x 256 table). out_ids / out_dist (queries x fetch) and "
    "out_count hold the heaps: they start from the entries already there and are left "
    "unordered.");

static PyObject *ivf_topk(PyObject *self, PyObject *args)
{
    IvfCall c = {.lower = -INFINITY, .upper = INFINITY};
    PyObject *data, *ids, *bias;
    if (!PyArg_ParseTuple(args, "iiy*ndddy*y*y*O!O!Onw*w*w*|dd", &c.kind, &c.metric, &c.qs,
                          &c.width, &c.scale, &c.start, &c.step, &c.pq, &c.ps, &c.pb,
                          &PyTuple_Type, &data, &PyTuple_Type, &ids, &bias, &c.fetch, &c.oi,
                          &c.od, &c.oc, &c.lower, &c.upper))
        return NULL;
    if (ivf_call_take(&c, "ivf_topk", data, ids, bias, Py_None) < 0) {
        ivf_call_release(&c);
        return NULL;
    }
    /* a distance range: rows outside it (NaN included) are never kept */
    const int ranged = c.lower > -INFINITY || c.upper < INFINITY;
    const IvfParams p = {c.kind, c.metric, c.width, c.scale, c.start, c.step};
    const int64_t *pair_q = c.pq.buf, *pair_s = c.ps.buf;
    const double *queries = c.qs.buf, *base = c.pb.buf;
    const Py_ssize_t width = c.width, fetch = c.fetch;
    int64_t *count = c.oc.buf;
    float *out_d = c.od.buf;
    uint64_t *out_i = c.oi.buf;
    Py_ssize_t work = 0;
    for (Py_ssize_t i = 0; i < c.npairs; i++)
        work += (c.ids[pair_s[i]].len / 8) * c.item;
    BEGIN_NOGIL(work)
    float dist[IVF_BLOCK];
    for (Py_ssize_t i = 0; i < c.npairs; i++) {
        const int64_t q = pair_q[i], s = pair_s[i];
        const Py_ssize_t n = c.ids[s].len / 8;
        const uint64_t *row = c.ids[s].buf;
        IvfHeap h = {out_d + q * fetch, out_i + q * fetch, count[q], fetch};
        for (Py_ssize_t r0 = 0; r0 < n; r0 += IVF_BLOCK) {
            Py_ssize_t m = n - r0 < IVF_BLOCK ? n - r0 : IVF_BLOCK;
            if (c.kind == IVF_PQ)
                ivf_score_pq(&p, queries + q * width, base[i], c.data[s].buf, c.bias[s].buf, r0,
                             m, dist);
            else
                ivf_score_dense(&p, queries + q * width, c.data[s].buf, r0, m, dist);
            for (Py_ssize_t b = 0; b < m; b++) {
                if (ranged && !(dist[b] >= c.lower && dist[b] < c.upper))
                    continue;
                if (h.n < h.cap || !(dist[b] > h.d[0])) /* row ids read only for contenders */
                    ivf_push(&h, dist[b], row[r0 + b]);
            }
        }
        count[q] = h.n;
    }
    END_NOGIL
    ivf_call_release(&c);
    Py_RETURN_NONE;
}

/* -- HNSW graphs (IVF_HNSW_* sub-indices) ------------------------------------------------- */

/* A graph node reached during a search: its distance and id (its row in the partition). */
typedef struct {
    float d;
    uint32_t id;
} HnswNode;

/* A binary heap of nodes, the largest distance on top when `max`, else the smallest. */
typedef struct {
    HnswNode *a;
    Py_ssize_t n;
    int max;
} HnswHeap;

static inline int hnsw_above(const HnswHeap *h, HnswNode x, HnswNode y)
{
    return h->max ? x.d > y.d : x.d < y.d;
}

static void hnsw_heap_push(HnswHeap *h, HnswNode x)
{
    Py_ssize_t i = h->n++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (!hnsw_above(h, x, h->a[p]))
            break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = x;
}

static void hnsw_heap_sift(HnswHeap *h, Py_ssize_t i)
{
    HnswNode x = h->a[i];
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && hnsw_above(h, h->a[c + 1], h->a[c]))
            c++;
        if (!hnsw_above(h, h->a[c], x))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    h->a[i] = x;
}

static HnswNode hnsw_heap_pop(HnswHeap *h)
{
    HnswNode top = h->a[0];
    h->a[0] = h->a[--h->n];
    if (h->n)
        hnsw_heap_sift(h, 0);
    return top;
}

/* One partition's graph as `hnsw_topk` reads it: `rows` (levels x n, int32) gives a node's row
 * at each level (-1: not on it), row r's neighbours are nbr[offsets[r] .. offsets[r + 1]]. */
typedef struct {
    Py_ssize_t n, n_rows, n_nbr;
    int levels;
    uint32_t entry;
    const int32_t *rows;
    const int64_t *offsets;
    const uint32_t *nbr;
    /* a graph being built (rows is then NULL): lists of level 0 (k = 0) and of the upper levels
     * (k = 1), list i of kind k at adj[k] + i * cap[k] with cnt[k][i] entries and their
     * distances at dis[k] + i * cap[k]; node's list on level l > 0 is upper[node] + l - 1 */
    uint32_t *adj[2];
    float *dis[2];
    int32_t *cnt[2];
    Py_ssize_t cap[2];
    const int64_t *upper;
    const int32_t *level_of;
} HnswGraph;

/* The list of node on `level` of a graph being built (-1: the node is not on that level). */
static inline int64_t hnsw_list(const HnswGraph *g, int level, uint32_t node)
{
    if (level == 0)
        return node;
    return level > g->level_of[node] ? -1 : g->upper[node] + level - 1;
}

static inline const uint32_t *hnsw_neighbors(const HnswGraph *g, int level, uint32_t node,
                                             Py_ssize_t *count)
{
    if (g->rows == NULL) {
        int64_t i = hnsw_list(g, level, node);
        int k = level > 0;
        *count = i < 0 ? 0 : g->cnt[k][i];
        return i < 0 ? NULL : g->adj[k] + i * g->cap[k];
    }
    /* bounds tested on every access (cheap), so a graph need not be checked whole per call */
    int32_t r = g->rows[(Py_ssize_t)level * g->n + node];
    int64_t a = r >= 0 && r < g->n_rows ? g->offsets[r] : 0;
    int64_t b = r >= 0 && r < g->n_rows ? g->offsets[r + 1] : 0;
    if (a < 0 || b < a || b > g->n_nbr) {
        *count = 0;
        return NULL;
    }
    *count = (Py_ssize_t)(b - a);
    return g->nbr + a;
}

/* How a node is measured: against a query (the storage's scoring, as `ivf_topk`), or, while a
 * graph is built, against another node (`vec`: rows of `dim` float32, `self` the node). */
typedef struct {
    const IvfParams *p;
    const double *q;
    double base;
    const void *data;
    const double *bias;
    const float *vec;
    Py_ssize_t dim;
    uint32_t self;
} HnswScorer;

/* Two rows of a graph being built, compared in float32 over 8 lanes (the compiler keeps them
 * in vector registers): a build needs an order between neighbours, not pylance's rounding. */
static float hnsw_between(int metric, const float *a, const float *b, Py_ssize_t w)
{
    float s[8] = {0}, aa[8] = {0}, bb[8] = {0};
    Py_ssize_t i = 0;
    if (metric == METRIC_L2) {
        for (; i + 8 <= w; i += 8)
            for (int l = 0; l < 8; l++) {
                float t = a[i + l] - b[i + l];
                s[l] += t * t;
            }
        for (; i < w; i++)
            s[0] += (a[i] - b[i]) * (a[i] - b[i]);
        return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    }
    for (; i + 8 <= w; i += 8)
        for (int l = 0; l < 8; l++)
            s[l] += a[i + l] * b[i + l], aa[l] += a[i + l] * a[i + l], bb[l] += b[i + l] * b[i + l];
    for (; i < w; i++)
        s[0] += a[i] * b[i], aa[0] += a[i] * a[i], bb[0] += b[i] * b[i];
    double dot = 0.0, na = 0.0, nb = 0.0;
    for (int l = 0; l < 8; l++)
        dot += s[l], na += aa[l], nb += bb[l];
    if (metric == METRIC_DOT)
        return (float)(1.0 - dot);
    return na > 0.0 && nb > 0.0 ? (float)(1.0 - dot / sqrt(na * nb)) : 1.0f;
}

static inline float hnsw_dist(const HnswScorer *s, uint32_t node)
{
    float d;
    if (s->vec)
        return hnsw_between(s->p->metric, s->vec + (Py_ssize_t)s->self * s->dim,
                            s->vec + (Py_ssize_t)node * s->dim, s->dim);
    if (s->p->kind == IVF_PQ)
        ivf_score_pq(s->p, s->q, s->base, s->data, s->bias, node, 1, &d);
    else
        ivf_score_dense(s->p, s->q, s->data, node, 1, &d);
    return d;
}

/* Buffers a search reuses: a visit mark per node (a node is seen when its mark is `gen`), the
 * candidates and the results. */
typedef struct {
    uint32_t *mark;
    uint32_t gen;
    HnswNode *cand, *res;
} HnswScratch;

static void hnsw_next_visit(HnswScratch *w, Py_ssize_t n)
{
    if (++w->gen == 0) {
        memset(w->mark, 0, (size_t)n * sizeof(uint32_t));
        w->gen = 1;
    }
}

/* From `cur`, move to the nearest neighbour on `level` while one is nearer (pylance's greedy
 * descent through the upper levels). */
static HnswNode hnsw_greedy(const HnswGraph *g, int level, HnswNode cur, const HnswScorer *s)
{
    for (;;) {
        Py_ssize_t count;
        const uint32_t *nb = hnsw_neighbors(g, level, cur.id, &count);
        uint32_t next = cur.id;
        for (Py_ssize_t i = 0; i < count; i++) {
            if (nb[i] >= (uint64_t)g->n)
                continue;
            float d = hnsw_dist(s, nb[i]);
            if (d < cur.d)
                cur.d = d, next = nb[i];
        }
        if (next == cur.id)
            return cur;
        cur.id = next;
    }
}

static int hnsw_by_distance(const void *a, const void *b)
{
    const HnswNode *x = a, *y = b;
    if (x->d < y->d)
        return -1;
    if (x->d > y->d)
        return 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The search of one level from `ep`, as pylance 14 runs it: candidates nearest first, the `ef`
 * best kept (only nodes `mask` allows and at lower <= d < upper count), a neighbour taken as a
 * candidate while it beats the worst kept or fewer than `ef` are; it stops at a candidate
 * farther than the worst of `ef` kept. The kept nodes, nearest first, are left in w->res;
 * their number is returned. */
static Py_ssize_t hnsw_search_level(const HnswGraph *g, int level, HnswNode ep,
                                    const HnswScorer *s, Py_ssize_t ef, const uint8_t *mask,
                                    float lower, float upper, HnswScratch *w)
{
    HnswHeap cand = {w->cand, 0, 0}, res = {w->res, 0, 1};
    hnsw_next_visit(w, g->n);
    w->mark[ep.id] = w->gen;
    hnsw_heap_push(&cand, ep);
    if ((!mask || mask[ep.id]) && ep.d >= lower && ep.d < upper)
        hnsw_heap_push(&res, ep);
    while (cand.n) {
        HnswNode cur = hnsw_heap_pop(&cand);
        if (res.n == ef && cur.d > res.a[0].d)
            break;
        Py_ssize_t count;
        const uint32_t *nb = hnsw_neighbors(g, level, cur.id, &count);
        for (Py_ssize_t i = 0; i < count; i++) {
            uint32_t v = nb[i];
            if (v >= (uint64_t)g->n || w->mark[v] == w->gen)
                continue;
            w->mark[v] = w->gen;
            HnswNode x = {hnsw_dist(s, v), v};
            if (res.n < ef || x.d <= res.a[0].d) {
                if ((!mask || mask[v]) && x.d >= lower && x.d < upper) {
                    if (res.n < ef) {
                        hnsw_heap_push(&res, x);
                    } else if (x.d < res.a[0].d) {
                        res.a[0] = x;
                        hnsw_heap_sift(&res, 0);
                    }
                }
                hnsw_heap_push(&cand, x);
            }
        }
    }
    qsort(res.a, (size_t)res.n, sizeof(HnswNode), hnsw_by_distance);
    return res.n;
}

/* The graph of item `i` of a tuple of (entry, levels, rows, offsets, neighbours), its buffers
 * held in bufs[0..2]: 0, or -1 with an exception set (and nothing held). */
static int hnsw_graph_arg(PyObject *item, Py_ssize_t n, HnswGraph *g, Py_buffer *bufs)
{
    Py_ssize_t entry, levels;
    if (!PyTuple_Check(item)) {
        PyErr_SetString(PyExc_TypeError, "hnsw_topk: a graph must be a tuple");
        return -1;
    }
    if (!PyArg_ParseTuple(item, "nny*y*y*", &entry, &levels, &bufs[0], &bufs[1], &bufs[2]))
        return -1;
    g->n = n, g->levels = (int)levels, g->entry = (uint32_t)entry;
    g->n_rows = bufs[1].len / 8 - 1, g->n_nbr = bufs[2].len / 4;
    g->rows = bufs[0].buf, g->offsets = bufs[1].buf, g->nbr = bufs[2].buf;
    int bad = levels < 1 || levels > 64 || entry < 0 || (n && entry >= n) ||
              bufs[0].len != levels * n * 4 || bufs[1].len % 8 || g->n_rows < 0 ||
              bufs[2].len % 4 || !aligned(bufs[0].buf, 4) || !aligned(bufs[1].buf, 8) ||
              !aligned(bufs[2].buf, 4);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "hnsw_topk: a graph of inconsistent sizes");
        for (int k = 0; k < 3; k++)
            PyBuffer_Release(&bufs[k]);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(
    hnsw_topk_doc,
    "hnsw_topk(kind, metric, queries, width, scale, start, step, pair_query, pair_slot, "
    "pair_base, data, ids, bias, graphs, masks, ef, fetch, out_ids, out_dist, out_count, lower, "
    "upper): `ivf_topk` for partitions with an HNSW graph: each (query, partition) pair is "
    "searched as pylance 14 searches the graph (from its entry point, greedily down the upper "
    "levels, then the bottom level keeping `ef` nodes) and its `fetch` nearest found go into "
    "the query's heap. graphs[slot] = (entry, levels, rows int32 (levels x n), offsets int64, "
    "neighbours uint32) (see HnswGraph); masks[slot] is None or one uint8 a row, 0 for rows "
    "that may not be answers (they are still walked through).");

static PyObject *hnsw_topk(PyObject *self, PyObject *args)
{
    IvfCall c = {.lower = -INFINITY, .upper = INFINITY};
    Py_ssize_t ef;
    PyObject *data, *ids, *bias, *graphs, *masks;
    if (!PyArg_ParseTuple(args, "iiy*ndddy*y*y*O!O!OO!O!nnw*w*w*|dd", &c.kind, &c.metric, &c.qs,
                          &c.width, &c.scale, &c.start, &c.step, &c.pq, &c.ps, &c.pb,
                          &PyTuple_Type, &data, &PyTuple_Type, &ids, &bias, &PyTuple_Type,
                          &graphs, &PyTuple_Type, &masks, &ef, &c.fetch, &c.oi, &c.od, &c.oc,
                          &c.lower, &c.upper))
        return NULL;
    PyObject *res = NULL;
    HnswGraph *gs = NULL;
    Py_buffer *bg = NULL;
    Py_ssize_t held_graphs = 0;
    if (ef < c.fetch || PyTuple_GET_SIZE(graphs) != PyTuple_GET_SIZE(data)) {
        PyErr_SetString(PyExc_ValueError, "hnsw_topk: ef below fetch, or not a graph a partition");
        goto done;
    }
    if (ivf_call_take(&c, "hnsw_topk", data, ids, bias, masks) < 0)
        goto done;
    const Py_ssize_t slots = c.parts ? c.parts : 1;
    gs = PyMem_Calloc(slots, sizeof(HnswGraph));
    bg = PyMem_Calloc(3 * slots, sizeof(Py_buffer));
    if (gs == NULL || bg == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t longest = 0;
    for (; held_graphs < c.parts; held_graphs++) {
        Py_ssize_t s = held_graphs, n = c.ids[s].len / 8;
        if (hnsw_graph_arg(PyTuple_GET_ITEM(graphs, s), n, &gs[s], bg + 3 * s) < 0)
            goto done;
        longest = n > longest ? n : longest;
    }
    HnswScratch w = {PyMem_Calloc(longest ? longest : 1, sizeof(uint32_t)), 0,
                     PyMem_Malloc((size_t)(longest + 1) * sizeof(HnswNode)),
                     PyMem_Malloc((size_t)(ef + 1) * sizeof(HnswNode))};
    if (!w.mark || !w.cand || !w.res) {
        PyMem_Free(w.mark), PyMem_Free(w.cand), PyMem_Free(w.res);
        PyErr_NoMemory();
        goto done;
    }
    const IvfParams p = {c.kind, c.metric, c.width, c.scale, c.start, c.step};
    const int64_t *pair_q = c.pq.buf, *pair_s = c.ps.buf;
    const double *queries = c.qs.buf, *base = c.pb.buf;
    const Py_ssize_t width = c.width, fetch = c.fetch;
    int64_t *count = c.oc.buf;
    float *out_d = c.od.buf;
    uint64_t *out_i = c.oi.buf;
    BEGIN_NOGIL(c.npairs * ef * 64)
    for (Py_ssize_t i = 0; i < c.npairs; i++) {
        const int64_t q = pair_q[i], s = pair_s[i];
        const HnswGraph *g = &gs[s];
        if (g->n == 0)
            continue;
        const uint64_t *row = c.ids[s].buf;
        const HnswScorer sc = {
            &p, queries + q * width, base[i], c.data[s].buf, c.bias[s].buf, NULL, 0, 0};
        HnswNode ep = {hnsw_dist(&sc, g->entry), g->entry};
        for (int level = g->levels - 1; level > 0; level--)
            ep = hnsw_greedy(g, level, ep, &sc);
        Py_ssize_t found = hnsw_search_level(g, 0, ep, &sc, ef, c.mask[s].buf, (float)c.lower,
                                             (float)c.upper, &w);
        IvfHeap h = {out_d + q * fetch, out_i + q * fetch, count[q], fetch};
        for (Py_ssize_t r = 0; r < found && r < fetch; r++)
            ivf_push(&h, w.res[r].d, row[w.res[r].id]);
        count[q] = h.n;
    }
    END_NOGIL
    PyMem_Free(w.mark), PyMem_Free(w.cand), PyMem_Free(w.res);
    res = Py_NewRef(Py_None);
done:
    for (Py_ssize_t s = 0; s < held_graphs; s++)
        for (int k = 0; k < 3; k++)
            PyBuffer_Release(&bg[3 * s + k]);
    PyMem_Free(bg);
    PyMem_Free(gs);
    ivf_call_release(&c);
    return res;
}

/* pylance's neighbour selection: of `cand` (nearest first), up to `cap` each nearer to the node
 * than to every one kept before it, then, while fewer than `fill` are kept, the nearest of the
 * others (after them in out). Returns how many were kept. `taken`: scratch, a byte a candidate. */
static Py_ssize_t hnsw_select(const HnswNode *cand, Py_ssize_t n, Py_ssize_t cap, Py_ssize_t fill,
                              int metric, const float *vec, Py_ssize_t dim, HnswNode *out,
                              uint8_t *taken)
{
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const float *c = vec + (Py_ssize_t)cand[i].id * dim;
        int ok = kept < cap;
        for (Py_ssize_t j = 0; j < kept && ok; j++)
            ok = cand[i].d < hnsw_between(metric, c, vec + (Py_ssize_t)out[j].id * dim, dim);
        taken[i] = (uint8_t)ok;
        if (ok)
            out[kept++] = cand[i];
    }
    for (Py_ssize_t i = 0; i < n && kept < fill; i++)
        if (!taken[i])
            out[kept++] = cand[i];
    return kept;
}

/* Node `u`'s list on `level` gains `x` (a node at distance x.d); a full list keeps the
 * selection of its entries and x, filled up to its capacity. */
static void hnsw_link(HnswGraph *g, int level, uint32_t u, HnswNode x, int metric,
                      const float *vec, Py_ssize_t dim, HnswNode *tmp, HnswNode *sel,
                      uint8_t *taken)
{
    int64_t i = hnsw_list(g, level, u);
    if (i < 0)
        return;
    int k = level > 0;
    uint32_t *adj = g->adj[k] + i * g->cap[k];
    float *dis = g->dis[k] + i * g->cap[k];
    int32_t n = g->cnt[k][i];
    if (n < g->cap[k]) {
        adj[n] = x.id, dis[n] = x.d, g->cnt[k][i] = n + 1;
        return;
    }
    if (!(x.d < dis[n - 1])) /* pylance's cutoff: a full list takes only a nearer node than its last */
        return;
    for (int32_t j = 0; j < n; j++)
        tmp[j].id = adj[j], tmp[j].d = dis[j];
    tmp[n] = x;
    qsort(tmp, (size_t)n + 1, sizeof(HnswNode), hnsw_by_distance);
    Py_ssize_t kept = hnsw_select(tmp, n + 1, g->cap[k], g->cap[k], metric, vec, dim, sel, taken);
    for (Py_ssize_t j = 0; j < kept; j++)
        adj[j] = sel[j].id, dis[j] = sel[j].d;
    g->cnt[k][i] = (int32_t)kept;
}

PyDoc_STRVAR(
    hnsw_build_doc,
    "hnsw_build(metric, vectors, dim, levels, m, ef_construction) -> (entry, counts, neighbours, "
    "distances): the HNSW graph of the rows of `vectors` (n x dim float32), node i on levels "
    "0 .. levels[i] (int32), built by inserting the nodes in order: each finds its "
    "`ef_construction` nearest on each of its levels and keeps pylance's selection of them "
    "(at most 2m on level 0, m above; the nearest others fill it up to m), and each kept "
    "neighbour links back (keeping its own selection, filled, when full). The lists come out level by level, the nodes of each level in id order: "
    "`counts` (uint32 a list), `neighbours` (uint32) and their `distances` (float32), as bytes.");

static PyObject *hnsw_build(PyObject *self, PyObject *args)
{
    int metric;
    Py_ssize_t dim, m, efc;
    Py_buffer vb, lb;
    if (!PyArg_ParseTuple(args, "iy*ny*nn", &metric, &vb, &dim, &lb, &m, &efc))
        return NULL;
    Py_buffer *all[] = {&vb, &lb};
    PyObject *res = NULL;
    const Py_ssize_t n = lb.len / 4;
    const int32_t *level_of = lb.buf;
    if (metric < METRIC_L2 || metric > METRIC_DOT || dim < 1 || m < 1 || efc < 1 ||
        lb.len % 4 || vb.len != n * dim * 4 || !aligned(vb.buf, 4) || !aligned(lb.buf, 4) ||
        n > (Py_ssize_t)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "hnsw_build: bad metric, sizes or parameters");
        goto done;
    }
    int top = -1;
    Py_ssize_t uppers = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (level_of[i] < 0 || level_of[i] > 63) {
            PyErr_SetString(PyExc_ValueError, "hnsw_build: a level outside 0 .. 63");
            goto done;
        }
        uppers += level_of[i];
        top = level_of[i] > top ? level_of[i] : top;
    }
    const float *vec = vb.buf;
    HnswGraph g = {n, 0, 0, top + 1, 0, NULL, NULL, NULL};
    g.cap[0] = 2 * m, g.cap[1] = m;
    g.level_of = level_of;
    int64_t *upper = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    g.adj[0] = PyMem_Malloc((size_t)(n * g.cap[0] + 1) * sizeof(uint32_t));
    g.dis[0] = PyMem_Malloc((size_t)(n * g.cap[0] + 1) * sizeof(float));
    g.cnt[0] = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int32_t));
    g.adj[1] = PyMem_Malloc((size_t)(uppers * g.cap[1] + 1) * sizeof(uint32_t));
    g.dis[1] = PyMem_Malloc((size_t)(uppers * g.cap[1] + 1) * sizeof(float));
    g.cnt[1] = PyMem_Calloc((size_t)(uppers ? uppers : 1), sizeof(int32_t));
    Py_ssize_t wide = (efc > 2 * m ? efc : 2 * m) + 1;
    HnswScratch w = {PyMem_Calloc((size_t)(n ? n : 1), sizeof(uint32_t)), 0,
                     PyMem_Malloc((size_t)(n + 1) * sizeof(HnswNode)),
                     PyMem_Malloc((size_t)(efc + 1) * sizeof(HnswNode))};
    HnswNode *found = PyMem_Malloc((size_t)wide * sizeof(HnswNode));
    HnswNode *sel = PyMem_Malloc((size_t)wide * sizeof(HnswNode));
    HnswNode *tmp = PyMem_Malloc((size_t)wide * sizeof(HnswNode));
    HnswNode *kept_back = PyMem_Malloc((size_t)wide * sizeof(HnswNode));
    uint8_t *taken = PyMem_Malloc((size_t)wide);
    if (!kept_back || !taken || !upper || !g.adj[0] || !g.dis[0] || !g.cnt[0] || !g.adj[1] || !g.dis[1] || !g.cnt[1] ||
        !w.mark || !w.cand || !w.res || !found || !sel || !tmp) {
        PyErr_NoMemory();
        goto free;
    }
    Py_ssize_t next = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        upper[i] = level_of[i] ? next : -1;
        next += level_of[i];
    }
    g.upper = upper;
    const IvfParams p = {IVF_FLAT, metric, dim, 0.0, 0.0, 0.0};
    BEGIN_NOGIL(n * efc * dim)
    int cur_top = n ? level_of[0] : -1;
    uint32_t entry = 0;
    for (Py_ssize_t v = 1; v < n; v++) {
        const HnswScorer sc = {&p, NULL, 0.0, NULL, NULL, vec, dim, (uint32_t)v};
        HnswNode ep = {hnsw_dist(&sc, entry), entry};
        const int lv = level_of[v];
        for (int level = cur_top; level > lv; level--)
            ep = hnsw_greedy(&g, level, ep, &sc);
        for (int level = lv < cur_top ? lv : cur_top; level >= 0; level--) {
            Py_ssize_t got = hnsw_search_level(&g, level, ep, &sc, efc, NULL, -INFINITY, INFINITY,
                                               &w);
            memcpy(found, w.res, (size_t)got * sizeof(HnswNode));
            int k = level > 0;
            Py_ssize_t kept = hnsw_select(found, got, g.cap[k], m, metric, vec, dim, sel, taken);
            int64_t li = hnsw_list(&g, level, (uint32_t)v);
            for (Py_ssize_t j = 0; j < kept; j++) {
                g.adj[k][li * g.cap[k] + j] = sel[j].id;
                g.dis[k][li * g.cap[k] + j] = sel[j].d;
            }
            g.cnt[k][li] = (int32_t)kept;
            for (Py_ssize_t j = 0; j < kept; j++) {
                HnswNode back = {sel[j].d, (uint32_t)v};
                hnsw_link(&g, level, sel[j].id, back, metric, vec, dim, tmp, kept_back, taken);
            }
            if (got)
                ep = found[0];
        }
        if (lv > cur_top)
            cur_top = lv, entry = (uint32_t)v;
    }
    g.entry = entry;
    END_NOGIL
    {
        Py_ssize_t rows = 0, edges = 0;
        for (int level = 0; level <= top; level++)
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t li = hnsw_list(&g, level, (uint32_t)i);
                if (li >= 0)
                    rows++, edges += g.cnt[level > 0][li];
            }
        PyObject *counts = PyBytes_FromStringAndSize(NULL, rows * 4);
        PyObject *nbr = PyBytes_FromStringAndSize(NULL, edges * 4);
        PyObject *dis = PyBytes_FromStringAndSize(NULL, edges * 4);
        if (counts && nbr && dis) {
            uint32_t *c = (uint32_t *)PyBytes_AS_STRING(counts);
            uint32_t *e = (uint32_t *)PyBytes_AS_STRING(nbr);
            float *d = (float *)PyBytes_AS_STRING(dis);
            for (int level = 0; level <= top; level++)
                for (Py_ssize_t i = 0; i < n; i++) {
                    int64_t li = hnsw_list(&g, level, (uint32_t)i);
                    if (li < 0)
                        continue;
                    int k = level > 0;
                    int32_t cnt = g.cnt[k][li];
                    *c++ = (uint32_t)cnt;
                    memcpy(e, g.adj[k] + li * g.cap[k], (size_t)cnt * 4);
                    memcpy(d, g.dis[k] + li * g.cap[k], (size_t)cnt * 4);
                    e += cnt, d += cnt;
                }
            res = Py_BuildValue("(nNNN)", (Py_ssize_t)g.entry, counts, nbr, dis);
        } else {
            Py_XDECREF(counts), Py_XDECREF(nbr), Py_XDECREF(dis);
        }
    }
free:
    PyMem_Free(upper);
    for (int k = 0; k < 2; k++)
        PyMem_Free(g.adj[k]), PyMem_Free(g.dis[k]), PyMem_Free(g.cnt[k]);
    PyMem_Free(w.mark), PyMem_Free(w.cand), PyMem_Free(w.res);
    PyMem_Free(found), PyMem_Free(sel), PyMem_Free(tmp), PyMem_Free(kept_back);
    PyMem_Free(taken);
done:
    release(2, all);
    return res;
}

/* -- 2.0 Binary end offsets ----------------------------------------------------------------- */

PyDoc_STRVAR(rebase_ends_doc,
             "rebase_ends(raw, width, has_prev, adjustment, out) -> (status, prev, last): the "
             "`width`-byte little-endian end offsets in `raw`, the first being the end of the row "
             "before when `has_prev`, as Arrow offsets from 0 into `out` (int32 or int64 by its "
             "item size, one more than the rows): `prev` is the end before the first row (0 "
             "without one), `last` the last row's end as stored. NULL_ENDS when `adjustment` is "
             "not 0 and an end reaches it (a null: not rebased), DECREASING when an end is below "
             "the one before, TOO_WIDE when one does not fit `out` (`last` is then its value "
             "from 0): whichever comes first in row order.");

static PyObject *rebase_ends(PyObject *self, PyObject *args)
{
    Py_buffer raw, out;
    int width, has_prev;
    unsigned long long adjustment;
    if (!PyArg_ParseTuple(args, "y*ipKw*", &raw, &width, &has_prev, &adjustment, &out))
        return NULL;
    Py_buffer *all[] = {&raw, &out};
    PyObject *res = NULL;
    const int item = out.itemsize == 4 || out.itemsize == 8 ? (int)out.itemsize : 0;
    if (width < 1 || width > 8 || raw.len % width || !item || out.len % item ||
        !aligned(out.buf, item) || raw.len / width + !has_prev != out.len / item ||
        (has_prev && raw.len == 0))
        PyErr_SetString(PyExc_ValueError, "rebase_ends: bad widths or lengths");
    else {
        const uint8_t *src = raw.buf;
        const Py_ssize_t n = raw.len / width;
        const uint64_t most = item == 4 ? INT32_MAX : INT64_MAX;
        const uint64_t adj = adjustment ? adjustment : UINT64_MAX;
        uint64_t prev = has_prev ? load_le(src, width) : 0, before = prev, v = prev;
        int status = prev >= adj ? NULL_ENDS : OK;
        Py_ssize_t i = has_prev;
        BEGIN_NOGIL(n)
/* One loop per (width, offset type): a constant width makes load_le one load. */
#define REBASE(W, T)                                                                           \
    {                                                                                          \
        T *dst = (T *)out.buf + !has_prev;                                                     \
        ((T *)out.buf)[0] = 0;                                                                 \
        for (; i < n; i++) {                                                                   \
            v = load_le(src + i * (W), (W));                                                   \
            if (v >= adj || v < before || v - prev > most)                                     \
                break;                                                                         \
            dst[i] = (T)(v - prev);                                                            \
            before = v;                                                                        \
        }                                                                                      \
    }
        if (status == OK) {
            if (width == 8 && item == 4)
                REBASE(8, int32_t)
            else if (width == 8)
                REBASE(8, int64_t)
            else if (width == 4 && item == 4)
                REBASE(4, int32_t)
            else if (item == 4)
                REBASE(width, int32_t)
            else
                REBASE(width, int64_t)
            if (i < n) /* stopped early: say why, in the order of the checks */
                status = v >= adj ? NULL_ENDS : v < before ? DECREASING : TOO_WIDE;
            if (status == TOO_WIDE)
                v -= prev;
        }
#undef REBASE
        END_NOGIL
        res = Py_BuildValue("(iKK)", status, (unsigned long long)prev, (unsigned long long)v);
    }
    release(2, all);
    return res;
}

/* -- BitPacker4x (full-text posting lists) ------------------------------------------------- */

/* One BitPacker4x block at `src` (4 * bits little-endian u32 words, any alignment: four
 * interleaved lanes, lane j holding values j, j + 4, ..., low bits first) into 128 values. */
static inline void unpack4x_block(const uint8_t *src, int bits, uint32_t *dst)
{
    if (!bits) {
        memset(dst, 0, 128 * sizeof *dst);
        return;
    }
    const uint64_t mask = bits == 32 ? 0xFFFFFFFFu : ((uint64_t)1 << bits) - 1;
    for (int j = 0; j < 32; j++) {
        /* a value never runs past the block: 32 values of `bits` fill `bits` words */
        const int start = j * bits, word = start >> 5, shift = start & 31;
        const int spill = shift + bits > 32;
        for (int l = 0; l < 4; l++) {
            uint64_t v = load_le(src + 4 * (word * 4 + l), 4) >> shift;
            if (spill)
                v |= load_le(src + 4 * ((word + 1) * 4 + l), 4) << (32 - shift);
            dst[j * 4 + l] = (uint32_t)(v & mask);
        }
    }
}

PyDoc_STRVAR(pack4x_doc,
             "pack4x(values, bits, out): blocks of 128 uint32 values of at most `bits` bits "
             "(1 to 32: a block of zeros takes no words, its caller writes none) into "
             "BitPacker4x blocks (4 * bits uint32 words each, as unpack4x reads them; words in "
             "the machine's order, little-endian on every platform Quiver builds for); a "
             "ValueError for a value wider than `bits`.");

static PyObject *pack4x(PyObject *self, PyObject *args)
{
    Py_buffer values, out;
    int bits;
    if (!PyArg_ParseTuple(args, "y*iw*", &values, &bits, &out))
        return NULL;
    Py_buffer *all[] = {&values, &out};
    PyObject *res = NULL;
    const Py_ssize_t blocks = values.len / 512;
    if (bits < 1 || bits > 32 || values.len % 512 || out.len != blocks * 16 * bits ||
        !aligned(values.buf, 4) || !aligned(out.buf, 4)) {
        PyErr_SetString(PyExc_ValueError, "pack4x: bad width, lengths or alignment");
        release(2, all);
        return NULL;
    }
    const uint32_t *v = values.buf;
    uint32_t *w = out.buf;
    const uint64_t limit = (uint64_t)1 << bits;
    int wide = 0;
    BEGIN_NOGIL(values.len / 4)
    for (Py_ssize_t b = 0; b < blocks && !wide; b++) {
        const uint32_t *src = v + b * 128;
        uint32_t *dst = w + b * 4 * bits;
        memset(dst, 0, 16 * (size_t)bits);
        for (int j = 0; j < 32; j++) {
            const int start = j * bits, word = start >> 5, shift = start & 31;
            for (int l = 0; l < 4; l++) {
                const uint64_t x = src[j * 4 + l];
                wide |= x >= limit;
                dst[word * 4 + l] |= (uint32_t)(x << shift);
                if (shift + bits > 32)
                    dst[(word + 1) * 4 + l] |= (uint32_t)(x >> (32 - shift));
            }
        }
    }
    END_NOGIL
    if (wide)
        PyErr_SetString(PyExc_ValueError, "pack4x: a value is wider than the block's width");
    else
        res = Py_None, Py_INCREF(res);
    release(2, all);
    return res;
}

PyDoc_STRVAR(unpack4x_doc,
             "unpack4x(words, bits, out): BitPacker4x blocks of `bits`-bit values (4 * bits "
             "uint32 words each: four interleaved lanes, lane j holding values j, j + 4, ..., "
             "low bits first) into 128 uint32 values each.");

static PyObject *unpack4x(PyObject *self, PyObject *args)
{
    Py_buffer words, out;
    int bits;
    if (!PyArg_ParseTuple(args, "y*iw*", &words, &bits, &out))
        return NULL;
    Py_buffer *all[] = {&words, &out};
    PyObject *res = NULL;
    const Py_ssize_t blocks = out.len / 512;
    if (bits < 0 || bits > 32 || out.len % 512 || words.len / 16 != blocks * bits ||
        words.len % 16 || !aligned(words.buf, 4) || !aligned(out.buf, 4))
        PyErr_SetString(PyExc_ValueError, "unpack4x: bad width, lengths or alignment");
    else {
        const uint8_t *w = words.buf;
        uint32_t *o = out.buf;
        BEGIN_NOGIL(out.len / 4)
        for (Py_ssize_t b = 0; b < blocks; b++)
            unpack4x_block(w + (size_t)b * 16 * bits, bits, o + b * 128);
        END_NOGIL
        res = Py_NewRef(Py_None);
    }
    release(2, all);
    return res;
}

enum { PB_OK, PB_HEADER, PB_IDS, PB_SIZE };

PyDoc_STRVAR(postings_full_doc,
             "postings_full(data, starts, ends, ids, freqs) -> (status, block): decode full "
             "posting blocks, block b the bytes of `data` from int64 `starts[b]` to `ends[b]` "
             "(each: f32 best score, u32 first document, a width byte and BitPacker4x "
             "document deltas, a width byte and BitPacker4x frequencies) into 128 uint32 `ids` "
             "and `freqs` per block; ids are the first document plus the running sum of the "
             "deltas (modulo 2^32). Stops at the first malformed block: PB_HEADER (shorter "
             "than its header), PB_IDS (width over 32, or ids running past the block), PB_SIZE "
             "(frequencies of a bad width or not ending the block).");

static PyObject *postings_full(PyObject *self, PyObject *args)
{
    Py_buffer data, starts, ends, ids, freqs;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*", &data, &starts, &ends, &ids, &freqs))
        return NULL;
    Py_buffer *all[] = {&data, &starts, &ends, &ids, &freqs};
    PyObject *res = NULL;
    const Py_ssize_t blocks = len64(&starts);
    if (blocks < 0 || len64(&ends) != blocks || ids.len != blocks * 512 ||
        freqs.len != blocks * 512 ||
        !aligned(ids.buf, 4) || !aligned(freqs.buf, 4))
        PyErr_SetString(PyExc_ValueError, "postings_full: bad lengths or alignment");
    else {
        const uint8_t *d = data.buf;
        const int64_t size = data.len;
        uint32_t *out_ids = ids.buf, *out_freqs = freqs.buf;
        int status = PB_OK;
        Py_ssize_t b = 0;
        BEGIN_NOGIL(blocks * 128)
        for (; b < blocks; b++) {
            const int64_t s = at64(&starts, b), e = at64(&ends, b);
            if (s < 0 || e < s || e > size || e - s < 10) {
                status = PB_HEADER;
                break;
            }
            const int bits = d[s + 8];
            const int64_t at = s + 9 + 16 * (int64_t)bits;
            if (bits > 32 || at >= e) {
                status = PB_IDS;
                break;
            }
            const int fbits = d[at];
            if (fbits > 32 || at + 1 + 16 * (int64_t)fbits != e) {
                status = PB_SIZE;
                break;
            }
            uint32_t *dst = out_ids + b * 128;
            unpack4x_block(d + s + 9, bits, dst);
            uint32_t v = (uint32_t)load_le(d + s + 4, 4);
            for (int i = 0; i < 128; i++) {
                v += dst[i];
                dst[i] = v;
            }
            unpack4x_block(d + at + 1, fbits, out_freqs + b * 128);
        }
        END_NOGIL
        res = Py_BuildValue("(in)", status, b);
    }
    release(5, all);
    return res;
}

/* BM25 weights in place: `w` holds each posting's document length and receives its weight
 * (frequency `f`). Each step rounds to float32 as numpy's does (the build compiles without
 * FMA contraction); no branches or indirection, so the compiler vectorises it (not inlined:
 * inlined into its caller, it was not). */
static __attribute__((noinline)) void bm25_weigh(float *restrict w, const uint32_t *restrict f,
                                                 Py_ssize_t n, float idf, float avgdl)
{
    const float k1 = 1.2f, b = 0.75f, k1p1 = k1 + 1.0f, omb = 1.0f - b;
    for (Py_ssize_t i = 0; i < n; i++) {
        const float norm = k1 * (omb + (b * w[i]) / avgdl);
        const float fq = (float)(int32_t)f[i]; /* signed: SSE2 converts it 4 at a time */
        w[i] = idf * ((k1p1 * fq) / (fq + norm));
    }
}

PyDoc_STRVAR(bm25_gather_doc,
             "bm25_gather(docs, freqs, row_ids, lengths, idf, avgdl, rows, weights) -> "
             "(bad, ascending): for each posting (uint32 document id and frequency), its row "
             "id (uint64 `row_ids[doc]`) and BM25 weight from its document's length "
             "(float32 `lengths[doc]`), in float32 in pylance's order of operations: "
             "idf * ((K1 + 1) * f / (f + K1 * ((1 - B) + B * length / avgdl))) with K1 = 1.2, "
             "B = 0.75. `bad` is the first posting whose document is out of range (-1: none); "
             "`ascending` says whether the row ids are non-decreasing.");

static PyObject *bm25_gather(PyObject *self, PyObject *args)
{
    Py_buffer docs, freqs, row_ids, lengths, rows, weights;
    float idf, avgdl;
    if (!PyArg_ParseTuple(args, "y*y*y*y*ffw*w*", &docs, &freqs, &row_ids, &lengths, &idf,
                          &avgdl, &rows, &weights))
        return NULL;
    Py_buffer *all[] = {&docs, &freqs, &row_ids, &lengths, &rows, &weights};
    PyObject *res = NULL;
    const Py_ssize_t n = docs.len / 4, n_docs = row_ids.len / 8;
    if (docs.len % 4 || freqs.len != docs.len || row_ids.len % 8 ||
        lengths.len != n_docs * 4 || rows.len != n * 8 || weights.len != n * 4 ||
        !aligned(docs.buf, 4) || !aligned(freqs.buf, 4) || !aligned(row_ids.buf, 8) ||
        !aligned(lengths.buf, 4) || !aligned(rows.buf, 8) || !aligned(weights.buf, 4))
        PyErr_SetString(PyExc_ValueError, "bm25_gather: bad lengths or alignment");
    else {
        const uint32_t *d = docs.buf, *f = freqs.buf;
        const uint64_t *ids = row_ids.buf;
        const float *len = lengths.buf;
        uint64_t *out_rows = rows.buf;
        float *out_w = weights.buf;
        Py_ssize_t bad = -1;
        int ascending = 1;
        uint64_t last = 0;
        BEGIN_NOGIL(n)
        /* gather first (rows, and each posting's document length into `out_w`), then weigh */
        for (Py_ssize_t i = 0; i < n; i++) {
            const uint32_t doc = d[i];
            if (doc >= (uint64_t)n_docs) {
                bad = i;
                break;
            }
            const uint64_t row = ids[doc];
            ascending &= row >= last;
            last = row;
            out_rows[i] = row;
            out_w[i] = len[doc];
        }
        if (bad < 0)
            bm25_weigh(out_w, f, n, idf, avgdl);
        END_NOGIL
        res = Py_BuildValue("(ni)", bad, ascending);
    }
    release(6, all);
    return res;
}

PyDoc_STRVAR(bm25_idf_doc,
             "bm25_idf(matching, documents, out): BM25's inverse document frequency of tokens "
             "held by matching[i] (float32) of `documents`, into out (float32): every step in "
             "float32 and the logarithm the C library's logf, as pylance's compiled scorer "
             "takes it (numpy's float32 log differs from it in the last bit for a quarter of "
             "arguments).");

static PyObject *bm25_idf(PyObject *self, PyObject *args)
{
    Py_buffer matching, out;
    float documents;
    if (!PyArg_ParseTuple(args, "y*fw*", &matching, &documents, &out))
        return NULL;
    Py_buffer *all[] = {&matching, &out};
    PyObject *res = NULL;
    const Py_ssize_t n = matching.len / 4;
    if (matching.len % 4 || out.len != matching.len || !aligned(matching.buf, 4) ||
        !aligned(out.buf, 4))
        PyErr_SetString(PyExc_ValueError, "bm25_idf: bad lengths or alignment");
    else {
        const float *m = matching.buf;
        float *o = out.buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            const volatile float rest = (documents - m[i]) + 0.5f;
            const volatile float held = m[i] + 0.5f;
            const volatile float ratio = rest / held;
            o[i] = logf(ratio + 1.0f);
        }
        res = Py_None;
        Py_INCREF(res);
    }
    release(2, all);
    return res;
}

PyDoc_STRVAR(leb128_doc,
             "leb128(data, count, out): the first `count` LEB128 numbers of data (uint8) into "
             "out (uint64); returns the bytes they take, -1 if data ends inside a number (or "
             "before `count` of them), -2 if a number takes more than 5 bytes (35 bits).");

static PyObject *leb128(PyObject *self, PyObject *args)
{
    Py_buffer data, out;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*nw*", &data, &count, &out))
        return NULL;
    Py_buffer *all[] = {&data, &out};
    if (count < 0 || out.len != count * 8 || !aligned(out.buf, 8)) {
        PyErr_SetString(PyExc_ValueError, "leb128: bad lengths or alignment");
        release(2, all);
        return NULL;
    }
    const uint8_t *d = data.buf;
    uint64_t *o = out.buf;
    Py_ssize_t at = 0, n = data.len, result = 0;
    for (Py_ssize_t i = 0; i < count && result == 0; i++) {
        uint64_t value = 0;
        for (int k = 0;; k++) {
            if (at >= n) {
                result = -1;
                break;
            }
            if (k == 5) {
                result = -2;
                break;
            }
            const uint8_t byte = d[at++];
            value |= (uint64_t)(byte & 0x7F) << (7 * k);
            if (!(byte & 0x80))
                break;
        }
        o[i] = value;
    }
    release(2, all);
    return PyLong_FromSsize_t(result == 0 ? at : result);
}

/* -- RaBitQ extended codes (IVF_RQ builds) -------------------------------------------------- */

/* A step of the rescale sweep: dimension `dim`'s code becomes `code` at t = code / a[dim]. */
typedef struct {
    float t;
    int32_t dim;
    int32_t code;
} rq_step;

static inline int rq_before(const rq_step *x, const rq_step *y)
{
    return x->t < y->t || (x->t == y->t && x->dim < y->dim);
}

/* Rust's `slice::sort_unstable_by` (ipnsort, Rust 1.81 on) of steps by t alone, redone move
 * for move: pylance sorts a row's steps so, from the order it makes them in (by dimension,
 * then code), and where steps share a t the order it leaves them in moves the sweep's float32
 * sums (and at a near-tie the rescale it picks). Our own walk of that algorithm: an insertion
 * sort of 20 steps or fewer; else an already sorted (or strictly descending, then reversed)
 * run of them all kept; else a quicksort whose pivot is a (recursive) median of three, a
 * Lomuto partition through a moving gap, an insertion sort of 32 steps or fewer (the small
 * sorts of a 16-byte element are stable) and a heapsort past 2 * log2(n) partitions. `le`
 * makes the comparison "not greater" (the partition of steps equal to an earlier pivot). */
static inline int rs_less(const rq_step *x, const rq_step *y, int le)
{
    return le ? !(y->t < x->t) : x->t < y->t;
}

static void rs_insertion(rq_step *v, int64_t n)
{
    for (int64_t i = 1; i < n; i++) {
        const rq_step item = v[i];
        int64_t j = i;
        while (j > 0 && item.t < v[j - 1].t) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = item;
    }
}

static int64_t rs_median3(const rq_step *v, int64_t a, int64_t b, int64_t c)
{
    const int x = v[a].t < v[b].t, y = v[a].t < v[c].t;
    if (x != y)
        return a;
    const int z = v[b].t < v[c].t;
    return (z ^ x) ? c : b;
}

static int64_t rs_median3_rec(const rq_step *v, int64_t a, int64_t b, int64_t c, int64_t n)
{
    if (n * 8 >= 64) {
        const int64_t n8 = n / 8;
        a = rs_median3_rec(v, a, a + n8 * 4, a + n8 * 7, n8);
        b = rs_median3_rec(v, b, b + n8 * 4, b + n8 * 7, n8);
        c = rs_median3_rec(v, c, c + n8 * 4, c + n8 * 7, n8);
    }
    return rs_median3(v, a, b, c);
}

static int64_t rs_partition(rq_step *v, int64_t n, int64_t pivot, int le)
{
    rq_step swap = v[0];
    v[0] = v[pivot];
    v[pivot] = swap;
    const rq_step p = v[0];
    rq_step *w = v + 1;
    const int64_t m = n - 1;
    int64_t lt = 0;
    if (m > 0) {
        const rq_step held = w[0];
        int64_t gap = 0;
        for (int64_t r = 1; r <= m; r++) {
            const rq_step item = r < m ? w[r] : held;
            const int is_lt = rs_less(&item, &p, le);
            w[gap] = w[lt];
            w[lt] = item;
            gap = r;
            lt += is_lt;
        }
    }
    swap = v[0];
    v[0] = v[lt];
    v[lt] = swap;
    return lt;
}

static void rs_heapsort(rq_step *v, int64_t n)
{
    for (int64_t i = n + n / 2 - 1; i >= 0; i--) {
        int64_t node = 0;
        if (i >= n)
            node = i - n;
        else {
            const rq_step swap = v[0];
            v[0] = v[i];
            v[i] = swap;
        }
        const int64_t len = i < n ? i : n;
        for (;;) {
            int64_t child = 2 * node + 1;
            if (child >= len)
                break;
            if (child + 1 < len)
                child += v[child].t < v[child + 1].t;
            if (!(v[node].t < v[child].t))
                break;
            const rq_step swap = v[node];
            v[node] = v[child];
            v[child] = swap;
            node = child;
        }
    }
}

static void rs_quicksort(rq_step *v, int64_t n, const rq_step *ancestor, unsigned limit)
{
    for (;;) {
        if (n <= 32) {
            rs_insertion(v, n);
            return;
        }
        if (limit == 0) {
            rs_heapsort(v, n);
            return;
        }
        limit--;
        const int64_t n8 = n / 8;
        const int64_t pivot = n < 64 ? rs_median3(v, 0, n8 * 4, n8 * 7)
                                     : rs_median3_rec(v, 0, n8 * 4, n8 * 7, n8);
        if (ancestor && !(ancestor->t < v[pivot].t)) {
            const int64_t k = rs_partition(v, n, pivot, 1);
            v += k + 1;
            n -= k + 1;
            ancestor = NULL;
            continue;
        }
        const int64_t k = rs_partition(v, n, pivot, 0);
        rs_quicksort(v, k, ancestor, limit);
        ancestor = v + k;
        v += k + 1;
        n -= k + 1;
    }
}

static void rs_sort_unstable(rq_step *v, int64_t n)
{
    if (n < 2)
        return;
    if (n <= 20) {
        rs_insertion(v, n);
        return;
    }
    int64_t run = 2;
    const int descending = v[1].t < v[0].t;
    while (run < n && (descending ? v[run].t < v[run - 1].t : !(v[run].t < v[run - 1].t)))
        run++;
    if (run == n) {
        if (descending)
            for (int64_t i = 0, j = n - 1; i < j; i++, j--) {
                const rq_step swap = v[i];
                v[i] = v[j];
                v[j] = swap;
            }
        return;
    }
    unsigned log2 = 0;
    for (uint64_t m = (uint64_t)n | 1; m > 1; m >>= 1)
        log2++;
    rs_quicksort(v, n, NULL, 2 * log2);
}

/* Fraction of the sweep's end where it starts, by extended bits. */
static const float RQ_SWEEP_START[9] = {0.0f, 0.15f, 0.20f, 0.52f, 0.59f,
                                        0.71f, 0.75f, 0.77f, 0.81f};
enum { RQ_BUCKETS = 1024 };

/* The bucket of a step at t (a monotonic function of t: buckets keep t's order). */
static inline int64_t rq_bucket(float t, float t_start, float scale)
{
    const int64_t b = (int64_t)((t - t_start) * scale);
    return b < 0 ? 0 : (b >= RQ_BUCKETS ? RQ_BUCKETS - 1 : b);
}

/* The sweep over `n` steps in order from the sums at its start (`best` their ratio, at
 * `best_t`): the t of the first step to the largest ratio; `*tied` is set when two steps in a
 * row share a t. */
static float rq_sweep(const float *a, const rq_step *sorted, int64_t n, float num, float den,
                      float best, float best_t, int *tied)
{
    for (int64_t i = 0; i < n; i++) {
        num = num + a[sorted[i].dim];
        den = den + (float)(2 * sorted[i].code);
        const float ratio = num / sqrtf(den);
        if (i > 0 && sorted[i].t == sorted[i - 1].t)
            *tied = 1;
        if (ratio > best) {
            best = ratio;
            best_t = sorted[i].t;
        }
    }
    return best_t;
}

/* The rescale t of one row of unit magnitudes a[0..dim) (none zero-length): its codes
 * floor(t * a + 1e-5), at most `top`, have the largest <code + 1/2, a> / |code + 1/2|. From
 * where the sweep starts, each step of one dimension's code, in increasing t, moves the
 * sums; the first step to their largest ratio sets t. Every operation float32, sums in
 * dimension order then in step order (pylance's). The steps are ordered by buckets of t, then
 * by insertion within a bucket (few share one), steps at one t by dimension; where that
 * order of them can matter, in pylance's unstable sort's order (see below). `steps` and
 * `sorted` hold dim * top steps, `counts` RQ_BUCKETS + 1 entries. */
static float rq_row_rescale(const float *a, int64_t dim, int top, int eb, rq_step *steps,
                            rq_step *sorted, int64_t *counts)
{
    float max = 0.0f;
    for (int64_t d = 0; d < dim; d++)
        if (a[d] > max)
            max = a[d];
    if (!(max > 0.0f))
        return 0.0f;
    const float t_end = (float)(top + 10) / max;
    const float t_start = t_end * RQ_SWEEP_START[eb];
    float num = 0.0f, den = (float)dim * 0.25f;
    int64_t n = 0;
    for (int64_t d = 0; d < dim; d++) {
        if (!(a[d] > 0.0f))
            continue;
        const float k = floorf(t_start * a[d] + 1e-5f);
        const int start = k < 0.0f ? 0 : (k > (float)top ? top : (int)k);
        den = den + (float)(start * start + start);
        num = num + ((float)start + 0.5f) * a[d];
        for (int code = start + 1; code <= top; code++) {
            const float t = (float)code / a[d];
            if (!(t < t_end))
                break;
            steps[n].t = t;
            steps[n].dim = (int32_t)d;
            steps[n].code = code;
            n++;
        }
    }
    const float first = num / sqrtf(den);
    if (n == 0)
        return t_start;
    const float scale = (float)RQ_BUCKETS / (t_end - t_start);
    memset(counts, 0, sizeof(int64_t) * (RQ_BUCKETS + 1));
    for (int64_t i = 0; i < n; i++)
        counts[rq_bucket(steps[i].t, t_start, scale) + 1]++;
    for (int64_t b = 0; b < RQ_BUCKETS; b++)
        counts[b + 1] += counts[b];
    for (int64_t i = 0; i < n; i++)
        sorted[counts[rq_bucket(steps[i].t, t_start, scale)]++] = steps[i];
    for (int64_t i = 1; i < n; i++) {
        const rq_step item = sorted[i];
        int64_t j = i;
        while (j > 0 && rq_before(&item, &sorted[j - 1])) {
            sorted[j] = sorted[j - 1];
            j--;
        }
        sorted[j] = item;
    }
    int tied = 0;
    const float t = rq_sweep(a, sorted, n, num, den, first, t_start, &tied);
    if (!tied)
        return t;
    /* Steps sharing a t are summed in pylance in the order its unstable sort leaves them
     * (from the order they were made in): a few ulps of the float32 sums, which at a near-tie
     * move the answer. Where the sweep with every such group reversed answers the same, so
     * does pylance's order (each group is in one of those two orders when, as nearly always,
     * it holds two steps); where it does not, sweep in pylance's order itself. */
    for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (j < n && sorted[j].t == sorted[i].t)
            j++;
        for (int64_t lo = i, hi = j - 1; lo < hi; lo++, hi--) {
            const rq_step swap = sorted[lo];
            sorted[lo] = sorted[hi];
            sorted[hi] = swap;
        }
        i = j;
    }
    if (rq_sweep(a, sorted, n, num, den, first, t_start, &tied) == t)
        return t;
    memcpy(sorted, steps, sizeof(rq_step) * (size_t)n);
    rs_sort_unstable(sorted, n);
    return rq_sweep(a, sorted, n, num, den, first, t_start, &tied);
}

/* In place: the Walsh-Hadamard butterflies of v[0..t) (t a power of two) at strides
 * 1, 2, 4, ..., each level over the last one's values, then every value times `scale`. */
static void rq_hadamard(float *v, int64_t t, float scale)
{
    for (int64_t h = 1; h < t; h *= 2)
        for (int64_t j = 0; j < t; j += 2 * h)
            for (int64_t i = j; i < j + h; i++) {
                const float x = v[i], y = v[i + h];
                v[i] = x + y;
                v[i + h] = x - y;
            }
    for (int64_t i = 0; i < t; i++)
        v[i] = v[i] * scale;
}

PyDoc_STRVAR(rq_rotate_doc,
             "rq_rotate(x, dim, signs): pylance's fast rotation of each row of x (float32, "
             "rows of `dim`, in place): four rounds of sign flips (`signs`: 4 rounds of dim/8 "
             "bytes, bit i%8 of byte i/8 flips dimension i) and Walsh-Hadamard transforms of "
             "the largest power-of-two head (even rounds) or tail (odd rounds), with a Kac "
             "step when dim is not a power of two, then 0.25 times every value.");

static PyObject *rq_rotate(PyObject *self, PyObject *args)
{
    Py_buffer x, signs;
    Py_ssize_t dim;
    if (!PyArg_ParseTuple(args, "w*ny*", &x, &dim, &signs))
        return NULL;
    Py_buffer *all[] = {&x, &signs};
    const Py_ssize_t rows = dim > 0 ? x.len / 4 / dim : 0;
    if (dim <= 0 || dim % 8 || x.len != rows * dim * 4 || signs.len != 4 * (dim / 8) ||
        !aligned(x.buf, 4)) {
        PyErr_SetString(PyExc_ValueError, "rq_rotate: bad lengths or alignment");
        release(2, all);
        return NULL;
    }
    int64_t t = 1;
    while (2 * t <= dim)
        t *= 2;
    const float scale = 1.0f / sqrtf((float)t);
    const int64_t half = dim / 2, per_round = dim / 8;
    const uint8_t *flip = signs.buf;
    float *v = x.buf;
    BEGIN_NOGIL(rows * dim)
    for (Py_ssize_t r = 0; r < rows; r++) {
        float *row = v + r * dim;
        for (int round = 0; round < 4; round++) {
            const uint8_t *bits = flip + round * per_round;
            for (int64_t i = 0; i < dim; i++)
                if ((bits[i / 8] >> (i % 8)) & 1)
                    row[i] = -row[i];
            if (t == dim) {
                rq_hadamard(row, t, scale);
                continue;
            }
            rq_hadamard(round % 2 == 0 ? row : row + (dim - t), t, scale);
            for (int64_t i = 0; i < half; i++) {
                const float a = row[i], b = row[i + half];
                row[i] = a + b;
                row[i + half] = a - b;
            }
        }
        if (t != dim)
            for (int64_t i = 0; i < dim; i++)
                row[i] = row[i] * 0.25f;
    }
    END_NOGIL
    release(2, all);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(rq_ex_codes_doc,
             "rq_ex_codes(rot, dim, bits, codes, dots): RaBitQ's extended codes of `bits` bits "
             "(1-8) of each row of rot (float32 rotated residuals, rows of `dim`) into codes "
             "(uint8, a byte a dimension; the complement for negative dimensions), and into "
             "dots (float32) each row's sum of rot times its full code's grid point, as "
             "pylance's IVF_RQ builds compute them: the row scaled to unit length, the "
             "rescale its codes line up best with (`rq_row_rescale`), float32 sums left to "
             "right. A row of (nearly) zero length gets zero codes and a zero sum.");

static PyObject *rq_ex_codes(PyObject *self, PyObject *args)
{
    Py_buffer rot, codes, dots;
    Py_ssize_t dim;
    int eb;
    if (!PyArg_ParseTuple(args, "y*niw*w*", &rot, &dim, &eb, &codes, &dots))
        return NULL;
    Py_buffer *all[] = {&rot, &codes, &dots};
    const Py_ssize_t rows = dim > 0 ? rot.len / 4 / dim : 0;
    if (dim <= 0 || eb < 1 || eb > 8 || rot.len != rows * dim * 4 || codes.len != rows * dim ||
        dots.len != rows * 4 || !aligned(rot.buf, 4) || !aligned(dots.buf, 4)) {
        PyErr_SetString(PyExc_ValueError, "rq_ex_codes: bad lengths, bits or alignment");
        release(3, all);
        return NULL;
    }
    const int top = (1 << eb) - 1;
    const float bias = -((float)(1 << eb) - 0.5f);
    const size_t most = (size_t)dim * (size_t)top;
    rq_step *steps = PyMem_RawMalloc(sizeof(rq_step) * 2 * most);
    int64_t *counts = PyMem_RawMalloc(sizeof(int64_t) * (RQ_BUCKETS + 1));
    float *a = PyMem_RawMalloc(sizeof(float) * (size_t)dim);
    if (!steps || !counts || !a) {
        PyMem_RawFree(steps);
        PyMem_RawFree(counts);
        PyMem_RawFree(a);
        release(3, all);
        return PyErr_NoMemory();
    }
    const float *values = rot.buf;
    uint8_t *out = codes.buf;
    float *sums = dots.buf;
    BEGIN_NOGIL(rows * dim)
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *x = values + r * dim;
        uint8_t *c = out + r * dim;
        float norm = 0.0f;
        for (Py_ssize_t d = 0; d < dim; d++)
            norm = norm + x[d] * x[d];
        if (!(norm > FLT_EPSILON) || !isfinite(norm)) {
            memset(c, 0, (size_t)dim);
            sums[r] = 0.0f;
            continue;
        }
        const float length = sqrtf(norm);
        for (Py_ssize_t d = 0; d < dim; d++)
            a[d] = fabsf(x[d]) / length;
        const float t = rq_row_rescale(a, dim, top, eb, steps, steps + most, counts);
        float sum = 0.0f;
        for (Py_ssize_t d = 0; d < dim; d++) {
            const float k = floorf(t * a[d] + 1e-5f);
            int code = k < 0.0f ? 0 : (k > (float)top ? top : (int)k);
            const int negative = signbit(x[d]) != 0;
            if (negative)
                code = ~code & top;
            c[d] = (uint8_t)code;
            const int full = ((negative ? 0 : 1) << eb) + code;
            sum = sum + x[d] * ((float)full + bias);
        }
        sums[r] = sum;
    }
    END_NOGIL
    PyMem_RawFree(steps);
    PyMem_RawFree(counts);
    PyMem_RawFree(a);
    release(3, all);
    Py_RETURN_NONE;
}

/* -- full-zip entries (2.1+ pages of variable-width values) ------------------------------- */

enum { FZ_OK, FZ_CONTROL, FZ_TOP, FZ_LENGTH, FZ_PAST };

/* Walk the entries of rows [starts[r], ends[r]) of a full-zip page: a control word of `cwb`
 * bytes (repetition above `bits_def` bits of definition), then, for a visible value
 * (definition 0), its length in `lw` bytes and its bytes. Counts the entries, and writes them
 * when `rep` is given. Returns a FZ_ status; `*bad` is the row it concerns. */
static int fz_walk(const Py_buffer *data, const Py_buffer *st, const Py_buffer *en, int cwb,
                   int bits_def, long long vis_max, int lw, long long top, int64_t *rep,
                   int64_t *def, int64_t *vstart, int64_t *vlen, int64_t cap, int64_t *count,
                   Py_ssize_t *bad)
{
    const uint8_t *d = data->buf;
    const int64_t size = data->len, n = len64(st);
    const uint64_t mask = bits_def >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits_def) - 1;
    int64_t k = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        const int64_t s = at64(st, r), e = at64(en, r);
        *bad = r;
        if (s < 0 || e < s || e > size)
            return FZ_PAST;
        int64_t at = s;
        int first = 1;
        while (at < e) {
            if (cwb > e - at)
                return FZ_CONTROL;
            const uint64_t cw = cwb ? load_le(d + at, cwb) : 0;
            const int64_t rp = bits_def >= 64 ? 0 : (int64_t)(cw >> bits_def);
            const int64_t df = (int64_t)(cw & mask);
            if (first && top && rp != top)
                return FZ_TOP;
            first = 0;
            at += cwb;
            uint64_t length = 0;
            if (df <= vis_max && df == 0) {
                if (lw > e - at)
                    return FZ_LENGTH;
                length = load_le(d + at, lw);
                at += lw;
            }
            if (rep) {
                if (k >= cap)
                    return FZ_PAST; /* a second walk found more entries than the first */
                rep[k] = rp, def[k] = df, vstart[k] = at, vlen[k] = (int64_t)length;
            }
            k++;
            if (length > (uint64_t)(e - at))
                return FZ_PAST;
            at += (int64_t)length;
        }
    }
    *count = k;
    return FZ_OK;
}

PyDoc_STRVAR(fullzip_walk_doc,
             "fullzip_walk(data, starts, ends, cwb, bits_def, vis_max, lw, top, rep, def, "
             "vstart, vlen) -> (status, row, entries): the entries of full-zip rows "
             "[starts, ends) of variable-width values (FZ_ statuses: CONTROL, TOP, LENGTH, "
             "PAST, naming the row). With output arrays (int64, one per entry) they are "
             "written; with zero-length ones only counted.");

static PyObject *fullzip_walk(PyObject *self, PyObject *args)
{
    Py_buffer data, st, en, rep, def, vs, vl;
    int cwb, bits_def, lw;
    long long vis_max, top;
    if (!PyArg_ParseTuple(args, "y*y*y*iiLiLw*w*w*w*", &data, &st, &en, &cwb, &bits_def,
                          &vis_max, &lw, &top, &rep, &def, &vs, &vl))
        return NULL;
    Py_buffer *all[] = {&data, &st, &en, &rep, &def, &vs, &vl};
    PyObject *res = NULL;
    const int64_t cap = len64(&rep);
    if (cwb < 0 || cwb > 8 || (lw != 4 && lw != 8) || bits_def < 0 || st.len != en.len ||
        def.len != rep.len || vs.len != rep.len || vl.len != rep.len ||
        (cap && !(aligned(rep.buf, 8) && aligned(def.buf, 8) && aligned(vs.buf, 8) &&
                  aligned(vl.buf, 8))))
        PyErr_SetString(PyExc_ValueError, "fullzip_walk: bad widths or lengths");
    else {
        int64_t count = 0;
        Py_ssize_t bad = 0;
        int status;
        BEGIN_NOGIL(data.len)
        status = fz_walk(&data, &st, &en, cwb, bits_def, vis_max, lw, top,
                         cap ? (int64_t *)rep.buf : NULL, (int64_t *)def.buf,
                         (int64_t *)vs.buf, (int64_t *)vl.buf, cap, &count, &bad);
        END_NOGIL
        res = Py_BuildValue("(inL)", status, bad, (long long)count);
    }
    release(7, all);
    return res;
}

/* -- module --------------------------------------------------------------------------------- */

/* -- split-block bloom filters (format.table.sbbf) -------------------------------------------- */

#define XXH_P1 0x9E3779B185EBCA87ULL
#define XXH_P2 0xC2B2AE3D27D4EB4FULL
#define XXH_P3 0x165667B19E3779F9ULL
#define XXH_P4 0x85EBCA77C2B2AE63ULL
#define XXH_P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

/* xxHash64 (seed 0) of one little-endian value of 1, 2, 4 or 8 bytes */
static inline uint64_t xxh64_short(const uint8_t *p, int width)
{
    uint64_t h = XXH_P5 + (uint64_t)width;
    if (width == 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v = LE64(v);
        h ^= rotl64(v * XXH_P2, 31) * XXH_P1;
        h = rotl64(h, 27) * XXH_P1 + XXH_P4;
    } else if (width == 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        v = LE32(v);
        h ^= (uint64_t)v * XXH_P1;
        h = rotl64(h, 23) * XXH_P2 + XXH_P3;
    } else {
        for (int i = 0; i < width; i++) {
            h ^= (uint64_t)p[i] * XXH_P5;
            h = rotl64(h, 11) * XXH_P1;
        }
    }
    h ^= h >> 33;
    h *= XXH_P2;
    h ^= h >> 29;
    h *= XXH_P3;
    h ^= h >> 32;
    return h;
}

PyDoc_STRVAR(xxh64_fixed_doc,
             "xxh64_fixed(values, width, out): out[i] (uint64) = xxHash64 with seed 0 of the i-th "
             "width-byte value of values (width 1, 2, 4 or 8).");

static PyObject *xxh64_fixed(PyObject *self, PyObject *args)
{
    Py_buffer values, out;
    int width;
    if (!PyArg_ParseTuple(args, "y*iw*", &values, &width, &out))
        return NULL;
    Py_buffer *all[] = {&values, &out};
    PyObject *res = NULL;
    if (width != 1 && width != 2 && width != 4 && width != 8) {
        PyErr_Format(PyExc_ValueError, "xxh64_fixed: width %d is not 1, 2, 4 or 8", width);
    } else if (values.len % width || out.len != values.len / width * 8) {
        PyErr_SetString(PyExc_ValueError, "xxh64_fixed: out must hold one uint64 per value");
    } else {
        const uint8_t *src = values.buf;
        uint8_t *dst = out.buf;
        const Py_ssize_t n = values.len / width;
        BEGIN_NOGIL(n)
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t h = LE64(xxh64_short(src + i * width, width));
            memcpy(dst + 8 * i, &h, 8);
        }
        END_NOGIL
        res = Py_NewRef(Py_None);
    }
    release(2, all);
    return res;
}

/* xxHash64 of `n` bytes with `seed` (the whole algorithm: stripes of 32 bytes, then words,
 * a half word and bytes) */
static inline uint64_t xxh64_round(uint64_t acc, uint64_t input)
{
    return rotl64(acc + input * XXH_P2, 31) * XXH_P1;
}

static inline uint64_t xxh64_merge(uint64_t h, uint64_t v)
{
    return (h ^ xxh64_round(0, v)) * XXH_P1 + XXH_P4;
}

static uint64_t xxh64_bytes(const uint8_t *p, size_t n, uint64_t seed)
{
    const uint8_t *end = p + n;
    uint64_t h, w;
    uint32_t half;
    if (n >= 32) {
        uint64_t v1 = seed + XXH_P1 + XXH_P2, v2 = seed + XXH_P2, v3 = seed, v4 = seed - XXH_P1;
        do {
            memcpy(&w, p, 8), v1 = xxh64_round(v1, LE64(w));
            memcpy(&w, p + 8, 8), v2 = xxh64_round(v2, LE64(w));
            memcpy(&w, p + 16, 8), v3 = xxh64_round(v3, LE64(w));
            memcpy(&w, p + 24, 8), v4 = xxh64_round(v4, LE64(w));
            p += 32;
        } while (end - p >= 32);
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xxh64_merge(xxh64_merge(xxh64_merge(xxh64_merge(h, v1), v2), v3), v4);
    } else {
        h = seed + XXH_P5;
    }
    h += (uint64_t)n;
    for (; end - p >= 8; p += 8) {
        memcpy(&w, p, 8);
        h ^= xxh64_round(0, LE64(w));
        h = rotl64(h, 27) * XXH_P1 + XXH_P4;
    }
    if (end - p >= 4) {
        memcpy(&half, p, 4);
        h ^= (uint64_t)LE32(half) * XXH_P1;
        h = rotl64(h, 23) * XXH_P2 + XXH_P3;
        p += 4;
    }
    for (; p < end; p++) {
        h ^= (uint64_t)*p * XXH_P5;
        h = rotl64(h, 11) * XXH_P1;
    }
    h ^= h >> 33;
    h *= XXH_P2;
    h ^= h >> 29;
    h *= XXH_P3;
    return h ^ (h >> 32);
}

/* -- MinHash signatures (format.index.scalar.minhash) ---------------------------------------- */

#define MINHASH_SEED 42
#define SHINGLE_SEPARATOR 0x1F

/* mins[i] = min(mins[i], a[i] * x + b[i]) for the k permutations: one shingle's hash folded
 * in. 64-bit lanes want AVX-512's vpmullq / vpminuq: that build is chosen at run time where
 * the CPU has them (AVX2 has neither, and emulates them slower than scalar code runs). */
#define MINHASH_FOLD_BODY                                                                       \
    for (Py_ssize_t i = 0; i < k; i++) {                                                       \
        const uint64_t v = a[i] * x + b[i];                                                     \
        mins[i] = v < mins[i] ? v : mins[i];                                                    \
    }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MINHASH_AVX512 1
__attribute__((target("avx512f,avx512dq"))) static void
minhash_fold_avx512(uint64_t *restrict mins, const uint64_t *restrict a,
                    const uint64_t *restrict b, uint64_t x, Py_ssize_t k)
{
    MINHASH_FOLD_BODY
}
#endif

static void minhash_fold(uint64_t *restrict mins, const uint64_t *restrict a,
                         const uint64_t *restrict b, uint64_t x, Py_ssize_t k)
{
#ifdef MINHASH_AVX512
    static int avx512 = -1;
    if (avx512 < 0)
        avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
    if (avx512) {
        minhash_fold_avx512(mins, a, b, x, k);
        return;
    }
#endif
    MINHASH_FOLD_BODY
}

PyDoc_STRVAR(minhash_sign_doc,
             "minhash_sign(data, token_ends, doc_ends, shingle, coef, out, signed) -> None: "
             "the MinHash signature of every document (its tokens: token_ends, int64 ends in "
             "data of each token; doc_ends, int64 ends in the tokens of each document). Each "
             "shingle (`shingle` tokens joined with 0x1F, one of all tokens when fewer) is "
             "hashed with XXH64 (seed 42) to x; signature[i] = (c_i * min(a_i * x + b_i)) >> 48 "
             "(coef: uint64 a, then b, then c, k each) into out (uint16, k per document); "
             "signed[d] (uint8) is 0 for a document without tokens.");

static PyObject *minhash_sign(PyObject *self, PyObject *args)
{
    Py_buffer data, tends, dends, coef, out, has;
    int shingle;
    if (!PyArg_ParseTuple(args, "y*y*y*iy*w*w*", &data, &tends, &dends, &shingle, &coef, &out,
                          &has))
        return NULL;
    Py_buffer *all[] = {&data, &tends, &dends, &coef, &out, &has};
    PyObject *res = NULL;
    const Py_ssize_t tokens = len64(&tends), docs = len64(&dends), k = len64(&coef) / 3;
    if (shingle < 1 || k < 1 || coef.len != 24 * k || tends.len % 8 || dends.len % 8 ||
        out.len != docs * k * 2 || has.len != docs) {
        PyErr_SetString(PyExc_ValueError, "minhash_sign: bad shingle, coefficients or outputs");
        release(6, all);
        return NULL;
    }
    /* every end within the data or the tokens, never decreasing */
    int64_t prev = 0;
    for (Py_ssize_t t = 0; t < tokens; t++) {
        int64_t e = at64(&tends, t);
        if (e < prev || e > data.len) {
            PyErr_SetString(PyExc_ValueError, "minhash_sign: token ends outside the data");
            release(6, all);
            return NULL;
        }
        prev = e;
    }
    prev = 0;
    for (Py_ssize_t d = 0; d < docs; d++) {
        int64_t e = at64(&dends, d);
        if (e < prev || e > tokens) {
            PyErr_SetString(PyExc_ValueError, "minhash_sign: document ends outside the tokens");
            release(6, all);
            return NULL;
        }
        prev = e;
    }
    uint64_t *c = PyMem_RawMalloc(24 * k);
    uint64_t *mins = PyMem_RawMalloc(8 * k);
    size_t room = 256, slots = 64;
    uint8_t *scratch = PyMem_RawMalloc(room);
    size_t *starts = PyMem_RawMalloc(slots * sizeof(size_t));
    if (!c || !mins || !scratch || !starts) {
        PyMem_RawFree(c), PyMem_RawFree(mins), PyMem_RawFree(scratch), PyMem_RawFree(starts);
        release(6, all);
        return PyErr_NoMemory();
    }
    memcpy(c, coef.buf, 24 * k);
    const uint64_t *a = c, *b = c + k, *cc = c + 2 * k;
    const uint8_t *bytes = data.buf;
    uint8_t *signed_ = has.buf;
    char *dst = out.buf;
    int oom = 0;
    BEGIN_NOGIL(tokens * k)
    int64_t first = 0;
    for (Py_ssize_t d = 0; d < docs && !oom; d++) {
        const int64_t last = at64(&dends, d), n = last - first;
        if (n == 0) {
            signed_[d] = 0;
            memset(dst + d * k * 2, 0, k * 2);
            continue;
        }
        for (Py_ssize_t i = 0; i < k; i++)
            mins[i] = UINT64_MAX;
        /* the document's tokens once, separated by 0x1F: a shingle is then the bytes from
         * its first token's start to its last token's end */
        const int64_t base = first ? at64(&tends, first - 1) : 0;
        const size_t need = (size_t)(at64(&tends, last - 1) - base) + (size_t)n;
        if (need > room || (size_t)n + 1 > slots) {
            uint8_t *grown = need > room ? PyMem_RawRealloc(scratch, need * 2) : scratch;
            if (grown)
                scratch = grown, room = need > room ? need * 2 : room;
            size_t *more = (size_t)n + 1 > slots
                               ? PyMem_RawRealloc(starts, ((size_t)n + 1) * 2 * sizeof(size_t))
                               : starts;
            if (more)
                starts = more, slots = (size_t)n + 1 > slots ? ((size_t)n + 1) * 2 : slots;
            if (!grown || !more) {
                oom = 1;
                break;
            }
        }
        size_t len = 0;
        for (int64_t t = first; t < last; t++) {
            const int64_t lo = t ? at64(&tends, t - 1) : 0, hi = at64(&tends, t);
            if (t > first)
                scratch[len++] = SHINGLE_SEPARATOR;
            starts[t - first] = len;
            memcpy(scratch + len, bytes + lo, (size_t)(hi - lo));
            len += (size_t)(hi - lo);
        }
        starts[n] = len + 1; /* past the separator a next token would have */
        const int64_t width = n < shingle ? n : shingle, count = n - width + 1;
        for (int64_t s = 0; s < count; s++) {
            const size_t from = starts[s], to = starts[s + width] - 1;
            minhash_fold(mins, a, b, xxh64_bytes(scratch + from, to - from, MINHASH_SEED), k);
        }
        for (Py_ssize_t i = 0; i < k; i++) {
            const uint16_t v = (uint16_t)((cc[i] * mins[i]) >> 48);
            memcpy(dst + (d * k + i) * 2, &v, 2);
        }
        signed_[d] = 1;
        first = last;
    }
    END_NOGIL
    PyMem_RawFree(c), PyMem_RawFree(mins), PyMem_RawFree(scratch), PyMem_RawFree(starts);
    if (oom)
        PyErr_NoMemory();
    else
        res = Py_NewRef(Py_None);
    release(6, all);
    return res;
}

PyDoc_STRVAR(minhash_bands_doc,
             "minhash_bands(signatures, k, bands, out) -> None: the band keys of signatures "
             "(uint16, k per row): band j of a row is its values j * r .. (j + 1) * r (r = k / "
             "bands) as little-endian bytes, keyed (j << 56) | (XXH64(bytes, 42) & (2^56 - 1)) "
             "into out (uint64, bands per row).");

static PyObject *minhash_bands(PyObject *self, PyObject *args)
{
    Py_buffer sig, out;
    Py_ssize_t k, bands;
    if (!PyArg_ParseTuple(args, "y*nnw*", &sig, &k, &bands, &out))
        return NULL;
    Py_buffer *all[] = {&sig, &out};
    PyObject *res = NULL;
    if (k < 1 || bands < 1 || bands > 256 || k % bands || sig.len % (2 * k) ||
        out.len != sig.len / (2 * k) * bands * 8) {
        PyErr_SetString(PyExc_ValueError, "minhash_bands: bad widths or output");
        release(2, all);
        return NULL;
    }
    const Py_ssize_t rows = sig.len / (2 * k), r = k / bands;
    uint8_t *band = PyMem_RawMalloc(2 * r);
    if (!band) {
        release(2, all);
        return PyErr_NoMemory();
    }
    const uint8_t *src = sig.buf;
    char *dst = out.buf;
    BEGIN_NOGIL(rows * k)
    for (Py_ssize_t row = 0; row < rows; row++) {
        for (Py_ssize_t j = 0; j < bands; j++) {
            const uint8_t *v = src + (row * k + j * r) * 2;
            for (Py_ssize_t i = 0; i < r; i++) { /* native uint16 -> little-endian bytes */
                uint16_t x;
                memcpy(&x, v + 2 * i, 2);
                band[2 * i] = (uint8_t)(x & 0xFF), band[2 * i + 1] = (uint8_t)(x >> 8);
            }
            const uint64_t key = ((uint64_t)j << 56) |
                                 (xxh64_bytes(band, 2 * r, MINHASH_SEED) & 0x00FFFFFFFFFFFFFFULL);
            memcpy(dst + (row * bands + j) * 8, &key, 8);
        }
    }
    END_NOGIL
    PyMem_RawFree(band);
    res = Py_NewRef(Py_None);
    release(2, all);
    return res;
}

static const uint32_t SBBF_SALT[8] = {0x47B6137BU, 0x44974D91U, 0x8824AD5BU, 0xA2B7289DU,
                                      0x705495C7U, 0x2DF1424BU, 0x9EFC4947U, 0x5C6BFB31U};

PyDoc_STRVAR(sbbf_fill_doc,
             "sbbf_fill(hashes, bounds, out, num_bytes): set in filter i (out[i * num_bytes:], "
             "zeroed, blocks of eight little-endian uint32 words) the bits of hashes "
             "[bounds[i], bounds[i + 1]) (uint64), as Parquet's split-block bloom filter.");

static PyObject *sbbf_fill(PyObject *self, PyObject *args)
{
    Py_buffer hashes, bounds, out;
    Py_ssize_t num_bytes;
    if (!PyArg_ParseTuple(args, "y*y*w*n", &hashes, &bounds, &out, &num_bytes))
        return NULL;
    Py_buffer *all[] = {&hashes, &bounds, &out};
    PyObject *res = NULL;
    const Py_ssize_t filters = len64(&bounds) - 1;
    if (num_bytes < 32 || num_bytes % 32 || filters < 0 || out.len != filters * num_bytes ||
        hashes.len % 8) {
        PyErr_SetString(PyExc_ValueError, "sbbf_fill: bad filter size or buffer lengths");
    } else {
        int bad = 0;
        for (Py_ssize_t f = 0; f <= filters && !bad; f++) {
            int64_t b = at64(&bounds, f);
            bad = b < 0 || b > len64(&hashes) || (f > 0 && b < at64(&bounds, f - 1));
        }
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "sbbf_fill: bounds outside the hashes");
        } else {
            const uint8_t *src = hashes.buf;
            uint8_t *dst = out.buf;
            const uint64_t blocks = (uint64_t)(num_bytes / 32);
            BEGIN_NOGIL(len64(&hashes))
            for (Py_ssize_t f = 0; f < filters; f++) {
                uint8_t *filter = dst + f * num_bytes;
                for (int64_t i = at64(&bounds, f); i < at64(&bounds, f + 1); i++) {
                    uint64_t h;
                    memcpy(&h, src + 8 * i, 8);
                    h = LE64(h);
                    uint8_t *block = filter + 32 * (((h >> 32) * blocks) >> 32);
                    const uint32_t low = (uint32_t)h;
                    for (int w = 0; w < 8; w++) {
                        uint32_t word;
                        memcpy(&word, block + 4 * w, 4);
                        word = LE32(LE32(word) | (1U << ((low * SBBF_SALT[w]) >> 27)));
                        memcpy(block + 4 * w, &word, 4);
                    }
                }
            }
            END_NOGIL
            res = Py_NewRef(Py_None);
        }
    }
    release(3, all);
    return res;
}

/* -- Full-text tokenizing (INVERTED builds) ----------------------------------------------- */

/* A hash of a word's bytes, eight at a time. */
static inline uint64_t word_hash(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    if (n) {
        uint64_t v = 0;
        memcpy(&v, p, (size_t)n);
        h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
    }
    h ^= h >> 29;
    return h * 0x94D049BB133111EBull;
}

/* The distinct words of one call: slot -> distinct word + 1 (0: empty), open addressing. */
typedef struct {
    int32_t *slot;
    uint32_t *tag;
    size_t mask;
} WordTable;

static int word_table_grow(WordTable *t, const uint8_t *text, const int64_t *ends, int32_t nd)
{
    size_t size = (t->mask + 1) * 2;
    int32_t *slot = PyMem_RawCalloc(size, sizeof(int32_t));
    uint32_t *tag = PyMem_RawMalloc(size * sizeof(uint32_t));
    if (!slot || !tag) {
        PyMem_RawFree(slot), PyMem_RawFree(tag);
        return -1;
    }
    for (int32_t d = 0; d < nd; d++) {
        uint64_t h = word_hash(text + ends[d], ends[d + 1] - ends[d]);
        size_t i = (size_t)h & (size - 1);
        while (slot[i])
            i = (i + 1) & (size - 1);
        slot[i] = d + 1, tag[i] = (uint32_t)(h >> 32);
    }
    PyMem_RawFree(t->slot), PyMem_RawFree(t->tag);
    t->slot = slot, t->tag = tag, t->mask = size - 1;
    return 0;
}

/* The distinct words met so far: their bytes one after another in `words`, their ends in
   `ends` (ends[0] = 0), found through `table`. */
typedef struct {
    WordTable table;
    uint8_t *words;
    int64_t *ends;
    Py_ssize_t used, cap_text;
    int32_t n, cap;
} Vocabulary;

/* The id of the word text[0:len], added when new; -2: the outputs are too small, -3: no
   memory. */
static inline int32_t vocabulary_id(Vocabulary *v, const uint8_t *text, Py_ssize_t len)
{
    const uint64_t h = word_hash(text, len);
    const uint32_t tag = (uint32_t)(h >> 32);
    WordTable *t = &v->table;
    size_t s = (size_t)h & t->mask;
    for (; t->slot[s]; s = (s + 1) & t->mask) {
        int32_t c = t->slot[s] - 1;
        if (t->tag[s] == tag && v->ends[c + 1] - v->ends[c] == len &&
            memcmp(v->words + v->ends[c], text, (size_t)len) == 0)
            return c;
    }
    if (v->n >= v->cap || v->used + len > v->cap_text)
        return -2;
    memcpy(v->words + v->used, text, (size_t)len);
    v->used += len;
    const int32_t d = v->n++;
    v->ends[v->n] = v->used;
    t->slot[s] = d + 1, t->tag[s] = tag;
    if ((size_t)v->n * 2 > t->mask && word_table_grow(t, v->words, v->ends, v->n) < 0)
        return -3;
    return d;
}

/* Shared by split_words and split_ngrams: the arguments after the mode's own, checked. */
typedef struct {
    Py_buffer data, offsets, rowsb, ow, orow, op, ot, oe, valid;
} SplitArgs;

static void split_release(SplitArgs *a)
{
    Py_buffer *all[] = {&a->data, &a->offsets, &a->rowsb, &a->ow, &a->orow, &a->op, &a->ot, &a->oe};
    release(8, all);
    if (a->valid.obj)
        PyBuffer_Release(&a->valid);
}

/* The text `rows[i]` of a split: [*start, *stop) of the data; 0: a null text, 1: a valid
   one, -1: offsets outside the data. */
static inline int split_text(const SplitArgs *a, Py_ssize_t offset, Py_ssize_t i, int64_t *start,
                             int64_t *stop)
{
    const int64_t *ends = a->offsets.buf, *rows = a->rowsb.buf;
    const uint8_t *bits = a->valid.buf;
    if (rows[i] < 0 || rows[i] > INT64_MAX - 1 - offset)
        return -1;
    const int64_t at = rows[i] + offset;
    if (at + 1 >= a->offsets.len / 8 || (bits && at / 8 >= a->valid.len))
        return -1;
    if (bits && !((bits[at / 8] >> (at % 8)) & 1))
        return 0;
    *start = ends[at], *stop = ends[at + 1];
    return (*start < 0 || *start > *stop || *stop > a->data.len) ? -1 : 1;
}

static PyObject *split_finish(int err, Py_ssize_t n, Vocabulary *v, const char *name)
{
    PyMem_RawFree(v->table.slot), PyMem_RawFree(v->table.tag);
    if (err == 1)
        PyErr_Format(PyExc_ValueError, "%s: a text's offsets lie outside the data", name);
    else if (err == 2)
        PyErr_Format(PyExc_ValueError, "%s: the outputs are too small", name);
    else if (err == 3)
        PyErr_NoMemory();
    else
        return Py_BuildValue("nn", n, (Py_ssize_t)v->n);
    return NULL;
}

/* Parses the shared arguments around the mode's own (`format` in the middle); 0 on success
   with `v` ready, -1 with an exception set and every buffer released. */
static int split_start(SplitArgs *a, Vocabulary *v, PyObject *validity, const char *name)
{
    memset(&a->valid, 0, sizeof(a->valid));
    if (validity != Py_None && PyObject_GetBuffer(validity, &a->valid, PyBUF_SIMPLE) < 0) {
        split_release(a);
        return -1;
    }
    const Py_ssize_t n_rows = len64(&a->rowsb);
    if (a->offsets.len % 8 || a->rowsb.len % 8 || a->orow.len != a->ow.len ||
        a->op.len != a->ow.len || a->ow.len % 4 || a->oe.len % 8 || a->oe.len < 8 ||
        !aligned(a->offsets.buf, 8) || !aligned(a->rowsb.buf, 8) || !aligned(a->ow.buf, 4) ||
        !aligned(a->orow.buf, 4) || !aligned(a->op.buf, 4) || !aligned(a->oe.buf, 8) ||
        n_rows > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: arrays of inconsistent sizes", name);
        split_release(a);
        return -1;
    }
    *v = (Vocabulary){{PyMem_RawCalloc(4096, sizeof(int32_t)), PyMem_RawMalloc(4096 * 4), 4095},
                      a->ot.buf, a->oe.buf, 0, a->ot.len, 0,
                      (int32_t)(a->oe.len / 8 - 1 > INT32_MAX ? INT32_MAX : a->oe.len / 8 - 1)};
    if (!v->table.slot || !v->table.tag) {
        PyMem_RawFree(v->table.slot), PyMem_RawFree(v->table.tag);
        PyErr_NoMemory();
        split_release(a);
        return -1;
    }
    v->ends[0] = 0;
    return 0;
}

#define SPLIT_OUTPUT_DOC                                                                         \
    "Each occurrence, in order: its distinct word (int32, numbered by first appearance), its "  \
    "text (int32, an index into `rows`) and its place (uint32). The distinct words' bytes go "  \
    "one after another into out_text, out_ends (int64, distinct + 1) their ends from 0. A "     \
    "ValueError when the outputs are too small or the offsets lie."

PyDoc_STRVAR(split_words_doc,
             "split_words(data, offsets, validity, offset, rows, separators, out_word, out_row, "
             "out_place, out_text, out_ends) -> (occurrences, distinct): the words of the texts "
             "`rows` (indices into a large_string array: its data and int64 offsets buffers, its "
             "validity bitmap or None, its offset), a word being a maximal run of bytes that are "
             "not separators (separators: 256 bytes, non-zero for a separator byte); null texts "
             "have none. A word's place is its number among its text's words. " SPLIT_OUTPUT_DOC);

static PyObject *split_words(PyObject *self, PyObject *args)
{
    SplitArgs a;
    Py_buffer sep;
    PyObject *validity;
    Py_ssize_t offset;
    Vocabulary v;
    if (!PyArg_ParseTuple(args, "y*y*Ony*y*w*w*w*w*w*", &a.data, &a.offsets, &validity, &offset,
                          &a.rowsb, &sep, &a.ow, &a.orow, &a.op, &a.ot, &a.oe))
        return NULL;
    if (sep.len != 256 || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "split_words: arrays of inconsistent sizes");
        PyBuffer_Release(&sep);
        memset(&a.valid, 0, sizeof(a.valid));
        split_release(&a);
        return NULL;
    }
    if (split_start(&a, &v, validity, "split_words") < 0) {
        PyBuffer_Release(&sep);
        return NULL;
    }
    const uint8_t *text = a.data.buf, *is_sep = sep.buf;
    int32_t *out_word = a.ow.buf, *out_row = a.orow.buf;
    uint32_t *out_place = a.op.buf;
    const Py_ssize_t cap = a.ow.len / 4, n_rows = len64(&a.rowsb);
    Py_ssize_t n = 0;
    int err = 0; /* 1: offsets outside the data, 2: outputs too small, 3: no memory */
    BEGIN_NOGIL(a.data.len)
    for (Py_ssize_t i = 0; i < n_rows && !err; i++) {
        int64_t start = 0, stop = 0;
        const int kind = split_text(&a, offset, i, &start, &stop);
        if (kind <= 0) {
            err = kind < 0;
            continue;
        }
        uint32_t place = 0;
        for (int64_t p = start; p < stop;) {
            while (p < stop && is_sep[text[p]])
                p++;
            if (p >= stop)
                break;
            int64_t q = p;
            while (q < stop && !is_sep[text[q]])
                q++;
            const int32_t d = vocabulary_id(&v, text + p, (Py_ssize_t)(q - p));
            if (d < 0 || n >= cap) {
                err = d < 0 ? -d : 2;
                break;
            }
            out_word[n] = d, out_row[n] = (int32_t)i, out_place[n] = place++;
            n++;
            p = q;
        }
    }
    END_NOGIL
    PyBuffer_Release(&sep);
    split_release(&a);
    return split_finish(err, n, &v, "split_words");
}

PyDoc_STRVAR(split_ngrams_doc,
             "split_ngrams(data, offsets, validity, offset, rows, shortest, longest, prefix_only, "
             "out_word, out_row, out_place, out_text, out_ends) -> (occurrences, distinct): the "
             "character n-grams of the texts `rows` (as split_words takes them; UTF-8), "
             "`shortest` to `longest` characters long, by start then length (with "
             "prefix_only, those at the start alone), as tantivy's NgramTokenizer gives "
             "them; every place is 0. " SPLIT_OUTPUT_DOC);

static PyObject *split_ngrams(PyObject *self, PyObject *args)
{
    SplitArgs a;
    PyObject *validity;
    Py_ssize_t offset, shortest, longest;
    int prefix_only;
    Vocabulary v;
    if (!PyArg_ParseTuple(args, "y*y*Ony*nnpw*w*w*w*w*", &a.data, &a.offsets, &validity,
                          &offset, &a.rowsb, &shortest, &longest, &prefix_only, &a.ow, &a.orow,
                          &a.op, &a.ot, &a.oe))
        return NULL;
    if (shortest < 1 || longest < shortest || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "split_ngrams: bad lengths or offset");
        memset(&a.valid, 0, sizeof(a.valid));
        split_release(&a);
        return NULL;
    }
    if (split_start(&a, &v, validity, "split_ngrams") < 0)
        return NULL;
    const uint8_t *text = a.data.buf;
    int32_t *out_word = a.ow.buf, *out_row = a.orow.buf;
    uint32_t *out_place = a.op.buf;
    const Py_ssize_t cap = a.ow.len / 4, n_rows = len64(&a.rowsb);
    Py_ssize_t n = 0, room = 0;
    int64_t *chars = NULL; /* where each character of a text starts, and its end */
    int err = 0;
    BEGIN_NOGIL(a.data.len)
    for (Py_ssize_t i = 0; i < n_rows && !err; i++) {
        int64_t start = 0, stop = 0;
        const int kind = split_text(&a, offset, i, &start, &stop);
        if (kind <= 0) {
            err = kind < 0;
            continue;
        }
        if (stop - start + 1 > room) {
            int64_t *grown = PyMem_RawRealloc(chars, (size_t)(stop - start + 1) * sizeof *chars);
            if (!grown) {
                err = 3;
                break;
            }
            chars = grown, room = stop - start + 1;
        }
        Py_ssize_t count = 0; /* characters: bytes that do not continue a UTF-8 sequence */
        for (int64_t p = start; p < stop; p++)
            if ((text[p] & 0xC0) != 0x80)
                chars[count++] = p;
        chars[count] = stop;
        const Py_ssize_t last = prefix_only ? 0 : count - shortest;
        for (Py_ssize_t c = 0; c <= last && !err; c++) {
            for (Py_ssize_t len = shortest; len <= longest && c + len <= count; len++) {
                const int32_t d = vocabulary_id(&v, text + chars[c], chars[c + len] - chars[c]);
                if (d < 0 || n >= cap) {
                    err = d < 0 ? -d : 2;
                    break;
                }
                out_word[n] = d, out_row[n] = (int32_t)i, out_place[n] = 0;
                n++;
            }
        }
    }
    END_NOGIL
    PyMem_RawFree(chars);
    split_release(&a);
    return split_finish(err, n, &v, "split_ngrams");
}

PyDoc_STRVAR(group_postings_doc,
             "group_postings(docs, tokens, places, token_ends, out_docs, out_freqs, out_places) "
             "-> postings: occurrences (each one's document, uint32, never decreasing, and "
             "token id, int32, below len(token_ends) - 1; `places`, uint32, empty or one per "
             "occurrence) grouped by token: out_docs / out_freqs (uint32, room for every "
             "occurrence) get each token's documents ascending and how often it holds the token, "
             "token after token; out_places (empty, or one per occurrence) the occurrences' places "
             "in that order; token_ends (int64, one more than the tokens) where each token's postings "
             "start and the last ends. A "
             "ValueError when the sizes disagree, a token id is out of range or the documents "
             "decrease.");

static PyObject *group_postings(PyObject *self, PyObject *args)
{
    Py_buffer docsb, tokb, placeb, endb, odb, ofb, opb;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*w*w*", &docsb, &tokb, &placeb, &endb, &odb, &ofb,
                          &opb))
        return NULL;
    Py_buffer *all[] = {&docsb, &tokb, &placeb, &endb, &odb, &ofb, &opb};
    PyObject *res = NULL;
    const Py_ssize_t n = docsb.len / 4, n_tok = endb.len / 8 - 1;
    const int places = placeb.len > 0;
    if (docsb.len % 4 || tokb.len != docsb.len || endb.len % 8 || n_tok < 0 ||
        odb.len != docsb.len || ofb.len != docsb.len ||
        (places && (placeb.len != docsb.len || opb.len != docsb.len)) ||
        !aligned(docsb.buf, 4) || !aligned(tokb.buf, 4) || !aligned(placeb.buf, 4) ||
        !aligned(endb.buf, 8) || !aligned(odb.buf, 4) || !aligned(ofb.buf, 4) ||
        !aligned(opb.buf, 4)) {
        PyErr_SetString(PyExc_ValueError, "group_postings: arrays of inconsistent sizes");
        release(7, all);
        return NULL;
    }
    const uint32_t *doc = docsb.buf, *place = placeb.buf;
    const int32_t *tok = tokb.buf;
    int64_t *ends = endb.buf;
    uint32_t *out_doc = odb.buf, *out_freq = ofb.buf, *out_place = opb.buf;
    int64_t *next = PyMem_RawCalloc((size_t)n_tok + 1, sizeof(int64_t));
    if (!next) {
        release(7, all);
        return PyErr_NoMemory();
    }
    int err = 0; /* 1: a token out of range, 2: documents decrease */
    Py_ssize_t postings = 0;
    BEGIN_NOGIL(n)
    for (Py_ssize_t i = 0; i < n && !err; i++) {
        if (tok[i] < 0 || tok[i] >= n_tok)
            err = 1;
        else if (i && doc[i] < doc[i - 1])
            err = 2;
        else
            next[tok[i] + 1]++;
    }
    if (!err) {
        /* occurrences of token t go to [next[t], ...): out_freq holds their documents */
        for (Py_ssize_t t = 0; t < n_tok; t++)
            next[t + 1] += next[t];
        for (Py_ssize_t i = 0; i < n; i++) {
            const int64_t at = next[tok[i]]++;
            out_freq[at] = doc[i];
            if (places)
                out_place[at] = place[i];
        }
        /* next[t] is now token t's end: runs of one document become (document, count) */
        int64_t start = 0;
        ends[0] = 0;
        for (Py_ssize_t t = 0; t < n_tok; t++) {
            const int64_t end = next[t];
            for (int64_t j = start; j < end;) {
                int64_t k = j + 1;
                while (k < end && out_freq[k] == out_freq[j])
                    k++;
                out_doc[postings] = out_freq[j];
                out_freq[postings] = (uint32_t)(k - j);
                postings++;
                j = k;
            }
            ends[t + 1] = postings;
            start = end;
        }
    }
    END_NOGIL
    PyMem_RawFree(next);
    if (err == 1)
        PyErr_SetString(PyExc_ValueError, "group_postings: a token id is out of range");
    else if (err == 2)
        PyErr_SetString(PyExc_ValueError, "group_postings: the documents decrease");
    else
        res = PyLong_FromSsize_t(postings);
    release(7, all);
    return res;
}

#define METHOD(name) {#name, name, METH_VARARGS, name##_doc}

static PyMethodDef methods[] = {
    METHOD(first_bad_range),
    METHOD(first_bad_position),
    METHOD(copy_ranges),
    METHOD(read_uint),
    METHOD(unpack_blocks),
    METHOD(inline_check),
    METHOD(inline_unpack),
    METHOD(outofline_check),
    METHOD(outofline_unpack),
    METHOD(check_runs),
    METHOD(rle_expand),
    METHOD(bss_join),
    METHOD(fsst_expand),
    METHOD(check_prefixes),
    METHOD(copy_bits),
    METHOD(variable_check),
    METHOD(variable_gather),
    METHOD(word_layout),
    METHOD(ivf_topk),
    METHOD(hnsw_topk),
    METHOD(hnsw_build),
    METHOD(take_items),
    METHOD(rebase_ends),
    METHOD(unpack4x),
    METHOD(pack4x),
    METHOD(postings_full),
    METHOD(bm25_gather),
    METHOD(bm25_idf),
    METHOD(rq_ex_codes),
    METHOD(leb128),
    METHOD(rq_rotate),
    METHOD(fullzip_walk),
    METHOD(xxh64_fixed),
    METHOD(sbbf_fill),
    METHOD(split_words),
    METHOD(split_ngrams),
    METHOD(group_postings),
    METHOD(minhash_sign),
    METHOD(minhash_bands),
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_kernels",
    "Compiled loops of the Lance 2.1/2.2 codecs and of IVF vector search (see the C source "
    "for the conventions).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__kernels(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    static const struct {
        const char *name;
        int value;
    } constants[] = {
        {"OK", OK},
        {"SHORT", SHORT},
        {"OUTSIDE", OUTSIDE},
        {"BAD_OFFSET", BAD_OFFSET},
        {"BYTES_OUTSIDE", BYTES_OUTSIDE},
        {"DECREASING", DECREASING},
        {"MISALIGNED", MISALIGNED},
        {"TOO_MANY", TOO_MANY},
        {"TOO_WIDE", TOO_WIDE},
        {"TOO_SHORT", TOO_SHORT},
        {"BAD_CODE", BAD_CODE},
        {"TRAILING_ESCAPE", TRAILING_ESCAPE},
        {"FULL", FULL},
        {"NULL_ENDS", NULL_ENDS},
        {"BLOCK", BLOCK},
        {"FSST_SLACK", FSST_SLACK},
        {"IVF_PQ", IVF_PQ},
        {"IVF_SQ", IVF_SQ},
        {"IVF_FLAT", IVF_FLAT},
        {"METRIC_L2", METRIC_L2},
        {"METRIC_COSINE", METRIC_COSINE},
        {"METRIC_DOT", METRIC_DOT},
        {"FZ_CONTROL", FZ_CONTROL},
        {"FZ_TOP", FZ_TOP},
        {"FZ_LENGTH", FZ_LENGTH},
        {"FZ_PAST", FZ_PAST},
        {"PB_HEADER", PB_HEADER},
        {"PB_IDS", PB_IDS},
        {"PB_SIZE", PB_SIZE},
    };
    for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++) {
        if (PyModule_AddIntConstant(m, constants[i].name, constants[i].value) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
