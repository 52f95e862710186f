/* The runtime of an exported tensorlift library, compiled into every library.
 *
 * It provides what generated code imports (`abi::HostFn`: the parallel-for, scratch memory,
 * half-precision conversions), CPU-level detection, the per-thread last error, and
 * `tl_call`, which checks DLPack arguments before any generated code runs. Every symbol here is
 * hidden: the library exports only the `<NAME>_`-prefixed functions its generated part defines.
 * Needs libc and libpthread only. */

#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TL_HIDDEN __attribute__((visibility("hidden")))

/* ---- errors ------------------------------------------------------------------------------ */

static _Thread_local char tl_error[1024];

TL_HIDDEN const char *tl_last_error(void) { return tl_error; }

__attribute__((format(printf, 2, 3))) static int32_t tl_fail(int32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_error, sizeof tl_error, fmt, ap);
    va_end(ap);
    return code;
}

/* ---- CPU levels (the same tests as `IsaLevel::is_supported`) ------------------------------- */

static uint64_t tl_xgetbv(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Whether this CPU (and OS) can run code of `level`. */
static int tl_level_supported(int level) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned c1 = c;
    int sse42 = (c1 >> 9 & 1) && (c1 >> 19 & 1) && (c1 >> 20 & 1) && (c1 >> 23 & 1);
    if (level == TL_LEVEL_SCALAR) return sse42;
    int osxsave = c1 >> 27 & 1, avx = c1 >> 28 & 1, fma = c1 >> 12 & 1;
    uint64_t xcr0 = osxsave ? tl_xgetbv() : 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    unsigned b7 = b, c7 = c, d7 = d;
    unsigned lzcnt = 0;
    if (__get_cpuid(0x80000001u, &a, &b, &c, &d)) lzcnt = c >> 5 & 1;
    int avx2 = sse42 && avx && (xcr0 & 6) == 6 && (b7 >> 5 & 1) && fma && (b7 >> 3 & 1) && (b7 >> 8 & 1) && lzcnt;
    if (level == TL_LEVEL_AVX2) return avx2;
    if (level == TL_LEVEL_AVX_VNNI) {
        if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
        return avx2 && (a >> 4 & 1);
    }
    int avx512 = avx2 && (xcr0 & 0xe6) == 0xe6 && (b7 >> 16 & 1) && (b7 >> 17 & 1) && (b7 >> 30 & 1)
                 && (b7 >> 31 & 1) && (c7 >> 11 & 1);
    if (level == TL_LEVEL_AVX512_VNNI) return avx512;
    /* AMX-TILE and AMX-INT8, tile state in XCR0 (bits 17-18), and the process's permission for
     * tile data (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), requested before the level is chosen. */
    if (level == TL_LEVEL_AMX)
        return avx512 && (d7 >> 24 & 1) && (d7 >> 25 & 1) && (xcr0 & 0x60000) == 0x60000
               && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    return 0;
}

static const char *const tl_level_names[TL_LEVELS] = {"scalar", "avx2", "avx-vnni", "avx512-vnni", "amx"};

/* The level calls run at: the best compiled level this CPU supports, or TENSORLIFT_ISA's
 * (which must be compiled and supported). Chosen once; -1 with `tl_select_error` set if none. */
static int tl_selected = -1;
static char tl_select_error[512];
static pthread_once_t tl_select_once = PTHREAD_ONCE_INIT;

static void tl_select_level(void) {
    const char *forced = getenv("TENSORLIFT_ISA");
    if (forced && *forced) {
        int level = -1;
        for (int l = 0; l < TL_LEVELS; l++)
            if (strcmp(forced, tl_level_names[l]) == 0) level = l;
        if (level < 0) {
            snprintf(tl_select_error, sizeof tl_select_error,
                     "TENSORLIFT_ISA: expected one of scalar|avx2|avx-vnni|avx512-vnni|amx, found \"%s\"", forced);
        } else if (!tl_compiled[level]) {
            snprintf(tl_select_error, sizeof tl_select_error,
                     "TENSORLIFT_ISA=%s: the library was not compiled for this level (compiled: %s)", forced,
                     TL_COMPILED_NAMES);
        } else if (!tl_level_supported(level)) {
            snprintf(tl_select_error, sizeof tl_select_error, "TENSORLIFT_ISA=%s: this CPU does not support it",
                     forced);
        } else {
            tl_selected = level;
        }
        return;
    }
    for (int l = TL_LEVELS - 1; l >= 0; l--) {
        if (tl_compiled[l] && tl_level_supported(l)) {
            tl_selected = l;
            return;
        }
    }
    snprintf(tl_select_error, sizeof tl_select_error,
             "this CPU supports none of the levels the library was compiled for (%s)", TL_COMPILED_NAMES);
}

