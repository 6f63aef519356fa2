/* Threads of the particle kernels: tpde_run_threads(worker, arg, threads, units) runs worker(arg) on `threads`
 * threads (at most `units`, the pieces of work, and at most 64); the calling thread works too, a thread that
 * cannot be started only costs time, and the number of threads the call ran on is returned (the caller and the
 * workers handed the call; one that comes after the work is done finds none, as a thread created late did
 * before the pool).  worker hands out its pieces itself (an atomic counter in *arg) and every piece's result
 * depends on the piece alone, so the bits of the result never depend on the thread count or on timing.
 *
 * A persistent pool: workers created once, lazily (grown to the largest count asked for, at most 63 besides
 * the caller, detached, every signal blocked so that signals reach Python's threads) and kept.  A call
 * publishes (worker, arg) and a new generation in one 64-bit word `job` = generation << 8 | workers wanted
 * (release store under the mutex, then a broadcast; the workers load it with acquire), runs worker(arg)
 * itself, then closes the generation (`entry`: a worker enters by a compare-and-swap on generation << 16 |
 * count, which fails once the caller has set TPDE_CLOSED), and waits until every worker that entered has
 * counted itself done (release increments, acquire loads).  So a worker not yet woken, or with no core to run
 * on, costs the call nothing (the caller has done its share); no worker touches *arg or the result after the
 * call returns; the pool keeps no pointer to the caller's stack past the call.
 *
 * Between calls a worker spins on `job` (the pause instruction, a sched_yield every 16 rounds) for
 * TPDE_POOL_SPIN_US microseconds, then blocks on a condition variable, so an idle process burns at most that
 * long of one core per worker after its last call; it blocks at once when a yield took over 50 us (another
 * thread wanted its core: a busy machine, where spinning would only take the core from the caller's Python),
 * and a worker the latest call did not use does not spin.  A call that finds fewer workers spinning than it
 * wants (a gap longer than the spin, a busy machine) creates its threads as before the pool, since on a busy
 * machine a blocked worker woken waited for a core where a new thread is placed on the idlest one (measured:
 * 2-thread speedup ~1.0 with woken workers against 1.03-1.11 with new threads, two other processes running),
 * then publishes a generation with nothing to do (want 0) that sets the workers spinning for the next call;
 * after a spin that found its core wanted, the next TPDE_POOL_BACKOFF (16) such calls leave the pool asleep
 * (with another process busy on one core the pool then gained as much as threads per call, 1.02-1.14x
 * against 0.98-1.20x, where without this it had lost: 1.00x against 1.11-1.19x; docs/performance.md).
 * Why spin: on a 2-vCPU VM a thread created or woken per call started 35-870 us late (waking the idle vCPU),
 * against 0.1 us for one spinning (docs/performance.md); at n = 2000 a call is 2-5 ms.  Default 2000 us, from
 * the gaps measured on that machine between two calls, as worker 1 sees them (from the end of its share to
 * the next call; numerics/bench_pool.py --gaps, float32 and float64, n = 2000, d = 24): 0.6-0.8 ms between
 * back-to-back calls (the caller's last tile, the Python around the call), median 1.1-1.6 ms and 90th
 * percentile 3.1 ms between the right-hand-side evaluations of a dopri5 particle run.  TPDE_POOL_SPIN_US
 * (digits only; read once, at the pool's first use) overrides it, 0 blocking at once; TPDE_POOL=0 turns the
 * pool off (a thread created per call, as before); both can be changed at run time (tpde_pool_config).
 *
 * Concurrent callers (two Python threads in kernels at once): the first holds the pool; a caller that finds
 * it held does not wait but creates its threads for that call (the per-call path), so no caller ever waits
 * on another's work.  fork(): a pthread_atfork child handler empties the pool in the child (it has none of
 * the parent's threads; the child grows its own at its first call).  Every kernel library carries this code
 * (a static pool each); the Python loader (symbolic_tpde.numerics.particles.fused) points every library it
 * loads at the first one's pool (tpde_pool_share), so a process has one pool and no library's idle workers
 * spin while another library's call runs. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#define TPDE_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define TPDE_PAUSE() __asm__ __volatile__("yield")
#else
#define TPDE_PAUSE() ((void)0)
#endif

#define TPDE_POOL_MAX 63          /* workers besides the caller */
#define TPDE_POOL_SPIN_DEFAULT 2000L  /* us: see the head comment */
#define TPDE_CLOSED 0x8000u
#define TPDE_POOL_CONTENDED 50000L  /* ns: a round of the spin that took longer ran something else meanwhile */
#define TPDE_POOL_BACKOFF 16         /* calls with threads made per call, no warm-up, after such a round */

