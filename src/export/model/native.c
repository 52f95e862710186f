/* The loops of an exported network's partitions that the engine runs natively
 * (`engine::native`), in the same float operations in the same order: quantize, dequantize, the
 * quantized add, max pooling and global average pooling on 8-bit integers (`s8` says whether
 * the bytes are signed). Compiled without floating-point contraction; `fmaf` where the engine
 * calls `mul_add`; rounding by the magic number as `native::round_clamped`. */

static inline float tl_f32(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline int32_t tl_value(uint8_t b, int s8) { return s8 ? (int32_t)(int8_t)b : (int32_t)b; }

/* round_half_even(clamp(x, lo, hi)) for integral |lo|, |hi| < 2^22; NaN gives lo. */
static inline int32_t tl_round_clamped(float x, float lo, float hi) {
    const float magic = 12582912.0f;
    float v = x >= lo ? x : lo;
    v = v <= hi ? v : hi;
    float s = v + magic;
    uint32_t bits;
    memcpy(&bits, &s, 4);
    return (int32_t)(bits - 0x4B400000u);
}

/* Builds of a loop for the levels' vector units, chosen by the selected level (`tl_level`):
 * AVX-512 (512-bit vectors), AVX2 with FMA, or the baseline. Each is the same C body, inlined
 * into a function compiled for its target, so only the vector width differs. */
#if defined(__clang__)
/* Clang takes the vector width as its own attribute and ignores a target string it does not
 * know whole, so the GCC spelling would build the AVX-512 loops for the baseline. */
#define TL_BUILD_AVX512 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"), min_vector_width(512), noinline))
#define TL_BUILD_AVX2 __attribute__((target("avx2,fma"), noinline))
#define TL_BUILD_BASE __attribute__((noinline))
#else
#define TL_BUILD_AVX512 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,prefer-vector-width=512"), noipa))
#define TL_BUILD_AVX2 __attribute__((target("avx2,fma"), noipa))
#define TL_BUILD_BASE __attribute__((noipa))
#endif
#define TL_INLINE static inline __attribute__((always_inline))

/* 0: AVX-512, 1: AVX2 with FMA, 2: the baseline. */
static int tl_build(void) {
    int level = tl_level();
    return level >= TL_LEVEL_AVX512_VNNI ? 0 : level >= TL_LEVEL_AVX2 ? 1 : 2;
}

/* q = saturate(round_half_even(x / scale) + zp) of `len` contiguous floats. */
TL_INLINE void tl_q_run(const float *src, int64_t len, float scale, int32_t zp, float lo, float hi, uint8_t *dst) {
    for (int64_t i = 0; i < len; i++) dst[i] = (uint8_t)(tl_round_clamped(src[i] / scale, lo, hi) + zp);
}

/* Pixels per block of the NHWC quantize, and channels per pass over a block. */
enum { TL_Q_BLOCK = 64, TL_Q_CHANNELS = 16 };

/* q = saturate(round_half_even(x / scale) + zp), from NCHW `[n, c, plane]` into NHWC when
 * `nhwc`, else element by element (`n · c · plane` of them). NHWC: a block of pixels of each
 * channel plane is quantized into a small buffer (contiguous, so the division and rounding
 * vectorize), then the block's channels are interleaved into the destination. */
TL_INLINE void tl_n_quantize_body(const float *src, int64_t n, int64_t c, int64_t plane, int nhwc, float scale,
                                  int32_t zp, int s8, uint8_t *dst) {
    float lo = (float)((s8 ? -128 : 0) - zp), hi = (float)((s8 ? 127 : 255) - zp);
    if (!nhwc) {
        tl_q_run(src, n * c * plane, scale, zp, lo, hi, dst);
        return;
    }
    uint8_t block[TL_Q_CHANNELS * TL_Q_BLOCK];
    for (int64_t b = 0; b < n; b++)
        for (int64_t p0 = 0; p0 < plane; p0 += TL_Q_BLOCK) {
            int64_t len = plane - p0 < TL_Q_BLOCK ? plane - p0 : TL_Q_BLOCK;
            uint8_t *out = dst + (b * plane + p0) * c;
            for (int64_t c0 = 0; c0 < c; c0 += TL_Q_CHANNELS) {
                int64_t cn = c - c0 < TL_Q_CHANNELS ? c - c0 : TL_Q_CHANNELS;
                for (int64_t ch = 0; ch < cn; ch++)
                    tl_q_run(src + (b * c + c0 + ch) * plane + p0, len, scale, zp, lo, hi, block + ch * TL_Q_BLOCK);
                if (c == 3 && len == TL_Q_BLOCK)
                    for (int64_t p = 0; p < TL_Q_BLOCK; p++) {
                        out[3 * p] = block[p];
                        out[3 * p + 1] = block[TL_Q_BLOCK + p];
                        out[3 * p + 2] = block[2 * TL_Q_BLOCK + p];
                    }
                else
                    for (int64_t p = 0; p < len; p++)
                        for (int64_t ch = 0; ch < cn; ch++) out[p * c + c0 + ch] = block[ch * TL_Q_BLOCK + p];
            }
        }
}

#define TL_QUANTIZE_ARGS                                                                                             \
    const float *src, int64_t n, int64_t c, int64_t plane, int nhwc, float scale, int32_t zp, int s8, uint8_t *dst
TL_BUILD_AVX512 static void tl_n_quantize_avx512(TL_QUANTIZE_ARGS) {
    tl_n_quantize_body(src, n, c, plane, nhwc, scale, zp, s8, dst);
}
TL_BUILD_AVX2 static void tl_n_quantize_avx2(TL_QUANTIZE_ARGS) {
    tl_n_quantize_body(src, n, c, plane, nhwc, scale, zp, s8, dst);
}
TL_BUILD_BASE static void tl_n_quantize_base(TL_QUANTIZE_ARGS) {
    tl_n_quantize_body(src, n, c, plane, nhwc, scale, zp, s8, dst);
}
static void tl_n_quantize(TL_QUANTIZE_ARGS) {
    switch (tl_build()) {
        case 0: tl_n_quantize_avx512(src, n, c, plane, nhwc, scale, zp, s8, dst); break;
        case 1: tl_n_quantize_avx2(src, n, c, plane, nhwc, scale, zp, s8, dst); break;
        default: tl_n_quantize_base(src, n, c, plane, nhwc, scale, zp, s8, dst);
    }
}

/* x = f32(q − zp) · scale, from NHWC `[n, plane, c]` when `nhwc` into NCHW. */
static void tl_n_dequantize(const uint8_t *src, int64_t n, int64_t c, int64_t plane, int nhwc, float scale, int32_t zp,
                            int s8, float *dst) {
    if (!nhwc) {
        for (int64_t i = 0; i < n * c * plane; i++) dst[i] = (float)(tl_value(src[i], s8) - zp) * scale;
        return;
    }
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++) {
            float *to = dst + (b * c + ch) * plane;
            for (int64_t p = 0; p < plane; p++) to[p] = (float)(tl_value(src[(b * plane + p) * c + ch], s8) - zp) * scale;
        }
}