TL_HIDDEN int tl_level(void) {
    pthread_once(&tl_select_once, tl_select_level);
    return tl_selected;
}

/* AMX kernels keep their tile configuration between calls (`kernels::amx`): where a thread's
 * work ends, its tile state returns to the initial one (`tilerelease`, as bytes). */
static void tl_release_tiles(void) {
    if (tl_selected == TL_LEVEL_AMX) __asm__ volatile(".byte 0xc4, 0xe2, 0x78, 0x49, 0xc0");
}

TL_HIDDEN const char *tl_level_name(void) {
    int level = tl_level();
    return level < 0 ? "none" : tl_level_names[level];
}

/* ---- host functions generated code imports -------------------------------------------------- */

typedef int32_t (*tl_body)(const void *closure, int64_t index);

/* A pool of worker threads, started on the first parallel loop. One loop runs on it at a time;
 * a loop that finds it busy (another caller, or a loop nested in one) runs on its own thread.
 * Between loops, workers spin for a while before they sleep, and so does the caller waiting
 * for them: a layer runs several parallel loops in a row, and waking a sleeping thread costs a
 * system call and a reschedule each time, far more than a short spin. Each thread owns an
 * equal, contiguous share of a loop's iterations and runs it front to back; a thread out of
 * iterations takes chunks from the back of the others' shares (`tl_drain`). The caller waits
 * only for workers that joined the loop before it ran out of iterations. A worker woken on the
 * caller's CPU moves off it (`tl_avoid_caller`). The same scheme as the JIT's pool
 * (`runtime::host::Pool`). */
enum { TL_SPINS = 4096 };
static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    int workers;
    atomic_uint_fast64_t generation; /* a new loop was published (release) */
    atomic_int open;                 /* the current loop takes workers (the caller closes it) */
    atomic_int running;              /* workers inside (or joining) the current loop */
    atomic_int caller_cpu;           /* the CPU the caller published the loop from (-1: unknown) */
    tl_body body;
    const void *closure;
    atomic_int status;
} tl_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};
enum { TL_MAX_THREADS = 256 };
/* One thread's share of the current loop (the caller's first, then worker i's at i): the
 * iterations not taken, `front..back`, as back << 32 | front, on a cache line of its own. */
static struct {
    _Alignas(64) atomic_uint_fast64_t range;
} tl_shares[TL_MAX_THREADS];
static pthread_mutex_t tl_pool_busy = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t tl_pool_once = PTHREAD_ONCE_INIT;

/* Takes the next chunk of share `t`, 1/TL_GUIDED of what is left (at least one iteration),
 * from its front (its owner) or from its back (another thread); 0 when none are left. */