typedef void *(*tpde_work_fn)(void *);

typedef struct {
    _Atomic uint64_t job;         /* generation << 8 | workers wanted (1..63) */
    _Atomic uint64_t entry;       /* generation << 16 | TPDE_CLOSED (the caller's work is done) | workers in */
    _Atomic int done;             /* workers in the current generation that finished it */
    _Atomic int busy;             /* 1 while a caller holds the pool */
    _Atomic int spinning;         /* workers spinning now (the others are blocked or working) */
    _Atomic int backoff;          /* calls left without a warm-up after a spin found its core wanted */
    _Atomic long spin_ns;         /* spin before blocking */
    _Atomic int pooled;           /* 0: a thread created per call */
    _Atomic long wait_ns;         /* worker 1's wait before the current generation (diagnostics: the gap) */
    tpde_work_fn fn;              /* the current generation's work: written before the release store of job, */
    void *arg;                    /* read by the wanted workers after their acquire load */
    _Atomic int nworkers;         /* workers started (changed only by the caller holding busy) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} tpde_pool_t;

static tpde_pool_t tpde_pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static pthread_once_t tpde_pool_once = PTHREAD_ONCE_INIT;

static void tpde_pool_prepare(void) { pthread_mutex_lock(&tpde_pool.mu); }
static void tpde_pool_parent(void) { pthread_mutex_unlock(&tpde_pool.mu); }
static void tpde_pool_child(void) {  /* the child has only the forking thread: no workers, nobody holding */
    tpde_pool.nworkers = 0;
    atomic_store(&tpde_pool.busy, 0);
    atomic_store(&tpde_pool.spinning, 0);
    atomic_store(&tpde_pool.backoff, 0);
    atomic_store(&tpde_pool.done, 0);
    pthread_mutex_init(&tpde_pool.mu, NULL);
    pthread_cond_init(&tpde_pool.cv, NULL);
}

static void tpde_pool_init(void) {
    const char *s = getenv("TPDE_POOL_SPIN_US"), *p = getenv("TPDE_POOL");
    long us = TPDE_POOL_SPIN_DEFAULT;
    if (s && *s) {  /* digits only (else the default; the Python loader warns) */
        long v = 0;
        const char *c = s;
        for (; *c >= '0' && *c <= '9'; ++c) v = v < 10000000L ? v * 10 + (*c - '0') : v;
        if (*c == '\0') us = v > 10000000L ? 10000000L : v;
    }
    atomic_store(&tpde_pool.spin_ns, us * 1000L);
    atomic_store(&tpde_pool.pooled, !(p && p[0] == '0' && p[1] == '\0'));
    pthread_atfork(tpde_pool_prepare, tpde_pool_parent, tpde_pool_child);
}

static long tpde_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}

/* the next job word whose generation differs from `seen`: spin (if `spin`), then block */
static uint64_t tpde_pool_wait(uint64_t seen, int spin_first) {
    const long spin = spin_first ? atomic_load_explicit(&tpde_pool.spin_ns, memory_order_relaxed) : 0;
    uint64_t job;
    if (spin > 0) {
        const long t0 = tpde_now_ns();
        long t = t0, prev;
        atomic_fetch_add_explicit(&tpde_pool.spinning, 1, memory_order_relaxed);
        do {
            for (int i = 0; i < 16; ++i) {
                job = atomic_load_explicit(&tpde_pool.job, memory_order_acquire);
                if ((job >> 8) != seen) {
                    atomic_fetch_sub_explicit(&tpde_pool.spinning, 1, memory_order_relaxed);
                    return job;
                }
                TPDE_PAUSE();
            }
            sched_yield();  /* a thread waiting for this core (the caller's Python, on a busy machine) runs */
            prev = t;
            t = tpde_now_ns();
        } while (t - t0 < spin && t - prev < TPDE_POOL_CONTENDED);  /* the core was wanted: block */
        atomic_fetch_sub_explicit(&tpde_pool.spinning, 1, memory_order_relaxed);
        if (t - prev >= TPDE_POOL_CONTENDED) atomic_store_explicit(&tpde_pool.backoff, TPDE_POOL_BACKOFF, memory_order_relaxed);
    }
    pthread_mutex_lock(&tpde_pool.mu);
    while (((job = atomic_load_explicit(&tpde_pool.job, memory_order_acquire)) >> 8) == seen)
        pthread_cond_wait(&tpde_pool.cv, &tpde_pool.mu);
    pthread_mutex_unlock(&tpde_pool.mu);
    return job;
}