/* fma(a, b, c) correctly rounded without an FMA unit: the product is exact in double, the sum
 * is rounded to odd (TwoSum gives its error), which rounds correctly to float. */
static float tl_fmaf_soft(float a, float b, float c) {
    double p = (double)a * (double)b, s = p + (double)c;
    double bb = s - p, err = (p - (s - bb)) + ((double)c - bb);
    if (err != 0) {
        uint64_t u;
        memcpy(&u, &s, 8);
        if (!(u & 1)) {
            u += ((err > 0) == (s > 0)) ? 1 : (uint64_t)-1;
            memcpy(&s, &u, 8);
        }
    }
    return (float)s;
}

#define TL_ADD_LOOP(FMA)                                                                                          \
    for (int64_t i = 0; i < count; i++) {                                                                         \
        float t = FMA((float)tl_value(b[i], s8), rb, fixed);                                                      \
        float v = FMA((float)tl_value(a[i], s8), ra, t);                                                          \
        c[i] = (uint8_t)tl_round_clamped(v, lo, hi);                                                              \
    }

#define TL_ADD_ARGS                                                                                                  \
    const uint8_t *a, const uint8_t *b, int64_t count, float ra, float rb, float fixed, float lo, float hi, int s8, \
        uint8_t *c

/* One loop per element type, so that each vectorizes. */
TL_BUILD_AVX512 static void tl_n_add_avx512(TL_ADD_ARGS) {
    if (s8) {
        TL_ADD_LOOP(__builtin_fmaf)
    } else {
        TL_ADD_LOOP(__builtin_fmaf)
    }
}