enum { TL_GUIDED = 2 };
static int tl_take(int t, int from_front, int64_t *first, int64_t *end) {
    uint64_t range = atomic_load_explicit(&tl_shares[t].range, memory_order_relaxed);
    for (;;) {
        uint64_t front = range & 0xffffffffu, back = range >> 32;
        if (front >= back) return 0;
        uint64_t chunk = (back - front) / TL_GUIDED;
        if (chunk < 1) chunk = 1;
        uint64_t lo, hi, next;
        if (from_front) {
            lo = front;
            hi = front + chunk;
            next = (back << 32) | hi;
        } else {
            hi = back;
            lo = back - chunk;
            next = (lo << 32) | front;
        }
        if (atomic_compare_exchange_weak_explicit(&tl_shares[t].range, &range, next, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *first = (int64_t)lo;
            *end = (int64_t)hi;
            return 1;
        }
    }
}

/* Runs iterations of the current loop until none are left or one failed: thread `me`'s own
 * share front to back in guided chunks (few atomic operations), then chunks from the back of
 * the other threads' shares, which shrink to single iterations where two threads meet. A
 * thread's iterations are thus one contiguous run, the same part of every loop over the same
 * rows (a layer mostly reads what the same core wrote in the layer before), and a kernel's
 * prefetch of the next panel of weights, which runs forward, serves its next chunk. */
static void tl_drain(tl_body body, const void *closure, int me) {
    int threads = tl_pool.workers + 1;
    int64_t first, end;
    for (int k = 0; k < threads; k++) {
        int t = (me + k) % threads;
        while (atomic_load_explicit(&tl_pool.status, memory_order_relaxed) == 0 && tl_take(t, k == 0, &first, &end)) {
            for (int64_t i = first; i < end; i++) {
                int32_t s = body(closure, i);
                if (s != 0) {
                    int expected = 0;
                    atomic_compare_exchange_strong(&tl_pool.status, &expected, s);
                    return;
                }
            }
        }
    }
}

/* A worker woken onto the caller's CPU would share it with the caller (and spin on it between
 * loops): it moves off it, restricting itself to the CPUs it started with but the caller's. */
static void tl_avoid_caller(const cpu_set_t *allowed) {
    int caller = atomic_load_explicit(&tl_pool.caller_cpu, memory_order_relaxed);
    if (caller < 0 || caller >= CPU_SETSIZE || sched_getcpu() != caller || !CPU_ISSET(caller, allowed)) return;
    cpu_set_t set = *allowed;
    CPU_CLR(caller, &set);
    if (CPU_COUNT(&set) > 0) sched_setaffinity(0, sizeof set, &set);
}

static void *tl_worker(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t seen = 0;
    cpu_set_t allowed;
    int placed = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
    for (;;) {
        for (int spin = 0; spin < TL_SPINS && atomic_load_explicit(&tl_pool.generation, memory_order_acquire) == seen;
             spin++)
            _mm_pause();
        if (atomic_load_explicit(&tl_pool.generation, memory_order_acquire) == seen) {
            pthread_mutex_lock(&tl_pool.lock);
            while (atomic_load(&tl_pool.generation) == seen) pthread_cond_wait(&tl_pool.wake, &tl_pool.lock);
            pthread_mutex_unlock(&tl_pool.lock);
        }
        seen = atomic_load_explicit(&tl_pool.generation, memory_order_acquire);
        /* Join, then look whether the loop is still open: the caller closes it before it waits
         * for `running` (both sequentially consistent, so one sees the other). */
        atomic_fetch_add(&tl_pool.running, 1);
        if (atomic_load(&tl_pool.open)) {
            if (placed) tl_avoid_caller(&allowed);
            tl_drain(tl_pool.body, tl_pool.closure, me);
            tl_release_tiles();
        }
        if (atomic_fetch_sub(&tl_pool.running, 1) == 1) {
            pthread_mutex_lock(&tl_pool.lock);
            pthread_cond_signal(&tl_pool.idle);
            pthread_mutex_unlock(&tl_pool.lock);
        }
    }
    return NULL;
}

/* Threads: TENSORLIFT_NUM_THREADS, else the CPUs this process may run on. */
static void tl_pool_start(void) {
    long threads = 0;
    const char *env = getenv("TENSORLIFT_NUM_THREADS");
    if (env && *env) threads = strtol(env, NULL, 10);
    if (threads <= 0) {
        cpu_set_t set;
        threads = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    }
    if (threads < 1) threads = 1;
    if (threads > TL_MAX_THREADS) threads = TL_MAX_THREADS;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (long t = 1; t < threads; t++) {
        pthread_t thread;
        if (pthread_create(&thread, &attr, tl_worker, (void *)(intptr_t)t) != 0) break;
        tl_pool.workers++;
    }
    pthread_attr_destroy(&attr);
}

/* The pool's size: its workers and the caller (starting it if it has not started). */
TL_HIDDEN int64_t tl_pool_threads(void) {
    pthread_once(&tl_pool_once, tl_pool_start);
    return (int64_t)tl_pool.workers + 1;
}

TL_HIDDEN int32_t tensorlift_parallel_for(tl_body body, const void *closure, int64_t n) {
    if (n <= 0) return 0;
    pthread_once(&tl_pool_once, tl_pool_start);
    /* Loops of 2^32 iterations or more (none in practice) run serially: a share holds 32-bit
     * bounds. */
    if (n == 1 || n > (int64_t)0xffffffff || tl_pool.workers == 0 || pthread_mutex_trylock(&tl_pool_busy) != 0) {
        for (int64_t i = 0; i < n; i++) {
            int32_t s = body(closure, i);
            if (s != 0) return s;
        }
        return 0;
    }
    pthread_mutex_lock(&tl_pool.lock);
    tl_pool.body = body;
    tl_pool.closure = closure;
    uint64_t threads = (uint64_t)tl_pool.workers + 1;
    for (uint64_t t = 0; t < threads; t++) {
        uint64_t front = t * (uint64_t)n / threads, back = (t + 1) * (uint64_t)n / threads;
        atomic_store_explicit(&tl_shares[t].range, back << 32 | front, memory_order_relaxed);
    }
    atomic_store(&tl_pool.status, 0);
    atomic_store_explicit(&tl_pool.caller_cpu, sched_getcpu(), memory_order_relaxed);
    atomic_store(&tl_pool.open, 1);
    atomic_fetch_add_explicit(&tl_pool.generation, 1, memory_order_release);
    pthread_cond_broadcast(&tl_pool.wake);
    pthread_mutex_unlock(&tl_pool.lock);
    tl_drain(body, closure, 0);
    atomic_store(&tl_pool.open, 0);
    for (int spin = 0; spin < TL_SPINS && atomic_load(&tl_pool.running) > 0; spin++) _mm_pause();
    if (atomic_load(&tl_pool.running) > 0) {
        pthread_mutex_lock(&tl_pool.lock);
        while (atomic_load(&tl_pool.running) > 0) pthread_cond_wait(&tl_pool.idle, &tl_pool.lock);
        pthread_mutex_unlock(&tl_pool.lock);
    }
    int32_t status = atomic_load(&tl_pool.status);
    pthread_mutex_unlock(&tl_pool_busy);
    return status;
}

/* Scratch memory. Each thread keeps freed blocks (up to `TL_CACHED_BLOCKS`, `TL_CACHED_BYTES`
 * together) for the next call of the same size: a network's layers' scratch buffers (padded
 * sources of hundreds of KiB) would otherwise go back to the OS on every call and come back
 * page-faulting. The same limits as the engine's (`runtime::host`). */
enum { TL_CACHED_BLOCKS = 64 };
#define TL_CACHED_BYTES ((size_t)64 << 20)
typedef struct {
    void *ptr[TL_CACHED_BLOCKS];
    size_t size[TL_CACHED_BLOCKS];
    size_t held;
} tl_block_cache;
static _Thread_local tl_block_cache tl_blocks;
static pthread_key_t tl_blocks_key;
static pthread_once_t tl_blocks_once = PTHREAD_ONCE_INIT;

/* At thread exit, the thread's cached blocks are freed. */
static void tl_blocks_release(void *cache) {
    tl_block_cache *c = cache;
    for (int i = 0; i < TL_CACHED_BLOCKS; i++) free(c->ptr[i]);
}

static void tl_blocks_init(void) { pthread_key_create(&tl_blocks_key, tl_blocks_release); }

static size_t tl_block_size(int64_t bytes) { return bytes <= 0 ? 64 : (((size_t)bytes + 63) & ~(size_t)63); }

TL_HIDDEN void *tensorlift_alloc(int64_t bytes) {
    if (bytes < 0) return NULL;
    size_t size = tl_block_size(bytes);
    for (int i = 0; i < TL_CACHED_BLOCKS; i++) {
        if (tl_blocks.ptr[i] && tl_blocks.size[i] == size) {
            void *p = tl_blocks.ptr[i];
            tl_blocks.ptr[i] = NULL;
            tl_blocks.held -= size;
            return p;
        }
    }
    return aligned_alloc(64, size);
}

TL_HIDDEN void tensorlift_free(void *ptr, int64_t bytes) {
    if (!ptr) return;
    pthread_once(&tl_blocks_once, tl_blocks_init);
    size_t size = tl_block_size(bytes);
    for (int i = 0; i < TL_CACHED_BLOCKS && tl_blocks.held + size <= TL_CACHED_BYTES; i++) {
        if (!tl_blocks.ptr[i]) {
            tl_blocks.ptr[i] = ptr;
            tl_blocks.size[i] = size;
            tl_blocks.held += size;
            pthread_setspecific(tl_blocks_key, &tl_blocks);
            return;
        }
    }
    free(ptr);
}

/* Half-precision conversions, as `ir::dtype::f16_bits_from_f64` (correctly rounded, ties to
 * even) and `half`'s exact widening. */
static uint64_t tl_f64_bits(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
}

static double tl_f64_from(uint64_t u) {
    double x;
    memcpy(&x, &u, 8);
    return x;
}

static uint32_t tl_f64_to_half(double x, int man_bits, int64_t bias) {
    uint64_t bits = tl_f64_bits(x);
    uint32_t sign = (uint32_t)((bits >> 48) & 0x8000);
    int64_t exp_field = (int64_t)((bits >> 52) & 0x7ff);
    uint64_t man = bits & ((1ull << 52) - 1);
    uint64_t inf = (uint64_t)(2 * bias + 1) << man_bits;
    if (exp_field == 0x7ff) {
        uint64_t nan = man == 0 ? 0 : (1ull << (man_bits - 1)) | (man >> (52 - man_bits));
        return sign | (uint32_t)inf | (uint32_t)nan;
    }
    if (exp_field == 0) return sign;
    uint64_t m = man | (1ull << 52);
    int64_t e = exp_field - 1023;
    int64_t q = (e > 1 - bias ? e : 1 - bias) - man_bits;
    int64_t shift = q - (e - 52);
    uint64_t units = 0;
    if (shift < 64) {
        uint64_t kept = m >> shift, rest = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
        units = kept + (rest > half || (rest == half && (kept & 1)));
    }
    uint64_t magnitude = e < 1 - bias ? units : ((uint64_t)(e + bias) << man_bits) + units - (1ull << man_bits);
    return magnitude >= inf ? sign | (uint32_t)inf : sign | (uint32_t)magnitude;
}

static double tl_half_to_f64(uint32_t i, int man_bits, int exp_bias, uint32_t exp_all) {
    uint64_t sign = (uint64_t)(i & 0x8000u) << 48;
    if ((i & 0x7fffu) == 0) return tl_f64_from(sign);
    uint32_t exp = i & exp_all, man = i & ((1u << man_bits) - 1);
    if (exp == exp_all) {
        if (man == 0) return tl_f64_from(sign | 0x7ff0000000000000ull);
        return tl_f64_from(sign | 0x7ff8000000000000ull | ((uint64_t)man << (52 - man_bits)));
    }
    int64_t e = (int64_t)(exp >> man_bits) - exp_bias;
    if (exp == 0) {
        /* Subnormal: normalize. */
        int shift = 0;
        while (!(man & (1u << man_bits))) {
            man <<= 1;
            shift++;
        }
        man &= (1u << man_bits) - 1;
        e = 1 - exp_bias - shift;
    }
    return tl_f64_from(sign | ((uint64_t)(e + 1023) << 52) | ((uint64_t)man << (52 - man_bits)));
}

TL_HIDDEN double tensorlift_f16_to_f64(uint32_t bits) { return tl_half_to_f64(bits & 0xffff, 10, 15, 0x7c00u); }
TL_HIDDEN double tensorlift_bf16_to_f64(uint32_t bits) { return tl_half_to_f64(bits & 0xffff, 7, 127, 0x7f80u); }
TL_HIDDEN uint32_t tensorlift_f64_to_f16(double x) { return tl_f64_to_half(x, 10, 15); }
TL_HIDDEN uint32_t tensorlift_f64_to_bf16(double x) { return tl_f64_to_half(x, 7, 127); }

/* ---- checked calls ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    uint8_t code; /* DLPack type code: 0 int, 1 uint, 2 float, 4 bfloat */
    uint8_t bits;
    const char *dtype; /* DLPack name, for messages */
    int32_t ndim;
    const int64_t *shape;
    int64_t elements;
    int32_t written; /* generated code stores to it */
} tl_param;

