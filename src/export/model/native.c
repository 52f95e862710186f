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

/* q = saturate(round_half_even(x / scale) + zp), from NCHW `[n, c, plane]` into NHWC when
 * `nhwc`, else element by element (`n · c · plane` of them). */
static void tl_n_quantize(const float *src, int64_t n, int64_t c, int64_t plane, int nhwc, float scale, int32_t zp,
                          int s8, uint8_t *dst) {
    float lo = (float)((s8 ? -128 : 0) - zp), hi = (float)((s8 ? 127 : 255) - zp);
    if (!nhwc) {
        for (int64_t i = 0; i < n * c * plane; i++) dst[i] = (uint8_t)(tl_round_clamped(src[i] / scale, lo, hi) + zp);
        return;
    }
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++) {
            const float *from = src + (b * c + ch) * plane;
            for (int64_t p = 0; p < plane; p++)
                dst[(b * plane + p) * c + ch] = (uint8_t)(tl_round_clamped(from[p] / scale, lo, hi) + zp);
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

/* `noipa`: a constant-propagated clone of this function is not vectorized (GCC 12), the loop
 * then runs an element at a time. */
__attribute__((target("avx2,fma"), noipa)) static void tl_n_add_fma(const uint8_t *a, const uint8_t *b,
                                                                     int64_t count, float ra, float rb, float fixed,
                                                                     float lo, float hi, int s8, uint8_t *c) {
    if (s8) {
        TL_ADD_LOOP(__builtin_fmaf)
    } else {
        TL_ADD_LOOP(__builtin_fmaf)
    }
}

static void tl_n_add_soft(const uint8_t *a, const uint8_t *b, int64_t count, float ra, float rb, float fixed, float lo,
                          float hi, int s8, uint8_t *c) {
    TL_ADD_LOOP(tl_fmaf_soft)
}

/* c = clamp(fma(a, ra, fma(b, rb, fixed))) rounded (`native::add`); `lo`, `hi` the clamp. */
static void tl_n_add(const uint8_t *a, const uint8_t *b, int64_t count, float ra, float rb, float fixed, int32_t lo,
                     int32_t hi, int s8, uint8_t *c) {
    if (tl_level() >= TL_LEVEL_AVX2)
        tl_n_add_fma(a, b, count, ra, rb, fixed, (float)lo, (float)hi, s8, c);
    else
        tl_n_add_soft(a, b, count, ra, rb, fixed, (float)lo, (float)hi, s8, c);
}

/* Max pooling NHWC `[n, h, w, c]` into `[n, oh, ow, c]`; positions in the padding never win.
 * Channels innermost (in chunks of `TL_POOL_CHUNK`), so that the loop over them vectorizes. */
enum { TL_POOL_CHUNK = 512 };
static void tl_n_max_pool(const uint8_t *src, int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                          const int64_t win[8], int s8, uint8_t *dst) {
    int32_t lo = s8 ? -128 : 0, hi = s8 ? 127 : 255;
    int32_t best[TL_POOL_CHUNK];
    for (int64_t b = 0; b < n; b++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++)
                for (int64_t c0 = 0; c0 < c; c0 += TL_POOL_CHUNK) {
                    int64_t cn = c - c0 < TL_POOL_CHUNK ? c - c0 : TL_POOL_CHUNK;
                    for (int64_t ch = 0; ch < cn; ch++) best[ch] = lo;
                    for (int64_t ky = 0; ky < win[0]; ky++) {
                        int64_t y = oy * win[2] + ky * win[6] - win[4];
                        if (y < 0 || y >= h) continue;
                        for (int64_t kx = 0; kx < win[1]; kx++) {
                            int64_t x = ox * win[3] + kx * win[7] - win[5];
                            if (x < 0 || x >= w) continue;
                            const uint8_t *row = src + ((b * h + y) * w + x) * c + c0;
                            if (s8)
                                for (int64_t ch = 0; ch < cn; ch++) {
                                    int32_t v = (int8_t)row[ch];
                                    best[ch] = v > best[ch] ? v : best[ch];
                                }
                            else
                                for (int64_t ch = 0; ch < cn; ch++) {
                                    int32_t v = row[ch];
                                    best[ch] = v > best[ch] ? v : best[ch];
                                }
                        }
                    }
                    uint8_t *out = dst + ((b * oh + oy) * ow + ox) * c + c0;
                    for (int64_t ch = 0; ch < cn; ch++) out[ch] = (uint8_t)(best[ch] < hi ? best[ch] : hi);
                }
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