TL_BUILD_AVX2 static void tl_n_add_fma(TL_ADD_ARGS) {
    if (s8) {
        TL_ADD_LOOP(__builtin_fmaf)
    } else {
        TL_ADD_LOOP(__builtin_fmaf)
    }
}

static void tl_n_add_soft(TL_ADD_ARGS) { TL_ADD_LOOP(tl_fmaf_soft) }

/* c = clamp(fma(a, ra, fma(b, rb, fixed))) rounded (`native::add`); `lo`, `hi` the clamp. */
static void tl_n_add_serial(const uint8_t *a, const uint8_t *b, int64_t count, float ra, float rb, float fixed,
                            int32_t lo, int32_t hi, int s8, uint8_t *c) {
    switch (tl_build()) {
        case 0: tl_n_add_avx512(a, b, count, ra, rb, fixed, (float)lo, (float)hi, s8, c); break;
        case 1: tl_n_add_fma(a, b, count, ra, rb, fixed, (float)lo, (float)hi, s8, c); break;
        default: tl_n_add_soft(a, b, count, ra, rb, fixed, (float)lo, (float)hi, s8, c);
    }
}

/* Native loops smaller than this many bytes of output run on the calling thread alone; larger
 * ones in pieces on the pool (`tensorlift_parallel_for`), as the engine splits them. */
enum { TL_SPLIT_BYTES = 32768, TL_ADD_PIECE = 8192 };

typedef struct {
    const uint8_t *a, *b;
    int64_t count;
    float ra, rb, fixed;
    int32_t lo, hi;
    int s8;
    uint8_t *c;
} tl_add_job;

static int32_t tl_add_piece(const void *closure, int64_t i) {
    const tl_add_job *j = closure;
    int64_t first = i * TL_ADD_PIECE;
    int64_t len = j->count - first < TL_ADD_PIECE ? j->count - first : TL_ADD_PIECE;
    tl_n_add_serial(j->a + first, j->b + first, len, j->ra, j->rb, j->fixed, j->lo, j->hi, j->s8, j->c + first);
    return 0;
}

/* `tl_n_add_serial`, in pieces on the pool where the output is large. Each element is computed
 * by itself, so the pieces give the same bytes. */
static void tl_n_add(const uint8_t *a, const uint8_t *b, int64_t count, float ra, float rb, float fixed, int32_t lo,
                     int32_t hi, int s8, uint8_t *c) {
    if (count < TL_SPLIT_BYTES || tl_pool_threads() < 2) {
        tl_n_add_serial(a, b, count, ra, rb, fixed, lo, hi, s8, c);
        return;
    }
    tl_add_job job = {a, b, count, ra, rb, fixed, lo, hi, s8, c};
    tensorlift_parallel_for(tl_add_piece, &job, (count + TL_ADD_PIECE - 1) / TL_ADD_PIECE);
}

/* The larger byte, as u8 or as i8. */
#define TL_MAX_U8(x, y) ((uint8_t)((x) > (y) ? (x) : (y)))
#define TL_MAX_S8(x, y) ((uint8_t)((int8_t)(x) > (int8_t)(y) ? (x) : (y)))

/* One output row of max pooling in two passes (`native::max_pool`): the maximum over the
 * window's valid source rows, whole rows of `w · c` contiguous bytes at once, into `rows`,
 * then over the window's valid columns of that, pixel by pixel. Bytes compared by `MAX`. */
#define TL_POOL_ROW(MAX)                                                                                          \
    {                                                                                                             \
        int first = 1;                                                                                            \
        for (int64_t ky = 0; ky < win[0]; ky++) {                                                                 \
            int64_t y = oy * win[2] + ky * win[6] - win[4];                                                       \
            if (y < 0 || y >= h) continue;                                                                        \
            const uint8_t *row = image + y * w * c;                                                               \
            if (first)                                                                                            \
                memcpy(rows, row, (size_t)(w * c));                                                               \
            else                                                                                                  \
                for (int64_t i = 0; i < w * c; i++) rows[i] = MAX(rows[i], row[i]);                               \
            first = 0;                                                                                            \
        }                                                                                                         \
        if (first) memset(rows, min, (size_t)(w * c));                                                           \
        for (int64_t ox = 0; ox < ow; ox++) {                                                                     \
            uint8_t *px = line + ox * c;                                                                          \
            int first_x = 1;                                                                                      \
            for (int64_t kx = 0; kx < win[1]; kx++) {                                                             \
                int64_t x = ox * win[3] + kx * win[7] - win[5];                                                   \
                if (x < 0 || x >= w) continue;                                                                    \
                const uint8_t *from = rows + x * c;                                                               \
                if (first_x)                                                                                      \
                    memcpy(px, from, (size_t)c);                                                                  \
                else                                                                                              \
                    for (int64_t ch = 0; ch < c; ch++) px[ch] = MAX(px[ch], from[ch]);                            \
                first_x = 0;                                                                                      \
            }                                                                                                     \
            if (first_x) memset(px, min, (size_t)c);                                                              \
        }                                                                                                         \
    }