typedef struct {
    int32_t checked; /* the level's code relies on every element being in lo..=hi */
    int64_t lo, hi;
} tl_range;

typedef int32_t (*tl_entry)(void *const *args);

typedef struct {
    const char *name;
    int32_t nargs;
    const tl_param *params;
    tl_entry entries[TL_LEVELS];
    const tl_range *ranges[TL_LEVELS]; /* one per parameter, per compiled level */
    /* Per level, the tensors whose gathers generated code checks (status base + n). */
    const char *const *checked[TL_LEVELS];
    int32_t nchecked[TL_LEVELS];
} tl_op;

static void tl_shape_text(char *out, size_t size, int32_t ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(out, size, "[");
    for (int32_t d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(out + used, size - used, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < size) snprintf(out + used, size - used, "]");
}

static int64_t tl_element_at(const uint8_t *data, const tl_param *p, int64_t i) {
    switch (p->bits) {
    case 8: return p->code == 0 ? (int64_t)((const int8_t *)data)[i] : (int64_t)data[i];
    case 16: return p->code == 0 ? (int64_t)((const int16_t *)data)[i] : (int64_t)((const uint16_t *)data)[i];
    case 32: return p->code == 0 ? (int64_t)((const int32_t *)data)[i] : (int64_t)((const uint32_t *)data)[i];
    default: return ((const int64_t *)data)[i];
    }
}

/* Unsigned min and max of `n` bytes, each XORed with `flip`, over two vector accumulators of
 * each (one chain would run at one vector per cycle; more spill to the stack on 16 registers):
 * SSE2 (`pminub`/`pmaxub`, any level) and AVX2. */
static void tl_minmax_tail(const uint8_t *d, int64_t i, int64_t n, uint8_t flip, uint8_t *min, uint8_t *max) {
    for (; i < n; i++) {
        uint8_t v = d[i] ^ flip;
        *min = v < *min ? v : *min;
        *max = v > *max ? v : *max;
    }
}

static void tl_minmax_u8(const uint8_t *d, int64_t n, uint8_t flip, uint8_t *min, uint8_t *max) {
    __m128i f = _mm_set1_epi8((char)flip), lo0 = _mm_set1_epi8(-1), lo1 = lo0, hi0 = _mm_setzero_si128(), hi1 = hi0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(d + i)), f);
        __m128i b = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(d + i + 16)), f);
        lo0 = _mm_min_epu8(lo0, a);
        hi0 = _mm_max_epu8(hi0, a);
        lo1 = _mm_min_epu8(lo1, b);
        hi1 = _mm_max_epu8(hi1, b);
    }
    uint8_t l[16], h[16];
    _mm_storeu_si128((__m128i *)l, _mm_min_epu8(lo0, lo1));
    _mm_storeu_si128((__m128i *)h, _mm_max_epu8(hi0, hi1));
    *min = 0xff, *max = 0;
    tl_minmax_tail(l, 0, 16, 0, min, max);
    tl_minmax_tail(h, 0, 16, 0, min, max);
    tl_minmax_tail(d, i, n, flip, min, max);
}