/* a worker: its index (1..63) and the generation current when it was created, packed in the argument */
static void *tpde_pool_worker(void *init) {
    const int me = (int)((uintptr_t)init & 255);
    uint64_t seen = (uint64_t)(uintptr_t)init >> 8;
    int spin = 1;
    for (;;) {
        const long t0 = me == 1 ? tpde_now_ns() : 0;
        const uint64_t job = tpde_pool_wait(seen, spin);
        seen = job >> 8;
        const int want = (int)(job & 255);  /* 0: a warm-up, nothing to do but spin for the next call */
        spin = want == 0 || me <= want;
        if (want == 0 || me > want) continue;
        if (me == 1) atomic_store_explicit(&tpde_pool.wait_ns, tpde_now_ns() - t0, memory_order_relaxed);
        /* enter the generation unless the caller has closed it (it finished the work alone meanwhile) */
        uint64_t e = atomic_load_explicit(&tpde_pool.entry, memory_order_acquire);
        while ((e >> 16) == seen && !(e & TPDE_CLOSED))
            if (atomic_compare_exchange_weak_explicit(&tpde_pool.entry, &e, e + 1, memory_order_acq_rel,
                                                      memory_order_acquire)) {
                tpde_pool.fn(tpde_pool.arg);
                atomic_fetch_add_explicit(&tpde_pool.done, 1, memory_order_release);
                break;
            }
    }
    return NULL;
}

/* the per-call path: `threads - 1` threads created for this call and joined */
static int tpde_run_percall(tpde_work_fn worker, void *arg, int threads) {
    pthread_t tid[TPDE_POOL_MAX];
    int started = 0;
    for (int t = 1; t < threads; ++t) {
        if (pthread_create(&tid[started], NULL, worker, arg) != 0) break;
        ++started;
    }
    worker(arg);
    for (int t = 0; t < started; ++t) pthread_join(tid[t], NULL);
    return started + 1;
}