/* Max pooling NHWC `[n, h, w, c]` into `[n, oh, ow, c]`, output lines `first..end` of the
 * `n · oh`; positions in the padding never win (a window entirely in the padding stores the
 * type's minimum). `rows`: `w · c` bytes. */
TL_INLINE void tl_n_max_pool_body(const uint8_t *src, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                                  const int64_t win[8], int s8, int64_t first, int64_t end, uint8_t *rows,
                                  uint8_t *dst) {
    int min = s8 ? 0x80 : 0;
    for (int64_t l = first; l < end; l++) {
        int64_t b = l / oh, oy = l % oh;
        const uint8_t *image = src + b * h * w * c;
        uint8_t *line = dst + l * ow * c;
        if (s8)
            TL_POOL_ROW(TL_MAX_S8)
        else
            TL_POOL_ROW(TL_MAX_U8)
    }
}

#define TL_POOL_ARGS                                                                                     \
    const uint8_t *src, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow, const int64_t win[8], int s8, \
        int64_t first, int64_t end, uint8_t *rows, uint8_t *dst
TL_BUILD_AVX512 static void tl_n_max_pool_avx512(TL_POOL_ARGS) {
    tl_n_max_pool_body(src, h, w, c, oh, ow, win, s8, first, end, rows, dst);
}
TL_BUILD_AVX2 static void tl_n_max_pool_avx2(TL_POOL_ARGS) {
    tl_n_max_pool_body(src, h, w, c, oh, ow, win, s8, first, end, rows, dst);
}
TL_BUILD_BASE static void tl_n_max_pool_base(TL_POOL_ARGS) {
    tl_n_max_pool_body(src, h, w, c, oh, ow, win, s8, first, end, rows, dst);
}

/* Max pooling one output at a time, every window position (no buffer), output lines
 * `first..end`: where the row buffer cannot be allocated. */
static void tl_n_max_pool_plain(const uint8_t *src, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                                const int64_t win[8], int s8, int64_t first, int64_t end, uint8_t *dst) {
    for (int64_t l = first; l < end; l++) {
        int64_t b = l / oh, oy = l % oh;
        for (int64_t ox = 0; ox < ow; ox++)
            for (int64_t ch = 0; ch < c; ch++) {
                int32_t best = s8 ? -128 : 0;
                for (int64_t ky = 0; ky < win[0]; ky++) {
                    int64_t y = oy * win[2] + ky * win[6] - win[4];
                    if (y < 0 || y >= h) continue;
                    for (int64_t kx = 0; kx < win[1]; kx++) {
                        int64_t x = ox * win[3] + kx * win[7] - win[5];
                        if (x < 0 || x >= w) continue;
                        int32_t v = tl_value(src[((b * h + y) * w + x) * c + ch], s8);
                        best = v > best ? v : best;
                    }
                }
                dst[((b * oh + oy) * ow + ox) * c + ch] = (uint8_t)best;
            }
    }
}

/* `tl_n_max_pool_body` over output lines `first..end`, with its row buffer on the stack where it
 * fits, else on the heap (else `tl_n_max_pool_plain`). */