__attribute__((target("avx2"))) static void tl_minmax_u8_avx2(const uint8_t *d, int64_t n, uint8_t flip, uint8_t *min,
                                                              uint8_t *max) {
    __m256i f = _mm256_set1_epi8((char)flip), lo0 = _mm256_set1_epi8(-1), lo1 = lo0;
    __m256i hi0 = _mm256_setzero_si256(), hi1 = hi0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m256i a = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(d + i)), f);
        __m256i b = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(d + i + 32)), f);
        lo0 = _mm256_min_epu8(lo0, a);
        hi0 = _mm256_max_epu8(hi0, a);
        lo1 = _mm256_min_epu8(lo1, b);
        hi1 = _mm256_max_epu8(hi1, b);
    }
    uint8_t l[32], h[32];
    _mm256_storeu_si256((__m256i *)l, _mm256_min_epu8(lo0, lo1));
    _mm256_storeu_si256((__m256i *)h, _mm256_max_epu8(hi0, hi1));
    *min = 0xff, *max = 0;
    tl_minmax_tail(l, 0, 32, 0, min, max);
    tl_minmax_tail(h, 0, 32, 0, min, max);
    tl_minmax_tail(d, i, n, flip, min, max);
}

/* The first element outside lo..=hi, or -1. Bytes (packed weights, the common case) first get
 * the min/max pass (i8 as u8 with the top bit flipped keeps the order), as `CompiledFunc::call`
 * does; only data outside the range is searched element by element. */