static int tpde_pool_run(tpde_work_fn worker, void *arg, int threads, long units) {
    if (threads > TPDE_POOL_MAX + 1) threads = TPDE_POOL_MAX + 1;
    if (threads > units) threads = (int)units;
    if (threads <= 1) {
        worker(arg);
        return 1;
    }
    pthread_once(&tpde_pool_once, tpde_pool_init);
    if (!atomic_load_explicit(&tpde_pool.pooled, memory_order_relaxed) ||
        atomic_exchange_explicit(&tpde_pool.busy, 1, memory_order_acquire))
        return tpde_run_percall(worker, arg, threads);  /* off, or held by another caller */
    const uint64_t gen = (atomic_load_explicit(&tpde_pool.job, memory_order_relaxed) >> 8) + 1;
    const int grew = tpde_pool.nworkers < threads - 1;
    if (grew) {  /* grow: new workers start at the current generation (new threads: they start spinning) */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_attr_t at;
        const int attr = pthread_attr_init(&at) == 0;
        if (attr) pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        while (tpde_pool.nworkers < threads - 1) {
            pthread_t t;
            const uintptr_t init = (uintptr_t)((gen - 1) << 8) | (uintptr_t)(tpde_pool.nworkers + 1);
            if (pthread_create(&t, attr ? &at : NULL, tpde_pool_worker, (void *)init) != 0) break;
            if (!attr) pthread_detach(t);
            ++tpde_pool.nworkers;
        }
        if (attr) pthread_attr_destroy(&at);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    const int want = threads - 1 < tpde_pool.nworkers ? threads - 1 : tpde_pool.nworkers;
    if (!grew && atomic_load_explicit(&tpde_pool.spinning, memory_order_relaxed) < want) {
        /* the workers are blocked: threads created for this call start sooner than blocked ones woken (on a
         * busy machine a woken worker waits for a core where a new thread is placed on the idlest); then wake
         * the pool with nothing to do (want 0), so that its workers spin for the next call */
        const int ran = tpde_run_percall(worker, arg, threads);
        const int b = atomic_load_explicit(&tpde_pool.backoff, memory_order_relaxed);
        if (b > 0) {  /* a busy machine: spinning workers would take the cores the calls' threads need */
            atomic_store_explicit(&tpde_pool.backoff, b - 1, memory_order_relaxed);
        } else {
            pthread_mutex_lock(&tpde_pool.mu);
            atomic_store_explicit(&tpde_pool.job, gen << 8, memory_order_release);
            pthread_cond_broadcast(&tpde_pool.cv);
            pthread_mutex_unlock(&tpde_pool.mu);
        }
        atomic_store_explicit(&tpde_pool.busy, 0, memory_order_release);
        return ran;
    }
    if (want > 0) {
        tpde_pool.fn = worker;
        tpde_pool.arg = arg;
        atomic_store_explicit(&tpde_pool.done, 0, memory_order_relaxed);
        atomic_store_explicit(&tpde_pool.entry, gen << 16, memory_order_relaxed);
        pthread_mutex_lock(&tpde_pool.mu);  /* under the mutex: a worker about to block sees it or is woken */
        atomic_store_explicit(&tpde_pool.job, gen << 8 | (uint64_t)want, memory_order_release);
        pthread_cond_broadcast(&tpde_pool.cv);
        pthread_mutex_unlock(&tpde_pool.mu);
    }
    worker(arg);
    /* close the generation: a worker not in yet (not woken, or no core for it) skips it; wait for those in */
    const int in = want > 0 ? (int)(atomic_fetch_or_explicit(&tpde_pool.entry, TPDE_CLOSED, memory_order_acq_rel)
                                    & (TPDE_CLOSED - 1)) : 0;
    for (long i = 0; atomic_load_explicit(&tpde_pool.done, memory_order_acquire) < in; ++i) {
        if (i < 4096) TPDE_PAUSE();  /* ~0.1-0.5 ms: about one tile of a worker that started late */
        else sched_yield();  /* a worker descheduled on a busy machine: let it run */
    }
    tpde_pool.arg = NULL;  /* nothing of this call stays in the pool */
    atomic_store_explicit(&tpde_pool.busy, 0, memory_order_release);
    return want + 1;
}

/* The pool a library uses: its own, or (tpde_pool_share) the first loaded library's, so that a process has one */
typedef struct {
    int (*run)(tpde_work_fn, void *, int, long);
    void (*config)(int, long);
    long (*info)(int);
} tpde_pool_iface;

static void tpde_pool_config_own(int pooled, long spin_us) {
    pthread_once(&tpde_pool_once, tpde_pool_init);
    if (pooled >= 0) atomic_store(&tpde_pool.pooled, pooled != 0);
    if (spin_us >= 0) atomic_store(&tpde_pool.spin_ns, spin_us * 1000L);
}

static long tpde_pool_info_own(int what) {
    pthread_once(&tpde_pool_once, tpde_pool_init);
    switch (what) {
    case 0: return atomic_load(&tpde_pool.pooled);
    case 1: return atomic_load(&tpde_pool.spin_ns) / 1000L;
    case 2: return atomic_load(&tpde_pool.busy) ? -1 : tpde_pool.nworkers;  /* -1: a call is running */
    case 3: return atomic_load(&tpde_pool.wait_ns);
    default: return -2;
    }
}

static const tpde_pool_iface tpde_pool_own = {tpde_pool_run, tpde_pool_config_own, tpde_pool_info_own};
static const tpde_pool_iface *tpde_pool_used = &tpde_pool_own;

/* exported: this library's own pool (to share), use another library's (before this library's first call) */
const void *tpde_pool_entry(void) { return &tpde_pool_own; }
void tpde_pool_share(const void *iface) { tpde_pool_used = iface ? (const tpde_pool_iface *)iface : &tpde_pool_own; }
/* exported: pooled (0 off, 1 on, -1 unchanged) and the spin in us (-1 unchanged); info: 0 pooled, 1 spin in us,
 * 2 workers started (-1 while a call runs), 3 worker 1's wait in ns before the latest call that used it (from
 * the end of its previous work to seeing the call: the gap between the calls, numerics/bench_pool.py) */
void tpde_pool_config(int pooled, long spin_us) { tpde_pool_used->config(pooled, spin_us); }
long tpde_pool_info(int what) { return tpde_pool_used->info(what); }

static int tpde_run_threads(tpde_work_fn worker, void *arg, int threads, long units) {
    return tpde_pool_used->run(worker, arg, threads, units);
}