enum { TL_POOL_STACK = 16384 };
static void tl_n_max_pool_lines(const uint8_t *src, int64_t h, int64_t w, int64_t c, int64_t oh,
                                int64_t ow, const int64_t win[8], int s8, int64_t first, int64_t end, uint8_t *dst) {
    uint8_t stack[TL_POOL_STACK];
    size_t bytes = (size_t)(w * c);
    uint8_t *rows = bytes <= sizeof stack ? stack : malloc(bytes);
    if (!rows) {
        tl_n_max_pool_plain(src, h, w, c, oh, ow, win, s8, first, end, dst);
        return;
    }
    switch (tl_build()) {
        case 0: tl_n_max_pool_avx512(src, h, w, c, oh, ow, win, s8, first, end, rows, dst); break;
        case 1: tl_n_max_pool_avx2(src, h, w, c, oh, ow, win, s8, first, end, rows, dst); break;
        default: tl_n_max_pool_base(src, h, w, c, oh, ow, win, s8, first, end, rows, dst);
    }
    if (rows != stack) free(rows);
}

typedef struct {
    const uint8_t *src;
    int64_t n, h, w, c, oh, ow, lines;
    const int64_t *win;
    int s8;
    uint8_t *dst;
} tl_pool_job;

static int32_t tl_pool_piece(const void *closure, int64_t i) {
    const tl_pool_job *j = closure;
    int64_t end = (i + 1) * j->lines < j->n * j->oh ? (i + 1) * j->lines : j->n * j->oh;
    tl_n_max_pool_lines(j->src, j->h, j->w, j->c, j->oh, j->ow, j->win, j->s8, i * j->lines, end, j->dst);
    return 0;
}

/* Max pooling (`tl_n_max_pool_body`), in pieces of output lines on the pool where the output is
 * large; each output byte depends only on the source, so the pieces give the same bytes. */
static void tl_n_max_pool(const uint8_t *src, int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                          const int64_t win[8], int s8, uint8_t *dst) {
    int64_t line = ow * c, all = n * oh;
    if (line <= 0 || all * line < TL_SPLIT_BYTES || tl_pool_threads() < 2) {
        tl_n_max_pool_lines(src, h, w, c, oh, ow, win, s8, 0, all, dst);
        return;
    }
    int64_t lines = TL_ADD_PIECE / line > 0 ? TL_ADD_PIECE / line : 1;
    tl_pool_job job = {src, n, h, w, c, oh, ow, lines, win, s8, dst};
    tensorlift_parallel_for(tl_pool_piece, &job, (all + lines - 1) / lines);
}

/* Global average pooling NHWC `[n, hw, c]` into `[n, c]` (`native::global_avg_pool`): the sum
 * exact in i32, less `bias` (= zp_x · hw), times `scale`, rounded within `lo..hi`, plus `zp`. */
static void tl_n_global_avg_pool(const uint8_t *src, int64_t n, int64_t hw, int64_t c, float scale, int32_t bias,
                                 int32_t lo, int32_t hi, int32_t zp, int s8, uint8_t *dst) {
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++) {
            uint32_t sum = 0;
            for (int64_t p = 0; p < hw; p++) sum += (uint32_t)tl_value(src[(b * hw + p) * c + ch], s8);
            int32_t v = tl_round_clamped((float)(int32_t)(sum - (uint32_t)bias) * scale, (float)lo, (float)hi);
            dst[b * c + ch] = (uint8_t)(v + zp);
        }
}

/* Bytes between the caller's logical NCHW `[n, c, plane]` and the engine's NHWC `[n, plane, c]`
 * (a graph input or output of 8-bit integers): `to_nhwc` says which way. */
static void tl_n_permute(const uint8_t *src, int64_t n, int64_t c, int64_t plane, int to_nhwc, uint8_t *dst) {
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < plane; p++) {
                int64_t nchw = (b * c + ch) * plane + p, nhwc = (b * plane + p) * c + ch;
                if (to_nhwc)
                    dst[nhwc] = src[nchw];
                else
                    dst[nchw] = src[nhwc];
            }
}

/* The calling thread's buffers of the network's intermediate tensors (`TL_NET_ARENA` bytes),
 * allocated on its first call and kept until it exits: a call allocates nothing after a
 * thread's first, and threads calling at once each have their own. NULL if out of memory. */
static pthread_key_t tl_net_key;
static pthread_once_t tl_net_once = PTHREAD_ONCE_INIT;

static void tl_net_key_init(void) { pthread_key_create(&tl_net_key, free); }

static uint8_t *tl_net_arena(void) {
    static _Thread_local uint8_t *arena;
    if (!arena) {
        pthread_once(&tl_net_once, tl_net_key_init);
        arena = aligned_alloc(64, (TL_NET_ARENA + 63) / 64 * 64);
        if (arena) pthread_setspecific(tl_net_key, arena);
    }
    return arena;
}
