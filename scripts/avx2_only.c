/*
 * avx2_only.c - make this process see an AVX2-only x86 CPU through CPUID.
 *
 * Why: onnxruntime (MLAS) picks its int8 kernels from CPUID when it loads
 * (AMX > AVX512-VNNI > AVX512 core > AVX-VNNI > AVX2).  To measure the AVX2
 * (vpmaddubsw) path on a machine that has AVX-512 VNNI, AVX-VNNI and AMX,
 * we hide those features from CPUID.  The instructions themselves still
 * work; only what CPUID reports changes.  XGETBV cannot be trapped, so XCR0
 * still shows the AVX-512/AMX state as enabled; MLAS checks CPUID first, so
 * that does not matter there.
 *
 * How: Linux CPUID faulting (arch_prctl ARCH_SET_CPUID, needs the
 * `cpuid_fault` CPU flag).  With it off, CPUID raises SIGSEGV (#GP); our
 * handler runs the real CPUID with faulting briefly re-enabled, clears the
 * feature bits, writes the result into the interrupted context and skips
 * the 2-byte instruction.  The setting is per thread, is inherited by
 * threads and children created later and is reset by execve, so the
 * constructor (which runs before Python imports onnxruntime) covers every
 * thread the process will have.  Any other SIGSEGV gets the previous
 * disposition back and re-faults, so real crashes still crash.  A program
 * that installs its own SIGSEGV handler afterwards dies at its next CPUID
 * (loudly, never silently wrong): perf does, so preload only the measured
 * process: perf record -- env LD_PRELOAD=/tmp/avx2_only.so python3 ...
 *
 * Build:  cc -O2 -shared -fPIC -o /tmp/avx2_only.so scripts/avx2_only.c
 * Use:    LD_PRELOAD=/tmp/avx2_only.so python3 ...
 *         AVX2_ONLY_VERBOSE=1 also prints, at exit, how many CPUIDs were
 *         trapped (proof that the shim was active).
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef ARCH_SET_CPUID
#define ARCH_SET_CPUID 0x1012
#endif

#define BIT(n) (1u << (n))

/* Leaf 7 subleaf 0. */
static const uint32_t L7_EBX_CLEAR =
    BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) |
    BIT(31);                 /* AVX512 F DQ IFMA PF ER CD BW VL */
static const uint32_t L7_ECX_CLEAR =
    BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14);
                             /* AVX512 VBMI VBMI2 VNNI BITALG VPOPCNTDQ */
static const uint32_t L7_EDX_CLEAR =
    BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25);
                             /* 4VNNIW 4FMAPS VP2INTERSECT AMX-BF16 FP16
                                AMX-TILE AMX-INT8 */
/* Leaf 7 subleaf 1. */
static const uint32_t L71_EAX_CLEAR =
    BIT(4) | BIT(5) | BIT(21) | BIT(23);
                             /* AVX-VNNI AVX512-BF16 AMX-FP16 AVX-IFMA */
static const uint32_t L71_EDX_CLEAR =
    BIT(4) | BIT(5) | BIT(10) | BIT(14) | BIT(19);
                             /* AVX-VNNI-INT8 AVX-NE-CONVERT AVX-VNNI-INT16
                                PREFETCHITI AVX10 */

static struct sigaction prev_segv;
static volatile uint64_t n_trapped;

static long set_cpuid(int enabled)
{
    return syscall(SYS_arch_prctl, ARCH_SET_CPUID, enabled);
}

static void on_segv(int sig, siginfo_t *si, void *uc_)
{
    ucontext_t *uc = uc_;
    greg_t *g = uc->uc_mcontext.gregs;
    const uint8_t *ip = (const uint8_t *)g[REG_RIP];

    /* CPUID faulting arrives as #GP: SI_KERNEL, and RIP is valid code. */
    if (si->si_code != SI_KERNEL || ip[0] != 0x0F || ip[1] != 0xA2) {
        sigaction(SIGSEGV, &prev_segv, NULL);
        return;                               /* re-fault, old disposition */
    }

    int saved_errno = errno;
    uint32_t leaf = (uint32_t)g[REG_RAX], sub = (uint32_t)g[REG_RCX];
    uint32_t a, b, c, d;
    set_cpuid(1);
    __cpuid_count(leaf, sub, a, b, c, d);
    set_cpuid(0);
    errno = saved_errno;

    if (leaf == 7 && sub == 0) {
        b &= ~L7_EBX_CLEAR;
        c &= ~L7_ECX_CLEAR;
        d &= ~L7_EDX_CLEAR;
    } else if (leaf == 7 && sub == 1) {
        a &= ~L71_EAX_CLEAR;
        d &= ~L71_EDX_CLEAR;
    }
    /* CPUID zero-extends into the 64-bit registers. */
    g[REG_RAX] = a;
    g[REG_RBX] = b;
    g[REG_RCX] = c;
    g[REG_RDX] = d;
    g[REG_RIP] += 2;
    __atomic_fetch_add(&n_trapped, 1, __ATOMIC_RELAXED);
    (void)sig;
}

static int verbose(void)
{
    const char *v = getenv("AVX2_ONLY_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

__attribute__((constructor)) static void avx2_only_init(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &prev_segv) != 0 || set_cpuid(0) != 0) {
        /* Running unmasked would silently measure the wrong kernels. */
        fprintf(stderr, "avx2_only: cannot enable CPUID faulting: %s\n",
                strerror(errno));
        _exit(97);
    }
    if (verbose())
        fprintf(stderr, "avx2_only: CPUID faulting on (pid %d)\n", getpid());
}

__attribute__((destructor)) static void avx2_only_fini(void)
{
    if (verbose())
        fprintf(stderr, "avx2_only: %llu CPUID calls trapped (pid %d)\n",
                (unsigned long long)n_trapped, getpid());
}