static int64_t tl_first_outside(const uint8_t *data, const tl_param *p, int64_t lo, int64_t hi) {
    if (p->bits == 8) {
        uint8_t flip = p->code == 0 ? 0x80 : 0, mn, mx;
        if (tl_level() >= TL_LEVEL_AVX2)
            tl_minmax_u8_avx2(data, p->elements, flip, &mn, &mx);
        else
            tl_minmax_u8(data, p->elements, flip, &mn, &mx);
        int64_t min = flip ? (int64_t)(int8_t)(mn ^ flip) : mn, max = flip ? (int64_t)(int8_t)(mx ^ flip) : mx;
        if (p->elements == 0 || (lo <= min && max <= hi)) return -1;
    }
    for (int64_t i = 0; i < p->elements; i++) {
        int64_t v = tl_element_at(data, p, i);
        if (v < lo || v > hi) return i;
    }
    return -1;
}

TL_HIDDEN int32_t tl_call(const tl_op *op, DLTensor *const *args, int32_t nargs) {
    int level = tl_level();
    if (level < 0) return tl_fail(TL_ERROR_UNSUPPORTED_CPU, "%s: %s", op->name, tl_select_error);
    if (args == NULL && nargs != 0) return tl_fail(TL_ERROR_NULL_POINTER, "%s: args is NULL", op->name);
    if (nargs != op->nargs)
        return tl_fail(TL_ERROR_NARGS, "%s: expected %d arguments, found %d", op->name, op->nargs, nargs);
    void *data[TL_MAX_ARGS];
    char expected[256], found[256];
    for (int32_t i = 0; i < nargs; i++) {
        const tl_param *p = &op->params[i];
        const DLTensor *t = args[i];
        if (t == NULL) return tl_fail(TL_ERROR_NULL_POINTER, "%s: argument %d (%s) is NULL", op->name, i, p->name);
        if (t->data == NULL && p->elements > 0)
            return tl_fail(TL_ERROR_NULL_POINTER, "%s: argument %d (%s): data is NULL", op->name, i, p->name);
        if (t->device.device_type != kDLCPU)
            return tl_fail(TL_ERROR_DEVICE, "%s: argument %d (%s): expected device kDLCPU (1), found %d", op->name, i,
                           p->name, (int)t->device.device_type);
        if (t->dtype.lanes != 1)
            return tl_fail(TL_ERROR_DTYPE, "%s: argument %d (%s): expected lanes 1, found %u", op->name, i, p->name,
                           (unsigned)t->dtype.lanes);
        if (t->dtype.code != p->code || t->dtype.bits != p->bits)
            return tl_fail(TL_ERROR_DTYPE, "%s: argument %d (%s): expected dtype %s, found code %u bits %u", op->name,
                           i, p->name, p->dtype, (unsigned)t->dtype.code, (unsigned)t->dtype.bits);
        if (t->ndim != p->ndim)
            return tl_fail(TL_ERROR_NDIM, "%s: argument %d (%s): expected ndim %d, found %d", op->name, i, p->name,
                           p->ndim, t->ndim);
        if (t->shape == NULL && t->ndim > 0)
            return tl_fail(TL_ERROR_NULL_POINTER, "%s: argument %d (%s): shape is NULL", op->name, i, p->name);
        for (int32_t d = 0; d < p->ndim; d++) {
            if (t->shape[d] != p->shape[d]) {
                tl_shape_text(expected, sizeof expected, p->ndim, p->shape);
                tl_shape_text(found, sizeof found, t->ndim, t->shape);
                return tl_fail(TL_ERROR_SHAPE, "%s: argument %d (%s): expected shape %s, found %s", op->name, i,
                               p->name, expected, found);
            }
        }
        if (t->strides != NULL) {
            /* Compact row-major strides (in elements) are accepted; any other layout is not. */
            int64_t stride = 1;
            for (int32_t d = p->ndim - 1; d >= 0; d--) {
                if (p->shape[d] != 1 && t->strides[d] != stride) {
                    tl_shape_text(found, sizeof found, t->ndim, t->strides);
                    return tl_fail(TL_ERROR_STRIDES,
                                   "%s: argument %d (%s): expected compact row-major strides (or NULL), found %s",
                                   op->name, i, p->name, found);
                }
                stride *= p->shape[d];
            }
        }
        uintptr_t base = (uintptr_t)t->data;
        if (t->byte_offset > UINTPTR_MAX - base)
            return tl_fail(TL_ERROR_BYTE_OFFSET, "%s: argument %d (%s): byte_offset %llu overflows the address",
                           op->name, i, p->name, (unsigned long long)t->byte_offset);
        /* Generated code loads and stores elements unaligned, but an element must not be split. */
        if ((base + t->byte_offset) % (p->bits / 8) != 0)
            return tl_fail(TL_ERROR_ALIGNMENT,
                           "%s: argument %d (%s): data + byte_offset must be aligned to %d bytes (the element size)",
                           op->name, i, p->name, p->bits / 8);
        data[i] = (void *)(base + (uintptr_t)t->byte_offset);
    }
    /* A buffer the function writes must not overlap any other argument. */
    for (int32_t i = 0; i < nargs; i++) {
        const tl_param *p = &op->params[i];
        if (!p->written) continue;
        uintptr_t lo = (uintptr_t)data[i], hi = lo + (uintptr_t)(p->elements * (p->bits / 8));
        for (int32_t j = 0; j < nargs; j++) {
            const tl_param *q = &op->params[j];
            uintptr_t qlo = (uintptr_t)data[j], qhi = qlo + (uintptr_t)(q->elements * (q->bits / 8));
            if (j != i && lo < qhi && qlo < hi)
                return tl_fail(TL_ERROR_OVERLAP, "%s: argument %d (%s), which the function writes, overlaps argument %d (%s)",
                               op->name, i, p->name, j, q->name);
        }
    }
    const tl_range *ranges = op->ranges[level];
    for (int32_t i = 0; i < nargs; i++) {
        const tl_param *p = &op->params[i];
        if (!ranges[i].checked) continue;
        int64_t e = tl_first_outside((const uint8_t *)data[i], p, ranges[i].lo, ranges[i].hi);
        if (e >= 0)
            return tl_fail(TL_ERROR_VALUE_RANGE,
                           "%s: argument %d (%s): element %lld is %lld, expected a value in the declared range "
                           "%lld..=%lld",
                           op->name, i, p->name, (long long)e, (long long)tl_element_at((const uint8_t *)data[i], p, e),
                           (long long)ranges[i].lo, (long long)ranges[i].hi);
    }
    int32_t status = op->entries[level](data);
    tl_release_tiles();
    switch (status) {
    case 0: return TL_OK;
    case TL_STATUS_OUT_OF_MEMORY:
        return tl_fail(TL_ERROR_OUT_OF_MEMORY, "%s: out of memory: a scratch buffer could not be allocated", op->name);
    default:
        if (status >= TL_STATUS_INDEX_OUT_OF_BOUNDS && status - TL_STATUS_INDEX_OUT_OF_BOUNDS < op->nchecked[level])
            return tl_fail(TL_ERROR_INDEX_OUT_OF_BOUNDS,
                           "%s: out-of-bounds read of %s: an index computed from data is outside its shape", op->name,
                           op->checked[level][status - TL_STATUS_INDEX_OUT_OF_BOUNDS]);
        return tl_fail(TL_ERROR_INTERNAL, "%s: generated code returned unknown status %d", op->name, status);
    }
}
